"""Stale locks: a lock no longer matches its inputs when the torch index, the requirements input or
an input file's content changed since `kdkit lock` wrote it (its header records them). `kdkit
validate` lists stale locks; `kdkit build` refuses one.

A backend's PEP 751 lock (``pylock.<backend>.toml`` beside its requirements lock:
``Backend.pylock``) carries the same header as TOML comment lines, and one line more,
``requirements-lock = <path> sha256:<hex>``: the requirements lock it was made from (`kdkit lock`
writes both from one resolution). It is judged by the same rules, and it is also stale once that
requirements lock is no longer the one its header names. A pylock is optional: a project without one
has nothing stale.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.config.project import Backend, Project
from kdkit.config.schemas import config_problem
from kdkit.core.errors import BadInput, Unavailable
from kdkit.core.finding import Finding
from kdkit.core.jsonio import sha256_file
from kdkit.core.lockfile import Lock, parse_lock
from kdkit.lock.inputs import relative

if TYPE_CHECKING:
    from collections.abc import Mapping

# The pylock header's key naming its requirements twin: "requirements/cpu.txt sha256:<hex>".
REQUIREMENTS_LOCK = "requirements-lock"


def _fix(backend: str) -> str:
    return f"run `kdkit lock --backend {backend}`"


def _stale(root: Path, requirements: str, backend: str, torch_index: str, lock: Lock) -> str | None:
    """Why a parsed lock's header no longer matches the project's inputs, or None."""
    fix = _fix(backend)
    if "kdkit-version" not in lock.header:
        return f"no kdkit provenance header (not written by `kdkit lock`); {fix}"
    if lock.header.get("torch-index") != torch_index:
        return (f"locked against torch index {lock.header.get('torch-index')}, kdkit.json now "
                f"names {torch_index}; {fix}")
    recorded = lock.inputs()
    if requirements not in recorded:
        return (
            f"made from {', '.join(recorded) or 'unknown inputs'}, kdkit.json now names "
            f"{requirements}; {fix}")
    for rel, digest in recorded.items():
        path = root / rel
        if not path.is_file():
            return f"input {rel} no longer exists; {fix}"
        if sha256_file(path) != digest:
            return f"stale: {rel} changed since this lock was written; {fix}"
    return None


def staleness(root: Path, requirements: str, backend: str,
              torch_index: str, lock_path: Path) -> str | None:
    """Why the lock at ``lock_path`` no longer matches its inputs, or None when it is fresh."""
    try:
        lock = parse_lock(lock_path)
    except BadInput as exc:
        return f"unreadable lock ({exc}); {_fix(backend)}"
    return _stale(root, requirements, backend, torch_index, lock)


def _twin_staleness(root: Path, chosen: Backend, pylock: Lock,
                    twin_sha256: str | None = None) -> str | None:
    """Why a pylock no longer goes with the backend's requirements lock (its header's
    requirements-lock), or None; ``twin_sha256``: that lock's sha256 when its bytes were read
    already (`kdkit build` reads each input once)."""
    fix, rel = _fix(chosen.name), relative(root, chosen.lock)
    named = pylock.header.get(REQUIREMENTS_LOCK)
    if named is None:
        return (
            f"its header names no {REQUIREMENTS_LOCK} (the requirements lock it was made from); "
            f"{fix}")
    path, sep, digest = named.rpartition(" sha256:")
    if not sep or path != rel:
        return (
            f"made from {path or named}, but backend {chosen.name}'s requirements lock is {rel}; "
            f"{fix}")
    if twin_sha256 is None and not chosen.lock.is_file():
        return f"made from {rel}, which no longer exists; {fix}"
    if (twin_sha256 or sha256_file(chosen.lock)) != digest.strip().lower():
        return f"made from another {rel}; {fix}"
    return None


def pylock_staleness(root: Path, requirements: str, chosen: Backend, parsed: Lock | None = None,
                     twin_sha256: str | None = None) -> str | None:
    """Why the backend's pylock no longer matches its inputs or its requirements lock, or None when
    it is fresh. Unavailable (exit 3) where this Python cannot read TOML (3.10: no tomllib).
    ``parsed``, ``twin_sha256``: the pylock and its requirements lock as the caller read them (then
    neither file is read here)."""
    try:
        pylock = parsed or parse_lock(chosen.pylock)
    except BadInput as exc:
        return f"unreadable lock ({exc}); {_fix(chosen.name)}"
    return (_stale(root, requirements, chosen.name, chosen.torch_index, pylock)
            or _twin_staleness(root, chosen, pylock, twin_sha256))


def _requirements_rel(root: Path, config: Mapping[str, Any]) -> str:
    return relative(root, root / str(config["requirements"]))


def stale_lock_problems(root: Path, config: dict[str, Any]) -> list[Finding]:
    """The `kdkit validate` check: every existing lock and pylock whose inputs changed. A missing
    lock is not a problem here (a fresh project has none; `kdkit build` requires one through
    :func:`require_fresh_lock`), nor a missing pylock, nor one this Python cannot read (3.10 has no
    tomllib; `kdkit build` says so)."""
    problems = []
    requirements = _requirements_rel(root, config)
    for name, spec in config.get("backends", {}).items():
        lock_path = root / spec["lock"]
        if lock_path.is_file():
            reason = staleness(root, requirements, name, spec["torch_index"], lock_path)
            if reason:
                problems.append(config_problem(Path(spec["lock"]), "header", reason))
        chosen = Project(root, config).backend(name)
        if not chosen.pylock.is_file():
            continue
        try:
            reason = pylock_staleness(root, requirements, chosen)
        except Unavailable:
            continue
        if reason:
            problems.append(config_problem(Path(relative(root, chosen.pylock)), "header", reason))
    return problems


def missing_lock(chosen: Backend) -> BadInput:
    return BadInput(
               f"{chosen.lock}: no lock for backend {chosen.name}; run `kdkit lock --backend "
               f"{chosen.name}`")


def require_fresh_lock(project: Project, backend: str, parsed: Lock | None = None) -> Path:
    """The lock of ``backend`` when it exists and is fresh; BadInput otherwise (used by `kdkit
    build`, which passes the lock it ``parsed`` from the bytes it read: then the file is not read
    again here)."""
    chosen = project.backend(backend)
    if parsed is None and not chosen.lock.is_file():
        raise missing_lock(chosen)
    requirements = _requirements_rel(project.root, project.config)
    reason = (staleness(project.root, requirements, chosen.name, chosen.torch_index, chosen.lock)
              if parsed is None
              else _stale(project.root, requirements, chosen.name, chosen.torch_index, parsed))
    if reason:
        raise BadInput(f"{chosen.lock}: {reason}")
    return chosen.lock


def require_fresh_pylock(project: Project, backend: str, parsed: Lock | None = None,
                         twin_sha256: str | None = None) -> Path:
    """The PEP 751 lock of ``backend`` when it exists and is fresh; BadInput otherwise (`kdkit build
    --lock-format pylock`; ``parsed``, ``twin_sha256``: as :func:`pylock_staleness`)."""
    chosen = project.backend(backend)
    if parsed is None and not chosen.pylock.is_file():
        rel = relative(project.root, chosen.lock)
        raise BadInput(f"{chosen.pylock}: no PEP 751 lock for backend {chosen.name}; `kdkit lock "
                       f"--backend {chosen.name}` writes it beside {rel}, or build from {rel} "
                       "(--lock-format requirements)")
    reason = pylock_staleness(project.root, _requirements_rel(project.root, project.config), chosen,
                              parsed,
                              twin_sha256)
    if reason:
        raise BadInput(f"{chosen.pylock}: {reason}")
    return chosen.pylock
