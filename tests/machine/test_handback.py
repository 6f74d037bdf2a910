"""Issue 31 §6: a run started by root leaves its run folders readable by everyone (kdkit.machine.handback), their
owner unchanged, and says how to undo it; a run not started by root is left as it is."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kdkit.machine.handback import readable_by_all


def _tree(root: Path) -> Path:
    folder = root / "runs" / "r1"
    (folder / "outputs").mkdir(parents=True)
    (folder / "summary.json").write_text("{}")
    (folder / "outputs" / "a.txt").write_text("a")
    for path in (folder / "summary.json", folder / "outputs" / "a.txt"):
        path.chmod(0o600)
    for path in (folder / "outputs", folder):
        path.chmod(0o700)
    (folder / "link").symlink_to("/etc/hostname")
    return folder


def test_root_run_folders_become_readable_and_the_undo_line_restores_them(tmp_path: Path) -> None:
    folder = _tree(tmp_path)
    link_target = Path("/etc/hostname").lstat().st_mode if Path("/etc/hostname").exists() else None
    (line,) = readable_by_all([folder], started_by_root=True, owner=os.geteuid())
    modes = {p.relative_to(folder).as_posix(): stat.S_IMODE(p.stat().st_mode)
             for p in folder.rglob("*")
             if not p.is_symlink()}
    assert modes == {"summary.json": 0o644, "outputs": 0o755, "outputs/a.txt": 0o644}
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755
    if link_target is not None:
        # a link's target is never changed
        assert Path("/etc/hostname").lstat().st_mode == link_target
    undo = line.split("undo with: ", 1)[1]
    subprocess.run(["sh", "-e", "-c", undo], check=True, timeout=60)  # as printed
    assert stat.S_IMODE((folder / "summary.json").stat().st_mode) == 0o600
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_a_run_not_started_by_root_is_left_as_it_is(tmp_path: Path) -> None:
    folder = _tree(tmp_path)
    assert readable_by_all([folder], started_by_root=False, owner=os.geteuid()) == []
    assert stat.S_IMODE((folder / "summary.json").stat().st_mode) == 0o600
    assert os.access(folder, os.F_OK)


def test_a_hard_link_a_device_and_a_deep_tree_are_handled(tmp_path: Path) -> None:
    """A hostile review's finds: a hard link to a file outside the run folder was made readable there too (one
    inode), a device node became readable by all, 1,100 nested folders crashed the walk (RecursionError: here a
    300-deep tree under a recursion limit of 200)."""
    folder = _tree(tmp_path)
    outside = tmp_path / "outside.txt"
    outside.write_text("private")
    outside.chmod(0o600)
    os.link(outside, folder / "hardlink")
    with contextlib.suppress(PermissionError):  # not root: no device node to try
        os.mknod(folder / "null", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    # deeper than the lowered limit below: os.walk recursed once per level
    deep = folder / ("d/" * 300)
    deep.mkdir(parents=True)
    (deep / "leaf.txt").write_text("x")
    (deep / "leaf.txt").chmod(0o600)
    limit = sys.getrecursionlimit()
    # not a 1,100-deep tree: pytest's own clean-up of tmp_path recurses too
    sys.setrecursionlimit(200)
    try:
        (line,) = readable_by_all([folder], started_by_root=True, owner=os.geteuid())
    finally:
        sys.setrecursionlimit(limit)
    assert "made readable by everyone" in line
    assert stat.S_IMODE(outside.stat().st_mode) == 0o600 and stat.S_IMODE(
        (folder / "hardlink").stat().st_mode) == 0o600
    if (folder / "null").exists():
        assert stat.S_IMODE((folder / "null").lstat().st_mode) == 0o600
    assert stat.S_IMODE((deep / "leaf.txt").stat().st_mode) == 0o644


class _Listed(list[Any]):
    def __enter__(self) -> _Listed:
        return self

    def __exit__(self, *_exc: object) -> None:
        return None


def test_a_folder_swapped_for_a_link_during_the_walk_changes_nothing_outside(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hostile review's find: the container's user (10001) swapped a folder the walk had listed for a link to a
    private folder elsewhere, and the walk followed it (scandir, chmod), making what it held readable by all.
    Now each name is opened relative to its folder, never through a link, and changed on its descriptor."""
    folder = _tree(tmp_path)
    secret = tmp_path / "secret"
    secret.mkdir(mode=0o700)
    (secret / "key").write_text("k")
    (secret / "key").chmod(0o600)
    listdir, scandir = os.listdir, os.scandir

    def swap(names: list[str]) -> None:
        if "outputs" in names and (folder / "outputs").is_dir() \
                and not (folder / "outputs").is_symlink():
            shutil.rmtree(folder / "outputs")
            (folder / "outputs").symlink_to(secret)  # after the listing, before the walk reaches it

    def listing(path: Any = ".") -> list[str]:
        names = listdir(path)
        swap(names)
        return names

    def scanning(path: Any = ".") -> Any:  # however the walk lists a folder
        with scandir(path) as entries:
            listed = _Listed(entries)
        swap([entry.name for entry in listed])
        return listed

    monkeypatch.setattr(os, "listdir", listing)
    monkeypatch.setattr(os, "scandir", scanning)
    (line,) = readable_by_all([folder], started_by_root=True, owner=os.geteuid())
    assert "made readable by everyone" in line
    assert stat.S_IMODE(secret.stat().st_mode) == 0o700 and stat.S_IMODE(
        (secret / "key").stat().st_mode) == 0o600
    assert stat.S_IMODE((folder / "summary.json").stat().st_mode) == 0o644


def test_a_run_folder_of_another_owner_is_left_as_it_is(tmp_path: Path) -> None:
    """A hostile review's find: root's `kdkit wait` on a run a user started (its files the user's, not the image
    user's) made them readable by all. Only a folder the image's user owns is handed back."""
    folder = _tree(tmp_path)
    assert readable_by_all([folder], started_by_root=True, owner=os.geteuid() + 1) == []
    assert stat.S_IMODE((folder / "summary.json").stat().st_mode) == 0o600
