"""`kdkit wheelhouse`: every file the lock names, downloaded on the host and hash-checked.

With the wheelhouse, ``kdkit build --wheelhouse DIR`` installs with ``--no-index``
and the build needs no network at all: the image can be rebuilt on a machine
that reaches no index, and a private index or an intercepting proxy is dealt
with once, here, by pip's own configuration (index-url, cert, find-links,
proxy variables), which ``pip download`` honours as ``pip install`` would.
:func:`wheelhouse_files` picks the files of a wheelhouse that such a build sends.

The files land in a staging folder first, ``.OUT.partial-PID`` beside ``--out``
(:mod:`kdkit.core.staging`), and move into ``--out`` only once pip has finished and
each one's sha256 is among the lock's hashes: an interrupted download leaves
``--out`` as it was, and the staging a killed run left is removed by the next
run to the same ``--out`` (listed in ``removed_staging``).
"""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kdkit.config.project import Project, load_project
from kdkit.core import proc
from kdkit.core.errors import BadInput, KdkitError
from kdkit.core.jsonio import sha256_file
from kdkit.core.lockfile import Lock, normalize_name, parse_lock
from kdkit.core.staging import staged_beside

if TYPE_CHECKING:
    from typing import TypedDict

    class WheelFile(TypedDict):
        """One file of the wheelhouse: its name and size in bytes."""

        name: str
        size: int

    class WheelhouseReport(TypedDict):
        """What `kdkit wheelhouse --json` prints (Wheelhouse.as_dict)."""

        backend: str
        lock: str
        folder: str
        files: list[WheelFile]
        bytes: int
        removed_staging: list[str]

# Every kdkit image is a Linux x86_64 container; on another host, pip is told so.
PLATFORMS = ("manylinux_2_28_x86_64",
             "manylinux_2_17_x86_64", "manylinux2014_x86_64", "linux_x86_64")
DOWNLOAD_TIMEOUT_S = 3 * 3600


@dataclass(frozen=True)
class Wheelhouse:
    """What ``kdkit wheelhouse`` left in its folder."""

    backend: str
    lock: Path
    folder: Path
    files: list[tuple[str, int]]  # (file name, size in bytes), one per locked pin
    # staging a killed run had left beside the folder
    removed: list[Path] = field(default_factory=list)

    def as_dict(self) -> WheelhouseReport:
        return {"backend": self.backend, "lock": str(self.lock), "folder": str(self.folder),
                "files": [{"name": n, "size": s} for n, s in self.files],
                "bytes": sum(s for _n, s in self.files),
                "removed_staging": [str(p) for p in self.removed]}


def default_folder(project: Project, backend: str) -> Path:
    return project.root / "wheelhouse" / backend


def target_arguments(python: str) -> list[str]:
    """pip's target options when this host is not the image's platform (Linux x86_64,
    ``python``)."""
    host_python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if sys.platform == "linux" and platform.machine() == "x86_64" and host_python == python:
        return []
    args = ["--only-binary=:all:", "--implementation", "cp", "--python-version", python]
    for tag in PLATFORMS:
        args += ["--platform", tag]
    return args


def download_arguments(lock: Path, dest: Path, known: Path, python: str) -> list[str]:
    """``pip download`` of exactly the lock: hashes required, no resolver, files already in
    ``known`` reused."""
    args = [sys.executable, "-m", "pip", "download", "--require-hashes", "--no-deps",
            "--progress-bar", "off",
            "--dest", str(dest), "-r", str(lock)]
    if known.is_dir():
        args += ["--find-links", str(known)]
    return args + target_arguments(python)


def _accept(staging: Path, out: Path, hashes: dict[str, str]) -> list[tuple[str, int]]:
    """Move each downloaded file whose sha256 the lock names into ``out``; refuse any other."""
    files = []
    for path in sorted(staging.iterdir()):
        if sha256_file(path) not in hashes:
            raise KdkitError(f"{path.name}: downloaded but its sha256 is not in the lock; nothing "
                             f"was added to {out}; check pip's configuration and re-run `kdkit "
                             "lock`")
    out.mkdir(parents=True, exist_ok=True)
    for path in sorted(staging.iterdir()):
        size = path.stat().st_size
        os.replace(path, out / path.name)
        files.append((path.name, size))
    return files


