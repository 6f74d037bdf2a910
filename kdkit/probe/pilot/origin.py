"""What a pilot run was made from, recorded when it starts and checked before it is resumed.

A run is one application version over one configuration and one set of inputs. params.json
records the resolved configuration (its hash names the run), and the app's code: SHA-256 of
every file of the entry's top-level package (``src/`` for ``src.classify:predict``) or module.
``--resume`` refuses, before anything is written, when the config, the code or one of the
inputs already answered is no longer what the run started with, and names the difference; and
it refuses a finished run outright: a run closed by its SHA256SUMS is never rewritten.

Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.core.checksums import SUMS
from kdkit.core.errors import BadInput
from kdkit.core.jsonio import sha256_file
from kdkit.core.pilotconfig import PilotConfig
from kdkit.core.runfolder import PARAMS, STOP, SUMMARY, foreign_entries
from kdkit.core.runresults import RunFolder
from kdkit.probe.pilot.harness import read_input

SKIPPED_DIRS = {"__pycache__", ".ipynb_checkpoints", ".mypy_cache", ".pytest_cache", ".ruff_cache"}
NAMED = 3  # differences named in one refusal

if TYPE_CHECKING:
    from typing import TypedDict

    class AppRecord(TypedDict):
        """params.json's ``app``: the entry, its files' sha256 by path, one digest over them."""

        entry: str
        sha256: str
        files: dict[str, str]


def app_files(root: Path, entry: str) -> dict[str, str]:
    """``{path relative to the root: sha256}`` for the code of ``entry``'s top-level package or
    module."""
    top = entry.split(":", 1)[0].split(".")[0]
    folder, module = root / top, root / f"{top}.py"
    if not folder.is_dir():
        return {
            module.relative_to(root).as_posix(): sha256_file(module)} if module.is_file() else {}
    files = {}
    for current, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
        for name in sorted(names):
            path = Path(current) / name
            if path.suffix in (".pyc", ".pyo") or not path.is_file() or path.is_symlink():
                continue
            files[path.relative_to(root).as_posix()] = sha256_file(path)
    return files


def app_record(root: Path, entry: str) -> AppRecord:
    """params.json's ``app``: the files and one digest over them."""
    files = app_files(root, entry)
    digest = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()
    return {"entry": entry, "sha256": digest, "files": files}


def _named(items: list[str]) -> str:
    return "; ".join(items[:NAMED]) + (f" (+{len(items) - NAMED} more)" if len(items) > NAMED
                                       else "")


def config_changes(recorded: dict[str, Any], current: dict[str, Any],
                   prefix: str = "") -> list[str]:
    """Each resolved parameter that differs, ``key: old -> new``; inside an object present on both
    sides the key that changed is named by its path (``params.temperature``,
    ``model.files.weights.bin``)."""
    changes = []
    for key in sorted(set(recorded) | set(current)):
        old, new = recorded.get(key), current.get(key)
        if old == new:
            continue
        if isinstance(old, dict) and isinstance(new, dict):
            changes += config_changes(old, new, f"{prefix}{key}.")
        else:
            changes.append(f"{prefix}{key}: {json.dumps(old)[:60]} -> {json.dumps(new)[:60]}")
    return changes


def code_changes(recorded: dict[str, str], current: dict[str, str]) -> list[str]:
    changes = []
    for name in sorted(set(recorded) | set(current)):
        if name not in current:
            changes.append(f"{name} removed")
        elif name not in recorded:
            changes.append(f"{name} added")
        elif recorded[name] != current[name]:
            changes.append(f"{name} changed")
    return changes


def input_changes(cfg: PilotConfig, run: RunFolder) -> list[str]:
    """Inputs answered in ``run`` whose bytes (or harness verdict) are not what they were then."""
    by_id = {doc.id: doc for doc in cfg.documents}
    root = os.fspath(cfg.root)
    changes = []
    for record in run.complete_records():
        doc = by_id.get(record.get("id"))  # type: ignore[arg-type]
        if doc is None \
                or record.get("outcome") not in ("accepted", "rejected", "invalid", "unanswered"):
            continue
        now = read_input(doc, cfg.max_input_bytes, root, decode=cfg.decode, id_field=cfg.id_field)
        if isinstance(now, str):
            if record.get("by") != "harness" or record.get("reason") != now:
                changes.append(f"{doc.file} ({doc.id}): now refused by the harness ({now})")
        elif record.get("by") == "harness" or record.get("sha256") != now.sha256:
            changes.append(f"{doc.file} ({doc.id}): its content changed")
        if len(changes) > NAMED:
            break
    return changes


def corpus_unchanged(cfg: PilotConfig, recorded: dict[str, Any]) -> bool:
    """Whether the inputs are a JSONL corpus whose whole file's sha256 is the one the run started
    with: then no record answered can have changed (each is read from those very bytes, under the
    same parameters), and
    :func:`input_changes` need not read them again."""
    inputs = (recorded.get("params") or {}).get("inputs")
    return (cfg.jsonl is not None and cfg.corpus_sha256 is not None and isinstance(inputs, dict)
            and inputs.get("sha256") == cfg.corpus_sha256)


def is_finished(run: RunFolder) -> bool:
    """Closed by its checksums with a summary, and not stopped early: nothing is left to resume."""
    path = run.path
    return (path / SUMS).is_file() and (path / SUMMARY).is_file() and not (path / STOP).exists()


def check_resume(cfg: PilotConfig, run: RunFolder, recorded: dict[str, Any], digest: str, *,
                 restarted: bool = False, finished_ok: bool = False) -> None:
    """BadInput, before anything is written, when ``run`` must not be resumed with ``cfg``.
    ``restarted``: its launcher started the worker again (no --resume was typed: the advice names a
    new run ID instead); ``finished_ok``: a finished run is only being reported, and must still be
    the same run."""
    where = run.path / PARAMS
    anew = ("give this launch a new run ID (KDKIT_RUN_ID, or the launcher's job)" if restarted
            else "start a new run without --resume")
    if recorded.get("params_hash") != digest:
        changes = config_changes(dict(recorded.get("params") or {}), cfg.resolved())
        raise BadInput(f"{where}: the parameters changed since this run started "
                       f"({_named(changes) or 'its hash'}); a new configuration gets a new run: "
                       f"{anew if restarted else 'drop --resume'}")
    if is_finished(run) and not finished_ok:
        raise BadInput(f"{run.path}: this run is finished and closed by its {SUMS}; a finished run "
                       f"is never rewritten (its copies must keep verifying): {anew}")
    foreign = foreign_entries(run.path)
    if foreign:
        raise BadInput(f"{run.path}: holds {_named(foreign)}, which the harness did not put there; "
                       "a run folder holds only the harness's files: move it out, then resume")
    app = recorded.get("app")
    if isinstance(app, dict):
        changes = code_changes(dict(app.get("files") or {}), app_files(cfg.root, cfg.entry))
        if changes:
            raise BadInput(f"{where}: the app's code changed since this run started "
                           f"({_named(changes)}); one run is one app version: {anew}")
    changes = [] if corpus_unchanged(cfg, recorded) else input_changes(cfg, run)
    if changes:
        raise BadInput(
            f"{where}: inputs changed since this run answered them ({_named(changes)}); {anew}")
