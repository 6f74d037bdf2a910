"""The files of a lock's machine-local pins, carried in a bundle for its path without Docker.

A lock made with ``kdkit lock --torch-find-links DIR`` pins a torch that only the locking machine
had (the lock's header says so: ``machine-local``). No index serves it, so RUN.md's venv made from
the lock would fail on the rented host with ``No matching distribution``. `kdkit bundle --wheelhouse
DIR` (the folder `kdkit wheelhouse` fills, every locked file hash-checked) carries those pins' files
in ``local-wheels/``, and RUN.md's pip line looks there too (``--find-links``); without it, RUN.md
says plainly that the path cannot work.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.core.lockfile import Lock, machine_local, normalize_name
from kdkit.transfer.kdkitwheels import folder_files

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import TypedDict

    class LocalWheels(TypedDict):
        """bundle.json's ``local_wheels``: the machine-local wheels the bundle carries."""

        folder: str
        files: list[str]

FOLDER = "local-wheels"


def local_wheel_files(wheelhouse: Path | None, lock: Lock) -> list[Path]:
    """The files of ``wheelhouse`` that carry the lock's machine-local pins (none without either);
    BadInput naming --wheelhouse when it lacks a locked file
    (kdkit.lock.wheelhouse.wheelhouse_files)."""
    names = machine_local(lock)
    if wheelhouse is None or not names:
        return []
    # here: verify-bundle reads this module, never a wheelhouse
    from kdkit.lock.wheelhouse import wheelhouse_files

    wanted = tuple(f"{normalize_name(name.split('==', 1)[0])}-" for name in names)
    return [path for path in wheelhouse_files(wheelhouse, lock)
            if normalize_name(path.name).startswith(wanted)]


def carry(staging: Path, files: list[Path]) -> LocalWheels | None:
    """Copy ``files`` into ``staging``/local-wheels/; bundle.json's ``local_wheels`` (None when
    there are none)."""
    if not files:
        return None
    folder = staging / FOLDER
    folder.mkdir()
    for path in files:
        shutil.copyfile(path, folder / path.name)
    return {"folder": FOLDER, "files": sorted(path.name for path in files)}


def carried_files(info: Mapping[str, Any]) -> list[str] | None:
    """The files bundle.json's ``local_wheels`` says the bundle holds ([] when none), None if
    malformed."""
    return folder_files(info, "local_wheels", FOLDER)
