"""The pilot's inputs: config/pilot.json and the manifest, read and checked with the stdlib.

Everything the run depends on is resolved here once — paths inside the project,
stop rules with their defaults, the manifest's digest — so the run-id's hash
changes exactly when the parameters do.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from kdkit.core.errors import BadInput
from kdkit.core.jsonio import sha256_file
from kdkit.core.projectfiles import (
    CONTROL_CHARACTER,
    MARKER,
    PATH_RULE,
    SAFE_ID_RULE,
    config_path,
    config_path_problem,
    inside,
    is_safe_id,
    is_within,
    load_object,
    path_problem,
    real_inside,
    require,
    require_real_inside,
    runs_problem,
    shown,
)

ENTRY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*")  # fullmatch
DEVICE = re.compile(r"auto|cpu|cuda|cuda:[0-9]+")  # fullmatch
# A bare file name: no separator, no drive, cannot be "." or "..", so it stays in the manifest's folder
# without the general path check (which costs microseconds per entry, a tenth of a trivial app's time).
PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")  # fullmatch


@dataclass(frozen=True, slots=True)
class Document:
    """One manifest entry. ``location`` comes from the manifest's ``file``, never from the ID.

    The location is kept as a string: a Path per entry costs more than reading a small file's name.
    """

    id: str
    file: str
    location: str
    label: str | None
    expect: str  # accept | reject
    # A record of a JSONL corpus (inputs.jsonl): where its line lies in ``location`` (offset -1: a file per item).
    offset: int = -1
    length: int = 0
    expected: Any = None  # the manifest's expected output (text, vector, JSON) for the other output kinds

    @property
    def path(self) -> Path:
        return Path(self.location)


OUTPUT_KINDS = ("category", "text", "vector", "json")
DECODES = ("utf-8", "bytes")


@dataclass(frozen=True)
class Output:
    """What an answer is (the pilot config's ``output``; a top-level ``categories`` is the category kind)."""

    kind: str = "category"
    categories: tuple[str, ...] = ()
    max_chars: int | None = None  # text
    dim: int | None = None  # vector
    schema: Any = None  # json: the schema document, loaded and checked (kdkit.core.answerschema)
    schema_file: str | None = None  # json: as the config names it


@dataclass(frozen=True)
class Model:
    """The model the run uses: a folder of the project (every file hashed), a hub reference at an exact
    revision, or both; and an adapter's base. ``record`` is what params.json keeps (part of the run's identity)."""

    path: str | None = None
    hub: str | None = None
    revision: str | None = None
    record: Any = None


@dataclass(frozen=True)
class PilotConfig:
    root: Path
    config_path: Path
    inputs_dir: Path
    manifest_path: Path
    categories: tuple[str, ...]
    entry: str
    batch_size: int
    device: str
    max_input_bytes: int
    min_quality: float
    runs_dir: Path
    max_rejected: int | None
    max_seconds: float | None
    documents: tuple[Document, ...]
    max_batch_seconds: float | None = None
    output: Output = Output()
    decode: str = "utf-8"  # utf-8 | bytes (a file per item); a JSONL corpus's items are records
    jsonl: Path | None = None  # inputs {"jsonl": ..., "id": ...}: the corpus file (inputs_dir is its folder)
    id_field: str | None = None
    model: Model | None = None
    params: dict[str, Any] | None = None  # None: the config declares none (predict(items) gets none)

    def relative(self, path: Path) -> str:
        """A path as the project names it (relative to the root), for reports that travel."""
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError:
            return str(path)

    def resolved(self) -> dict[str, Any]:
        """The parameters the run depends on, defaults filled in; their hash names the run."""
        return {
            "config_file": self.relative(self.config_path),
            "inputs": self.relative(self.inputs_dir),
            "manifest": self.relative(self.manifest_path),
            "manifest_sha256": sha256_file(self.manifest_path),
            "categories": list(self.categories),
            "entry": self.entry,
            "batch_size": self.batch_size,
            "device": self.device,
            "max_input_bytes": self.max_input_bytes,
            "min_quality": self.min_quality,
            "runs": self.relative(self.runs_dir),
            "stop": {"max_rejected": self.max_rejected, "max_seconds": self.max_seconds,
                     **({"max_batch_seconds": self.max_batch_seconds} if self.max_batch_seconds else {})},
        }


def params_hash(params: dict[str, Any]) -> str:
    canonical = json.dumps(params, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def config_file(root: Path, given: Path | None) -> Path:
    """--config as given (relative to the project root), else kdkit.json's pilot_config."""
    if given is not None:
        return given if given.is_absolute() else root / given
    project = load_object(root / MARKER, "project file")
    relative = require(project, "pilot_config", str, root / MARKER)
    return config_path(root, relative, root / MARKER, "$.pilot_config")


# ---------------------------------------------------------------- the one model of the pilot config
# `kdkit validate` reports every problem this model finds (config_problems) and the pilot refuses
# to start on the first (load_pilot): the two cannot disagree. schemas/pilot.schema.json says the
# same for editors; tests/test_pilot_config_model.py holds the schema to this model.

MAX_SECONDS = 10 * 365 * 24 * 3600  # a stop rule beyond ten years is a typo (null means no limit)
JSON_TYPE = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object",
             type(None): "null"}


@dataclass(frozen=True)
class Rule:
    """What one key of the pilot config may hold."""

    kind: str  # path | string | integer | number | categories | object
    required: bool = True
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    nullable: bool = False
    pattern: re.Pattern[str] | None = None
    hint: str = ""


FIELDS: dict[str, Rule] = {
    "$schema": Rule("string", required=False),
    "inputs": Rule("path"),
    "manifest": Rule("path"),
    "categories": Rule("categories"),
    "entry": Rule("string", pattern=ENTRY, hint='"module:function" (e.g. src.classify:predict)'),
    "batch_size": Rule("integer", minimum=1, maximum=65536),
    "device": Rule("string", pattern=DEVICE, hint="use auto, cpu, cuda or cuda:N"),
    "max_input_bytes": Rule("integer", minimum=1, maximum=1 << 30),
    "min_quality": Rule("number", minimum=0, maximum=1),
    "runs": Rule("path"),
    "stop": Rule("object", required=False),
}
STOP_FIELDS: dict[str, Rule] = {
    "max_rejected": Rule("integer", required=False, minimum=0, maximum=10**9, nullable=True),
    "max_seconds": Rule("number", required=False, minimum=0, exclusive_minimum=True, maximum=MAX_SECONDS,
                        nullable=True),
    "max_batch_seconds": Rule("number", required=False, minimum=0, exclusive_minimum=True,
                              maximum=MAX_SECONDS, nullable=True),
}


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:40] + "..."


