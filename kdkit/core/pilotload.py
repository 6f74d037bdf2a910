"""What the pilot config's newer keys name, read once: the answer schema of a json output, the
model's files (each hashed once per load) and the JSONL corpus's digest.

Every place is held to the one containment rule (kdkit.core.projectfiles: lexically inside the
project, and still inside with every link resolved). Each reader raises BadInput (exit 2) naming the
file and the place; `kdkit validate` calls the same readers (without hashing) and lists what they
refuse. Standard library only.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.core.errors import BadInput
from kdkit.core.jsonio import load_json, sha256_file
from kdkit.core.pilotkeys import Model, Output
from kdkit.core.projectfiles import config_path, require_real_inside

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import TypedDict

    class ModelReference(TypedDict, total=False):
        """params.json's record of a model or its base: a folder's files, or a hub reference."""

        path: str
        files: dict[str, str]  # relative path -> sha256 ("" without digest)
        hub: str
        revision: str
        base: ModelReference


def located(root: Path, relative: str, path: Path, where: str) -> Path:
    """The place ``relative`` names (a path the model passed), inside the project with every link
    resolved."""
    target = config_path(root, relative, path, where)
    require_real_inside(root, target, path, where)
    return target


def existing(root: Path, relative: str, path: Path, where: str, kind: str) -> Path:
    """:func:`located`, which must exist as a ``kind`` ("file", "folder" or "file or folder")."""
    target = located(root, relative, path, where)
    if not target.exists():
        raise BadInput(
            f"{path}: {where}: {relative!r} does not exist in the project folder; create it or fix "
            "the path")
    is_dir = target.is_dir()
    if (kind == "file" and (is_dir or not target.is_file())) or (kind == "folder" and not is_dir):
        raise BadInput(f"{path}: {where}: {relative!r} is not a {kind}; name the {kind}")
    return target


def answer_schema(root: Path, relative: str, path: Path, where: str) -> Any:
    """The json output's schema: a file of the project, strict JSON, within what
    kdkit.core.answerschema supports (a keyword outside it is refused, never ignored); BadInput
    naming the schema file and place."""
    from kdkit.core.schemacheck import schema_problems

    target = existing(root, relative, path, where, "file")
    schema = load_json(target, what="answer schema")
    problems = schema_problems(schema)
    if problems:
        place, message = problems[0]
        more = (f" (+{len(problems) - 1} more: `kdkit validate` lists them)" if len(problems) > 1
                else "")
        raise BadInput(f"{target}: {place}: {message}{more}")
    return schema


def load_output(root: Path, data: Mapping[str, Any], path: Path) -> Output:
    """The declared output (its shape already passed the model); a top-level ``categories`` is the
    category kind."""
    spec = data.get("output")
    if spec is None:
        return Output("category", tuple(data["categories"]))
    kind = spec["kind"]
    if kind == "category":
        return Output(kind, tuple(spec["categories"]))
    if kind == "text":
        return Output(kind, max_chars=int(spec["max_chars"]))
    if kind == "vector":
        return Output(kind, dim=int(spec["dim"]))
    if kind == "file":
        return Output(kind,
                      max_bytes=None if spec.get("max_bytes") is None else int(spec["max_bytes"]))
    schema = answer_schema(root, spec["schema"], path, "$.output.schema")
    return Output(kind, schema=schema, schema_file=spec["schema"])


# hidden folders (.git, a hub client's .cache) and caches: not the model
SKIPPED = (".", "__pycache__")


def model_files(root: Path, target: Path, path: Path, where: str) -> Iterator[tuple[str, Path]]:
    """Each regular file of the model ``target`` (a file, or a folder walked in order), as (path
    relative to ``target``, path); a link leading out of the project, a loop or a special file is
    BadInput."""
    if target.is_file():
        yield target.name, target
        return
    seen: set[str] = set()
    for current, dirs, names in os.walk(target, followlinks=True):
        real = require_real_inside(root, Path(current), path, where)
        if str(real) in seen:
            raise BadInput(
                f"{path}: {where}: {current} is reached twice through links (a loop?); keep one "
                "copy")
        seen.add(str(real))
        dirs[:] = sorted(d for d in dirs if not d.startswith(SKIPPED))
        for name in sorted(names):
            full = Path(current) / name
            require_real_inside(root, full, path, where)
            if not full.is_file():
                raise BadInput(
                    f"{path}: {where}: {full} is not a regular file; a model folder holds files "
                    "only")
            yield full.relative_to(target).as_posix(), full


def reference_record(root: Path, spec: Mapping[str, Any], path: Path, where: str, *,
                     digest: bool = True) -> ModelReference:
    """params.json's record of a model (or its base): ``path`` and ``files`` ({relative path:
    sha256}, every file hashed once) for a folder, ``hub`` and ``revision`` for a hub reference,
    ``base`` likewise. Without ``digest`` (`kdkit validate`) the files are checked, never read."""
    record: ModelReference = {}
    if "path" in spec:
        target = existing(root, spec["path"], path, f"{where}.path", "file or folder")
        files = {rel: sha256_file(full) if digest else "" for rel,
                 full in model_files(root, target, path,
                                     f"{where}.path")}
        if not files:
            raise BadInput(
                f"{path}: {where}.path: {spec['path']!r} holds no file; put the model's files "
                "there")
        record["path"] = Path(os.path.normpath(spec["path"])).as_posix()
        record["files"] = files
    if "hub" in spec:
        record["hub"], record["revision"] = spec["hub"], spec["revision"]
    if "base" in spec:
        record["base"] = reference_record(root, spec["base"], path, f"{where}.base", digest=digest)
    return record


def load_model(root: Path, data: Mapping[str, Any], path: Path, *,
               digest: bool = True) -> Model | None:
    spec = data.get("model")
    if spec is None:
        return None
    record = reference_record(root, spec, path, "$.model", digest=digest)
    return Model(record.get("path"), spec.get("hub"), spec.get("revision"), record)
