"""The pilot config's keys beyond today's: ``output`` (what an answer is), ``inputs`` as a JSONL
corpus, ``decode``, ``model`` and ``params``: their typed values and the rules of their shape.

Shape only (no file is read here): kdkit.core.pilotconfig.config_problems calls these for `kdkit
validate` and the pilot alike; kdkit.core.pilotload reads what they name. Standard library only.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kdkit.core.pilotrules import JSON_TYPE, Problems, Rule, object_problems, value_shown
from kdkit.core.projectfiles import shown

OUTPUT_KINDS = ("category", "text", "vector", "json", "file")
DECODES = ("utf-8", "bytes")
MAX_DIM = 65536
MAX_CHARS = 10**8
MAX_BYTES = 1 << 50  # a file kind's max_bytes per item
MAX_PARAMS_BYTES = 64 * 1024  # params, canonical JSON (sorted keys, no spaces, ASCII)
REVISION = re.compile(r"[0-9a-f]{40}")  # fullmatch: a commit, never a branch or a tag
# fullmatch
HUB = re.compile(r"(?:[A-Za-z0-9][A-Za-z0-9._-]{0,95}/)?[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
# fullmatch
ENTRY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*")
ID_FIELD = re.compile(r"[^\x00-\x1f\x7f]{1,128}")  # fullmatch; a control character is refused first


@dataclass(frozen=True)
class Output:
    """What an answer is (the pilot config's ``output``; a top-level ``categories`` is the category
    kind)."""

    kind: str = "category"
    categories: tuple[str, ...] = ()
    max_chars: int | None = None  # text
    dim: int | None = None  # vector
    schema: Any = None  # json: the schema document, loaded and checked (kdkit.core.answerschema)
    schema_file: str | None = None  # json: as the config names it
    # quality.scorer, the project's function scorer(item, answer, expected) -> [0, 1]: imported in
    # the harness's process only (kdkit.probe.pilot.harness.with_scorer); None: the kind's built-in
    # score (kdkit.core.outputkinds)
    scorer: Callable[[dict[str, Any], Any, Any], Any] | None = field(
        default=None, compare=False, repr=False)
    max_bytes: int | None = None  # file: the most bytes of one item's files (None: no limit)


@dataclass(frozen=True)
class Model:
    """The model the run uses: a folder of the project (every file hashed), a hub reference at an
    exact revision, or both; and an adapter's base. ``record`` is what params.json keeps (part of
    the run's identity)."""

    path: str | None = None
    hub: str | None = None
    revision: str | None = None
    record: Any = None


OUTPUT_FIELDS: dict[str, dict[str, Rule]] = {
    "category": {"kind": Rule("string"), "categories": Rule("categories")},
    "text": {"kind": Rule("string"), "max_chars": Rule("integer", minimum=1, maximum=MAX_CHARS)},
    "vector": {"kind": Rule("string"), "dim": Rule("integer", minimum=1, maximum=MAX_DIM)},
    "json": {"kind": Rule("string"), "schema": Rule("path")},
    "file": {"kind": Rule("string"),
             "max_bytes": Rule("integer", required=False, minimum=1, maximum=MAX_BYTES)},
}
INPUT_FIELDS: dict[str, Rule] = {
    "jsonl": Rule("path"),
    "id": Rule("string", required=False,
               pattern=ID_FIELD, hint="a field name of 1 to 128 characters"),
}
REFERENCE_FIELDS: dict[str, Rule] = {
    "path": Rule("path", required=False),
    "hub": Rule("string", required=False, pattern=HUB, hint='"org/name", a hub repository'),
    "revision": Rule("string", required=False),
}
MODEL_FIELDS: dict[str, Rule] = {**REFERENCE_FIELDS, "base": Rule("object", required=False)}
QUALITY_FIELDS: dict[str, Rule] = {
    "scorer": Rule("string", required=False,
                   pattern=ENTRY, hint='"module:function" (e.g. src.score:score)'),
    "min": Rule("number", required=False, minimum=0, maximum=1),
}