def _kind_problem(rule: Rule, value: Any) -> str | None:
    """The type problem of ``value`` under ``rule``, or None. Whole-valued floats (4.0) are integers,
    as in JSON Schema; booleans are never numbers."""
    if value is None and rule.nullable:
        return None
    wanted = {"path": (str,), "string": (str,), "categories": (list,), "object": (dict,),
              "integer": (int,), "number": (int, float)}[rule.kind]
    fits = isinstance(value, wanted) and not isinstance(value, bool)
    if rule.kind == "integer" and isinstance(value, float) and value.is_integer():
        fits = True
    if fits:
        return None
    expected = {"path": "string", "categories": "array"}.get(rule.kind, rule.kind)
    return f"expected {expected}{' or null' if rule.nullable else ''}, got {type(value).__name__} {_shown(value)}"


def _range_problem(rule: Rule, value: float) -> str | None:
    low = rule.minimum is not None and (value <= rule.minimum if rule.exclusive_minimum else value < rule.minimum)
    high = rule.maximum is not None and value > rule.maximum
    if not (low or high):
        return None
    bounds = [f"{'>' if rule.exclusive_minimum else '>='} {rule.minimum:g}" if rule.minimum is not None else "",
              f"<= {rule.maximum:g}" if rule.maximum is not None else ""]
    return f"{value:g} is out of range; use a value {' and '.join(b for b in bounds if b)}" + \
        (" (or null for no limit)" if rule.nullable else "")


def _value_problem(rule: Rule, value: Any) -> str | None:
    problem = _kind_problem(rule, value)
    if problem is not None or value is None:
        return problem
    if rule.kind in ("integer", "number"):
        return _range_problem(rule, value)
    if rule.kind == "path":
        return config_path_problem(value)
    if rule.kind == "categories":
        if not value or not all(isinstance(c, str) and c for c in value) or len(set(value)) != len(value):
            return "expected a non-empty list of distinct, non-empty strings"
        bad = next((c for c in value if CONTROL_CHARACTER.search(c)), None)  # no category breaks a line
        return None if bad is None else f"the category {shown(bad)} holds a control character or a line break; " \
            "write it on one line"
    if isinstance(value, str) and CONTROL_CHARACTER.search(value):
        return f"{shown(value)} holds a control character or a line break; write it on one line"
    if rule.pattern is not None and not rule.pattern.fullmatch(value):
        text = repr(value) if len(value) <= 60 else repr(value[:60]) + "..."
        return f"{text} is not {rule.hint}" if rule.hint.startswith('"') else f"{text}; {rule.hint}"
    return None


