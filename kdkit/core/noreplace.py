"""Renaming without replacing: the one way kdkit claims a final name that another process may claim
too.

``os.rename`` replaces what is at the destination (on Linux a file, a link, or an empty folder) and
``os.replace`` does so everywhere: two writers that both checked the name was free both succeed and
one result is gone. :func:`rename_no_replace` fails instead, atomically, when anything is there.
(rename(2), renameat2(2) RENAME_NOREPLACE: https://man7.org/linux/man-pages/man2/rename.2.html;
macOS renamex_np(2) RENAME_EXCL: https://keith.github.io/xcode-man-pages/renamex_np.2.html)

What is at a name is told apart by (device, inode), and only while a descriptor of it is open
(:func:`pin`): a freed inode's number is given to the next file made, so an unpinned folder removed
and made again can carry the same pair.

Standard library only (ctypes reaches the C library's call; without it the name is claimed first).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
from collections.abc import Callable
from pathlib import Path

_AT_FDCWD = -100  # linux/fcntl.h
_RENAME_NOREPLACE = 1  # linux/fs.h, renameat2(2)
_RENAME_EXCL = 0x4  # macOS sys/stdio.h, renamex_np(2)
# The call exists but this kernel or file system does not do it: claim the name first instead.
_UNSUPPORTED = frozenset(
    {errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, getattr(errno, "ENOTSUP", errno.EOPNOTSUPP)})


@functools.lru_cache(maxsize=1)
def _c_call() -> Callable[[bytes, bytes], int] | None:
    """The C library's atomic no-replace rename, as a call giving 0 or an errno; None where it has
    none."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
    except (ImportError, OSError):
        return None
    if hasattr(libc, "renameat2"):  # Linux 3.15+ with glibc 2.28+
        linux = libc.renameat2
        linux.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int,
                          ctypes.c_char_p, ctypes.c_uint]

        def call(src: bytes, dst: bytes) -> int:
            return 0 if linux(_AT_FDCWD, src,
                              _AT_FDCWD, dst, _RENAME_NOREPLACE) == 0 else ctypes.get_errno()

        return call
    if hasattr(libc, "renamex_np"):  # macOS 10.12+
        mac = libc.renamex_np
        mac.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint]

        def call_mac(src: bytes, dst: bytes) -> int:
            return 0 if mac(src, dst, _RENAME_EXCL) == 0 else ctypes.get_errno()

        return call_mac
    return None


def rename_no_replace(src: Path, dst: Path) -> None:
    """Rename ``src`` to ``dst`` unless anything is at ``dst`` (a folder, even an empty one, a file,
    a dangling link): FileExistsError then, and both stay as they were. One atomic call where the C
    library and the file system have it (Linux renameat2(2) RENAME_NOREPLACE, macOS renamex_np(2)
    RENAME_EXCL); elsewhere the name is claimed first (mkdir for a folder, a hard link for a file),
    so a SIGKILL in that instant can leave an empty folder at ``dst``."""
    call = _c_call()
    if call is not None:
        code = call(os.fsencode(src), os.fsencode(dst))
        if code == 0:
            return
        if code not in _UNSUPPORTED:
            raise OSError(code, os.strerror(code), os.fspath(src), None, os.fspath(dst))
    if src.is_symlink() or not src.is_dir():
        os.link(src, dst, follow_symlinks=False)
        os.unlink(src)
        return
    os.mkdir(dst)  # the claim: fails on anything there
    try:
        # replaces only the empty folder just made; ENOTEMPTY once someone filled it
        os.rename(src, dst)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.rmdir(dst)
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), os.fspath(dst)) from None
        raise


Identity = tuple[int, int]


def identity(path: Path | os.stat_result) -> Identity | None:
    """(device, inode) of what is at ``path`` (a link itself, not what it names), or of a stat; None
    if nothing."""
    try:
        found = path if isinstance(path, os.stat_result) else os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return found.st_dev, found.st_ino


def pin(path: Path) -> int | None:
    """A descriptor of the folder at ``path`` (not a link); while it is open the folder's inode
    cannot be freed, so no other file takes its number and (device, inode) names it alone. None if
    there is none."""
    try:
        return os.open(path,
                       os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None


def pinned(fd: int | None) -> Identity | None:
    return None if fd is None else identity(os.fstat(fd))


def put_back(old: Path, final: Path) -> Path:
    """Return what was moved aside to ``final``, else to a name no cleaner removes; where it is
    now."""
    for place in (final, final.with_name(f"{final.name}.kept-{os.getpid()}")):
        with contextlib.suppress(OSError):
            rename_no_replace(old, place)
            return place
    return old
