"""Staging beside a final path: made, held by its owner, and renamed into place.

Every command that makes a folder or a big file all at once (init, bundle, copy-out, gather,
wheelhouse, every atomic write) builds it under a hidden name beside the final path that
carries the owner's process ID, ``.NAME.partial-PID`` (folders) or ``.NAME.PID.XXXX.tmp``
(files), and renames it into place at the end (an older NAME it replaces waits as ``.NAME.old-PID``
until the new one is in place). A SIGKILL leaves that staging behind; the next run of a command
that writes NAME removes every staging copy of NAME whose owner is gone, and says so
(kdkit.core.stalestaging). Every staging folder is made, held, removed or renamed into place by one
helper, :func:`staged_beside`.

The owner holds an exclusive flock(2) on its staging folder or file (:func:`hold`) from the moment
it exists until it is renamed into place; the kernel drops that lock when the owner dies, however it
dies, and kdkit.core.stalestaging judges an entry gone by it.

A folder is published under its final name by a no-replace rename (:func:`staged_folder`): the final
name is claimed atomically, so two writers (two bundles, two gatherings) to one place never both
succeed, and nothing another process put there meanwhile (a folder, even an empty one, a file, a
link) is ever replaced. ``--force`` moves the old folder aside atomically and deletes it only once
it is found to be the very one that was checked (same inode, same verdict); anything else is put
back untouched.

Standard library only: the in-container side stages its copies too.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

from kdkit.core.errors import BadInput, KdkitError
from kdkit.core.noreplace import Identity, identity, pin, pinned, put_back, rename_no_replace

# kdkit.core.places: where kdkit may write, re-exported
from kdkit.core.places import make_folder as make_folder
from kdkit.core.places import refuse_link as refuse_link
from kdkit.core.places import require_writable as require_writable
from kdkit.core.stalestaging import clean_stale, staged_name


def staging_for(final: Path) -> Path:
    """The staging folder of ``final`` for this process (not created): ``.NAME.partial-PID``."""
    return final.parent / f".{final.name}.partial-{os.getpid()}"


def temp_prefix(final: Path) -> str:
    """The prefix of a staging file of ``final`` (``tempfile.mkstemp(prefix=...,
    suffix=".tmp")``)."""
    return f".{final.name}.{os.getpid()}."


def hold(path: Path | str) -> int:
    """Take the owner's lock on a staging folder or file; returns the descriptor to release()."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
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


# ---------------------------------------------------------------- claiming the final name

_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
LOW_SPACE = 256 * 1024  # bytes left below which a failed write is put down to a full disk


# why what is at a path is not a copy kdkit may replace, or None
Replaceable = Callable[[Path], "str | None"]


class Staged:
    """A folder being made: write into ``path``; it becomes ``final`` when the ``with`` block ends
    well. ``removed``: the staging killed runs had left, removed first."""

    __slots__ = ("final", "path", "removed")

    def __init__(self, final: Path, path: Path, removed: list[Path]) -> None:
        self.final, self.path, self.removed = final, path, removed


class Beside(Staged):
    """A staging folder made by :func:`staged_beside`; ``owner``: its lock, None once taken
    (:meth:`take_lock`)."""

    __slots__ = ("owner", "published")

    def __init__(self, final: Path, path: Path, removed: list[Path]) -> None:
        super().__init__(final, path, removed)
        self.owner: int | None = None
        self.published = False

    def publish(self, replace: bool = True) -> None:
        """Rename the staging folder to ``final``: os.replace (the caller has checked that nothing
        is there), or with ``replace=False`` :func:`rename_no_replace` (FileExistsError when
        anything is there)."""
        (os.replace if replace else rename_no_replace)(self.path, self.final)
        self.published = True

    def take_lock(self) -> int | None:
        """The lock, kept past the block: the folder published is the staging folder renamed, still
        held."""
        owner, self.owner = self.owner, None
        return owner


