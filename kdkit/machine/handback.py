"""What a run started by root leaves readable: the choice, said where it is made.

Started by root, the container runs as the image's user 10001 (kdkit.machine.run), which owns what it writes,
files 0600 and folders 0700: readable by root only, a surprise for the person who ran ``sudo kdkit run`` and
then reads or copies the run as themself. Each run folder the run made is therefore made readable by everyone
once the container has ended (``chmod -R a+rX``: read, and enter folders; nothing becomes writable or
executable), and its owner stays 10001, so a ``--resume`` in a container can still write it. kdkit says what
it did and the command that undoes it. A run not started by root is its starter's own: nothing is changed.
"""

from __future__ import annotations

import os
import shlex
import stat
from collections.abc import Sequence
from pathlib import Path

READ_FILE = stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH
ENTER = stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH


def _readable(path: Path) -> None:
    """Read (and enter, for a folder) for everyone on a folder or a regular file of the run only: a link is not
    followed, a device, FIFO or socket keeps its mode, and a file with another name elsewhere (a hard link) is
    left as it is, since its mode is that other name's too."""
    info = path.lstat()
    if stat.S_ISREG(info.st_mode) and info.st_nlink == 1:
        extra = READ_FILE
    elif stat.S_ISDIR(info.st_mode):
        extra = READ_FILE | ENTER
    else:
        return
    if info.st_mode & extra != extra:
        os.chmod(path, stat.S_IMODE(info.st_mode) | extra)


def _entered(folder: Path) -> list[Path]:
    """Each file of ``folder`` made readable; its folders, to enter next (a link is neither followed nor entered)."""
    folders = []
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                folders.append(Path(entry.path))
            else:
                _readable(Path(entry.path))
    return folders


def _share(folder: Path) -> str | None:
    """Every folder and file below ``folder`` made readable (a stack, not recursion: any depth); why not, if not."""
    pending = [folder]
    try:
        while pending:
            current = pending.pop()
            _readable(current)
            pending += _entered(current)
    except OSError as exc:
        return f"{exc.strerror or exc}" + (f" ({exc.filename})" if exc.filename else "")
    return None


def readable_by_all(folders: Sequence[Path], started_by_root: bool | None = None) -> list[str]:
    """Make each run folder in ``folders`` readable by everyone when root started the run; the lines saying so
    (or why one could not be, whole: the run's verdict stands either way)."""
    if not (os.geteuid() == 0 if started_by_root is None else started_by_root):
        return []
    lines = []
    for folder in folders:
        if folder.is_symlink() or not folder.is_dir():
            continue
        shown = shlex.quote(str(folder))
        failed = _share(folder)
        if failed:
            lines.append(f"{folder}: not all of it could be made readable by everyone ({failed}); what was is "
                         f"undone with: chmod -R go-rX {shown}")
            continue
        lines.append(f"{folder}: made readable by everyone (chmod -R a+rX; the container's user 10001 still owns "
                     f"it, so a resume can write it); undo with: chmod -R go-rX {shown}")
    return lines
