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
from pathlib import Path
from typing import Any

from kdkit.errors import BadInput
from kdkit.jsonio import sha256_file
from kdkit.probe.projectfiles import MARKER, SAFE_ID_RULE, inside, is_safe_id, is_within, load_object, require

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

    @property
    def path(self) -> Path:
        return Path(self.location)


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
            "stop": {"max_rejected": self.max_rejected, "max_seconds": self.max_seconds},
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
    return inside(root, relative, root / MARKER, "$.pilot_config")


def load_pilot(root: Path, given: Path | None = None) -> PilotConfig:
    """Read and check the pilot config and its manifest; BadInput (exit 2) names the first problem."""
    path = config_file(root, given)
    data = load_object(path, "pilot config")
    categories = _categories(data, path)
    entry = require(data, "entry", str, path)
    if not ENTRY.fullmatch(entry):
        raise BadInput(f"{path}: $.entry: {entry!r} is not \"module:function\" (e.g. src.classify:predict)")
    device = require(data, "device", str, path)
    if not DEVICE.fullmatch(device):
        raise BadInput(f"{path}: $.device: {device!r}; use auto, cpu, cuda or cuda:N")
    inputs = inside(root, require(data, "inputs", str, path), path, "$.inputs")
    manifest_path = inside(root, require(data, "manifest", str, path), path, "$.manifest")
    max_rejected, max_seconds = _stop_rules(data, path)
    return PilotConfig(
        root=root,
        config_path=path,
        inputs_dir=inputs,
        manifest_path=manifest_path,
        categories=categories,
        entry=entry,
        batch_size=_number(data, "batch_size", path, int, minimum=1),
        device=device,
        max_input_bytes=_number(data, "max_input_bytes", path, int, minimum=1),
        min_quality=float(_number(data, "min_quality", path, (int, float), minimum=0, maximum=1)),
        runs_dir=inside(root, require(data, "runs", str, path), path, "$.runs"),
        max_rejected=max_rejected,
        max_seconds=max_seconds,
        documents=load_manifest(manifest_path, inputs, categories),
    )


def _categories(data: dict[str, Any], path: Path) -> tuple[str, ...]:
    values = require(data, "categories", list, path)
    if not values or not all(isinstance(c, str) and c for c in values) or len(set(values)) != len(values):
        raise BadInput(f"{path}: $.categories: expected a non-empty list of distinct, non-empty strings")
    return tuple(values)


def _number(data: dict[str, Any], key: str, path: Path, kind: type | tuple[type, ...],
            minimum: float | None = None, maximum: float | None = None) -> Any:
    value = require(data, key, kind, path)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        bounds = f">= {minimum}" + (f" and <= {maximum}" if maximum is not None else "")
        raise BadInput(f"{path}: $.{key}: {value} is out of range; use a value {bounds}")
    return value


def _stop_rules(data: dict[str, Any], path: Path) -> tuple[int | None, float | None]:
    stop = data.get("stop", {})
    if not isinstance(stop, dict):
        raise BadInput(f"{path}: $.stop: expected an object with max_rejected and max_seconds")
    max_rejected, max_seconds = stop.get("max_rejected"), stop.get("max_seconds")
    if max_rejected is not None and (isinstance(max_rejected, bool) or not isinstance(max_rejected, int)
                                     or max_rejected < 0):
        raise BadInput(f"{path}: $.stop.max_rejected: expected a whole number >= 0 or null")
    if max_seconds is not None and (isinstance(max_seconds, bool) or not isinstance(max_seconds, (int, float))
                                    or max_seconds <= 0):
        raise BadInput(f"{path}: $.stop.max_seconds: expected a number > 0 or null")
    return max_rejected, (float(max_seconds) if max_seconds is not None else None)


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
