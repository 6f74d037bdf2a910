"""A backend's lock as a command reads it: once, into bytes, at the command's edge (a
``LockedBackend``).

What `kdkit build`, `kdkit bundle` and `kdkit wheelhouse` judge of the lock comes from those bytes:
the lock parsed (freshness, torch's labels, the layers' parts, the machine-local pins, the hashes a
download is held to), its sha256 (the ``dev.kdkit.lock.sha256`` label, the default tag,
bundle.json's ``lock_sha256``), the credential check, and the file the build context carries
(``lock/<path>``). Read twice, a lock replaced between the reads gave an image whose label names
another lock than the one it holds. Two readers still open the file itself: `kdkit bundle` packs it
with the project's files, and pip reads it for `kdkit wheelhouse` (each downloaded file is then held
to the hashes of the read).
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
    # the bytes decoded as a text read decodes them (UTF-8, universal newlines)
    text: str = field(repr=False)
    lock: Lock = field(repr=False)

    @cached_property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


def _read(path: Path) -> bytes:
    """The bytes of a regular file of at most LOCK_LIMIT bytes, from one open (checked on that open
    file)."""
    try:
        with open(path, "rb") as handle:
            info = os.fstat(handle.fileno())
            if stat.S_ISDIR(info.st_mode):
                raise BadInput(f"{path}: lock is a folder, not a file; give the file")
            if not stat.S_ISREG(info.st_mode):
                raise BadInput(
                    f"{path}: lock is not a regular file (a FIFO, socket or device?); give the "
                    "file")
            data = handle.read(LOCK_LIMIT + 1)
    except FileNotFoundError:
        raise BadInput(f"{path}: lock not found; create it with `kdkit lock`") from None
    except IsADirectoryError:
        raise BadInput(f"{path}: lock is a folder, not a file; give the file") from None
    except OSError as exc:
        raise BadInput(
            f"{path}: cannot read lock ({exc.strerror or exc}); check the file") from None
    if len(data) > LOCK_LIMIT:
        raise BadInput(f"{path}: over {LOCK_LIMIT} bytes, too large to be a lock (at most "
                       f"{LOCK_LIMIT}); give the lock")
    return data


def read_lock_input(path: Path) -> LockInput:
    """Read the lock at ``path`` once and parse it (BadInput naming ``file:line``, as
    :func:`parse_lock`)."""
    data = _read(path)
    try:
        text = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8").read()
    except UnicodeDecodeError as exc:
        raise BadInput(
            f"{path}: lock is not UTF-8 (byte at offset {exc.start}); save it as UTF-8") from None
    return LockInput(path, data, text, parse_lock_content(text, path))


@dataclass(frozen=True)
class LockedBackend:
    """A backend with its lock read once and checked fresh from those bytes (and, for a pylock
    build, the PEP 751 lock first, then the requirements lock it was made from)."""

    backend: Backend
    inputs: tuple[LockInput, ...] = field(repr=False)  # (lock,) or (pylock, its requirements twin)

    @property
    def installed(self) -> LockInput:
        """The lock the image installs: its sha256 is the image's label."""
        return self.inputs[0]

    @property
    def requirements(self) -> LockInput:
        """The backend's requirements lock (the lock itself, or the one a pylock was made from)."""
        return self.inputs[-1]


def read_locked(project: Project, chosen: Backend,
                lock_format: str = "requirements") -> LockedBackend:
    """The backend's locks, each read once and checked fresh from those bytes: the requirements
    lock, or the pylock and then the requirements lock it was made from; BadInput (exit 2) for a
    missing, unreadable or stale one."""
    from kdkit.lock.staleness import missing_lock, require_fresh_lock, require_fresh_pylock

    if not chosen.lock.is_file():
        raise missing_lock(chosen)
    twin = read_lock_input(chosen.lock)
    require_fresh_lock(project, chosen.name, twin.lock)
    if lock_format != "pylock":
        return LockedBackend(chosen, (twin,))
    if not chosen.pylock.is_file():
        require_fresh_pylock(project, chosen.name)  # refused, with what to do
    pylock = read_lock_input(chosen.pylock)
    require_fresh_pylock(project, chosen.name, pylock.lock, twin.sha256)
    return LockedBackend(chosen, (pylock, twin))
