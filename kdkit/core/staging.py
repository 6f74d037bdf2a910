"""Staging beside a final path, and the cleaning of what a killed process left there.

Every command that makes a folder or a big file all at once (init, bundle, copy-out, gather,
wheelhouse, every atomic write) builds it under a hidden name beside the final path that
carries the owner's process ID, ``.NAME.partial-PID`` (folders) or ``.NAME.PID.XXXX.tmp``
(files), and renames it into place at the end (an older NAME it replaces waits as ``.NAME.old-PID``
until the new one is in place). A SIGKILL leaves that staging behind; the next run of a command
that writes NAME removes every staging copy of NAME whose owner is gone, and says so.

"Gone" is judged by a lock, not only by the PID in the name: the owner holds an exclusive
flock(2) on its staging folder or file (:func:`hold`) from the moment it exists until it is
renamed into place, and the kernel drops that lock when the owner dies, however it dies. A PID
means something in one PID namespace only: two containers sharing a runs/ folder or a copy
destination see each other's PIDs as dead (or as their own), but never each other's locks as
free. A staging entry whose lock is free is stale when its PID is not a live process here (or is
ours), or when it is older than STALE_AFTER_S (staging of a kdkit that held no lock, or made in
the instant before its lock was taken).

Standard library only: the in-container side stages its copies too.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import time
from pathlib import Path

from kdkit.core.errors import BadInput

_STAGED = re.compile(r"\.(?P<name>.+)\.(?:(?:partial|old)-(?P<pid>[0-9]+)|(?P<tpid>[0-9]+)\.[^./]+\.tmp)\Z")


def staging_for(final: Path) -> Path:
    """The staging folder of ``final`` for this process (not created): ``.NAME.partial-PID``."""
    return final.parent / f".{final.name}.partial-{os.getpid()}"


def temp_prefix(final: Path) -> str:
    """The prefix of a staging file of ``final`` (``tempfile.mkstemp(prefix=..., suffix=".tmp")``)."""
    return f".{final.name}.{os.getpid()}."


def staged_name(name: str) -> str | None:
    """The final name whose staging ``name`` is (``.results.jsonl.123.ab.tmp`` -> ``results.jsonl``), or None."""
    match = _STAGED.match(name)
    return match["name"] if match else None


STALE_AFTER_S = 60.0


def hold(path: Path | str) -> int:
    """Take the owner's lock on a staging folder or file; returns the descriptor to release()."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise
    return fd


def release(fd: int | None) -> None:
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


def _held(path: Path) -> bool:
    """Whether a live owner holds the lock of ``path`` (False for what cannot be opened or locked)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
    return False


def owner_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not this process (which cannot have staged yet)."""
    if pid == os.getpid() or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    return True


def stale_staging(final: Path) -> list[Path]:
    """Staging copies of ``final`` left by processes that are gone."""
    try:
        names = os.listdir(final.parent)
    except OSError:
        return []
    stale = []
    for name in names:
        match = _STAGED.match(name)
        if match is None or match["name"] != final.name:
            continue
        path = final.parent / name
        if _held(path):
            continue
        try:
            old = time.time() - os.lstat(path).st_mtime > STALE_AFTER_S
        except OSError:
            continue
        if old or not owner_alive(int(match["pid"] or match["tpid"])):
            stale.append(path)
    return sorted(stale)


def clean_stale(final: Path) -> list[Path]:
    """Remove the staging copies of ``final`` whose owner is gone; return what was removed."""
    removed = []
    for path in stale_staging(final):
        with contextlib.suppress(OSError):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
            removed.append(path)
    return removed


def clean_stale_in(folder: Path) -> list[Path]:
    """Remove every stale staging entry directly inside ``folder`` (a run folder, a runs folder)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    finals = {m["name"] for n in names if (m := _STAGED.match(n))}
    return [path for name in sorted(finals) for path in clean_stale(folder / name)]


def describe_removed(removed: list[Path]) -> list[str]:
    """One line per removed staging entry, for stderr."""
    return [f"removed {path} (staging left by a process that no longer runs)" for path in removed]


def require_writable(folder: Path, what: str) -> None:
    """Refuse, before any work, a folder that cannot be made and written there: a read-only mount, no
    permission, a file in the way. Missing parts are fine (they will be created); nothing is written."""
    probe = folder
    while not probe.exists() and not probe.is_symlink() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise BadInput(f"{folder}: {probe} is not a folder; move it away or choose another {what}")
    if not os.access(probe, os.W_OK | os.X_OK):
        reason = "read-only file system" if os.statvfs(probe).f_flag & os.ST_RDONLY else "permission denied"
        raise BadInput(f"{folder}: cannot write there ({probe}: {reason}); make it writable or choose another "
                       f"{what}")


def make_folder(folder: Path, what: str) -> None:
    """Create ``folder`` (and its parents); BadInput naming the place when the filesystem refuses."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInput(f"{folder}: cannot create it ({exc.strerror or exc}); make it writable or choose "
                       f"another {what}") from None
