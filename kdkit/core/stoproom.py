"""stop.json's room, set aside while a run is open: a run the disk fills under can still say where
it stopped.

STOP_RESERVED bytes are allocated (posix_fallocate) to a file named as a staging copy of stop.json
(kdkit.core.staging: locked while this session lives, removed by the next one if it is killed);
stop.json is then written into that room and renamed into place, needing no new space. Standard
library only.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from pathlib import Path

from kdkit.core.staging import temp_prefix

FULL_DISK = frozenset({errno.ENOSPC, errno.EDQUOT})
# bytes set aside for stop.json while a run is open; a stop.json names at most
STOP_RESERVED = 32 << 10
# 100 IDs of the batch in flight (128 characters each) and a few short reasons
RESERVED = "reserved.tmp"  # how the name of stop.json's reserved room ends


def disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` is a write refused for want of space (a full file system, or a quota)."""
    return isinstance(exc, OSError) and exc.errno in FULL_DISK


class StopRoom:
    """The room reserved for ``stop`` (the run folder's stop.json), open and locked."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path, self.fd = path, fd

    @classmethod
    def reserve(cls, stop: Path) -> StopRoom | None:
        """The room, or None on a file system that cannot allocate ahead (stop.json is then written
        as any file); a full disk is raised."""
        path = stop.parent / f"{temp_prefix(stop)}{RESERVED}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                os.posix_fallocate(fd, 0, STOP_RESERVED)
            except OSError as exc:
                if exc.filename is None:
                    exc.filename = os.fspath(path)
                raise
        except BaseException as exc:
            os.close(fd)
            path.unlink(missing_ok=True)
            if disk_full(exc) or not isinstance(exc, OSError):
                raise
            return None
        return cls(path, fd)

    def fill(self, payload: bytes, stop: Path) -> None:
        """``payload`` written into the room, fsynced and renamed to ``stop``; the room is then
        closed."""
        view = memoryview(payload)
        while view:
            view = view[os.pwrite(self.fd, view, len(payload) - len(view)):]
        os.ftruncate(self.fd, len(payload))
        os.fsync(self.fd)
        os.replace(self.path, stop)
        os.close(self.fd)

    def drop(self) -> None:
        """Give the room back (the run closes without a stop, or this session ends)."""
        with contextlib.suppress(OSError):
            self.path.unlink()
        os.close(self.fd)