@contextlib.contextmanager
def staged_beside(final: Path, clean: bool = True, parents: bool = False) -> Iterator[Beside]:
    """The staging folder of ``final`` made (its missing parents too: ``parents``) and held, after
    the staging killed runs left is removed (``clean``; ``removed``: the caller says so); removed,
    and its lock released, however the block ends unless it was published (:meth:`Beside.publish`).
    Checks and messages are the caller's; :func:`staged_folder` is the one that claims ``final``
    without replacing anything."""
    staged = Beside(final, staging_for(final), clean_stale(final) if clean else [])
    staged.path.mkdir(parents=parents)
    try:
        staged.owner = hold(staged.path)
        yield staged
    finally:
        if not staged.published:
            shutil.rmtree(staged.path, ignore_errors=True)
        release(staged.owner)


@contextlib.contextmanager
def staged_folder(final: Path, what: str,
                  replaceable: Replaceable | None = None) -> Iterator[Staged]:
    """Stage a folder beside ``final``; publish it there when the block ends without an exception.

    Before anything is written, what is at ``final`` is refused: anything at all, or with
    ``replaceable`` (``--force``) whatever it says kdkit may not replace. Then the staging of
    ``final`` that killed runs left is removed (``removed``: the caller says so). The staging folder
    carries the owner's lock until it is renamed into place or removed, whatever ends the block.
    Publishing claims ``final`` atomically (:func:`rename_no_replace`); a copy to replace is moved
    aside and deleted only when it is still the one checked. Failing to write there (a full disk,
    the folder removed meanwhile) is one line, exit 2, naming ``final`` and ``what``, the option
    that chose it."""
    checked, made = None, False
    folder = pin(final.parent)
    above = [(path, identity(path)) for path in final.parent.parents]
    try:
        checked = _check_final(final, what, replaceable)
        # the staging killed runs left removed; this one made and held
        with staged_beside(final) as staged:
            made = True
            yield staged
            # removed, made again by a writer in it (mkdir -p)
            if identity(staged.path) != pinned(staged.owner):
                raise BadInput(_gone(final, what))
            _publish(staged.path, final, what, pinned(checked), replaceable)
            staged.published = True
    except BaseException as exc:
        if made:  # the staging is removed by now (staged_beside)
            _unmake([(final.parent, pinned(folder)), *above])
        bad = _write_error(exc, final, what, pinned(folder))
        if bad is None:
            raise
        raise bad from None
    finally:
        for fd in (checked, folder):
            release(fd)


def _gone(final: Path, what: str) -> str:
    return (f"{final}: {final.parent} was removed or replaced while kdkit was writing there; "
            "nothing was published or left behind: make the folder again (or choose another "
            f"{what}) and retry")


def _unmake(above: list[tuple[Path, Identity | None]]) -> None:
    """Remove the empty folders above the staging that are not the ones there at the start: a writer
    inside the staging made them again after they were removed (its mkdir -p)."""
    for path, was in above:
        if identity(path) in (was, None):
            return
        try:
            os.rmdir(path)
        except OSError:
            return


def _check_final(final: Path, what: str, replaceable: Replaceable | None) -> int | None:
    """Refuse what is at ``final`` unless kdkit may replace it; then a descriptor pinning it
    (kdkit.core.noreplace.pin), so that the publish can tell it is still the one checked. None when
    nothing is there."""
    if not os.path.lexists(final):
        return None
    held = pin(final)
    why = "already exists" if replaceable is None else replaceable(final)
    if why is None and identity(final) != pinned(held):
        why = "changed while kdkit looked at it"
    if why is not None:
        release(held)
        raise BadInput(f"{final}: {why}; choose another {what} or move it away first")
    return held


def _appeared(final: Path, what: str) -> str:
    return (f"{final}: appeared while kdkit was writing it (another kdkit or another program made "
            f"it); it was left as it is and nothing was published: choose another {what}, or move "
            "it away and retry")