def _object_problems(data: dict[str, Any], fields: dict[str, Rule], where: str) -> list[tuple[str, str]]:
    problems = []
    unknown = sorted(set(data) - set(fields))
    if unknown:
        allowed = ", ".join(k for k in sorted(fields) if not k.startswith("$"))
        problems.append((where, f"unknown key {', '.join(repr(k) for k in unknown)}; allowed keys: {allowed} "
                                "(a typo?)"))
    missing = [k for k, rule in fields.items() if rule.required and k not in data]
    if missing:
        problems.append((where, f"missing required key {', '.join(repr(k) for k in missing)}; add it"))
    for key, rule in fields.items():
        if key in data and (problem := _value_problem(rule, data[key])) is not None:
            problems.append((f"{where}.{key}", problem))
    return problems


def config_problems(data: Any) -> list[tuple[str, str]]:
    """Every problem of a pilot config document as (JSON path, message), in the keys' order."""
    if not isinstance(data, dict):
        return [("$", f"expected an object, got {JSON_TYPE.get(type(data), 'value')}")]
    problems = _object_problems(data, FIELDS, "$")
    if isinstance(data.get("stop"), dict):
        problems += _object_problems(data["stop"], STOP_FIELDS, "$.stop")
    return problems


def refuse_problems(data: Any, path: Path) -> None:
    """BadInput naming the first of :func:`config_problems` (and how many follow), if any: what the pilot and
    every host command reading the pilot config (kdkit.config.project) refuse to go on with."""
    problems = config_problems(data)
    if problems:
        where, message = problems[0]
        more = f" (+{len(problems) - 1} more: `kdkit validate` lists them)" if len(problems) > 1 else ""
        raise BadInput(f"{path}: {where}: {message}{more}")


def runs_folder_problem(root: Path, data: dict[str, Any], extra: tuple[str, ...] = ()) -> str | None:
    """:func:`kdkit.core.projectfiles.runs_problem` for the pilot config ``data`` (its model already passed):
    ``runs`` apart from the project's folders, the inputs, the manifest and its folder, and ``extra`` (what
    other configs name: the bundle's allow-list)."""
    manifest = str(data["manifest"])
    folder = os.path.dirname(os.path.normpath(manifest))
    places = (str(data["inputs"]), manifest, *([folder] if folder else []), *extra)
    return runs_problem(root, str(data.get("runs", "runs")), places)


def entry_problem(root: Path, entry: str) -> str | None:
    """Why ``entry``'s module is not the project's own (``module.py`` or ``module/__init__.py`` under the
    root, links resolved inside it), or None. The app is the project's code: ``os:system`` is not."""
    module = entry.split(":", 1)[0]
    base = root.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file() and real_inside(root, candidate) is not None:
            return None
    rel = PurePosixPath(*module.split("."))
    return f"module {module!r} not found: expected {rel}.py or {rel}/__init__.py under the project root"


def _optional(value: Any, kind: type) -> Any:
    return None if value is None else kind(value)


def load_pilot(root: Path, given: Path | None = None) -> PilotConfig:
    """Read and check the pilot config and its manifest; BadInput (exit 2) names the first problem.

    Every folder and file the config names is resolved through symbolic links and must stay inside
    the project (projectfiles.require_real_inside, the rule `kdkit validate` applies too).
    """
    path = config_file(root, given)
    data = load_object(path, "pilot config")
    refuse_problems(data, path)
    if (problem := entry_problem(root, data["entry"])) is not None:
        raise BadInput(f"{path}: $.entry: {problem}")
    if (problem := runs_folder_problem(root, data, (os.path.relpath(path, root),))) is not None:
        raise BadInput(f"{path}: $.runs: {problem}")
    categories = tuple(data["categories"])
    inputs = _located(root, data, "inputs", path)
    manifest_path = _located(root, data, "manifest", path)
    stop = data.get("stop", {})
    return PilotConfig(
        root=root,
        config_path=path,
        inputs_dir=inputs,
        manifest_path=manifest_path,
        categories=categories,
        entry=data["entry"],
        batch_size=int(data["batch_size"]),
        device=data["device"],
        max_input_bytes=int(data["max_input_bytes"]),
        min_quality=float(data["min_quality"]),
        runs_dir=_located(root, data, "runs", path),
        max_rejected=_optional(stop.get("max_rejected"), int),
        max_seconds=_optional(stop.get("max_seconds"), float),
        max_batch_seconds=_optional(stop.get("max_batch_seconds"), float),
        documents=load_manifest(manifest_path, inputs, categories),
        output=Output("category", categories),
    )


