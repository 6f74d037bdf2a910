"""The heartbeat of an open run: ``<run>/heartbeat.json``, written atomically by the pilot at most
once a second (after a batch is on disk), read by ``kdkit status`` from any shell without the
process that started the run.

It lives only while the run is open: the pilot removes it before it closes the folder (the closed
folder's truth is summary.json, stop.json and SHA256SUMS, which never list it), so copy-out, gather
and close verify exactly what they did before. A heartbeat left in a folder with no summary is a run
killed before it closed (or still running elsewhere): the reader judges it by its age and, on this
host, by its process.

Standard library only: the in-container side writes it. Its imports are light (``kdkit status``
reads it).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

# kdkit.core.runfolder names it among the harness's files (HARNESS_FILES)
HEARTBEAT = "heartbeat.json"
EVERY_S = 1.0  # at most one write a second
RUNNING = "running"  # the only state a heartbeat holds: it is removed before its run closes


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Heartbeat:
    """The writer: :meth:`beat` after each batch (throttled), :meth:`remove` before the folder
    closes."""

    def __init__(self, folder: Path, run_id: str, total: int | None, rejection_limit: int | None,
                 max_seconds: float | None, done: int = 0, rejected: int = 0,
                 kind: str | None = None) -> None:
        self.path = folder / HEARTBEAT
        self.first_done = done
        self.started_at = time.monotonic()
        self.last = -EVERY_S
        self.record: dict[str, Any] = {
            "run_id": run_id, "pid": os.getpid(), "host": socket.gethostname(), "state": RUNNING,
            "done": done, "total": total, "accepted": done - rejected, "rejected": rejected,
            "rejection_limit": rejection_limit, "last_error": None, "started": utc_now(),
            "updated": utc_now(),
            "max_seconds": max_seconds, "rate": 0.0}
        # a training run's (kdkit.probe.train): done counts its steps, no total, no rejections
        if kind is not None:
            self.record["kind"] = kind

    def rebase(self, done: int, rejected: int) -> None:
        """Where this session starts (a resumed run's finished items): the rate counts this
        session's only."""
        self.first_done, self.started_at = done, time.monotonic()
        self.beat(done, rejected, force=True)

    def beat(self, done: int, rejected: int, accepted: int | None = None,
             last_error: str | None = None,
             force: bool = False) -> None:
        """Record the counts; write them when a second has passed since the last write (or
        ``force``). A write that fails (a full disk) is skipped: the heartbeat never stops the
        run."""
        now = time.monotonic()
        elapsed = now - self.started_at
        self.record.update(done=done, rejected=rejected,
                           accepted=done - rejected if accepted is None else accepted,
                           rate=round((done - self.first_done) / elapsed, 3) if elapsed > 0
                           else 0.0)
        if last_error is not None:
            self.record["last_error"] = last_error[:500]
        if not force and now - self.last < EVERY_S:
            return
        self.last = now
        self.record["updated"] = utc_now()
        # the writer's only: a reader (kdkit status) never loads it
        from kdkit.core.jsonio import atomic_write_json

        with contextlib.suppress(OSError):
            atomic_write_json(self.path, self.record)

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.path)


def read_heartbeat(folder: Path) -> dict[str, Any] | None:
    """The heartbeat of ``folder``, or None when there is none or it cannot be read as a JSON
    object."""
    try:
        data = json.loads((folder / HEARTBEAT).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def age_seconds(record: Mapping[str, Any], now: datetime | None = None) -> float | None:
    """Seconds since the heartbeat was written, or None when its ``updated`` is not a time."""
    try:
        updated = datetime.fromisoformat(str(record.get("updated")))
    except ValueError:
        return None
    return ((now or datetime.now(timezone.utc)) - updated).total_seconds()


def process_alive(record: Mapping[str, Any]) -> bool | None:
    """Whether the writer's process is alive, when it ran on this host (None: another host or a
    container)."""
    pid = record.get("pid")
    if record.get("host") != socket.gethostname() or not isinstance(pid, int) or pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True
