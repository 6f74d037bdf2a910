"""Shared fixtures: an isolated HOME, plain output, scaffolded projects, the Docker gate."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from kdkit.cli import cli

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
# The end-to-end image (tests/image/test_images.py, tests/machine/test_workers.py): one per session, see `built`.
BASE = os.environ.get("KDKIT_TEST_BASE", "kdkit-test/debian-python:3.11")
TORCH_WHEELS = Path(os.environ.get("KDKIT_TEST_TORCH_WHEELS", "/opt/wheels"))
SYSTEM_CA = Path("/etc/ssl/certs/ca-certificates.crt")


@pytest.fixture(scope="session")
def kdkit_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """kdkit's cache for the whole session: a bundle's kdkit-wheels/ is fetched from the index once."""
    return tmp_path_factory.mktemp("kdkit-cache")


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
                  kdkit_cache: Path) -> None:
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("KDKIT_CACHE_DIR", str(kdkit_cache))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.delenv("KDKIT_DEBUG", raising=False)
    # `kdkit check` reads no index wheel unless a test serves one
    monkeypatch.setenv("KDKIT_OFFLINE", "1")
    # One thread for each torch a test starts: on a loaded 2-core VM, MKL running torch.sin on two
    # OpenMP threads returned one thread's half off by 3e-4 in about one process in a hundred
    # (docs/evidence/cpu-threaded-math.md); tests that compare two processes bit for bit do not judge
    # the machine. A test that needs threads sets its own.
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("MKL_NUM_THREADS", "1")
    # A suite run by a launcher (srun, torchrun) must not give every pilot a share; a pilot run in-process
    # under a launcher's variables may set the visible devices, which are put back after each test.
    from kdkit.probe.pilot.launchers import LAUNCHERS, LOCAL_WORKER_VAR, LOCAL_WORKERS_VAR, RUN_ID_VAR, VISIBLE

    launcher_vars = {name for launcher in LAUNCHERS for name in launcher.variables}
    for name in sorted(launcher_vars | {RUN_ID_VAR, LOCAL_WORKER_VAR, LOCAL_WORKERS_VAR, *VISIBLE}):
        # recorded: restored, or removed, after the test
        monkeypatch.setenv(name, os.environ.get(name, ""))
        if name not in VISIBLE or not os.environ[name]:
            monkeypatch.delenv(name)


def invoke(*args: str | os.PathLike[str], input: str | None = None) -> Result:
    """Run the CLI in-process; exceptions other than exits propagate (catch_exceptions=False)."""
    runner = CliRunner()
    return runner.invoke(cli, [os.fspath(a) for a in args], input=input, catch_exceptions=False)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that uses the Docker engine (through any fixture) is marked ``docker``, so `make test` can run
    the others on one worker per CPU (pytest-xdist, a whole module per worker) and these in one process after
    them: they share the session's image and its tags, and would fight for the engine's cores. It runs before
    ``-m`` selects."""
    for item in items:
        if "docker_engine" in getattr(item, "fixturenames", ()) \
                and not item.get_closest_marker("docker"):
            item.add_marker(pytest.mark.docker)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A freshly scaffolded project (cpu backend) in a temporary folder."""
    from kdkit.project.init import init_project

    return init_project(tmp_path / "proj", name="proj", backend="cpu")


def tree_snapshot(root: Path) -> dict[str, bytes]:
    """Every file below root with its bytes: compare before/after to prove nothing was written."""
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def docker_available() -> str | None:
    """None when an engine answers, else the reason it does not."""
    try:
        import docker

        client = docker.from_env(timeout=5)
        client.ping()
        return None
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[None]:
    """Skip loudly without an engine; with KDKIT_REQUIRE_DOCKER=1, fail instead."""
    reason = docker_available()
    if reason is not None:
        message = (
            f"no Docker engine reachable ({reason}); run `make engine` to install and start one")
        if os.environ.get("KDKIT_REQUIRE_DOCKER") == "1":
            pytest.fail(f"KDKIT_REQUIRE_DOCKER=1 but {message}", pytrace=False)
        sys.stderr.write(f"\nSKIPPING DOCKER TESTS: {message}\n")
        pytest.skip(message)
    yield


@pytest.fixture
def locked_copy(locked: Path, tmp_path: Path) -> Path:
    """A private copy of the session's locked project (same name and lock, so the same image) with no runs/:
    for tests that change it or run it."""
    return Path(
        shutil.copytree(locked, tmp_path / "kdkit-e2e", ignore=shutil.ignore_patterns("runs")))


def copy_tree(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest)
    return dest


# ---------------------------------------------------------------- the session's end-to-end image
# Shared by every test module that runs the image: the torch wheel is ~190 MB and CI has 2 cores.


@pytest.fixture(scope="session")
def locked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scaffolded cpu project with its lock (torch from the local wheels). Never modified by tests."""
    if not any(TORCH_WHEELS.glob("torch-*.whl")):
        pytest.skip(f"no torch wheel in {TORCH_WHEELS} (KDKIT_TEST_TORCH_WHEELS)")
    from kdkit.project.init import init_project

    root = init_project(tmp_path_factory.mktemp("e2e") / "kdkit-e2e",
                        name="kdkit-e2e", backend="cpu")
    result = invoke("lock", root, "--backend", "cpu", "--torch-find-links", TORCH_WHEELS)
    assert result.exit_code == 0, result.output
    return root


