"""PyPI as a torch source: a cuda backend whose ``torch_index`` is PyPI's simple index (here the stand-in
PyPI of tests/localindex.py, named by pip's configuration as a user's mirror) locks a plain ``torch==2.13.0``,
whose build (+cu130 inside, as torch/version.py of the real wheel says) comes from kdkit/data/pairings.json
``pypi`` and is written in the lock's header; check, the image labels and verify-env read it there.
pip-compile, pip and the HTTP server run for real.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import tests.lock.test_lock_index as index_tests
from kdkit.core.builds import PYPI_SIMPLE, header_build, is_pypi
from kdkit.core.errors import BadInput
from kdkit.core.lockfile import parse_lock
from kdkit.facts.pairings import load_pairings
from kdkit.lock.preflight import refuse_foreign_index
from tests.conftest import invoke
from tests.localindex import CUDNN, LocalIndex, Served, dependency_wheel, serve, torch_index_server, torch_wheel

__all__ = ["torch_index_server"]  # the session's index, a fixture


@pytest.fixture
def pypi(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, torch_index_server: Served) -> Served:
    """pip with no configuration but PIP_INDEX_URL: the stand-in PyPI, /simple/."""
    index_tests.isolate_pip(monkeypatch, tmp_path)
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("PIP_INDEX_URL", torch_index_server.simple)
    return torch_index_server


def pypi_project(root: Path, served: Served, base_in: str | None = None) -> Path:
    return index_tests.make_project(root, "cuda", served.simple, base_in)


# ---------------------------------------------------------------- the facts


def test_pypi_builds_are_the_artifacts_own() -> None:
    pairings = load_pairings()
    assert [pairings.pypi_label(f"2.{minor}.0") for minor in range(5, 16)] == [
        "cu124", "cu124", "cu126", "cu128", "cu128", "cu128", "cu130", "cu130",
        "cu130", "cu130", "cu132"]
    assert pairings.pypi_label("2.10.0", "aarch64") == "cpu" and pairings.pypi_label("2.11.0",
                                                                                     "aarch64") == "cu130"
    assert pairings.pypi_label("2.99.0") is None and pairings.pypi_build("2.99.0") is None
    build = pairings.pypi_build("2.13.0")
    assert build is not None and build.label == "cu130" and build.architectures == (
        "sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120")
    # PyPI's cu130 has no PTX; download.pytorch.org's lists compute_120
    twelve = pairings.pypi_build("2.12.1")
    assert twelve is not None and "compute_120" not in twelve.architectures
    assert "compute_120" in (pairings.build("2.12.1", "cu130") or build).architectures
    for minor, platforms in pairings.data["pypi"].items():
        for cpu, entry in platforms.items():
            if isinstance(entry, dict):
                assert "pypi_artifacts" in entry["source"] or "pypi_2_13_0" in entry["source"], (
                    minor, cpu)


def test_pypi_index_is_recognised_with_or_without_the_slash_and_as_pips_index() -> None:
    assert is_pypi("https://pypi.org/simple") and is_pypi("https://pypi.org/simple/")
    assert not is_pypi("https://download.pytorch.org/whl/cu130")
    assert is_pypi("https://mirror.example/pypi/simple/", ("https://mirror.example/pypi/simple",))
    assert header_build(
        {"torch-build": "cu130 (PyPI torch 2.13 on x86_64: pypi_2_13_0)"}) == "cu130"
    assert header_build({"torch-build": "nonsense"}) is None and header_build({}) is None


@pytest.mark.parametrize("url", [PYPI_SIMPLE, PYPI_SIMPLE + "/"])
def test_a_cuda_backend_takes_pypi_and_a_rocm_one_is_told_why_not(tmp_path: Path, url: str) -> None:
    config = tmp_path / "kdkit.json"
    refuse_foreign_index(url, "cuda", config)
    with pytest.raises(
        BadInput, match=r"is PyPI's index, whose Linux torch is a CUDA build .*a rocm backend needs"):
        refuse_foreign_index(url, "rocm", config)


# ---------------------------------------------------------------- lock, check, labels, verify-env


def test_lock_from_pypi_writes_the_build_in_the_header(pypi: Served, tmp_path: Path) -> None:
    project = pypi_project(tmp_path / "proj", pypi)
    result = invoke("lock", project, "--backend", "cuda")
    assert result.exit_code == 0, result.stderr
    lock = parse_lock(project / "requirements" / "cuda.txt")
    assert lock.pins["torch"].version == "2.13.0" and lock.pins["torch"].local is None
    assert lock.header["torch-build"] == ("cu130 (PyPI torch 2.13 on x86_64: pypi_2_13_0, "
                                          "pypi_artifacts: 2.13.0+cu130)")
    assert lock.options == [("--index-url", pypi.simple)]
    from kdkit.config.project import load_project
    from kdkit.image.labels import torch_build

    loaded = load_project(project)
    assert torch_build(lock, loaded.backend("cuda"), loaded.python) == ("2.13.0", "13.0", "")

    ok = invoke("check", project, "--gpu", "RTX 5090", "--json")
    points = {p["name"]: p for p in json.loads(ok.stdout)["points"]}
    assert points["build"]["verdict"] == "ok" and "2.13.0+cu130, a cuda build" in points["build"]["why"]
    assert points["kernels"]["verdict"] == "ok" and "sm_120" in points["kernels"]["why"], points["kernels"]
    old = invoke("check", project, "--gpu", "V100 SXM2 16GB", "--json")
    points = {p["name"]: p for p in json.loads(old.stdout)["points"]}
    assert old.exit_code == 1 and points["kernels"]["verdict"] == "fail"
    assert "no code for V100 SXM2 16GB's sm_70" in points["kernels"]["why"]


def test_verify_env_takes_the_installed_cu130_build_for_the_plain_pin(
    pypi: Served, tmp_path: Path) -> None:
    """pip installs the lock (the plain wheel; torch/version.py says 2.13.0+cu130): the torch build agrees."""
    from kdkit.core.markers import current_environment
    from kdkit.probe.env.installed import read_installed
    from kdkit.probe.env.verify import compare

    project = pypi_project(tmp_path / "proj", pypi)
    assert invoke("lock", project, "--backend", "cuda").exit_code == 0
    lock_path = project / "requirements" / "cuda.txt"
    target = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                           "--no-cache-dir",
                           "--require-hashes", "--target", str(target), "-r", str(lock_path)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    report = compare(parse_lock(lock_path), read_installed([str(target)]), current_environment())
    assert not [f for f in report.findings if f.where == "torch"], [f.why for f in report.findings]
    (target / "torch"
     / "version.py").write_text("__version__ = '2.13.0+cpu'\ncuda = None\nhip = None\n",
                                                 encoding="utf-8")
    report = compare(parse_lock(lock_path), read_installed([str(target)]), current_environment())
    torch = [f for f in report.findings if f.name == "torch-build"]
    assert torch and torch[0].verdict == "fail"
    assert "locked 2.13.0 from PyPI, the +cu130 build (lock header torch-build)" in torch[0].why


def test_torch_find_links_takes_the_plain_wheel_for_a_pypi_backend(
    pypi: Served, tmp_path: Path) -> None:
    project = pypi_project(tmp_path / "proj", pypi)
    links = tmp_path / "links"
    torch_wheel(links, "2.13.0")
    result = invoke("lock", project, "--backend", "cuda", "--torch-find-links", links)
    assert result.exit_code == 0, result.stderr
    lock = parse_lock(project / "requirements" / "cuda.txt")
    assert lock.pins["torch"].version == "2.13.0" and lock.header["torch-build"].startswith(
        "cu130 ")
    labelled = tmp_path / "labelled"
    torch_wheel(labelled, "2.13.0+cpu", arches=[])
    refused = invoke("lock", project, "--backend", "cuda", "--torch-find-links", labelled)
    assert refused.exit_code == 2 and "plain-version (PyPI's, no local label) wheel" in refused.stderr


def test_a_pypi_release_whose_build_is_unknown_is_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    index = LocalIndex(tmp_path / "index")
    index.add_simple(torch_wheel(tmp_path / "build", "2.99.0"))
    index.add_simple(dependency_wheel(tmp_path / "build", *CUDNN))
    index.write()
    with serve(index.root) as served:
        index_tests.isolate_pip(monkeypatch, tmp_path)
        monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
        monkeypatch.setenv("PIP_INDEX_URL", served.simple)
        project = pypi_project(tmp_path / "proj", served, "torch==2.99.0\n")
        result = invoke("lock", project, "--backend", "cuda")
    assert result.exit_code == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert "Traceback" not in result.stderr and len(errors) == 1, result.stderr
    assert f"torch==2.99.0 from PyPI ({served.simple})" in errors[0] and "$.pypi.2.99.x86_64" in errors[0]
    assert not (project / "requirements" / "cuda.txt").exists()


def test_a_rocm_backend_on_pypi_is_refused_before_anything_runs(
    pypi: Served, tmp_path: Path) -> None:
    project = index_tests.make_project(tmp_path / "proj", "rocm", pypi.simple)
    asked = len(pypi.requests)
    result = invoke("lock", project, "--backend", "rocm")
    assert result.exit_code == 2 and "PyPI serves only a cuda backend" in result.stderr, result.stderr
    assert len(pypi.requests) == asked  # refused before the preflight asked the index