def _object(value: Any, where: str, example: str) -> Problems | None:
    """None for an object, else the one problem naming what to write."""
    if isinstance(value, dict):
        return None
    return [(where, f"expected an object ({example}), got {JSON_TYPE.get(type(value), 'value')} "
                    f"{value_shown(value)}")]


def output_problems(value: Any, where: str = "$.output") -> Problems:
    """``output``: one of :data:`OUTPUT_KINDS` with that kind's settings, and nothing else."""
    refused = _object(value, where, '{"kind": "vector", "dim": 768}')
    if refused is not None:
        return refused
    kind = value.get("kind")
    if kind not in OUTPUT_KINDS:
        what = "missing" if "kind" not in value else f"unknown output kind {value_shown(kind)}"
        return [(f"{where}.kind", f"{what}; use one of {', '.join(OUTPUT_KINDS)}")]
    return object_problems(value, OUTPUT_FIELDS[kind], where, f" for output kind {kind!r}")


def inputs_problems(value: Any, where: str = "$.inputs") -> Problems:
    """``inputs`` as an object: ``{"jsonl": FILE, "id": FIELD}`` (a string, a folder, is a path
    rule's)."""
    if not isinstance(value, dict):
        return []
    problems = object_problems(value, INPUT_FIELDS, where)
    jsonl = value.get("jsonl")
    if isinstance(jsonl, str) and not problems and not os.path.dirname(os.path.normpath(jsonl)):
        problems.append((f"{where}.jsonl",
                         f"{shown(jsonl)} lies in the project's root; put the corpus in a folder "
                         "of its own (e.g. data/corpus.jsonl): that folder is what a container "
                         "mounts as the inputs"))
    return problems


def revision_problem(value: Any) -> str | None:
    if not isinstance(value, str):
        return f"expected the 40-hex commit of the hub repository, got {value_shown(value)}"
    if REVISION.fullmatch(value):
        return None
    return (f"{shown(value)} is not a commit: a branch or a tag moves, so the same run could not "
            "be made again; give the 40-hex commit (lowercase) the hub shows for it")


def reference_problems(value: Any, where: str, fields: dict[str, Rule]) -> Problems:
    """A model or base reference: ``path`` and/or ``hub`` with its exact ``revision``."""
    refused = _object(
        value, where, '{"path": "models/my-model"} or {"hub": "org/name", "revision": "<40 hex>"}')
    if refused is not None:
        return refused
    problems = object_problems(value, fields, where)
    if "path" not in value and "hub" not in value:
        problems.append((where,
                         'missing "path" or "hub"; name the model\'s folder in the project, its '
                         "hub repository with an exact revision, or both"))
    if "hub" in value and "revision" not in value:
        problems.append((where,
                         f'missing "revision" for hub {value_shown(value["hub"])}; give the 40-hex '
                         "commit (a branch or a tag moves)"))
    if "revision" in value:
        if "hub" not in value:
            problems.append(
                (f"{where}.revision",
                 'a revision without "hub"; name the hub repository it belongs to'))
        elif (problem := revision_problem(value["revision"])) is not None:
            problems.append((f"{where}.revision", problem))
    return problems


def model_problems(value: Any, where: str = "$.model") -> Problems:
    problems = reference_problems(value, where, MODEL_FIELDS)
    if isinstance(value, dict) and "base" in value:
        problems += reference_problems(value["base"], f"{where}.base", REFERENCE_FIELDS)
    return problems


def _non_finite(value: Any, where: str) -> tuple[str, str] | None:
    """The first non-finite number or non-string key below ``value`` (a config built in code can
    hold one)."""
    if isinstance(value, float) and not math.isfinite(value):
        return where, f"{value} is not a finite number; JSON numbers must be finite"
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return where, f"the key {key!r} is not a string; JSON keys are strings"
            if found := _non_finite(item, f"{where}.{key}"):
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            if found := _non_finite(item, f"{where}[{index}]"):
                return found
    return None