@pytest.fixture(scope="session")
def wheelhouse(locked: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheelhouse") / "cpu"
    result = invoke("wheelhouse", locked, "--out", out, "--json")
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="session")
def ca_bundle(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    """The system bundle (the proxy's CA) plus a marker line: any copy of it is findable.

    The marker is fixed, not random, so the builder's cache holds from one test session to the next.
    """
    marker = b"# kdkit-ca-marker-7f3e0c9a54b1d2e8"
    path = tmp_path_factory.mktemp("ca") / "corp-ca.pem"
    path.write_bytes(SYSTEM_CA.read_bytes() + b"\n" + marker + b"\n")
    return path, marker


@pytest.fixture(scope="session")
def built(docker_engine: None, locked: Path, wheelhouse: Path,
          ca_bundle: tuple[Path, bytes]) -> dict[str, Any]:
    """The session's image: built offline from the wheelhouse, with a CA bundle that must not leak."""
    result = invoke("build", locked, "--backend", "cpu", "--base-image", BASE, "--wheelhouse",
                    wheelhouse,
                    "--ca-bundle", ca_bundle[0], "--json")
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def wait_for_lines(path: Path, count: int, process: subprocess.Popen[bytes]) -> None:
    """Wait until ``path`` holds ``count`` lines written by ``process`` (a pilot about to be killed)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_bytes().splitlines()) >= count:
            return
        if process.poll() is not None:
            pytest.fail(f"pilot exited early: {process.communicate()}")
        time.sleep(0.05)
    process.kill()
    pytest.fail(f"{path} never reached {count} lines")


def reseal(folder: Path) -> None:
    """Rewrite a closed folder's SHA256SUMS over the files it lists, as they now are: what someone who
    edits a closed run and covers their tracks would do (kdkit itself never re-reads to seal)."""
    from kdkit.core.checksums import SUMS, write_sums

    names = [line.split("  ", 1)[1] for line in (folder / SUMS).read_text().splitlines()
             if "  " in line]
    write_sums(folder, [(name, folder / name) for name in names])


def valid_outside_git(project: Path) -> str:
    """What `kdkit validate` prints for a valid project with no warning but the one about git: a test's project
    lives in a temporary folder, outside any git checkout (kdkit.project.gitstate)."""
    from kdkit.project.gitstate import NOT_GIT, START

    return (
        f"Warning: {project}: git: {NOT_GIT}; start one there: `{START}`\n{project}: valid (1 "
        "warning(s))")


@pytest.fixture
def lock_parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The real paths of the locks parsed while a test runs: each Lock made is counted, whatever module made it
    (issue 30: a command parses its lock once)."""
    from kdkit.core import lockmodel

    made: list[str] = []
    original = lockmodel.Lock.__init__

    def counted(self: lockmodel.Lock, path: Any, *args: Any, **kwargs: Any) -> None:
        made.append(os.path.realpath(path))
        original(self, path, *args, **kwargs)

    monkeypatch.setattr(lockmodel.Lock, "__init__", counted)
    return made