def download_wheelhouse(project_dir: Path | None, backend: str | None = None,
                        out: Path | None = None) -> Wheelhouse:
    """Download every locked file for ``backend`` into ``out`` (default
    ``wheelhouse/<backend>``)."""
    from kdkit.lock.locked import read_locked

    project = load_project(project_dir)
    chosen = project.backend(backend)
    read = read_locked(project, chosen).requirements  # read once: checked fresh, parsed
    lock, hashes = read.path, locked_hashes(read.lock)
    folder = (out or default_folder(project, chosen.name)).resolve()
    folder.parent.mkdir(parents=True, exist_ok=True)
    # never published: the files move out of it, and it is removed
    with staged_beside(folder) as staged:
        done = proc.run(
            download_arguments(lock, staged.path, folder, project.python),
            timeout=(DOWNLOAD_TIMEOUT_S))
        if not done.ok:
            raise KdkitError(f"{lock}: pip download failed: {done.first_error_line()}; check pip's "
                             "configuration (`pip config list`) and the network, then retry")
        files = _accept(staged.path, folder, hashes)
    return Wheelhouse(chosen.name, lock, folder, files, staged.removed)


def locked_hashes(lock: Lock) -> dict[str, str]:
    """Each sha256 (hex, lower case) the lock names -> the key of its pin."""
    return {h.split(":", 1)[1].lower(): pin.key for pin in lock.every_pin() for h in pin.hashes}


def wheelhouse_files(wheelhouse: Path, lock_path: Path | Lock) -> list[Path]:
    """The files of ``wheelhouse`` whose sha256 the lock names, one per locked hash (every candidate
    of a name pinned under several markers keeps its own); every unconditional pin must have one."""
    # `kdkit build` parsed it once
    lock = lock_path if isinstance(lock_path, Lock) else parse_lock(lock_path)
    if not wheelhouse.is_dir():
        raise BadInput(
            f"--wheelhouse {wheelhouse}: not a folder; create it with "
            f"{_fill_line(wheelhouse, lock)}")
    wanted = locked_hashes(lock)
    prefixes = tuple(f"{key}-" for key in lock.candidates)
    chosen: dict[str, Path] = {}  # sha256 -> the first file with it
    for path in sorted(wheelhouse.iterdir()):
        if path.is_file() and normalize_name(path.name).startswith(prefixes):
            digest = sha256_file(path)
            if digest in wanted:
                chosen.setdefault(digest, path)
    missing = [pin for pin in lock.every_pin() if pin.marker is None
               and not any(h.split(":", 1)[1].lower() in chosen for h in pin.hashes)]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise BadInput(f"--wheelhouse {wheelhouse}: no file with a locked hash for "
                       f"{missing[0].name}=={missing[0].version}{more}; run "
                       f"{_fill_line(wheelhouse, lock)}")
    return sorted(chosen.values())


def wheelhouse_command(root: Path, backend: str, out: Path | None = None) -> str:
    """The `kdkit wheelhouse` command for ``backend`` of the project at ``root`` (into ``out``), as
    printed: it works from any folder."""
    import shlex

    into = f" --out {shlex.quote(str(out))}" if out is not None else ""
    return f"kdkit wheelhouse {shlex.quote(str(root))} --backend {shlex.quote(backend)}{into}"


def offline_build(root: Path, backend: str) -> str:
    """How to build ``backend``'s image of the project at ``root`` from a wheelhouse, in commands
    that work as printed (kdkit wheelhouse names the project in its "Next:" build line)."""
    return f"`{wheelhouse_command(root, backend)}`, then the `kdkit build` line it prints"


def _fill_line(wheelhouse: Path, lock: Lock) -> str:
    """The command that fills ``wheelhouse`` for ``lock`` (``P/requirements/B.txt`` or its pylock),
    as printed."""
    path = Path(lock.path)
    backend = path.stem.removeprefix("pylock.")
    return f"`{wheelhouse_command(path.parent.parent, backend, wheelhouse)}`"
