"""Places that cannot be written (issue 10 §14): `kdkit init` refuses them with exit 2 and one line,
before anything is written, and never with a traceback.

Tests run as root, where chmod stops no write, so each place is made unwritable for real:

* a read-only bind mount, in a private mount namespace (`unshare --mount`, then
  `mount -o remount,bind,ro`): the kernel answers EROFS;
* the CLI run as another user (`setpriv --reuid 65534`) over root's folders: EACCES;
* a file where a folder is expected: ENOTDIR;
* a path under /proc, where no folder can be made: ENOENT;
* a tmpfs of 48 KiB for a 100 KiB template: ENOSPC half-way.

The helpers that make them serve `kdkit sweep` and `kdkit resume-test` too
(tests/probe/measure/test_measure_refusals.py).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, invoke, tree_snapshot

KDKIT = str(REPO / ".venv" / "bin" / "kdkit")
NOBODY = 65534
READ_ONLY = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" "$1" && shift && exec "$@"'


def _works(argv: list[str]) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="module")
def namespaces() -> None:
    if not _works(["unshare", "--mount", "sh", "-c", "mount -t tmpfs none /mnt"]):
        pytest.skip("no private mount namespace here (unshare --mount needs CAP_SYS_ADMIN): "
                    "read-only mounts cannot be made")


@pytest.fixture(scope="module")
def setpriv() -> None:
    if shutil.which("setpriv") is None \
            or not _works(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}",
                                                      "--clear-groups", "true"]):
        pytest.skip("setpriv (util-linux) cannot switch user here")


def kdkit(*args: object, user: int | None = None,
          read_only: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The real CLI in a subprocess, as ``user`` and/or with ``read_only`` mounted read-only."""
    argv = [KDKIT, *map(str, args)]
    if user is not None:
        argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *argv]
    if read_only is not None:
        argv = ["unshare", "--mount", "sh", "-c", READ_ONLY, "sh", str(read_only), *argv]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300)


def one_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), done.stderr
    return lines[0]


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder every user can reach (pytest's tmp_path is root's alone), owned by root, mode 0755."""
    base = Path(tempfile.mkdtemp(prefix="kdkit-places-"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base)


# ---------------------------------------------------------------- kdkit init


def _init_message(target: Path, reason: str) -> str:
    return (f"Error: {target}: could not write the project ({reason}); nothing was left behind, "
            "free space or fix permissions (or choose another place) and retry")


@pytest.mark.parametrize("target", ["proj", "a/b/proj"])
def test_init_under_a_read_only_mount(namespaces: None, tmp_path: Path, target: str) -> None:
    before = tree_snapshot(tmp_path)
    line = one_error(kdkit("init", tmp_path / target, read_only=tmp_path))
    assert line == _init_message(tmp_path / target, "Read-only file system")
    assert tree_snapshot(tmp_path) == before and list(tmp_path.iterdir()) == []


def test_init_into_an_empty_folder_of_a_read_only_mount(namespaces: None, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    line = one_error(kdkit("init", tmp_path / "empty", read_only=tmp_path))
    assert line == _init_message(tmp_path / "empty", "Read-only file system")
    assert [p.name
            for p in tmp_path.iterdir()] == ["empty"] and list((tmp_path / "empty").iterdir()) == []


@pytest.mark.parametrize("target", ["proj", "new/deeper/proj"])
def test_init_as_a_user_who_may_not_write_there(setpriv: None, shared: Path, target: str) -> None:
    before = tree_snapshot(shared)
    line = one_error(kdkit("init", shared / target, user=NOBODY))
    assert line == _init_message(shared / target, "Permission denied")
    assert tree_snapshot(shared) == before and list(shared.iterdir()) == []


def test_init_where_a_file_stands_in_the_path(tmp_path: Path) -> None:
    (tmp_path / "notes").write_text("mine", encoding="utf-8")
    before = tree_snapshot(tmp_path)
    result = invoke("init", tmp_path / "notes" / "proj")
    assert result.exit_code == 2
    assert result.output.splitlines() == [
        _init_message(tmp_path / "notes" / "proj", "Not a directory")]
    assert tree_snapshot(tmp_path) == before


def test_init_under_proc(tmp_path: Path) -> None:
    result = invoke("init", "/proc/kdkit-nowhere/proj")
    assert result.exit_code == 2
    assert result.output.splitlines() == [
        _init_message(Path("/proc/kdkit-nowhere/proj"), "No such file or directory")]
    assert not Path("/proc/kdkit-nowhere").exists()


def test_init_on_a_full_disk_leaves_nothing(namespaces: None, tmp_path: Path) -> None:
    """A real ENOSPC half-way through the copy: a 48 KiB tmpfs for a 100 KiB template."""
    script = ('mount -t tmpfs -o size=48k tmpfs "$1" && "$2" init "$1/deep/proj"; rc=$?; '
              'find "$1" -mindepth 1 | sed "s|^|LEFT |"; exit $rc')
    done = subprocess.run(["unshare", "--mount", "sh", "-c", script, "sh", str(tmp_path), KDKIT],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.splitlines() == [
        _init_message(tmp_path / "deep" / "proj", "No space left on device")]
    assert "LEFT" not in done.stdout  # not the staging, not the parent folder init made
