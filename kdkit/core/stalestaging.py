"""What a killed process left beside a final path: staging entries recognised by their names
(``.NAME.partial-PID``, ``.NAME.old-PID``, ``.NAME.PID.XXXX.tmp``: :func:`staged_name`), the stale
ones found (:func:`stale_staging`), removed (:func:`clean_stale`, :func:`clean_stale_in`) and
reported (:func:`describe_removed`). kdkit.core.staging makes, holds and publishes the staging.

"Gone" is judged by a lock, not only by the PID in the name: the owner holds an exclusive flock(2)
on its staging folder or file (kdkit.core.staging.hold) from the moment it exists until it is
renamed into place, and the kernel drops that lock when the owner dies, however it dies. A PID
means something in one PID namespace only: two containers sharing a runs/ folder or a copy
destination see each other's PIDs as dead (or as their own), but never each other's locks as
free. A staging entry whose lock is free is stale when its PID is not a live process here (or is
ours), or when it is older than STALE_AFTER_S (staging of a kdkit that held no lock, or made in
the instant before its lock was taken).

Standard library only: the in-container side cleans its staging too.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import stat
import time
from pathlib import Path

_STAGED = (
    re.compile(
        r"\.(?P<name>.+)\.(?:(?:partial|old)-(?P<pid>[0-9]+)|(?P<tpid>[0-9]+)\.[^./]+\.tmp)\Z"))
STALE_AFTER_S = 60.0


def staged_name(name: str) -> str | None:
    """The final name whose staging ``name`` is (``.results.jsonl.123.ab.tmp`` ->
    ``results.jsonl``), or None."""
    match = _STAGED.match(name)
    return match["name"] if match else None


def _held(path: Path) -> bool:
    """Whether a live owner holds the lock of ``path`` (False for what cannot be opened or
    locked)."""
    try:
        fd = os.open(path,
                     os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
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


def stale_staging(final: Path, folders_only: bool = False) -> list[Path]:
    """Staging copies of ``final`` left by processes that are gone (only its staging folders:
    ``folders_only``)."""
    try:
        names = os.listdir(final.parent)
    except OSError:
        return []
    stale = []
    for name in names:
        match = _STAGED.match(name)
        if match is None or match["name"] != final.name or (folders_only and match["tpid"]):
            continue
        path = final.parent / name
        try:
            info = os.lstat(path)
        except OSError:
            continue
        # Only what kdkit makes under such a name: a folder (.partial-, .old-) or a regular file
        # (.tmp), never a link.
        if not (stat.S_ISDIR if match["pid"] else stat.S_ISREG)(info.st_mode) or _held(path):
            continue
        old = time.time() - info.st_mtime > STALE_AFTER_S
        if old or not owner_alive(int(match["pid"] or match["tpid"])):
            stale.append(path)
    return sorted(stale)


def clean_stale(final: Path, folders_only: bool = False) -> list[Path]:
    """Remove the staging copies of ``final`` whose owner is gone; return what was removed."""
    removed = []
    for path in stale_staging(final, folders_only):
        with contextlib.suppress(OSError):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
            removed.append(path)
    return removed


def clean_stale_in(folder: Path, folders_only: bool = False) -> list[Path]:
    """Remove every stale staging entry directly inside ``folder`` (a run folder; a runs folder,
    where kdkit stages only folders: ``folders_only``). Only a folder kdkit writes in is ever passed
    here."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    finals = {m["name"] for n in names if (m := _STAGED.match(n))}
    return [path for name in sorted(finals) for path in clean_stale(folder / name, folders_only)]


def describe_removed(removed: list[Path]) -> list[str]:
    """One line per removed staging entry, for stderr."""
    return [f"removed {path} (staging left by a process that no longer runs)" for path in removed]
