"""Shared fixtures: an isolated HOME, plain output, scaffolded projects, the Docker gate."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from kdkit.cli import cli

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.delenv("KDKIT_DEBUG", raising=False)


def invoke(*args: str | os.PathLike[str], input: str | None = None) -> Result:
    """Run the CLI in-process; exceptions other than exits propagate (catch_exceptions=False)."""
    runner = CliRunner()
    return runner.invoke(cli, [os.fspath(a) for a in args], input=input, catch_exceptions=False)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A freshly scaffolded project (cpu backend) in a temporary folder."""
    from kdkit.scaffold import init_project

    return init_project(tmp_path / "proj", name="proj", backend="cpu")


def tree_snapshot(root: Path) -> dict[str, bytes]:
    """Every file below root with its bytes: compare before/after to prove nothing was written."""
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


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
        message = f"no Docker engine reachable ({reason}); run `make engine` to install and start one"
        if os.environ.get("KDKIT_REQUIRE_DOCKER") == "1":
            pytest.fail(f"KDKIT_REQUIRE_DOCKER=1 but {message}", pytrace=False)
        sys.stderr.write(f"\nSKIPPING DOCKER TESTS: {message}\n")
        pytest.skip(message)
    yield


def copy_tree(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest)
    return dest
