"""campaign.json as the host reads it: the question, its threshold on one metric, the frozen corpus,
the control and the variants (schemas/campaign.schema.json), and the rules a schema cannot say.

:func:`campaign_problems` lists every problem (`kdkit validate` shows them all);
:func:`load_campaign` refuses the file on the first, one line naming the file and the JSON path
(exit 2). The rules: the schema's (a category outside essential / useful / exploratory, a threshold
that is not a number; NaN, Infinity and 1e999 are refused by the strict reader, kdkit.core.jsonio),
then two variants of one name, a variant naming neither a config nor a command, a config that does
not exist in the project, a control naming no variant, a frozen corpus whose manifest is missing or
no longer has the SHA-256 frozen, and an order file named that is not there. Here, below
kdkit.project (validate) and kdkit.order (the campaign's status), which both read it.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.config.schemas import (
    config_problem,
    json_path,
    raise_first,
    schema_problems,
    walk_document,
)
from kdkit.core.errors import BadInput
from kdkit.core.finding import Finding
from kdkit.core.jsonio import parse_json, read_text_file, sha256_file
from kdkit.core.projectfiles import real_inside

if TYPE_CHECKING:
    from typing import NotRequired, TypedDict

    class VariantEntry(TypedDict):
        """One variant of campaign.json as its schema checked it (``variants[]``)."""

        name: str
        category: str  # essential, useful or exploratory
        machine_hours: float
        config: NotRequired[str | None]
        command: NotRequired[Any]  # a list of words, or null (Any: _campaign tests .get first)
        gpu: NotRequired[str | None]
        description: NotRequired[str]

    class CorpusEntry(TypedDict):
        """campaign.json's frozen corpus: its manifest and that manifest's SHA-256."""

        manifest: str
        sha256: NotRequired[str | None]
        items: NotRequired[int | None]

    class ExpenseEntry(TypedDict):
        """Another expense campaign.json declares: what, an amount, a currency."""

        what: str
        amount: float
        currency: str

    class CampaignFile(TypedDict):
        """campaign.json as its schema checked it (schemas/campaign.schema.json)."""

        question: str
        metric: str
        threshold: float
        higher_is_better: NotRequired[bool]
        corpus: CorpusEntry
        assumed_items_per_second: NotRequired[float | None]
        control: str
        variants: list[VariantEntry]
        deliverables: NotRequired[list[str]]
        decision_point: NotRequired[str]
        order: NotRequired[str | None]
        expenses: NotRequired[list[ExpenseEntry]]

CAMPAIGN = "campaign.json"
CATEGORIES = ("essential", "useful", "exploratory")  # kept first to cut last


@dataclass(frozen=True)
class Variant:
    """One variant of a campaign (the control is one of them)."""

    name: str
    category: str
    machine_hours: float
    config: str | None = None
    command: tuple[str, ...] | None = None
    gpu: str | None = None


@dataclass(frozen=True)
class Campaign:
    """campaign.json, checked: every variant's name unique, the control one of them."""

    path: Path
    question: str
    metric: str
    threshold: float
    higher_is_better: bool
    control: str
    variants: tuple[Variant, ...]
    manifest: str
    manifest_sha256: str | None
    corpus_items: int | None
    assumed_items_per_second: float | None
    order: str | None
    deliverables: tuple[str, ...]
    decision_point: str | None
    expenses: tuple[ExpenseEntry, ...]

    def variant(self, name: str) -> Variant | None:
        return next((v for v in self.variants if v.name == name), None)

    def passes(self, value: float) -> bool:
        return value >= self.threshold if self.higher_is_better else value <= self.threshold


def campaign_problems(root: Path, data: Any, rel: Path = Path(CAMPAIGN)) -> list[Finding]:
    """Every problem of campaign.json's ``data`` (its schema's, then the rules above); [] when it is
    fit."""
    problems = schema_problems(data, "campaign", rel)
    if problems or not isinstance(data, dict):
        return problems
    variants: list[VariantEntry] = data["variants"]
    seen: dict[str, int] = {}
    for index, variant in enumerate(variants):
        where, name = f"$.variants[{index}]", variant["name"]
        if name in seen:
            problems.append(config_problem(rel,
                                           f"{where}.name",
                                           f"{name!r} names a variant twice (first at "
                                           f"$.variants[{seen[name]}]); give each variant its own "
                                           "name"))
        seen.setdefault(name, index)
        if variant.get("config") is None and variant.get("command") is None:
            problems.append(
                config_problem(
                    rel, where, "names neither a config nor a command; give the one it runs"))
        problems += _path_problems(root, variant.get("config"), rel, f"{where}.config")
    if data["control"] not in seen:
        problems.append(config_problem(rel,
                                       "$.control",
                                       f"{data['control']!r} names no variant; name one of "
                                       f"{', '.join(seen)}"))
    problems += _path_problems(root, data["corpus"]["manifest"], rel, "$.corpus.manifest")
    # saved later
    problems += _path_problems(root, data.get("order"), rel, "$.order", must_exist=False)
    return problems + _frozen_problems(root, data["corpus"], rel)


