"""The files that travel into an image and the tar they travel in.

The build context is written as a tar of exactly the files the Dockerfile copies (never the whole
project folder), with normalized owners, modes and times: two checkouts of the same sources give
the same context, so the builder's cache holds across machines and a source-only change re-runs
only the source layer. Of the project, kdkit.json, config/ and src/ travel; a file named like a
secret never does, and a link leading outside the project is refused.
"""

from __future__ import annotations

import io
import os
import re
import tarfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from kdkit.core import layout
from kdkit.core.credentials import refuse_credentials_in
from kdkit.core.errors import BadInput
from kdkit.core.projectfiles import real_inside
from kdkit.core.secretnames import secret_file

# /opt/kdkit/bin/kdkit: kdkit's in-container commands (diagnose, verify-env, pilot, copy-out),
# without click. A Python script run by the venv's interpreter, not `sh` + `python -m kdkit.probe`:
# each command's start-up is felt on every call (verify-env's goal is uv's time:
# bench/bench_verify_env.py), and a shell and runpy were a fifth of it. The probe goes first on
# sys.path, and into PYTHONPATH for the programs a command starts, as the shell line did; `exec
# kdkit pilot` still leaves Python as the process (PID 1 in the CMD).
SHIM = """#!/opt/kdkit/venv/bin/python
import os
import sys

LIB = "/opt/kdkit/lib"
os.environ["PYTHONPATH"] = LIB + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")
sys.path[0] = LIB  # in place of the folder of this script, which holds nothing to import
from kdkit.probe.entry import main  # noqa: E402

sys.exit(main())
"""  # noqa: E501 (a script, as run)
PROJECT_FOLDERS = ("config", "src")
SKIPPED = re.compile(r"(^|/)(__pycache__|\.ipynb_checkpoints)(/|$)|\.py[co]$|(^|/)\.DS_Store$")


def project_files(root: Path) -> tuple[list[tuple[str, bytes]], list[str]]:
    """(the project files an image carries, each read once into its bytes; the secret-shaped ones
    left out).

    kdkit.json, config/ and src/; a file named like a secret (kdkit.core.secretnames.secret_file:
    .env*, keys, .netrc...) never goes into an image, and a link leading outside the project is
    refused (projectfiles.real_inside), as for a bundle. The bytes checked for credentials are the
    bytes the build context carries: a file is never read twice.
    """
    files, left_out = [("project/kdkit.json", _read(root / "kdkit.json", "kdkit.json"))], []
    for folder in PROJECT_FOLDERS:
        base = root / folder
        for path in sorted(base.rglob("*")) if base.is_dir() else []:
            rel = path.relative_to(root).as_posix()
            if SKIPPED.search(rel) or not path.is_file():
                continue
            if secret_file(rel) is not None:
                left_out.append(rel)
                continue
            if real_inside(root, path) is None:
                raise BadInput(f"{path}: leads to {os.path.realpath(path)}, outside the project (a "
                               "symbolic link); an image carries only the project's own files: "
                               "copy it in or remove the link")
            data = _read(path, rel)
            refuse_credentials_in(path, rel, data)
            files.append((f"project/{rel}", data))
    return files, left_out


def _read(path: Path, rel: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise BadInput(
            f"{path}: cannot read {rel} ({exc.strerror or exc}); check the file") from None


def probe_files() -> Iterator[tuple[str, Path]]:
    for rel, path in layout.files():
        yield f"kdkit/lib/kdkit/{rel}", path


def _tar_info(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name.rstrip("/"))
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = 0
    if name.endswith("/"):
        info.type, info.mode = tarfile.DIRTYPE, 0o755
    else:
        info.size, info.mode = size, 0o755 if name.startswith("kdkit/bin/") else 0o644
    return info


def write_context(entries: Iterable[tuple[str, Path | bytes]], out: IO[bytes]) -> int:
    """Write the entries as a tar with normalized metadata; return the number of files."""
    count = 0
    seen: set[str] = set()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, source in entries:
            if name in seen:
                continue
            seen.add(name)
            if isinstance(source, bytes):
                tar.addfile(_tar_info(name, len(source)),
                            None if name.endswith("/") else io.BytesIO(source))
            else:
                with source.open("rb") as handle:
                    tar.addfile(_tar_info(name, source.stat().st_size), handle)
            count += not name.endswith("/")
    out.seek(0)
    return count