def _located(root: Path, data: dict[str, Any], key: str, path: Path) -> Path:
    """The folder or file under ``key``, as the config names it: lexically inside the project, and still
    inside with every link resolved (else BadInput naming where the link leads)."""
    target = inside(root, data[key], path, f"$.{key}")
    require_real_inside(root, target, path, f"$.{key}")
    return target


def load_manifest(path: Path, inputs: Path, categories: tuple[str, ...]) -> tuple[Document, ...]:
    """The manifest's documents; IDs checked as data, files kept inside the inputs folder."""
    data = load_object(path, "manifest")
    documents = require(data, "documents", list, path)
    if not documents:
        raise BadInput(f"{path}: $.documents: empty; list every pilot input")
    seen: set[str] = set()
    out = []
    folders = (str(path.parent), str(inputs))  # once: ten thousand entries must cost milliseconds
    plain_ok = is_within(folders[0], folders[1])  # a plain name then lands inside the inputs folder
    for index, doc in enumerate(documents):
        if not isinstance(doc, dict):
            raise BadInput(f"{_at(path, index)}: expected an object with id, file, label, expect")
        document = _document(doc, path, index, folders, categories, plain_ok)
        if document.id in seen:
            raise BadInput(f"{_at(path, index)}.id: duplicate ID {document.id!r}; every ID must be unique")
        seen.add(document.id)
        out.append(document)
    return tuple(out)


def _at(path: Path, index: int) -> str:
    """Where an entry is, for a message: built only on error (a string per entry costs as much as its checks)."""
    return f"{path}: $.documents[{index}]"


def _document(doc: dict[str, Any], path: Path, index: int, folders: tuple[str, str],
              categories: tuple[str, ...], plain_ok: bool) -> Document:
    ident = doc.get("id")
    if not is_safe_id(ident):
        raise BadInput(f"{_at(path, index)}.id: {json.dumps(ident)} is not a safe ID; {SAFE_ID_RULE}")
    name = doc.get("file")
    if not isinstance(name, str):
        raise BadInput(f"{_at(path, index)}.file: expected the input's file name, relative to the manifest")
    if not (plain_ok and PLAIN_NAME.fullmatch(name)) and (problem := path_problem(name)) is not None:
        raise BadInput(f"{_at(path, index)}.file: {problem.replace(PATH_RULE, 'a name relative to the manifest')}")
    target = _target(name, path, index, folders, plain_ok)
    expect, label = doc.get("expect"), doc.get("label")
    if expect not in ("accept", "reject"):
        raise BadInput(f"{_at(path, index)}.expect: {json.dumps(expect)}; use \"accept\" or \"reject\"")
    if expect == "accept" and label not in categories:
        raise BadInput(f"{_at(path, index)}.label: {json.dumps(label)} is not an allowed category "
                       f"({', '.join(categories)})")
    if label is not None and not isinstance(label, str):
        raise BadInput(f"{_at(path, index)}.label: expected a category or null")
    return Document(ident, name, target, label, expect)


def _target(name: str, path: Path, index: int, folders: tuple[str, str], plain_ok: bool) -> str:
    """The input's location: inside the manifest's folder and inside the inputs folder, else BadInput."""
    manifest_folder, inputs = folders
    if plain_ok and PLAIN_NAME.fullmatch(name):
        return manifest_folder.rstrip(os.sep) + os.sep + name  # what os.path.join gives, at half the cost
    where = f"$.documents[{index}].file"
    target = os.fspath(inside(manifest_folder, name, path, where))
    if not is_within(os.path.dirname(target), inputs):
        raise BadInput(f"{path}: {where}: {name!r} is not inside the inputs folder {inputs}")
    return target


def check_device(device: str) -> None:
    """``--device``: the pilot config's rule (auto, cpu, cuda, cuda:N), checked before anything runs."""
    if not DEVICE.fullmatch(device):
        raise BadInput(f"--device {device!r}: unknown device; use auto, cpu, cuda or cuda:N")
