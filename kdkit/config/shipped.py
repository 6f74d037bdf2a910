"""Files kdkit ships: schemas, the project template, the Dockerfiles, data tables.

In an installed wheel they live in ``kdkit/_data``; in a source checkout they
sit at the repository's top level, beside the package.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from kdkit.core.errors import Unavailable

_PACKAGE = Path(__file__).resolve().parent.parent  # kdkit/, this file being kdkit/config/shipped.py
# What data_root() holds, each at its place under kdkit/_data in a wheel (pyproject.toml's
# force-include; a test keeps the two equal).
DATA_ITEMS = ("schemas", "project-template", "Dockerfile.common", "Dockerfile.cpu",
              "Dockerfile.cuda",
              "Dockerfile.rocm", "requirements/runtime.txt")


@cache
def data_root() -> Path:
    """The folder holding ``schemas/``, ``project-template/`` and ``Dockerfile.*``."""
    for candidate in (_PACKAGE / "_data", _PACKAGE.parent):
        if (candidate / "schemas").is_dir():
            return candidate
    raise Unavailable(f"{_PACKAGE}: kdkit's data files (schemas/) are missing; reinstall kdkit")


def schema_path(name: str) -> Path:
    """Path of ``schemas/<name>.schema.json``."""
    return data_root() / "schemas" / f"{name}.schema.json"


def template_dir() -> Path:
    return data_root() / "project-template"


def dockerfile(backend: str) -> Path:
    return data_root() / f"Dockerfile.{backend}"


def runtime_lock() -> Path:
    """kdkit's own hashed runtime lock (``requirements/runtime.txt``): what ``kdkit-wheels/`` of a
    bundle holds."""
    return data_root() / "requirements" / "runtime.txt"


def data_file(name: str) -> Path:
    """A shipped data table (catalog, pairings) under ``kdkit/data/``."""
    return _PACKAGE / "data" / name
