"""The file output kind's artifacts: each item's files, staged by the app, checked, hashed and kept
whole.

For a run whose ``output`` is ``{"kind": "file"}`` each item handed to the app carries
``"out_dir"``: a fresh, empty folder ``<run>/outputs.staging/<name>/`` made by the harness before
every call of the app that holds the item. ``<name>`` is the item's ID when it is a safe ID
(kdkit.core.projectfiles.is_safe_id: a file name on every file system; every input's ID is one
today, a manifest's or a JSONL corpus's), else ``_`` and the SHA-256 of the ID in hex (a guard for
any other ID: a safe ID never starts with ``_``, so the two never meet).

The app writes its artifact(s) there and answers ``{"id", "output": value}`` (value: null or any
JSON data, kept as the record's ``output``) or ``{"id", "error": reason}``. On acceptance
(:func:`inspect`) the folder must hold at least one regular file (an empty ``out_dir`` is that
item's rejection), nothing but regular files and folders (a symbolic link, a FIFO, a device is that
item's rejection: it could lead out of ``out_dir``), and, where the config declares ``max_bytes``,
at most that many bytes in all. Every file is hashed and fsynced; the record keeps ``{"folder":
"outputs/<name>", "files": {"relative/path": sha256}}``. The run folder's writer
(kdkit.core.runresults.RunFolder.append) then renames the folder into ``<run>/outputs/<name>/`` and
fsyncs ``outputs/`` BEFORE the batch's results lines are written: an artifact is durable before the
line naming it.

On resume the staging folder goes, and every ``outputs/<name>`` no complete results line names (a
kill between the rename and the line) is removed: the item is redone, nothing is kept twice
(:func:`cut_back`). SHA256SUMS lists each file as ``outputs/<name>/<relative path>``. Standard
library only.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.core import vectorfile
from kdkit.core.checksums import SUMS, safe_name
from kdkit.core.errors import CheckFailed
from kdkit.core.projectfiles import is_safe_id
from kdkit.core.resultlines import stream_records

if TYPE_CHECKING:
    from collections.abc import Mapping

OUTPUTS = "outputs"  # <run>/outputs/<name>/...: the accepted items' files
# <run>/outputs.staging/<name>/: each item's out_dir while the app works
STAGING = "outputs.staging"
# an accepted record's keys: "outputs/<name>", {relative path: sha256}
FOLDER, FILES = "folder", "files"
MAX_FILES = 10000  # files of one item's out_dir
CHUNK = 1 << 20


def folder_name(ident: str) -> str:
    """The item's folder under outputs/ and outputs.staging/: its ID when safe, else ``_<sha256 of
    the ID>``."""
    return ident if is_safe_id(ident) else "_" + hashlib.sha256(
        ident.encode("utf-8", "surrogatepass")).hexdigest()


def stage(run: Path, idents: Iterable[str]) -> dict[str, str]:
    """A fresh, empty staging folder for each ID (whatever an earlier call left there removed
    first): {ID: absolute path of its out_dir}."""
    root = run / STAGING
    root.mkdir(exist_ok=True)
    made = {}
    for ident in idents:
        path = root / folder_name(ident)
        _remove(path)
        path.mkdir()
        made[ident] = str(path.absolute())
    return made


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


def inspect(run: Path, ident: str, max_bytes: int | None) -> dict[str, Any] | str:
    """The accepted record's ``folder`` and ``files`` for the item's staged out_dir (each file
    hashed and fsynced), or the reason the item is rejected."""
    name = folder_name(ident)
    top = run / STAGING / name
    if top.is_symlink() or not top.is_dir():
        return (
            "its out_dir is gone or was replaced (not a folder the harness made); nothing can be "
            "kept")
    files: dict[str, str] = {}
    total = 0
    for folder, dirs, names in os.walk(top):
        for entry in sorted(dirs + names):
            path = Path(folder) / entry
            relative = path.relative_to(top).as_posix()
            mode = os.lstat(path).st_mode
            if stat.S_ISDIR(mode):
                continue
            if stat.S_ISLNK(mode):
                return (
                    f"out_dir holds a symbolic link {relative!a}; write files, never links (a link "
                    "leads out)")
            if not stat.S_ISREG(mode):
                return f"out_dir holds {relative!a}, which is not a regular file"
            if not _plain_name(relative):
                return (f"out_dir holds a file named {relative!a}; use names without control "
                        "characters, backslashes or undecodable bytes (SHA256SUMS lists every file "
                        "by name)")
            if len(files) >= MAX_FILES:
                return f"out_dir holds more than {MAX_FILES} files"
            digest, size = _hash_synced(path)
            total += size
            if max_bytes is not None and total > max_bytes:
                return f"out_dir holds more than max_bytes {max_bytes} bytes"
            files[relative] = digest
    if not files:
        return "the app wrote no file into its out_dir (an empty out_dir is a rejection)"
    return {FOLDER: f"{OUTPUTS}/{name}", FILES: dict(sorted(files.items()))}


def _plain_name(relative: str) -> bool:
    try:
        relative.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return safe_name(relative)


def _hash_synced(path: Path) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        while block := os.read(fd, CHUNK):
            digest.update(block)
            size += len(block)
        os.fsync(fd)
    finally:
        os.close(fd)
    return digest.hexdigest(), size


def keep(run: Path, records: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Move each accepted record's staged folder into outputs/ (a rename), then fsync outputs/: what
    the run folder's writer does before the batch's lines. Returns the files kept, {name in
    SHA256SUMS: sha256}."""
    moved = [record for record in records if record.get("outcome") == "accepted"
             and FOLDER in record]
    if not moved:
        return {}
    (run / OUTPUTS).mkdir(exist_ok=True)
    kept: dict[str, str] = {}
    for record in moved:
        name = record[FOLDER].split("/", 1)[1]
        target = run / OUTPUTS / name
        # never expected: an ID is answered once; a stale copy never stands for this one
        _remove(target)
        os.rename(run / STAGING / name, target)
        kept.update({f"{record[FOLDER]}/{rel}": digest for rel, digest in record[FILES].items()})
    for folder in (run / OUTPUTS, run / STAGING):
        _fsync_dir(folder)
    return kept


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def named(records: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """The files complete results lines name, {name in SHA256SUMS: sha256}, by folder name order."""
    listed: dict[str, str] = {}
    for record in records:
        folder, files = record.get(FOLDER), record.get(FILES)
        if record.get("outcome") == "accepted" and isinstance(folder, str) \
                and isinstance(files, dict):
            listed.update({f"{folder}/{rel}": str(digest) for rel, digest in files.items()})
    return listed


def cut_back(run: Path, records: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """A resume: the staging folder removed, every folder outputs/<name> no complete line names
    removed (anything else there is left, for integrity checks to name: the harness puts only
    folders there). Returns the files the lines name ({name in SHA256SUMS: sha256}, what the harness
    vouches for from now on)."""
    listed = named(records)
    _remove(run / STAGING)
    folders = {name.split("/")[1] for name in listed}
    top = run / OUTPUTS
    if top.is_dir() and not top.is_symlink():
        # a folder renamed before a kill cut its line; a file there is no rename's
        for entry in os.scandir(top):
            if entry.name not in folders and entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
        _fsync_dir(top)
    return listed


def discard(run: Path, ident: str) -> None:
    """An item not accepted: its staging folder goes (what the app wrote there is not part of the
    run)."""
    _remove(run / STAGING / folder_name(ident))


def staging_strays(run: Path, in_flight: Iterable[str]) -> list[str]:
    """At close, before the staging folder goes: every entry of it that is not the folder of an item
    in flight (``in_flight``: the folder names the harness staged for the batch not yet judged),
    each a problem of the run: the app wrote it outside its item's out_dir (``out_dir/../x``), and
    it is never kept."""
    top = run / STAGING
    if top.is_symlink() or not top.is_dir():
        return ([f"{STAGING}: not the folder the harness made; the run cannot pass"]
                if top.is_symlink() else [])
    staged = set(in_flight)
    with os.scandir(top) as entries:
        found = sorted(entry.name for entry in entries
                       if not (entry.name in staged and entry.is_dir(follow_symlinks=False)))
    return [f"{STAGING}/{name}: written outside its item's out_dir during this session; not part "
            "of the run: the run cannot pass" for name in found]


def close_staging(run: Path) -> None:
    """At close: the staging folder goes (items not accepted leave theirs)."""
    _remove(run / STAGING)


def unvouched(run: Path, vouched: Iterable[str]) -> list[str]:
    """Entries under outputs/ the harness did not keep (an extra file, a link), each named with what
    it is."""
    top = run / OUTPUTS
    if top.is_symlink():
        return [f"{OUTPUTS} (a symbolic link)"]
    if not top.is_dir():
        return []
    known = set(vouched)
    found = []
    for folder, dirs, names in os.walk(top):
        for entry in sorted(dirs + names):
            path = Path(folder) / entry
            relative = path.relative_to(run).as_posix()
            if path.is_symlink():
                found.append(f"{relative} (a symbolic link)")
            elif not path.is_dir() and relative not in known:
                found.append(f"{relative} ({'a file' if path.is_file() else 'not a regular file'})")
    return found


def gather_outputs(sources: Iterable[tuple[str, Path, dict[str, str]]],
                   target: Path) -> tuple[dict[str, str], list[str]]:
    """The workers' outputs/ joined into ``target/outputs/``: each (worker's name, its verified
    folder, its SHA256SUMS) gives the files it lists under outputs/, copied, fsynced and hashed
    again. Returns the files ({name in SHA256SUMS: sha256}) and the problems: an item's folder in
    two workers (kept from the first), a copy that differs from its worker's checksum."""
    digests: dict[str, str] = {}
    owner: dict[str, str] = {}
    problems = []
    for worker, folder, sums in sources:
        for name, digest in sorted(sums.items()):
            parts = name.split("/")
            if parts[0] != OUTPUTS or len(parts) < 3:
                continue
            first = owner.setdefault(parts[1], worker)
            if first != worker:
                problems.append(f"{OUTPUTS}/{parts[1]}: kept by both {first} and {worker}; an "
                                "item's files belong to one worker (its ID answered twice?)")
                continue
            copy = target / name
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(folder / name, copy, follow_symlinks=False)
            copied, _size = _hash_synced(copy)
            if copied != digest:
                problems.append(
                    f"{folder / name}: its copy's SHA-256 differs from {worker}'s checksum; gather "
                    "again")
            digests[name] = copied
    return digests, list(dict.fromkeys(problems))


def kept_problems(folder: Path, sums: dict[str, str], results: Path, file_kind: bool) -> list[str]:
    """A closed pilot run folder: SHA256SUMS's lines under outputs/ are exactly the files its
    accepted records name, with the digests the records give (each record's ``files``,
    :func:`named`); SHA256SUMS already covers every file on the disk. Nothing to check unless the
    run is of the file kind or holds outputs/ or its lines."""
    listed = {name: digest for name, digest in sums.items() if name.startswith(f"{OUTPUTS}/")}
    if not (file_kind or listed or os.path.lexists(folder / OUTPUTS)):
        return []
    try:
        kept = named(stream_records(results))
    except (OSError, CheckFailed) as exc:
        return [f"{results}: cannot be read back ({exc}); the files under {OUTPUTS}/ cannot be "
                "checked"]
    problems = [f"{folder / name}: {results.name} names SHA-256 {digest[:12]}... for it, but "
                f"{SUMS} "
                + (f"says {listed[name][:12]}..." if name in listed else "does not list it")
                for name, digest in kept.items() if listed.get(name) != digest]
    return problems + [f"{folder / name}: named by no accepted record of {results.name} (not a "
                       "file the run kept)"
                       for name in sorted(listed) if name not in kept]


def count_problems(folder: Path, rows: Any, items: Any, summary: Path) -> list[str]:
    """A gathering's summary (``summary``) against what it holds: its ``rows`` those of
    vectors.npy's header, its ``items`` the item folders under outputs/ (kdkit.probe.pilot.gathering
    writes both)."""
    problems = []
    vectors = folder / vectorfile.VECTORS
    if rows is not None or vectors.exists():
        try:
            with vectors.open("rb") as handle:
                held: int | str = vectorfile.read_header(handle.read(vectorfile.HEADER), vectors)[0]
        except (OSError, CheckFailed) as exc:
            held = f"none readable ({exc})"
        if held != rows:
            problems.append(
                f"{summary}: says {rows!r} vector rows, but {vectors.name} holds {held}")
    if items is not None or (folder / OUTPUTS).exists():
        top = folder / OUTPUTS
        held = sum(1 for entry in os.scandir(top)
                   if entry.is_dir(follow_symlinks=False)) if top.is_dir() else 0
        if held != items:
            problems.append(
                f"{summary}: says {items!r} items' output folders, but {OUTPUTS}/ holds {held}")
    return problems
