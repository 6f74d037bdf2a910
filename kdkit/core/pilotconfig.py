"""The pilot's inputs: config/pilot.json and the manifest, read and checked with the stdlib.

Everything the run depends on is resolved here once — paths inside the project,
stop rules with their defaults, the manifest's digest, the corpus's and the model's
digests — so the run-id's hash changes exactly when the parameters do. The newer keys'
rules live in kdkit.core.pilotkeys, their readers in kdkit.core.pilotload, the documents
in kdkit.core.pilotmanifest; this module is the one model that holds them together.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from kdkit.core.errors import BadInput
from kdkit.core.jsonio import sha256_file
from kdkit.core.pilotkeys import DECODES as DECODES
from kdkit.core.pilotkeys import ENTRY as ENTRY
from kdkit.core.pilotkeys import NESTED, key_problems
from kdkit.core.pilotkeys import OUTPUT_KINDS as OUTPUT_KINDS
from kdkit.core.pilotkeys import Model as Model
from kdkit.core.pilotkeys import Output as Output
from kdkit.core.pilotload import existing, load_model, load_output
from kdkit.core.pilotmanifest import PLAIN_NAME as PLAIN_NAME
from kdkit.core.pilotmanifest import Document as Document
from kdkit.core.pilotmanifest import corpus_documents
from kdkit.core.pilotmanifest import load_manifest as load_manifest
from kdkit.core.pilotrules import JSON_TYPE as JSON_TYPE
from kdkit.core.pilotrules import Problems, object_problems
from kdkit.core.pilotrules import Rule as Rule
from kdkit.core.projectfiles import (
    MARKER,
    config_path,
    inside,
    load_object,
    real_inside,
    require,
    require_real_inside,
    runs_problem,
)

if TYPE_CHECKING:
    from kdkit.core.pilotrecords import OutputRecord

DEVICE = re.compile(r"auto|cpu|cuda|cuda:[0-9]+")  # fullmatch
DECODE = re.compile("|".join(re.escape(d) for d in DECODES))  # fullmatch


@dataclass(frozen=True)
class PilotConfig:
    root: Path
    config_path: Path
    # a folder of inputs; for a JSONL corpus, the folder holding it (what a container mounts)
    inputs_dir: Path
    manifest_path: Path | None  # None: a JSONL corpus without a manifest (no expectations)
    categories: tuple[str, ...]  # output.categories: empty unless the output is the category kind
    entry: str
    batch_size: int
    device: str
    max_input_bytes: int
    # min_quality, or quality.min; 0 where neither is given (nothing can be expected then)
    min_quality: float
    runs_dir: Path
    max_rejected: int | None
    max_seconds: float | None
    # a tuple; a JSONL corpus's: pilotmanifest.CorpusDocuments (compact)
    documents: Sequence[Document]
    max_batch_seconds: float | None = None
    output: Output = Output()  # noqa: RUF009  frozen: one shared default is safe
    decode: str = "utf-8"  # utf-8 | bytes (a file per item); a JSONL corpus's items are records
    # inputs {"jsonl": ..., "id": ...}: the corpus file (inputs_dir is its folder)
    jsonl: Path | None = None
    # the JSONL corpus's ID field (default "id"); None for a folder of inputs
    id_field: str | None = None
    model: Model | None = None
    # None: the config declares none (predict(items) gets none)
    params: dict[str, Any] | None = None
    corpus_sha256: str | None = None  # the JSONL corpus, hashed once when loaded
    # the config's "quality" ({"scorer", "min"}), None where not declared
    quality: dict[str, Any] | None = None
    # quality.scorer's module file in the project (part of the run's identity)
    scorer_file: Path | None = None

    def relative(self, path: Path) -> str:
        """A path as the project names it (relative to the root), for reports that travel."""
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError:
            return str(path)

    def resolved(self) -> dict[str, Any]:
        """The parameters the run depends on, defaults filled in; their hash names the run. A config
        using none of the newer keys (output, a JSONL corpus, decode, model, params) resolves as it
        always did."""
        manifest = self.manifest_path
        resolved: dict[str, Any] = {
            "config_file": self.relative(self.config_path),
            "inputs": self.relative(self.inputs_dir) if self.jsonl is None else
            {"jsonl": self.relative(self.jsonl), "id": self.id_field, "sha256": self.corpus_sha256},
            "manifest": None if manifest is None else self.relative(manifest),
            "manifest_sha256": None if manifest is None else sha256_file(manifest),
            "categories": list(self.categories),
            "entry": self.entry,
            "batch_size": self.batch_size,
            "device": self.device,
            "max_input_bytes": self.max_input_bytes,
            "min_quality": self.min_quality,
            "runs": self.relative(self.runs_dir),
            "stop": {"max_rejected": self.max_rejected, "max_seconds": self.max_seconds,
                     **({"max_batch_seconds": self.max_batch_seconds} if self.max_batch_seconds
                        else {})},
        }
        if self.output.kind != "category":
            resolved["output"] = self.output_record()
        if self.decode != "utf-8":
            resolved["decode"] = self.decode
        if self.model is not None:
            resolved["model"] = self.model.record
        if self.params is not None:
            resolved["params"] = self.params
        if self.quality is not None:
            resolved["quality"] = {**self.quality, **({} if self.scorer_file is None else {
                "scorer_file": self.relative(self.scorer_file),
                "scorer_sha256": sha256_file(self.scorer_file)})}
        return resolved

    def output_record(self) -> OutputRecord:
        """The declared output as params.json keeps it: its kind and settings (a json kind's schema
        file with its sha256)."""
        out = self.output
        record: OutputRecord = {"kind": out.kind}
        if out.kind == "text":
            record["max_chars"] = out.max_chars
        elif out.kind == "vector":
            record["dim"] = out.dim
        elif out.kind == "file" and out.max_bytes is not None:
            record["max_bytes"] = out.max_bytes
        elif out.kind == "json" and out.schema_file is not None:
            record["schema"] = out.schema_file
            record["schema_sha256"] = sha256_file(self.root / out.schema_file)
        return record


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
# same for editors; tests/core/test_pilot_config_model.py holds the schema to this model.

MAX_SECONDS = 10 * 365 * 24 * 3600  # a stop rule beyond ten years is a typo (null means no limit)

FIELDS: dict[str, Rule] = {
    "$schema": Rule("string", required=False),
    "inputs": Rule("inputs"),
    # required for a folder of inputs (pilotkeys.key_problems)
    "manifest": Rule("path", required=False),
    "categories": Rule("categories", required=False),  # or "output" (pilotkeys.key_problems)
    "output": Rule("object", required=False),
    "decode": Rule("string", required=False, pattern=DECODE, hint="use utf-8 or bytes"),
    "entry": Rule("string", pattern=ENTRY, hint='"module:function" (e.g. src.classify:predict)'),
    "batch_size": Rule("integer", minimum=1, maximum=65536),
    "device": Rule("string", pattern=DEVICE, hint="use auto, cpu, cuda or cuda:N"),
    "max_input_bytes": Rule("integer", minimum=1, maximum=1 << 30),
    # see pilotkeys.quality_key_problems
    "min_quality": Rule("number", required=False, minimum=0, maximum=1),
    "quality": Rule("object", required=False),
    "runs": Rule("path"),
    "stop": Rule("object", required=False),
    "model": Rule("object", required=False),
    "params": Rule("object", required=False),
}
STOP_FIELDS: dict[str, Rule] = {
    "max_rejected": Rule("integer", required=False, minimum=0, maximum=10**9, nullable=True),
    "max_seconds": Rule("number", required=False, minimum=0, exclusive_minimum=True,
                        maximum=MAX_SECONDS,
                        nullable=True),
    "max_batch_seconds": Rule("number", required=False, minimum=0, exclusive_minimum=True,
                              maximum=MAX_SECONDS, nullable=True),
}


def config_problems(data: Any) -> Problems:
    """Every problem of a pilot config document as (JSON path, message), in the keys' order, then
    the rules between keys (kdkit.core.pilotkeys.key_problems)."""
    if not isinstance(data, dict):
        return [("$", f"expected an object, got {JSON_TYPE.get(type(data), 'value')}")]
    problems = object_problems(data, FIELDS, "$")
    if isinstance(data.get("stop"), dict):
        problems += object_problems(data["stop"], STOP_FIELDS, "$.stop")
    for key, check in NESTED.items():
        if key in data and not any(where == f"$.{key}" for where, _message in problems):
            problems += check(data[key], f"$.{key}")
    return problems + key_problems(data)


def refuse_problems(data: Any, path: Path) -> None:
    """BadInput naming the first of :func:`config_problems` (and how many follow), if any: what the
    pilot and every host command reading the pilot config (kdkit.config.project) refuse to go on
    with."""
    problems = config_problems(data)
    if problems:
        where, message = problems[0]
        more = (f" (+{len(problems) - 1} more: `kdkit validate` lists them)" if len(problems) > 1
                else "")
        raise BadInput(f"{path}: {where}: {message}{more}")


def named_paths(data: dict[str, Any]) -> list[tuple[str, str]]:
    """(JSON path, path) of every place the pilot config ``data`` (its model already passed) names
    besides ``runs``: the inputs folder or the JSONL corpus, the manifest, the answer schema, the
    model's and its base's folders. What a bundle carries and what ``runs`` must stay apart from
    (:func:`places`)."""
    inputs, output, model = data["inputs"], data.get("output"), data.get("model")
    found: list[tuple[str, Any]] = [("$.inputs", inputs)] if isinstance(inputs, str) else \
        [("$.inputs.jsonl", inputs.get("jsonl"))]
    found.append(("$.manifest", data.get("manifest")))
    if isinstance(output, dict):
        found.append(("$.output.schema", output.get("schema")))
    if isinstance(model, dict):
        base = model.get("base")
        found += [("$.model.path", model.get("path")),
                  ("$.model.base.path", base.get("path") if isinstance(base, dict) else None)]
    return [(where, value) for where, value in found if isinstance(value, str)]


def inputs_folder(data: dict[str, Any]) -> str:
    """The inputs' folder as the config names it (a folder of inputs, or the JSONL corpus's folder):
    what a container mounts read-only."""
    inputs = data["inputs"]
    return inputs if isinstance(inputs, str) else os.path.dirname(os.path.normpath(inputs["jsonl"]))


def listing_file(data: dict[str, Any]) -> str:
    """The file that lists the inputs: the manifest, else (a JSONL corpus without one) the corpus
    itself."""
    manifest = data.get("manifest")
    return manifest if isinstance(manifest, str) else str(data["inputs"]["jsonl"])


def places(data: dict[str, Any]) -> tuple[str, ...]:
    """:func:`named_paths` and the folders of the manifest and of the JSONL corpus."""
    named: list[str] = []
    for where, value in named_paths(data):
        folder = os.path.dirname(os.path.normpath(value))
        named += [value,
                  *([folder] if folder and where in ("$.manifest", "$.inputs.jsonl") else [])]
    return tuple(named)


def runs_folder_problem(root: Path, data: dict[str, Any],
                        extra: tuple[str, ...] = ()) -> str | None:
    """:func:`kdkit.core.projectfiles.runs_problem` for the pilot config ``data`` (its model already
    passed): ``runs`` apart from the project's folders, what the config names (:func:`places`), and
    ``extra`` (what other configs name: the bundle's allow-list)."""
    return runs_problem(root, str(data["runs"]), (*places(data), *extra))


def entry_file(root: Path, entry: str) -> Path | None:
    """``entry``'s module file under the project root (``module.py`` or ``module/__init__.py``,
    links resolved inside it), or None."""
    base = root.joinpath(*entry.split(":", 1)[0].split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file() and real_inside(root, candidate) is not None:
            return candidate
    return None


def entry_problem(root: Path, entry: str) -> str | None:
    """Why ``entry``'s module is not the project's own (``module.py`` or ``module/__init__.py``
    under the root, links resolved inside it), or None. The app is the project's code: ``os:system``
    is not; nor is a quality scorer that is not the project's own function."""
    if entry_file(root, entry) is not None:
        return None
    module = entry.split(":", 1)[0]
    rel = PurePosixPath(*module.split("."))
    return (
        f"module {module!r} not found: expected {rel}.py or {rel}/__init__.py under the project "
        "root")


def _optional(value: Any, kind: type) -> Any:
    return None if value is None else kind(value)


def load_pilot(root: Path, given: Path | None = None) -> PilotConfig:
    """Read and check the pilot config, its documents (a folder's manifest, or a JSONL corpus and
    its optional manifest), its answer schema and its model (hashed once); BadInput (exit 2) names
    the first problem.

    Every folder and file the config names is resolved through symbolic links and must stay inside
    the project (projectfiles.require_real_inside, the rule `kdkit validate` applies too).
    """
    path = config_file(root, given)
    data = load_object(path, "pilot config")
    refuse_problems(data, path)
    if (problem := entry_problem(root, data["entry"])) is not None:
        raise BadInput(f"{path}: $.entry: {problem}")
    quality, scorer_file = _quality(root, data, path)
    if (problem := runs_folder_problem(root, data, (os.path.relpath(path, root),))) is not None:
        raise BadInput(f"{path}: $.runs: {problem}")
    output = load_output(root, data, path)
    inputs, manifest_path, documents = load_documents(root, data, path, output)
    stop = data.get("stop", {})
    spec = data["inputs"]
    jsonl = None if isinstance(spec, str) else documents[0].path
    return PilotConfig(
        root=root,
        config_path=path,
        inputs_dir=inputs,
        manifest_path=manifest_path,
        categories=output.categories,
        entry=data["entry"],
        batch_size=int(data["batch_size"]),
        device=data["device"],
        max_input_bytes=int(data["max_input_bytes"]),
        min_quality=float(data.get("min_quality", (quality or {}).get("min", 0.0))),
        runs_dir=_located(root, data, "runs", path),
        max_rejected=_optional(stop.get("max_rejected"), int),
        max_seconds=_optional(stop.get("max_seconds"), float),
        max_batch_seconds=_optional(stop.get("max_batch_seconds"), float),
        documents=documents,
        output=output,
        decode=data.get("decode", "utf-8"),
        jsonl=jsonl,
        id_field=None if jsonl is None else spec.get("id", "id"),
        model=load_model(root, data, path),
        params=data.get("params"),
        corpus_sha256=None if jsonl is None else sha256_file(jsonl),
        quality=quality,
        scorer_file=scorer_file,
    )


def _quality(root: Path,
             data: dict[str, Any], path: Path) -> tuple[dict[str, Any] | None, Path | None]:
    """The declared ``quality`` and its scorer's module file: the project's own (as ``entry``), else
    BadInput."""
    quality = data.get("quality")
    if quality is None:
        return None, None
    scorer = quality.get("scorer")
    if scorer is None:
        return dict(quality), None
    found = entry_file(root, scorer)
    if found is None:
        raise BadInput(
            f"{path}: $.quality.scorer: not the project's own function: "
            f"{entry_problem(root, scorer)}")
    return dict(quality), found


def load_documents(root: Path, data: dict[str, Any], path: Path,
               output: Output) -> tuple[Path, Path | None, Sequence[Document]]:
    """(inputs folder, manifest or None, documents): a folder's manifest, or a JSONL corpus with its
    optional manifest (the inputs folder is then the corpus's folder)."""
    spec = data["inputs"]
    if isinstance(spec, str):
        inputs = _located(root, data, "inputs", path)
        # the model requires it for a folder of inputs
        manifest = _located(root, data, "manifest", path)
        return inputs, manifest, load_manifest(manifest, inputs, output)
    jsonl = existing(root, spec["jsonl"], path, "$.inputs.jsonl", "file")
    manifest_path = _located(root, data, "manifest", path) if "manifest" in data else None
    return jsonl.parent, manifest_path, corpus_documents(
        jsonl, spec.get("id", "id"), manifest_path, output)


def _located(root: Path, data: dict[str, Any], key: str, path: Path) -> Path:
    """The folder or file under ``key``, as the config names it: lexically inside the project, and
    still inside with every link resolved (else BadInput naming where the link leads)."""
    target = inside(root, data[key], path, f"$.{key}")
    require_real_inside(root, target, path, f"$.{key}")
    return target


def check_device(device: str) -> None:
    """``--device``: the pilot config's rule (auto, cpu, cuda, cuda:N), checked before anything
    runs."""
    if not DEVICE.fullmatch(device):
        raise BadInput(f"--device {device!r}: unknown device; use auto, cpu, cuda or cuda:N")