def _publish(staging: Path, final: Path, what: str, checked: Identity | None,
             replaceable: Replaceable | None) -> None:
    try:
        rename_no_replace(staging, final)
        return
    except FileExistsError:
        if checked is None or replaceable is None:
            raise BadInput(_appeared(final, what)) from None
    _replace(staging, final, what, checked, replaceable)


def _replace(staging: Path, final: Path, what: str,
             checked: Identity, replaceable: Replaceable) -> None:
    """``--force``: move what is at ``final`` aside atomically, publish, and delete the old copy
    only when it is the very one checked (same inode, same verdict); anything else goes back
    untouched."""
    old = final.with_name(f".{final.name}.old-{os.getpid()}")
    owner = _hold_quietly(final)  # the lock goes with the inode: held before it has a staging name
    try:
        try:
            rename_no_replace(final, old)
        except FileNotFoundError:  # gone meanwhile: nothing to replace
            return _publish(staging, final, what, None, None)
        why = "another folder is there now" if identity(old) != checked else replaceable(old)
        if why is not None:
            where = put_back(old, final)
            kept = "left as it is" if where == final else f"kept at {where}"
            raise BadInput(f"{final}: changed while kdkit was writing it ({why}); it was {kept} "
                           "and nothing was published: move it away and retry")
        try:
            rename_no_replace(staging, final)
        except FileExistsError:
            raise BadInput(_appeared(final, what)) from None
        finally:
            shutil.rmtree(old, ignore_errors=True)  # checked: the earlier copy kdkit wrote
    finally:
        release(owner)
    return None


def _hold_quietly(path: Path) -> int | None:
    try:
        return hold(path)
    except OSError:
        return None


def _write_error(exc: BaseException, final: Path, what: str,
                 folder: Identity | None) -> BadInput | None:
    """One line for a failure to write at ``final`` (an OSError there, anything once its folder
    ``final.parent`` is no longer the ``folder`` it was, a tool's failure that names a full disk or
    leaves one there); None for every other exception."""
    if isinstance(exc, BadInput) or not isinstance(exc, (OSError, KdkitError)):
        return None
    if identity(final.parent) != folder:
        return BadInput(_gone(final, what))
    if isinstance(exc, OSError) and (exc.errno in _FULL or _names_place(exc, final)):
        reason = exc.strerror or str(exc)
    # a tool (zstd, pip) that failed
    elif os.strerror(errno.ENOSPC) in str(exc) or _nearly_full(final.parent):
        # writing there, saying so or leaving the disk full
        reason = f"{os.strerror(errno.ENOSPC)}: {exc}"
    else:
        return None
    return BadInput(f"{final}: could not write it ({reason}); nothing was left behind: free space "
                    f"or fix permissions (or choose another {what}) and retry")


def _names_place(exc: OSError, final: Path) -> bool:
    """Whether the error names ``final``, its folder, or a staging entry of ``final`` (or a path
    inside one)."""
    for name in (exc.filename, exc.filename2):
        if not isinstance(name, (str, bytes, os.PathLike)):
            continue
        path = Path(os.fsdecode(name))
        if path == final.parent:
            return True
        if path.is_relative_to(final.parent) and path != final.parent:
            first = path.relative_to(final.parent).parts[0]
            if first == final.name or staged_name(first) == final.name:
                return True
    return False


def _nearly_full(folder: Path) -> bool:
    try:
        found = os.statvfs(folder)
    except OSError:
        return False
    return found.f_bavail * found.f_frsize < LOW_SPACE


@contextlib.contextmanager
def scratch_beside(final: Path) -> Iterator[Path]:
    """A scratch folder under ``final``'s staging name (``.NAME.partial-PID``), its owner's lock
    held while the block runs, removed after: a process killed meanwhile leaves it to
    :func:`clean_stale` of ``final``, which the next run of the command calls and reports (`kdkit
    lock`'s resolver works in one)."""
    # Cleaned here only when our own name is taken (by a process gone that had our PID, in another
    # container).
    with staged_beside(final, clean=os.path.lexists(staging_for(final))) as staged:
        yield staged.path
