"""`kdkit init`: copy the project template into a new folder, all or nothing."""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

from kdkit.errors import BadInput, KdkitError
from kdkit.resources import template_dir

NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
# Template files stored under another name so they do not act on kdkit's own repository.
RENAMES = {"dot-gitignore": ".gitignore", "dot-env.example": ".env.example"}
# Files below these folders are copied byte for byte (pilot inputs must stay exactly as shipped).
VERBATIM = ("data",)


def default_name(target: Path) -> str:
    name = re.sub(r"[^a-z0-9._-]+", "-", target.resolve().name.lower()).strip("-._")
    return name or "kdkit-project"


def _render(text: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        text = text.replace("{{" + key + "}}", value)
    return text


def init_project(target: Path, name: str | None = None, backend: str = "cuda", force: bool = False) -> Path:
    """Create a project at ``target`` from the template and return its resolved path.

    An existing non-empty folder is refused unless ``force``; with ``force`` only the
    template's files are written over. A failure part-way leaves no trace behind.
    """
    target = target.resolve()
    project_name = name if name is not None else default_name(target)
    if not NAME.fullmatch(project_name):
        raise BadInput(f"--name {project_name!r}: use lowercase letters, digits, '.', '_' or '-' "
                       "(it becomes the image name)")
    if backend not in ("cuda", "rocm", "cpu"):
        raise BadInput(f"--backend {backend}: unknown backend; choose cuda, rocm or cpu")
    if target.exists() and not target.is_dir():
        raise BadInput(f"{target}: exists and is not a folder; choose another path")
    if target.is_dir() and any(target.iterdir()) and not force:
        raise BadInput(f"{target}: folder exists and is not empty; choose a new path or pass --force")

    values = {"name": project_name, "backend": backend, "python": f"{sys.version_info[0]}.{sys.version_info[1]}"}
    # Build the whole tree beside the target, then move it into place: a failure leaves nothing.
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        _copy_template(template_dir(), staging, values)
        (staging / "runs").mkdir(exist_ok=True)
        if target.is_dir():
            _merge(staging, target)
        else:
            os.replace(staging, target)
    except OSError as exc:
        raise KdkitError(f"{target}: could not write the project ({exc.strerror or exc}); "
                         "nothing was left behind, free space or fix permissions and retry") from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _copy_template(source: Path, dest: Path, values: dict[str, str]) -> None:
    for path in sorted(source.rglob("*")):
        rel = path.relative_to(source)
        if "__pycache__" in rel.parts or path.suffix == ".pyc":
            continue
        out = dest / rel.parent / RENAMES.get(rel.name, rel.name)
        if path.is_dir():
            out.mkdir(parents=True, exist_ok=True)
        elif rel.parts[0] in VERBATIM:
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, out)
        else:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(_render(path.read_text(encoding="utf-8"), values), encoding="utf-8")


def _merge(staging: Path, target: Path) -> None:
    """--force into an existing folder: move each template file over its namesake."""
    for path in sorted(staging.rglob("*")):
        dest = target / path.relative_to(staging)
        if path.is_dir():
            dest.mkdir(parents=True, exist_ok=True)
        else:
            os.replace(path, dest)
