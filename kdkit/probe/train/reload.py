"""Reload instructions and their check: ``reload.json`` holds the exact command that reloads a run's
final checkpoint in a new process; ``kdkit train --verify-reload RUN_ID`` runs it and records the
result.

The contract with the loop: ``python -m MODULE --reload CHECKPOINT_DIR`` (cwd the project root)
loads that checkpoint folder in a fresh process, checks it (every part loads, every number finite),
prints one line and exits 0; any other exit is a failed reload. reload.json: ``{"argv": [python,
"-m", MODULE, "--reload", "runs/<id>/checkpoints/step-N"], "cwd": ".", "checkpoint": "step-N"}``
(paths relative to the project root). The check is written to ``reload-check.json`` ({"ok",
"returncode", "argv", "seconds", "at", "output"}), summary.json's "reload" is set to it and the run
folder's SHA256SUMS is written again, so the check is listed.

Standard library only.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from kdkit.core.errors import BadInput, CheckFailed
from kdkit.core.heartbeat import utc_now
from kdkit.core.jsonio import atomic_write_json, load_json
from kdkit.core.runfolder import SUMMARY
from kdkit.core.runverify import read_sums, verify_folder
from kdkit.core.safetext import printable
from kdkit.probe.train.closing import seal
from kdkit.probe.train.runfiles import CHECKPOINTS, RELOAD, RELOAD_CHECK

if TYPE_CHECKING:
    from typing import TypedDict

    class ReloadCheck(TypedDict):
        """reload-check.json: the reload command run in a new process, and how it ended."""

        ok: bool
        returncode: int | None  # None: no answer within TIMEOUT_S
        argv: list[str]
        seconds: float
        at: str
        output: str  # the end of its output

TIMEOUT_S = 3600.0


def reload_argv(module: str, root: Path, folder: Path, checkpoint: str) -> list[str]:
    target = (folder / CHECKPOINTS / checkpoint).relative_to(root).as_posix()
    return [sys.executable, "-m", module, "--reload", target]


def verify_reload(root: Path, folder: Path, env: dict[str, str]) -> ReloadCheck:
    """Run reload.json's command in a new process; record the result in the run folder and re-close
    it."""
    if not (folder / SUMMARY).is_file():
        raise BadInput(
            f"{folder}: the run is not closed (no {SUMMARY}); let it end, or resume it, first")
    spec = load_json(folder
                     / RELOAD, what="reload instructions") if (folder / RELOAD).is_file() else None
    if not isinstance(spec, dict) or not isinstance(spec.get("argv"), list) or not spec["argv"]:
        raise BadInput(
            f"{folder / RELOAD}: no reload command (the run wrote no checkpoint); nothing to "
            "verify")
    # a tampered checkpoint is never "reload OK"
    if problems := verify_folder(folder, read_sums(folder)):
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        raise CheckFailed(f"{problems[0]}{more}; the run changed since it was closed, so its "
                          "reload proves nothing (copy it back from a verified copy-out)")
    argv = [str(word) for word in spec["argv"]]
    if not os.path.exists(argv[0]):
        argv[0] = sys.executable  # the interpreter that trained is not here: this one
    started = time.monotonic()
    try:
        done = subprocess.run(argv, cwd=root, env=env, stdin=subprocess.DEVNULL,
                              capture_output=True,
                              timeout=TIMEOUT_S, check=False)
        code, output = done.returncode, (done.stdout + done.stderr).decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        code, output = None, f"no answer within {TIMEOUT_S:g} s"
    record: ReloadCheck = {"ok": code == 0, "returncode": code, "argv": argv,
                           "seconds": round(time.monotonic() - started, 3),
                           "at": utc_now(), "output": printable(output[-2000:], lines=True)}
    atomic_write_json(folder / RELOAD_CHECK, record)
    summary = load_json(folder / SUMMARY, what="run summary")
    if isinstance(summary, dict):
        summary["reload"] = {k: record[k] for k in ("ok", "returncode", "seconds", "at")}
        atomic_write_json(folder / SUMMARY, summary)
    seal(folder)
    return record
