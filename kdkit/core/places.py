"""Refusing, before any work, a place kdkit cannot or must not write its folder at (re-exported by
kdkit.core.staging).

Standard library only: the in-container side uses them too.
"""

from __future__ import annotations

import os
from pathlib import Path

from kdkit.core.errors import BadInput


def require_writable(folder: Path, what: str) -> None:
    """Refuse, before any work, a folder that cannot be made and written there: a read-only mount,
    no permission, a file in the way. Missing parts are fine (they will be created); nothing is
    written."""
    probe = folder
    while not probe.exists() and not probe.is_symlink() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise BadInput(f"{folder}: {probe} is not a folder; move it away or choose another {what}")
    if not os.access(probe, os.W_OK | os.X_OK):
        reason = ("read-only file system" if os.statvfs(probe).f_flag & os.ST_RDONLY
                  else "permission denied")
        raise BadInput(f"{folder}: cannot write there ({probe}: {reason}); make it writable or "
                       f"choose another {what}")


def refuse_link(given: Path, what: str) -> None:
    """Refuse a symbolic link at ``given``, dangling or not, before it is resolved: kdkit writes its
    folder at the path a person names, never where a link there leads (README: it writes over
    regular files only)."""
    if os.path.islink(given):
        raise BadInput(f"{given}: is a symbolic link (to {os.readlink(given)}); kdkit never writes "
                       f"through a link at {what}: give the real path, or move the link away")


def make_folder(folder: Path, what: str) -> None:
    """Create ``folder`` (and its parents); BadInput naming the place when the filesystem
    refuses."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInput(f"{folder}: cannot create it ({exc.strerror or exc}); make it writable or "
                       f"choose another {what}") from None
