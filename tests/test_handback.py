"""Issue 31 §6: a run started by root leaves its run folders readable by everyone (kdkit.machine.handback), their
owner unchanged, and says how to undo it; a run not started by root is left as it is."""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import sys
from pathlib import Path

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
    (line,) = readable_by_all([folder], started_by_root=True)
    modes = {p.relative_to(folder).as_posix(): stat.S_IMODE(p.stat().st_mode) for p in folder.rglob("*")
             if not p.is_symlink()}
    assert modes == {"summary.json": 0o644, "outputs": 0o755, "outputs/a.txt": 0o644}
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755
    if link_target is not None:
        assert Path("/etc/hostname").lstat().st_mode == link_target  # a link's target is never changed
    undo = line.split("undo with: ", 1)[1]
    subprocess.run(["sh", "-e", "-c", undo], check=True, timeout=60)  # as printed
    assert stat.S_IMODE((folder / "summary.json").stat().st_mode) == 0o600
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_a_run_not_started_by_root_is_left_as_it_is(tmp_path: Path) -> None:
    folder = _tree(tmp_path)
    assert readable_by_all([folder], started_by_root=False) == []
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
    deep = folder / ("d/" * 300)  # deeper than the lowered limit below: os.walk recursed once per level
    deep.mkdir(parents=True)
    (deep / "leaf.txt").write_text("x")
    (deep / "leaf.txt").chmod(0o600)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(200)  # not a 1,100-deep tree: pytest's own clean-up of tmp_path recurses too
    try:
        (line,) = readable_by_all([folder], started_by_root=True)
    finally:
        sys.setrecursionlimit(limit)
    assert "made readable by everyone" in line
    assert stat.S_IMODE(outside.stat().st_mode) == 0o600 and stat.S_IMODE((folder / "hardlink").stat().st_mode) == 0o600
    if (folder / "null").exists():
        assert stat.S_IMODE((folder / "null").lstat().st_mode) == 0o600
    assert stat.S_IMODE((deep / "leaf.txt").stat().st_mode) == 0o644
