"""A lock as `kdkit build` reads it: once, into bytes.

Everything a build says of its lock comes from those bytes: the lock parsed (freshness, torch's labels, the
layers' parts), its sha256 (the ``dev.kdkit.lock.sha256`` label and the default tag), the credential check,
and the file the build context carries (``lock/<path>``). Read twice, a lock replaced between the reads gave
an image whose label names another lock than the one it holds.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from kdkit.config.project import Backend, Project
from kdkit.core.errors import BadInput
from kdkit.core.lockfile import LOCK_LIMIT, Lock, parse_lock_content


@dataclass(frozen=True)
class LockInput:
    """One read of a lock file: its bytes, and the lock parsed from them."""

    path: Path
    data: bytes = field(repr=False)
    text: str = field(repr=False)  # the bytes decoded as a text read decodes them (UTF-8, universal newlines)
    lock: Lock = field(repr=False)

    @cached_property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()



def _read(path: Path) -> bytes:
    """The bytes of a regular file of at most LOCK_LIMIT bytes, from one open (checked on that open file)."""
    try:
        with open(path, "rb") as handle:
            info = os.fstat(handle.fileno())
            if stat.S_ISDIR(info.st_mode):
                raise BadInput(f"{path}: lock is a folder, not a file; give the file")
            if not stat.S_ISREG(info.st_mode):
                raise BadInput(f"{path}: lock is not a regular file (a FIFO, socket or device?); give the file")
            data = handle.read(LOCK_LIMIT + 1)
    except FileNotFoundError:
        raise BadInput(f"{path}: lock not found; create it with `kdkit lock`") from None
    except IsADirectoryError:
        raise BadInput(f"{path}: lock is a folder, not a file; give the file") from None
    except OSError as exc:
        raise BadInput(f"{path}: cannot read lock ({exc.strerror or exc}); check the file") from None
    if len(data) > LOCK_LIMIT:
        raise BadInput(f"{path}: over {LOCK_LIMIT} bytes, too large to be a lock (at most {LOCK_LIMIT}); give the "
                       "lock")
    return data


def read_lock_input(path: Path) -> LockInput:
    """Read the lock at ``path`` once and parse it (BadInput naming ``file:line``, as :func:`parse_lock`)."""
    data = _read(path)
    try:
        text = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8").read()
    except UnicodeDecodeError as exc:
        raise BadInput(f"{path}: lock is not UTF-8 (byte at offset {exc.start}); save it as UTF-8") from None
    return LockInput(path, data, text, parse_lock_content(text, path))


def read_inputs(project: Project, chosen: Backend, lock_format: str) -> tuple[LockInput, ...]:
    """The locks a build reads, each once and checked fresh from those bytes: the requirements lock, or the
    pylock and then the requirements lock it was made from."""
    from kdkit.lock.staleness import missing_lock, require_fresh_lock, require_fresh_pylock

    if not chosen.lock.is_file():
        raise missing_lock(chosen)
    twin = read_lock_input(chosen.lock)
    require_fresh_lock(project, chosen.name, twin.lock)
    if lock_format != "pylock":
        return (twin,)
    if not chosen.pylock.is_file():
        require_fresh_pylock(project, chosen.name)  # refused, with what to do
    pylock = read_lock_input(chosen.pylock)
    require_fresh_pylock(project, chosen.name, pylock.lock, twin.sha256)
    return pylock, twin
