"""The record `kdkit build` leaves of each image it made: one JSON line appended to
``<project>/.kdkit-logs/builds.jsonl`` (never carried by a bundle, never inside ``runs/``):
``{"tag", "image_id", "started", "ended", "seconds", "backend"}``, times in UTC ISO-8601.

The line is written with one ``write`` on a file opened for appending, then fsynced: two builds
appending at once never interleave within a line, and a kill leaves at most one torn last line,
which the reader (kdkit.order.worklog) skips. A record that cannot be written costs the build
nothing: the image is made and tagged; `kdkit close` then counts that build's hours as not recorded.
"""

from __future__ import annotations

import contextlib
import json
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Protocol, TypeVar

BUILDS = Path(".kdkit-logs") / "builds.jsonl"  # relative to the project's root


class Built(Protocol):
    @property
    def tag(self) -> str: ...
    @property
    def image_id(self) -> str: ...
    @property
    def seconds(self) -> float: ...


B = TypeVar("B", bound=Built)


def build_line(result: Built, backend: str, ended: datetime) -> str:
    """The record of one build as one JSON line (its start is its end less its measured seconds)."""
    started = ended - timedelta(seconds=result.seconds)
    return json.dumps({"tag": result.tag, "image_id": result.image_id,
                       "started": started.isoformat(timespec="seconds"),
                       "ended": ended.isoformat(timespec="seconds"),
                       "seconds": round(result.seconds, 2), "backend": backend},
                      sort_keys=True) + "\n"


def append_line(path: Path, line: str) -> None:
    """``line`` appended whole to ``path`` (one write, O_APPEND) and fsynced; the folder made when
    missing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)


def recorded(root: Path, backend: str, result: B) -> B:
    """``result`` after its record is appended under ``root`` (a refused write is left unsaid: see
    above)."""
    with contextlib.suppress(OSError):
        append_line(root / BUILDS, build_line(result, backend, datetime.now(timezone.utc)))
    return result
