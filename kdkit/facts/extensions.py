"""Facts about the compiled extensions renters use (kdkit/data/extensions.json), and the verdicts
they support.

Each extension names its import modules and a list of rules, one per backend and range of releases:
``min_sm`` (the oldest NVIDIA compute capability with code, as 80 for sm_80), ``only_sm`` (the
capabilities it runs on), ``targets`` (the exact ROCm gfx targets it builds for; empty: no ROCm
support in those releases) or ``note`` (it runs, with a condition to confirm). ``torch_pairs`` gives
the release of the package that belongs to each torch minor (torchvision, torchaudio). Every rule
names a source of the file's ``sources``; what no rule covers is unknown, never ok.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.core.errors import BadInput

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import NotRequired, TypedDict

    class ExtensionRule(TypedDict):
        """One fact of extensions.json about an extension on one backend (``rules[]``)."""

        # with exactly one of min_sm, only_sm, targets and note (held so by _check_rule)
        backend: str  # "cuda" or "rocm"
        source: str  # a key of $.sources
        min_sm: NotRequired[int]
        only_sm: NotRequired[list[int]]
        targets: NotRequired[list[str]]
        note: NotRequired[str]
        versions: NotRequired[str]  # the releases it holds for (a PEP 440 specifier)
        toolkits: NotRequired[str]  # the CUDA or ROCm versions it holds for


_KINDS = ("min_sm", "only_sm", "targets", "note")


@dataclass(frozen=True)
class Verdict:
    """One extension on one card: ok, fail, unknown or note, with the reason and its source."""

    status: str
    reason: str


@dataclass(frozen=True)
class Extension:
    name: str  # the distribution, as pinned in a lock: "flash-attn"
    modules: tuple[str, ...]
    packages: tuple[str, ...]  # other distributions of it: pytorch-triton-rocm
    rules: tuple[ExtensionRule, ...]
    torch_pairs: dict[str, str]
    about: str
    source: str
    checked_through: str = ""  # the newest release the facts were read at: a newer pin is unknown
    checked_source: str = ""


@dataclass(frozen=True)
class ExtensionFacts:
    extensions: dict[str, Extension]
    sources: dict[str, str]
    path: str

    def by_module(self, module: str) -> Extension | None:
        """The extension whose import module is exactly ``module`` (flash_attn.cute is
        FlashAttention-4, another distribution than flash_attn's: a submodule is not taken for its
        package)."""
        return next((e for e in self.extensions.values() if module in e.modules), None)

    def by_package(self, name: str) -> Extension | None:
        """The extension distributed as ``name`` (PEP 503 normalized)."""
        wanted = re.sub(r"[-_.]+", "-", name).lower()
        return self.extensions.get(wanted) or next(
            (e for e in self.extensions.values() if wanted in e.packages), None)


def _check_rule(path: str, where: str, rule: Any, sources: Mapping[str, Any]) -> None:
    from kdkit.core.versions import InvalidVersion, specifier_clauses

    if not isinstance(rule, dict) or rule.get("backend") not in ("cuda", "rocm"):
        raise BadInput(f"{path}: {where}.backend: expected \"cuda\" or \"rocm\"")
    if sum(kind in rule for kind in _KINDS) != 1:
        raise BadInput(f"{path}: {where}: expected exactly one of {', '.join(_KINDS)}")
    if rule.get("source") not in sources:
        raise BadInput(f"{path}: {where}.source: {rule.get('source')!r} is not a key of $.sources; "
                       "name the fact's source there")
    for key in ("versions", "toolkits"):
        try:
            if key in rule:
                specifier_clauses(str(rule[key]))
        except InvalidVersion as exc:
            raise BadInput(f"{path}: {where}.{key}: {exc}") from None


def _extension(path: str, name: str, raw: Any, sources: Mapping[str, Any]) -> Extension:
    where = f"$.extensions.{name}"
    if not isinstance(raw, dict) or not isinstance(raw.get("modules"), list) or not raw["modules"]:
        raise BadInput(f"{path}: {where}.modules: expected a list of import names")
    for index, rule in enumerate(raw.get("rules", [])):
        _check_rule(path, f"{where}.rules[{index}]", rule, sources)
    pairs = raw.get("torch_pairs", {})
    if (pairs or "source" in raw) and raw.get("source") not in sources:
        raise BadInput(
            f"{path}: {where}.source: expected a key of $.sources (torch_pairs need their source)")
    through, through_source = _checked_through(path, where, raw.get("checked_through"), sources)
    return Extension(name, tuple(raw["modules"]), tuple(raw.get("packages", [])),
                     tuple(raw.get("rules", [])),
                     dict(pairs), str(raw.get("about", "")),
                     str(raw.get("source", "")), through, through_source)


def _checked_through(path: str, where: str, raw: Any,
                     sources: Mapping[str, Any]) -> tuple[str, str]:
    """(release, source) of an extension's ``checked_through``; ("", "") when it has none."""
    from kdkit.core.versions import InvalidVersion, Version

    if raw is None:
        return "", ""
    if not isinstance(raw, dict) or not isinstance(raw.get("version"), str) \
            or raw.get("source") not in sources:
        raise BadInput(f"{path}: {where}.checked_through: expected {{\"version\": the newest "
                       "release the facts were read at, \"source\": a key of $.sources}")
    try:
        Version.parse(raw["version"])
    except InvalidVersion as exc:
        raise BadInput(f"{path}: {where}.checked_through.version: {exc}") from None
    return raw["version"], str(raw["source"])


