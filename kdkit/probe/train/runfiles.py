"""The training run folder: its names, its lock (flock on the folder), params.json, the appended
series (fsynced per line), stop.json, reopening.

Standard library only.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import time
from pathlib import Path
from typing import Any

from kdkit.core import checkpoints
from kdkit.core.checksums import SUMS
from kdkit.core.errors import BadInput
from kdkit.core.heartbeat import utc_now
from kdkit.core.jsonio import atomic_write_json, atomic_write_text
from kdkit.core.runfolder import CHECKPOINT_LOG as CHECKPOINT_LOG
from kdkit.core.runfolder import CHECKPOINTS as CHECKPOINTS
from kdkit.core.runfolder import METRICS as METRICS
from kdkit.core.runfolder import OUTPUT_LOG as OUTPUT_LOG
from kdkit.core.runfolder import RELOAD as RELOAD
from kdkit.core.runfolder import RELOAD_CHECK as RELOAD_CHECK
from kdkit.core.runfolder import STOP, SUMMARY, SUMMARY_MD
from kdkit.core.runfolder import TRAIN as TRAIN


def finite_json(value: Any) -> Any:
    """A metric as strict JSON: a non-finite float becomes the string "NaN", "Infinity" or
    "-Infinity"."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


class Appender:
    """A JSONL file of the run folder, one line appended and fsynced at a time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)

    def append(self, record: dict[str, Any]) -> None:
        data = (json.dumps({k: finite_json(v) for k, v in record.items()}, separators=(",", ":"))
                + "\n").encode()
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]
        os.fsync(self._fd)

    def close(self) -> None:
        os.close(self._fd)


def read_lines(path: Path) -> list[dict[str, Any]]:
    """The complete JSON object lines of ``path`` (a torn last line, from a kill, is left out)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    found = []
    for line in text.split("\n"):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            found.append(record)
    return found


def cut_after(path: Path, step: int) -> int:
    """Keep only ``path``'s complete lines with ``"step"`` at most ``step`` (a resume from that
    checkpoint); the number of lines dropped."""
    kept = [r for r in read_lines(path) if isinstance(r.get("step"), int) and r["step"] <= step]
    dropped = len(read_lines(path)) - len(kept)
    atomic_write_text(path, "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in kept))
    return dropped


def numbered(folder: Path, stem: str) -> Path:
    n = 1
    while (folder / f"{stem}-{n}.json").exists():
        n += 1
    return folder / f"{stem}-{n}.json"


def reopen(folder: Path) -> list[Path]:
    """A resumed run is open again: its closing files go, stop.json is kept as stop-N.json,
    checkpoint staging a killed writer left is removed (returned)."""
    for name in (SUMS, SUMMARY, SUMMARY_MD, RELOAD):
        (folder / name).unlink(missing_ok=True)
    if (folder / STOP).exists():
        os.replace(folder / STOP, numbered(folder, "stop"))
    return checkpoints.clean_partials(folder / CHECKPOINTS)


def write_stop(folder: Path, run_id: str, reason: str, detail: str, step: int | None,
               **extra: Any) -> dict[str, Any]:
    record = {"run_id": run_id, "reason": reason, "detail": detail, "step": step,
              "at": utc_now(), **extra}
    atomic_write_json(folder / STOP, record)
    return record


def listed_checkpoints(folder: Path) -> dict[str, dict[str, Any]]:
    """checkpoints.jsonl's records by name (the last of a name wins)."""
    return {r["name"]: r for r in read_lines(folder / CHECKPOINT_LOG)
            if isinstance(r.get("name"), str)}


def reconcile(folder: Path, log: Appender) -> None:
    """List the complete checkpoint folders that checkpoints.jsonl lacks (a kill between the rename
    and the line)."""
    known = listed_checkpoints(folder)
    for step, path in checkpoints.checkpoint_folders(folder / CHECKPOINTS):
        if path.name not in known and checkpoints.problem(path) is None:
            log.append({"name": path.name, "step": step, "files": checkpoints.listed(path) or {},
                        "save_seconds": None, "at": utc_now()})


def keep_listed(folder: Path) -> None:
    """checkpoints.jsonl keeps the records of the checkpoint folders still there, rewritten whole
    (a kill leaves the old file or the new one)."""
    kept = {path.name for _step, path in checkpoints.checkpoint_folders(folder / CHECKPOINTS)}
    lines = [r for r in read_lines(folder / CHECKPOINT_LOG) if r.get("name") in kept]
    atomic_write_text(folder / CHECKPOINT_LOG, "".join(json.dumps(r) + "\n" for r in lines))


def lock_run(folder: Path, wait_s: float = 0.0) -> int:
    """The run folder's lock (flock on the folder), held by kdkit train and inherited by the loop,
    so that a resume never runs beside a session (or a loop) still alive; waits ``wait_s`` for a
    dying one."""
    fd = os.open(folder, os.O_RDONLY)
    deadline = time.monotonic() + wait_s
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise BadInput(f"{folder}: the run is still running (its kdkit train or its "
                                   "loop holds it); stop it first, or wait for it to end") from None
                time.sleep(0.05)
    except BaseException:  # refused, or a stop while waiting: the fd is not kept
        os.close(fd)
        raise
