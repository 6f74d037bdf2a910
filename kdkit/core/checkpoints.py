"""Checkpoint folders: written whole or not at all, listed with their hashes, and the newest
complete one found.

A checkpoint is a folder ``checkpoints/step-%08d`` of a training run folder (the Hugging Face
Trainer's file names where they fit: model.pt or model.safetensors, optimizer.pt, scheduler.pt,
scaler.pt, rng_state.pth, trainer_state.json). It is staged beside its final name as
``.step-%08d.partial-PID`` under its owner's lock (kdkit.core.staging.staged_folder); when the
writer is done every regular file is hashed and fsynced, ``SHA256SUMS`` (kdkit.core.checksums) is
written and fsynced, the folder is renamed to its final name by a rename that never replaces
(kdkit.core.noreplace), and its parent is fsynced.

A folder is *complete* when its SHA256SUMS parses, every file it lists is there with that hash, and
it holds no file it does not list. A staging folder, a folder without SHA256SUMS, or one whose files
do not verify is never chosen to resume from.

Standard library only (the loop's helper, kdkit.core.trainapi, loads it at its first save).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

from kdkit.core.checksums import SUMS, write_digests
from kdkit.core.errors import KdkitError
from kdkit.core.staging import staged_folder
from kdkit.core.stalestaging import clean_stale_in

NAME = re.compile(r"step-(?P<step>[0-9]{8,})\Z")
CHUNK = 1 << 20


class Published:
    """A checkpoint being written: ``path`` the staging folder; ``files`` ({name: sha256}) once
    published."""

    __slots__ = ("files", "path")

    def __init__(self, path: Path) -> None:
        self.path, self.files = path, dict[str, str]()


def fsync_path(path: Path) -> None:
    """fsync a file or a folder (a folder's fsync makes the names in it durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _hash_synced(path: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        while chunk := os.read(fd, CHUNK):
            digest.update(chunk)
        os.fsync(fd)
    finally:
        os.close(fd)
    return digest.hexdigest()


def _files(folder: Path) -> Iterator[tuple[str, Path]]:
    """Every file under ``folder`` as (relative POSIX name, path); a link or other non-file is
    refused."""
    for path in sorted(folder.rglob("*")):
        name = path.relative_to(folder).as_posix()
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            raise KdkitError(
                f"{path}: a checkpoint holds regular files and folders only (not a link or a "
                "device)")
        if path.is_file() and name != SUMS:
            yield name, path


def seal(folder: Path) -> dict[str, str]:
    """Hash and fsync every file of ``folder``, write its SHA256SUMS and fsync it and the folders;
    the digests."""
    digests = {name: _hash_synced(path) for name, path in _files(folder)}
    write_digests(folder, digests)
    for sub in sorted({(folder / name).parent for name in digests} | {folder}, reverse=True):
        fsync_path(sub)
    return digests


@contextlib.contextmanager
def publish_checkpoint(parent: Path, name: str) -> Iterator[Published]:
    """Stage ``parent/name``, seal it when the block ends well and publish it (never replacing); on
    an exception the staging is removed and nothing is published."""
    parent.mkdir(parents=True, exist_ok=True)
    with staged_folder(parent / name, "checkpoint") as staged:
        result = Published(staged.path)
        yield result
        result.files = seal(staged.path)
    fsync_path(parent)


def step_of(folder: Path) -> int | None:
    match = NAME.match(folder.name)
    return int(match["step"]) if match else None


def listed(folder: Path) -> dict[str, str] | None:
    """The checkpoint's SHA256SUMS as {name: sha256}, or None when it has none or it is damaged."""
    from kdkit.core.checksums import read_sums

    try:
        return read_sums(folder, "checkpoint", "not a complete checkpoint")
    except KdkitError:
        return None


def missing_files(folder: Path) -> list[str]:
    """The files ``folder``'s SHA256SUMS lists that are not there (a cheap check: no hashing);
    SHA256SUMS itself when it is missing or damaged."""
    sums = listed(folder)
    if sums is None:
        return [SUMS]
    return [name for name in sums if not (folder / name).is_file()]


def problem(folder: Path) -> str | None:
    """Why ``folder`` is not a complete checkpoint, or None: SHA256SUMS missing or damaged, a listed
    file missing or changed, a file it does not list."""
    sums = listed(folder)
    if sums is None:
        return f"{folder.name}: {SUMS} missing or damaged"
    try:
        found = dict(_files(folder))
    except (KdkitError, OSError) as exc:
        return f"{folder.name}: {exc}"
    for name, digest in sums.items():
        if name not in found:
            return f"{folder.name}: {name} is listed in {SUMS} but missing"
        if _hash_synced(found[name]) != digest:
            return f"{folder.name}: {name} does not match its {SUMS} line"
    extra = sorted(set(found) - set(sums))
    return f"{folder.name}: {extra[0]} is not listed in {SUMS}" if extra else None


def checkpoint_folders(parent: Path) -> list[tuple[int, Path]]:
    """The folders named ``step-%08d`` under ``parent`` (complete or not), by step, oldest first."""
    try:
        names = os.listdir(parent)
    except OSError:
        return []
    found = [(step, parent / name) for name in names if (step := step_of(Path(name))) is not None]
    return sorted(item for item in found if item[1].is_dir() and not item[1].is_symlink())


def newest_complete(parent: Path) -> tuple[int, Path, list[str]] | None:
    """The newest complete checkpoint under ``parent`` as (step, folder, why each newer one was
    passed over)."""
    passed: list[str] = []
    for step, folder in reversed(checkpoint_folders(parent)):
        why = problem(folder)
        if why is None:
            return step, folder, passed
        passed.append(why)
    return None


def clean_partials(parent: Path) -> list[Path]:
    """Remove the staging folders of checkpoints whose writers are gone; what was removed."""
    return clean_stale_in(parent, folders_only=True)
