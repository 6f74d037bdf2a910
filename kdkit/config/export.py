"""Writing a bundle's packing plan (kdkit.config.files.plan_packing) into its ``project/``: from the
committed tree through ``git archive`` in a git checkout, else copied from the project's folder,
each file read without following a link and written as a new file."""

from __future__ import annotations

import os
import shutil
import tarfile
from pathlib import Path
from typing import Any

from kdkit.config.files import Packing
from kdkit.core import proc
from kdkit.core.errors import BadInput, KdkitError
from kdkit.core.git import git_output


def export_git(root: Path, prefix: str, dest: Path, packing: Packing,
               essentials: list[str]) -> None:
    """Write the planned files of the committed tree of ``root`` (HEAD) into ``dest``.

    ``git archive`` honours ``export-ignore``: a planned file it leaves out is named in
    ``packing.left_out`` (BadInput when the rented machine needs it).
    """
    archive = dest.parent / ".project.tar"
    # From the repository's top: in a sub-folder, git archive would look for the sub-folder inside
    # HEAD:prefix.
    top = (git_output(root, "rev-parse", "--show-toplevel") or str(root)).strip()
    done = proc.run(
        ["git", "-C", top, "archive", "--format=tar", "-o", str(archive), f"HEAD:{prefix}"])
    if not done.ok:
        raise KdkitError(f"{root}: git archive failed ({done.first_error_line()})")
    with tarfile.open(archive) as tar:
        members = {m.name: m for m in tar.getmembers() if m.isfile()}
        for rel, src in list(packing.files.items()):
            member = members.get(src)
            if member is None:
                if rel in essentials:
                    raise BadInput(f"{rel}: left out by `git archive` (export-ignore in "
                                   ".gitattributes?); the bundle must carry it")
                del packing.files[rel]
                packing.left_out.append(
                    {"file": rel, "why": "export-ignore: git archive leaves it out"})
                continue
            handle = tar.extractfile(member)
            assert handle is not None  # a regular member always has content
            _write_new(dest / rel, handle)
    archive.unlink()


def copy_files(root: Path, dest: Path, packing: Packing) -> None:
    """Copy the planned files of the project (no git) into ``dest``, each read without following a
    link."""
    for rel, src in packing.files.items():
        fd = os.open(root / src, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as handle:
            _write_new(dest / rel, handle)


def _write_new(path: Path, handle: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("xb") as out:
        shutil.copyfileobj(handle, out, 1 << 20)