def parse_facts(data: Any, path: str) -> ExtensionFacts:
    """The extension facts of ``data`` (extensions.json's content), checked; BadInput names the
    place."""
    if not isinstance(data, dict) or not isinstance(data.get("sources"), dict) or \
            not isinstance(data.get("extensions"), dict):
        raise BadInput(f"{path}: expected an object with \"sources\" and \"extensions\"")
    sources = data["sources"]
    found = {name: _extension(path, name, raw, sources) for name, raw in data["extensions"].items()}
    return ExtensionFacts(found, {k: str(v) for k, v in sources.items()}, path)


@cache
def load_extension_facts(path: Path | None = None) -> ExtensionFacts:
    """The shipped extension facts (kdkit/data/extensions.json), or those of ``path``."""
    from kdkit.config.shipped import data_file
    from kdkit.core.jsonio import load_json

    where = path or data_file("extensions.json")
    return parse_facts(load_json(where, what="extension facts"), str(where))


# ---------------------------------------------------------------- verdicts


def _capability(card: str) -> int | None:
    match = re.fullmatch(r"sm_([0-9]+)", card)
    return int(match.group(1)) if match else None


def _rule_verdict(ext: Extension, rule: ExtensionRule, card: str) -> Verdict:
    """What one rule says of ``card`` (its releases named by the caller)."""
    source = f"extensions.json: {rule['source']}"
    if "note" in rule:
        return Verdict("note", f"{ext.name}: {rule['note']} ({source})")
    if "targets" in rule:
        targets = rule["targets"]
        if not targets:
            return Verdict("fail", f"{ext.name} has no {rule['backend']} build at all ({source})")
        if card in targets:
            return Verdict("ok", f"{ext.name} builds kernels for {card} ({source})")
        return Verdict("fail",
                       f"{ext.name} builds for {', '.join(targets)}: not for {card} ({source})")
    capability = _capability(card)
    if capability is None:
        return Verdict("unknown", f"{card} is not an NVIDIA compute capability ({source})")
    if "min_sm" in rule:
        if capability >= rule["min_sm"]:
            return Verdict("ok",
                           f"{ext.name} needs sm_{rule['min_sm']} or newer; {card} is ({source})")
        return Verdict("fail",
                       f"{ext.name} needs sm_{rule['min_sm']} or newer, and {card} is older "
                       f"({source})")
    only = ", ".join(f"sm_{c}" for c in rule["only_sm"])
    if capability in rule["only_sm"]:
        return Verdict("ok", f"{ext.name} runs on {only} only; {card} is one ({source})")
    return Verdict("fail", f"{ext.name} runs on {only} only, not on {card} ({source})")


def _span(rule: ExtensionRule) -> str:
    span = f"releases {rule['versions']}" if rule.get("versions") else "every release"
    return span + (f" with {rule['backend']} {rule['toolkits']}" if rule.get("toolkits") else "")


def _applies(rule: Mapping[str, Any], key: str, version: str | None) -> bool:
    """Whether ``rule`` covers ``version`` by its specifier ``key`` (an unknown version: it may)."""
    from kdkit.core.versions import InvalidVersion, satisfies

    if key not in rule or version is None:
        return True
    try:
        return satisfies(version, rule[key])
    except InvalidVersion:
        return False


def _agree(ext: Extension, rules: list[ExtensionRule], card: str, prefix: str) -> Verdict:
    """The verdict every rule of ``rules`` gives ``card``, or unknown naming what it depends on."""
    verdicts = [(_rule_verdict(ext, r, card), r) for r in rules]
    if len({v.status for v, _ in verdicts}) == 1:
        tail = "" if len(verdicts) == 1 else ", in every release and build kdkit has facts for"
        return Verdict(verdicts[0][0].status, f"{prefix}{verdicts[0][0].reason}{tail}")
    spans = "; ".join(f"{v.status} in {_span(r)}" for v, r in verdicts)
    return Verdict("unknown",
                   f"{prefix}{ext.name} on {card} depends on its release and build ({spans})")


