"""What a run started by root leaves readable: the choice, said where it is made.

Started by root, the container runs as the image's user 10001 (kdkit.machine.run), which owns what
it writes, files 0600 and folders 0700: readable by root only, a surprise for the person who ran
``sudo kdkit run`` and then reads or copies the run as themself. Each run folder the run made is
therefore made readable by everyone once the container has ended (``chmod -R a+rX``: read, and enter
folders; nothing becomes writable or executable), and its owner stays 10001, so a ``--resume`` in a
container can still write it. kdkit says what it did and the command that undoes it. A run not
started by root is its starter's own: nothing is changed.
"""

from __future__ import annotations

import errno
import os
import shlex
import stat
from collections.abc import Sequence
from pathlib import Path

from kdkit.image.container import IMAGE_UID

READ_FILE = stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH
ENTER = stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH
# Every name is opened relative to its folder's descriptor and never through a link (O_NOFOLLOW),
# and each mode is changed on the open descriptor (fchmod): the container's user, who can rename and
# link inside its run folder while the walk goes on, cannot make it change anything outside (a
# checked path swapped for a link).
OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def _widen(fd: int) -> bool:
    """Read (and enter, for a folder) for everyone on the open folder or regular file ``fd``;
    whether it is a folder to enter. A file with another name elsewhere (a hard link) keeps its
    mode: that name's too."""
    info = os.fstat(fd)
    if stat.S_ISDIR(info.st_mode):
        extra = READ_FILE | ENTER
    elif stat.S_ISREG(info.st_mode) and info.st_nlink == 1:
        extra = READ_FILE
    else:
        return False
    if info.st_mode & extra != extra:
        os.fchmod(fd, stat.S_IMODE(info.st_mode) | extra)
    return stat.S_ISDIR(info.st_mode)


def _entry(folder: int, name: str) -> int | None:
    """``name`` in the open ``folder`` made readable: its descriptor when it is a folder to enter,
    else None (a link is neither followed nor entered; a device, FIFO or socket is never opened)."""
    info = os.lstat(name, dir_fd=folder)
    if not (stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)):
        return None
    try:
        fd = os.open(name, OPEN, dir_fd=folder)
    except OSError as exc:
        # swapped for a link, gone, a socket meanwhile
        if exc.errno in (errno.ELOOP, errno.ENOENT, errno.ENXIO):
            return None
        raise
    try:
        if _widen(fd):
            return fd
    except BaseException:
        os.close(fd)
        raise
    os.close(fd)
    return None


def _share(folder: Path) -> str | None:
    """Every folder and file below ``folder`` made readable, depth first with one open descriptor
    per level (any depth the descriptor limit allows, no recursion); why not, if not."""
    stack: list[tuple[int, list[str]]] = []
    try:
        top = os.open(folder, OPEN | os.O_DIRECTORY)
        stack.append((top, []))
        _widen(top)
        stack[-1] = (top, os.listdir(top))
        while stack:
            fd, names = stack[-1]
            if not names:
                os.close(stack.pop()[0])
                continue
            child = _entry(fd, names.pop())
            if child is not None:
                stack.append((child, []))
                stack[-1] = (child, os.listdir(child))
    except OSError as exc:
        return f"{exc.strerror or exc}" + (f" ({exc.filename})" if exc.filename else "")
    finally:
        for fd, _names in stack:
            os.close(fd)
    return None


def readable_by_all(folders: Sequence[Path], started_by_root: bool | None = None,
                    owner: int = IMAGE_UID) -> list[str]:
    """Make each run folder in ``folders`` readable by everyone when root started the run: this
    process is root and the folder is the image user's (``owner``: a run root started,
    kdkit.machine.run; a run a user started is that user's, and a root `kdkit wait` leaves it so).
    The lines saying so (or why one could not be, whole: the run's verdict stands either way)."""
    if not (os.geteuid() == 0 if started_by_root is None else started_by_root):
        return []
    lines = []
    for folder in folders:
        if folder.is_symlink() or not folder.is_dir() or folder.stat().st_uid != owner:
            continue
        shown = shlex.quote(str(folder))
        failed = _share(folder)
        if failed:
            lines.append(f"{folder}: not all of it could be made readable by everyone ({failed}); "
                         f"what was is undone with: chmod -R go-rX {shown}")
            continue
        lines.append(f"{folder}: made readable by everyone (chmod -R a+rX; the container's user "
                     "10001 still owns it, so a resume can write it); undo with: chmod -R go-rX "
                     f"{shown}")
    return lines
