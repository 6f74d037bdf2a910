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
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode):
        return  # a link's own mode means nothing; its target is not kdkit's to change
    extra = READ_FILE | (ENTER if stat.S_ISDIR(info.st_mode) else 0)
    if info.st_mode & extra != extra:
        os.chmod(path, stat.S_IMODE(info.st_mode) | extra)


def readable_by_all(folders: Sequence[Path], started_by_root: bool | None = None) -> list[str]:
    """Make each run folder in ``folders`` readable by everyone when root started the run; the lines saying so."""
    if not (os.geteuid() == 0 if started_by_root is None else started_by_root):
        return []
    lines = []
    for folder in folders:
        if folder.is_symlink() or not folder.is_dir():
            continue
        _readable(folder)
        for top, dirs, files in os.walk(folder):
            for name in [*dirs, *files]:
                _readable(Path(top) / name)
        shown = shlex.quote(str(folder))
        lines.append(f"{folder}: made readable by everyone (chmod -R a+rX; the container's user 10001 still owns "
                     f"it, so a resume can write it); undo with: chmod -R go-rX {shown}")
    return lines
