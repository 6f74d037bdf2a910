"""What a hostile tester found in this round's verify-env and lock, each now one line (or a right verdict),
nothing written, nothing printed that should stay secret. Real commands, real files, the stand-in index.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kdkit.core.lockfile import LOCK_LIMIT
from tests.conftest import invoke, tree_snapshot
from tests.core.test_safe_paths import HOSTILE, PATH_KEYS, USED, _refused, set_key
from tests.localindex import Served, serve, torch_index_server
from tests.lock.test_lock_index import clean_pip, make_project
from tests.lock.test_lock_resolvers import needs_uv
from tests.tinywheels import build_wheel, lock_line, make_venv, pip_install
from tests.transfer.test_bundle_hostile import CREDENTIALS

__all__ = ["clean_pip", "torch_index_server"]
HASH = "--hash=sha256:" + "ab" * 32


def probe(*args: str | os.PathLike[str],
          cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kdkit.probe", "verify-env", *map(str, args)],
                          capture_output=True,
                          text=True, timeout=120, check=False, cwd=cwd)


@pytest.fixture(scope="module")
def alpha(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("alpha")
    wheel = build_wheel(root / "wheels", "alpha", "1.0")
    python = make_venv(root / "venv", with_pip=False)
    pip_install(python, root / "wheels", ["alpha==1.0"])
    return python, wheel


@pytest.mark.parametrize(("name", "text", "said"), [
    ("tilde.txt",
     f'alpha==1.0 ; platform_release ~= "5" {HASH}\n',
     ":1: the marker of alpha cannot be evaluated for "
     "this interpreter ("),
    ("pylock.toml",
     'lock-version = "1.0"\ncreated-by = "t"\nenvironments = ["sys_platform ~= \'linux\'"]\n'
     '[[packages]]\nname = "alpha"\nversion = "1.0"\nwheels = [{ name = '
     '"alpha-1.0-py3-none-any.whl", url = "https://x/alpha-1.0-py3-none-any.whl", hashes = { '
     f'sha256 = "{"ab" * 32}" }} }}]\n',
     ": the environment \"sys_platform ~= 'linux'\" cannot be evaluated for this interpreter ("),
    # pip: no continuation
    ("space.txt", f"alpha==1.0 \\ \n    {HASH}\n", ":1: cannot parse 'alpha==1.0 \\\\'"),
])
def test_a_lock_that_cannot_be_read_here_is_one_line(alpha: tuple[Path, Path], tmp_path: Path,
                                                     name: str, text: str,
                                                     said: str) -> None:
    python, _wheel = alpha
    lock = tmp_path / name
    lock.write_text(text, encoding="utf-8")
    done = probe("--lock", lock, "--python", python)
    assert done.returncode == 2 and done.stderr.startswith(f"Error: {lock}{said}"), done.stderr
    assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr


def test_a_version_of_5000_digits_is_a_verdict_not_a_traceback(
    alpha: tuple[Path, Path], tmp_path: Path) -> None:
    python, _wheel = alpha
    lock = tmp_path / "long.txt"
    lock.write_text(f"alpha==1.{'9' * 5000} {HASH}\n", encoding="utf-8")
    done = probe("--lock", lock, "--python", python)
    assert done.returncode == 1 and "VERSION" in done.stdout and "Traceback" not in done.stderr, done.stderr


def test_a_lock_too_large_to_be_one_is_not_read(tmp_path: Path) -> None:
    lock = tmp_path / "huge.txt"
    with lock.open("wb") as handle:
        handle.truncate(LOCK_LIMIT + 1)  # sparse: nothing to write
    done = probe("--lock", lock)
    assert done.returncode == 2 and done.stderr == (f"Error: {lock}: {LOCK_LIMIT + 1} bytes, too "
                                                    f"large to be a lock (at most {LOCK_LIMIT}); "
                                                    "give the lock\n")


def test_a_reader_that_leaves_early_gets_no_traceback(
    alpha: tuple[Path, Path], tmp_path: Path) -> None:
    """`kdkit verify-env ... --json | head -c 1`: the pipe closes under the writer, as click handles it."""
    python, wheel = alpha
    lock = tmp_path / "lock.txt"
    lock.write_text(lock_line("alpha", "1.0", wheel) * 1, encoding="utf-8")
    for entry in ("kdkit", "kdkit.probe"):
        line = (
            f"{sys.executable} -m {entry} verify-env --lock {lock} --python {python} --json | head "
            "-c 1")
        done = subprocess.run(["sh", "-c", line], capture_output=True, text=True,
                              timeout=120, check=False)
        assert (done.stdout, done.stderr) == ("{", ""), entry


@needs_uv
def test_a_token_in_the_users_index_never_reaches_a_lock(clean_pip: Served,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    """PIP_INDEX_URL=http://TOKEN@host/simple/ (a token as the user name, as Gemfury gives it to pip): both
    locks would carry it; nothing is written, and the token is not printed."""
    with serve(clean_pip.root) as index:
        monkeypatch.setenv("PIP_INDEX_URL",
                           index.simple.replace("http://", "http://ZkQ9wX2mRt7LpV4nB8cY@"))
        project = make_project(tmp_path / "proj", "cpu", clean_pip.torch_index("cpu"))
        before = tree_snapshot(project)
        for resolver in ("pip-tools", "uv"):
            result = invoke("lock", project, "--backend", "cpu", "--resolver", resolver)
            assert result.exit_code == 2, result.stderr
            assert "ZkQ9wX2mRt7LpV4nB8cY" not in result.output
            assert "the lock would carry a user name or token inside a URL (http://<redacted>@" in result.stderr
            assert tree_snapshot(project) == before


@needs_uv
def test_a_folder_that_refuses_the_lock_is_one_line(clean_pip: Served, tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj", "cpu", clean_pip.torch_index("cpu"))
    # where the lock goes: a folder, which no rename replaces
    (project / "requirements" / "cpu.txt").mkdir()
    result = invoke("lock", project, "--backend", "cpu", "--resolver", "uv")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.splitlines()[-1].startswith(
        f"Error: {project / 'requirements' / 'cpu.txt'}: ")


@needs_uv
def test_a_relative_kdkit_uv_is_taken_from_where_it_was_given(clean_pip: Served, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    project = make_project(tmp_path / "proj", "cpu", clean_pip.torch_index("cpu"))
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "uv").symlink_to(Path(sys.executable).parent / "uv")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KDKIT_UV", "tools/uv")
    result = invoke("lock", project, "--backend", "cpu", "--resolver", "uv")
    assert result.exit_code == 0, result.stderr


@needs_uv
def test_what_a_killed_lock_left_is_removed_by_the_next(clean_pip: Served, tmp_path: Path) -> None:
    """SIGKILL during the rename leaves the staging file beside the lock; the next lock removes it, and says so."""
    project = make_project(tmp_path / "proj", "cpu", clean_pip.torch_index("cpu"))
    # a process that no longer runs wrote it
    left = project / "requirements" / ".cpu.txt.999999.x1y2.tmp"
    left.write_text("torch==2.13.0+cpu \\\n", encoding="utf-8")
    result = invoke("lock", project, "--backend", "cpu", "--resolver", "uv")
    assert result.exit_code == 0, result.stderr
    assert not left.exists()
    assert f"Warning: removed {left} (staging left by a process that no longer runs)" in result.stderr


def test_lock_refuses_a_requirements_input_holding_a_password(project: Path) -> None:
    with (project / "requirements/base.in").open("a") as handle:
        handle.write(CREDENTIALS["requirements/base.in"])
    before = tree_snapshot(project)
    result = invoke("lock", project, "--backend", "cpu", "--torch-find-links", project)
    assert result.exit_code == 2 and "requirements/base.in:" in result.stderr
    assert "Sup3rS3cretPw" not in result.output and "https://bob:<redacted>@" in result.stderr
    assert tree_snapshot(project) == before


@pytest.mark.parametrize("name", USED)
@pytest.mark.parametrize("where", ["$.backends.cpu.lock", "$.requirements"])
def test_lock_refuses_a_config_edited_after_validate(project: Path, where: str, name: str) -> None:
    value = dict((k[1], k[2]) for k in PATH_KEYS)[where]
    set_key(project, "kdkit.json", where, HOSTILE[name](value))
    _refused(["lock", project, "--backend", "cpu"], [project], where)