def _beyond(ext: Extension, version: str) -> str | None:
    """Why ``version`` is past the release ``ext``'s facts were read at (a rule such as ``>=2`` does
    not speak for releases nobody has read), or None."""
    from kdkit.core.versions import InvalidVersion, Version

    if not ext.checked_through:
        return None
    try:
        newer = Version.parse(version).public_version() > Version.parse(ext.checked_through)
    except InvalidVersion:
        return "not a PEP 440 version"
    if not newer:
        return None
    return (f"kdkit's facts were read through {ext.name} {ext.checked_through} (extensions.json: "
            f"{ext.checked_source}), and this release is newer")


def label_verdict(name: str, pinned: str, torch_version: str, torch_label: str) -> Verdict | None:
    """A fail when the pin's local label names a torch minor (``torch2.6``) or a CUDA major
    (``cu12``) other than the lock's torch: a compiled extension loads only with the torch and CUDA
    runtime it was built for."""
    from kdkit.core.builds import parse_label, torch_minor

    local = pinned.partition("+")[2].lower()
    minor = torch_minor(torch_version)
    named = re.search(r"torch([0-9]+)[._-]([0-9]+)", local)
    if named and f"{int(named[1])}.{int(named[2])}" != minor:
        return Verdict("fail",
                       f"{name} {pinned} is built for torch {int(named[1])}.{int(named[2])} (its "
                       f"local label), and the lock's torch is {torch_version}: a compiled "
                       "extension loads only with the torch it was built against")
    cuda = re.search(r"(?<![a-z])cu([0-9]{2,3})(?![0-9])", local)
    built = parse_label(torch_label)
    theirs = (built[1].split(".")[0] if built is not None and built[0] == "cuda" and built[1]
              else None)
    if cuda and str(int(cuda[1][:2])) != theirs:
        what = f"CUDA {theirs}" if theirs else f"a {torch_label or 'non-CUDA'} build"
        return Verdict("fail",
                       f"{name} {pinned} is built for CUDA {int(cuda[1][:2])} (its local label), "
                       f"and the lock's torch {torch_version} is {what}: its CUDA runtime is not "
                       "the one the extension links")
    return None


def judge(ext: Extension, backend: str, card: str, version: str | None,
          toolkit: str | None = None) -> Verdict:
    """``ext`` (release ``version``, None when the lock pins none) on a ``backend`` card ``card``,
    with a torch built for CUDA or ROCm ``toolkit`` ("7.2"; None when not known): rules may name the
    toolkits they hold for."""
    rules = [r for r in ext.rules if r["backend"] == backend and _applies(r, "toolkits", toolkit)]
    built = f" {toolkit}" if toolkit and any("toolkits" in r for r in ext.rules
                                             if r["backend"] == backend) else ""
    if not rules:
        about = f" ({ext.about})" if ext.about else ""
        return Verdict("unknown", f"no facts for {ext.name} on {backend}{built}{about}")
    if version is None:
        return _agree(ext, rules, card, "")
    beyond = _beyond(ext, version)
    if beyond is not None:
        return (
            Verdict("unknown", f"no facts for {ext.name} {version} on {backend}{built}: {beyond}"))
    found = [r for r in rules if _applies(r, "versions", version)]
    if not found:
        spans = "; ".join(_span(r) for r in rules)
        return Verdict("unknown",
                       f"no facts for {ext.name} {version} on {backend}{built} (kdkit's cover "
                       f"{spans})")
    return _agree(ext, found, card, f"{ext.name} {version}: ")


def judge_pair(ext: Extension, torch_version: str, version: str | None) -> Verdict:
    """A package released in step with torch (torchvision, torchaudio) against the locked torch."""
    from kdkit.core.builds import torch_minor

    source = f"extensions.json: {ext.source}"
    minor = torch_minor(torch_version)
    expected = ext.torch_pairs.get(minor)
    if version is None:
        return (
            Verdict("unknown",
                    f"the lock pins no {ext.name}, so its pairing with torch {minor} is not known"))
    if expected is None:
        return Verdict("unknown",
                       f"no facts for the {ext.name} of torch {minor} (kdkit knows torch "
                       f"{', '.join(ext.torch_pairs)}; {source})")
    if torch_minor(version) == expected:
        return (
            Verdict("ok",
                    f"{ext.name} {version} is the {expected} release that belongs to torch {minor} "
                    f"({source})"))
    return Verdict("fail",
                   f"{ext.name} {version} does not belong to torch {minor}: torch {minor} pairs "
                   f"with {ext.name} {expected}.* ({source})")
