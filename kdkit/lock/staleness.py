"""Stale locks: a lock no longer matches its inputs when the torch index, the requirements input or an
input file's content changed since `kdkit lock` wrote it (its header records them). `kdkit validate`
lists stale locks; `kdkit build` refuses one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kdkit.config.project import Project
from kdkit.config.schemas import Problem
from kdkit.core.errors import BadInput
from kdkit.core.jsonio import sha256_file
from kdkit.core.lockfile import parse_lock
from kdkit.lock.inputs import relative


def staleness(root: Path, requirements: str, backend: str, torch_index: str, lock_path: Path) -> str | None:
    """Why the lock at ``lock_path`` no longer matches its inputs, or None when it is fresh."""
    fix = f"run `kdkit lock --backend {backend}`"
    try:
        lock = parse_lock(lock_path)
    except BadInput as exc:
        return f"unreadable lock ({exc}); {fix}"
    if "kdkit-version" not in lock.header:
        return f"no kdkit provenance header (not written by `kdkit lock`); {fix}"
    if lock.header.get("torch-index") != torch_index:
        return (f"locked against torch index {lock.header.get('torch-index')}, kdkit.json now names "
                f"{torch_index}; {fix}")
    recorded = lock.inputs()
    if requirements not in recorded:
        return f"made from {', '.join(recorded) or 'unknown inputs'}, kdkit.json now names {requirements}; {fix}"
    for rel, digest in recorded.items():
        path = root / rel
        if not path.is_file():
            return f"input {rel} no longer exists; {fix}"
        if sha256_file(path) != digest:
            return f"stale: {rel} changed since this lock was written; {fix}"
    return None


def _requirements_rel(root: Path, config: dict[str, Any]) -> str:
    return relative(root, root / str(config["requirements"]))


def stale_lock_problems(root: Path, config: dict[str, Any]) -> list[Problem]:
    """The `kdkit validate` check: every existing lock whose inputs changed. A missing lock is not a problem
    here (a fresh project has none); `kdkit build` requires one through :func:`require_fresh_lock`."""
    problems = []
    for name, spec in config.get("backends", {}).items():
        lock_path = root / spec["lock"]
        if not lock_path.is_file():
            continue
        reason = staleness(root, _requirements_rel(root, config), name, spec["torch_index"], lock_path)
        if reason:
            problems.append(Problem(Path(spec["lock"]), "header", reason))
    return problems


def require_fresh_lock(project: Project, backend: str) -> Path:
    """The lock of ``backend`` when it exists and is fresh; BadInput otherwise (used by `kdkit build`)."""
    chosen = project.backend(backend)
    if not chosen.lock.is_file():
        raise BadInput(f"{chosen.lock}: no lock for backend {chosen.name}; run `kdkit lock --backend {chosen.name}`")
    reason = staleness(project.root, _requirements_rel(project.root, project.config), chosen.name,
                       chosen.torch_index, chosen.lock)
    if reason:
        raise BadInput(f"{chosen.lock}: {reason}")
    return chosen.lock