def _path_problems(root: Path, value: str | None, rel: Path, where: str, *,
                   must_exist: bool = True) -> list[Finding]:
    """A path campaign.json names (the schema held it to the path rule): inside the project, and
    there."""
    if value is None:
        return []
    target = real_inside(root, root / value)
    try:
        there = target is not None and target.is_file()
    except OSError as exc:
        return [
            config_problem(
                rel, where,
                f"cannot look at {value!r} ({exc.strerror or exc}); use a shorter path")]
    if target is None:
        return [
            config_problem(
                rel, where,
                f"{value!r} points outside the project folder; keep every path inside it")]
    if must_exist and not there:
        return [config_problem(rel,
                               where,
                               f"{value!r} does not exist in the project folder (or is not a "
                               "file); create it or fix the path")]
    return []


def _frozen_problems(root: Path, corpus: CorpusEntry, rel: Path) -> list[Finding]:
    """The corpus's manifest against the SHA-256 frozen in campaign.json (when one is)."""
    frozen, path = corpus.get("sha256"), root / corpus["manifest"]
    if frozen is None or real_inside(root, path) is None or not path.is_file():
        return []
    actual = sha256_file(path)
    if actual != frozen:
        return [config_problem(rel, "$.corpus.sha256",
                               f"the corpus changed since it was frozen: {corpus['manifest']}"
                               f" has SHA-256 {actual[:12]}..., the campaign froze "
                               f"{frozen[:12]}...; restore the corpus, or start a new campaign on "
                               "the new one")]
    return []


def read_problems(root: Path, rel: Path = Path(CAMPAIGN)) -> tuple[Any, list[Finding]]:
    """(campaign.json's data or None, every problem of it): read strictly (kdkit.core.jsonio), a
    non-finite number named by its JSON path, then checked (campaign_problems)."""
    text = ""
    try:
        text = read_text_file(root / rel, "campaign file")
        data = parse_json(text, str(rel))
    except BadInput as exc:
        said = str(exc).removeprefix(f"{root / rel}: ").removeprefix(f"{rel}:")
        placed = re.match(r"(\d+):(\d+): (.*)", said)
        if placed and "is not a finite number" in said:
            return None, [config_problem(rel, _nonfinite_path(text), placed[3])]
        return None, [config_problem(rel, f"line {placed[1]} column {placed[2]}", placed[3])
                      if placed
                      else config_problem(rel, "$", said.strip())]
    return data, campaign_problems(root, data, rel)


def _nonfinite_path(text: str) -> str:
    """The JSON path of the first non-finite number in ``text`` (read leniently: NaN, Infinity,
    1e999)."""
    try:
        data = json.loads(text)
    except ValueError:
        return "$"
    found = (parts for parts, _key, value in walk_document(data)
             if isinstance(value, float) and not math.isfinite(value))
    return json_path(next(found, ()))


def load_campaign(root: Path) -> Campaign | None:
    """The project's campaign.json, checked (BadInput naming the first problem); None when there is
    none."""
    path = root / CAMPAIGN
    if not path.exists() and not path.is_symlink():
        return None
    data, problems = read_problems(root)
    raise_first(problems, base=root, more_hint="run `kdkit validate` to see them all")
    return _campaign(path, data)


def _campaign(path: Path, data: CampaignFile) -> Campaign:
    variants = tuple(Variant(name=v["name"], category=v["category"],
                             machine_hours=float(v["machine_hours"]),
                             config=v.get("config"), command=None if v.get("command") is None else
                             tuple(v["command"]), gpu=v.get("gpu")) for v in data["variants"])
    corpus, assumed = data["corpus"], data.get("assumed_items_per_second")
    return Campaign(
        path=path, question=data["question"], metric=data["metric"],
        threshold=float(data["threshold"]),
        higher_is_better=data.get("higher_is_better", True), control=data["control"],
        variants=variants,
        manifest=corpus["manifest"], manifest_sha256=corpus.get("sha256"),
        corpus_items=corpus.get("items"),
        assumed_items_per_second=None if assumed is None else float(assumed),
        order=data.get("order"),
        deliverables=tuple(data.get("deliverables", ())), decision_point=data.get("decision_point"),
        expenses=tuple(data.get("expenses", ())))


def require_variant(campaign: Campaign, name: str, what: str) -> Variant:
    """The variant called ``name``; BadInput naming the campaign's when there is none."""
    found = campaign.variant(name)
    if found is None:
        from kdkit.core.safetext import printable

        raise BadInput(f"{what} {printable(name[:60])!r}: {campaign.path} has no such variant; "
                       f"name one of {', '.join(v.name for v in campaign.variants)}")
    return found
