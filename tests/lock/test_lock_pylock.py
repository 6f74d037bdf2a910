"""`kdkit lock` writes requirements/pylock.<backend>.toml beside requirements/<backend>.txt, from the same
resolution, through uv; and the file works where PEP 751 locks are used: pip 26.1+ installs it, verify-env
and `uv pip sync --dry-run` read it.

Everything runs for real: pip-compile, uv, pip and the stand-in torch index of tests/localindex.py served
over HTTP on 127.0.0.1 (the pylock's URLs are that server's).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kdkit.config.project import load_project
from kdkit.core.jsonio import sha256_file
from kdkit.core.lockfile import parse_lock
from kdkit.lock.staleness import REQUIREMENTS_LOCK, staleness
from tests.conftest import invoke
from tests.localindex import Served, torch_index_server
from tests.lock.test_lock import TORCH_WHEELS, needs_torch_wheels
from tests.lock.test_lock_index import clean_pip, make_project
from tests.lock.test_lock_resolvers import UV_VERSION, needs_uv
from tests.tinywheels import make_venv

__all__ = ["clean_pip", "torch_index_server"]

UV = Path(sys.executable).parent / "uv"


def locked(tmp_path: Path, served: Served, resolver: str, backend: str = "cpu",
           label: str = "cpu") -> Path:
    project = make_project(tmp_path / "proj", backend, served.torch_index(label))
    result = invoke("lock", project, "--backend", backend, "--resolver", resolver)
    assert result.exit_code == 0, result.stderr
    pylock = project / "requirements" / f"pylock.{backend}.toml"
    assert f"Wrote {pylock}: the same pins as a PEP 751 lock" in result.stdout, result.stderr
    return project


@needs_uv
@pytest.mark.parametrize("resolver", ["pip-tools", "uv"])
@pytest.mark.parametrize(("backend", "label"), [("cpu", "cpu"), ("cuda", "cu130")])
def test_the_pylock_holds_the_locks_pins_and_files(clean_pip: Served, tmp_path: Path, resolver: str,
                                                   backend: str,
                                                    label: str) -> None:
    project = locked(tmp_path, clean_pip, resolver, backend, label)
    lock_path = project / "requirements" / f"{backend}.txt"
    lock, pylock = parse_lock(lock_path), parse_lock(project / "requirements"
                                                     / f"pylock.{backend}.toml")
    assert pylock.format == "pylock"
    assert {k: p.version for k,
            p in pylock.pins.items()} == {k: p.version for k, p in lock.pins.items()}
    assert pylock.pins["torch"].version == f"2.13.0+{label}"
    for key, pin in pylock.pins.items():
        assert pin.hashes and set(pin.hashes) <= set(lock.pins[key].hashes), key
    # kdkit's header on top, as TOML comments: the lock's own fields and the lock it was made from
    assert {k: v for k, v in pylock.header.items() if k != REQUIREMENTS_LOCK} == lock.header
    assert pylock.header[REQUIREMENTS_LOCK] == f"requirements/{backend}.txt sha256:{sha256_file(lock_path)}"
    text = (project / "requirements" / f"pylock.{backend}.toml").read_text(encoding="utf-8")
    urls = [line.split('"')[1] for line in text.splitlines() if "url = " in line
            for line in line.split("url = ")[1:]]
    # only files the lock's indexes serve
    assert urls and all(url.startswith(clean_pip.url) for url in urls)
    # the project's Python, not this host's full version
    assert 'requires-python = ">=3.11"' in text
    backend_of = load_project(project).backend(backend)
    assert staleness(project, "requirements/base.in", backend,
                     backend_of.torch_index, backend_of.pylock) is None


@needs_uv
def test_pip_installs_the_pylock_and_verify_env_and_uv_agree(
    clean_pip: Served, tmp_path: Path) -> None:
    """The pylock at work: pip (26.1+) installs it into a bare venv from the 127.0.0.1 index, and verify-env
    and `uv pip sync --dry-run` both find that venv to be the lock, requirements and PEP 751 alike."""
    project = locked(tmp_path, clean_pip, "uv", "cuda", "cu130")
    pylock = project / "requirements" / "pylock.cuda.toml"
    python = make_venv(tmp_path / "venv", with_pip=False)
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                           "--isolated", "-q",
                           "--no-deps", "-r", str(pylock)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    for lock in (pylock, project / "requirements" / "cuda.txt"):
        result = invoke("verify-env", "--lock", lock, "--python", python, "--json")
        report = json.loads(result.stdout)
        assert (result.exit_code, report["ok"]) == (0, True), report["findings"]
        # torch and its nvidia-cudnn-cu13
        assert not report["findings"] and report["counts"]["locked"] == 2
        uv = subprocess.run([str(UV), "pip", "sync", "--dry-run", "--offline", "--python",
                             str(python), str(lock)],
                            capture_output=True, text=True, timeout=120)
        assert uv.returncode == 0 and "Would make no changes" in uv.stderr, uv.stderr


@needs_uv
def test_without_uv_the_lock_is_written_alone_and_says_why(clean_pip: Served, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    project = locked(tmp_path, clean_pip, "pip-tools")
    pylock = project / "requirements" / "pylock.cpu.toml"
    before = pylock.read_bytes()
    # a change: relock
    (project / "requirements" / "base.in").write_text("torch==2.13.0\n", encoding="utf-8")
    monkeypatch.setenv("KDKIT_UV", str(tmp_path / "no-uv"))
    result = invoke("lock", project, "--backend", "cpu", "--resolver", "pip-tools")
    assert result.exit_code == 0, result.stderr
    assert result.stderr.splitlines()[-1] == (
        "Warning: requirements/pylock.cpu.toml not written: uv, which writes it, was not found "
        "(install it with `pip install 'kdkit[uv]'` (or `pip install uv`)); requirements/cpu.txt "
        "is complete on its own; the requirements/pylock.cpu.toml from before is now stale (`kdkit "
        "validate` says so)")
    assert pylock.read_bytes() == before  # untouched, and now found stale
    backend = load_project(project).backend("cpu")
    reason = staleness(project, "requirements/base.in", "cpu", backend.torch_index, pylock)
    assert reason is not None and reason.startswith("stale: requirements/base.in changed since")


@needs_torch_wheels
def test_torch_from_a_folder_of_this_machine_makes_no_pylock(project: Path) -> None:
    result = invoke("lock", project, "--backend", "cpu",
                    "--torch-find-links", TORCH_WHEELS, "--json")
    assert result.exit_code == 0, result.stderr
    (made,) = json.loads(result.stdout)["locks"]
    assert made["pylock"] is None
    assert made["warnings"][-1] == (
        "requirements/pylock.cpu.toml not written: torch came from --torch-find-links, a folder of "
        "this machine, and a pylock names each file by a URL another machine can reach; "
        "requirements/cpu.txt is complete on its own")
    assert not (project / "requirements" / "pylock.cpu.toml").exists()


def test_uv_is_the_version_the_resolver_tests_use() -> None:
    assert UV_VERSION is None or UV.is_file()