def params_problems(value: Any, where: str = "$.params") -> Problems:
    """``params``: a JSON object of finite numbers and string keys, at most :data:`MAX_PARAMS_BYTES`
    canonical."""
    refused = _object(value, where, '{"temperature": 0.2, "max_tokens": 256}')
    if refused is not None:
        return refused
    try:
        found = _non_finite(value, where)
    except RecursionError:
        found = where, "nested too deeply; flatten it"
    if found is not None:
        return [found]
    size = len(json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True))
    if size > MAX_PARAMS_BYTES:
        return [(where,
                 f"{size} bytes as canonical JSON; keep params under {MAX_PARAMS_BYTES} (they "
                 "travel with every batch): put large data in a file of the project")]
    return []


def quality_problems(value: Any, where: str = "$.quality") -> Problems:
    """``quality``: the project's ``scorer`` ("module:function") and/or the ``min`` mean score, at
    least one."""
    refused = _object(value, where, '{"scorer": "src.score:score", "min": 0.9}')
    if refused is not None:
        return refused
    problems = object_problems(value, QUALITY_FIELDS, where)
    if not value:
        problems.append(
            (where,
             'empty; give "scorer" (the project\'s "module:function"), "min" (0 to 1) or both'))
    return problems


def _category_kind(data: dict[str, Any]) -> bool:
    output = data.get("output")
    return "categories" in data or not isinstance(output, dict) or output.get("kind") == "category"


def quality_key_problems(data: dict[str, Any], folder: bool) -> Problems:
    """``min_quality`` or ``quality.min`` (never both) where an answer can have an expected value: a
    manifest (a folder's, or a JSONL corpus's); not over a JSONL corpus without a manifest, whatever
    the kind (nothing is expected: the verdict rests on the accounting and each answer's check). A
    ``scorer`` is for the other kinds (the category kind's quality is accuracy against the
    manifest's labels)."""
    quality = data.get("quality")
    has_min = isinstance(quality, dict) and "min" in quality
    problems: Problems = []
    if "min_quality" in data and has_min:
        problems.append(("$.quality.min",
                         'both "min_quality" and "quality.min" are given; keep one ("quality.min" '
                         'replaces "min_quality")'))
    elif "min_quality" not in data and not has_min and (folder or "manifest" in data):
        problems.append(("$",
                         "missing required key 'min_quality'; add it (or \"quality\": {\"min\": "
                         "...}): a manifest's labels and expected answers are judged against it"))
    if isinstance(quality, dict) and "scorer" in quality and _category_kind(data):
        problems.append(("$.quality.scorer",
                         "the category kind's quality is accuracy against the manifest's labels; "
                         'drop "scorer" (a scorer is for the text, vector, json and file kinds)'))
    return problems


def key_problems(data: dict[str, Any]) -> Problems:
    """The rules between keys: ``categories`` or ``output`` (one of them); a folder of inputs needs
    its ``manifest``; a JSONL corpus is decoded as records, never as bytes; ``min_quality`` where
    something can be expected (:func:`quality_key_problems`)."""
    problems: Problems = []
    if "categories" in data and "output" in data:
        problems.append(("$", 'both "categories" and "output" are given; keep one: "output" '
                              '({"kind": "category", "categories": [...]} is what "categories" '
                              'says)'))
    elif "categories" not in data and "output" not in data:
        problems.append(
            ("$",
             "missing required key 'categories'; add it (or declare \"output\": {\"kind\": ...})"))
    folder = "inputs" not in data or isinstance(data["inputs"], str)
    if folder and "manifest" not in data:
        problems.append(
            ("$",
             "missing required key 'manifest'; a folder of inputs needs one listing every input"))
    if not folder and data.get("decode") == "bytes":
        problems.append(("$.decode",
                         '"bytes" is for a folder of inputs (a file per item); a JSONL corpus\'s '
                         'items are its records: drop "decode" or give "utf-8"'))
    return problems + quality_key_problems(data, folder)


NESTED = {"output": output_problems, "inputs": inputs_problems, "model": model_problems,
          "params": params_problems,
          "quality": quality_problems}
