"""`kdkit lock`: real pip-compile runs on a scaffolded project, and stale-lock detection.

Here torch comes from a local folder of wheels through --torch-find-links (what air-gapped
users do); the index arguments each backend hands to pip-compile are asserted separately.
Locking through a real package index (a stand-in download.pytorch.org served on 127.0.0.1)
is tests/lock/test_lock_index.py.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from kdkit.config.project import Project, load_project
from kdkit.core.errors import BadInput
from kdkit.core.jsonio import sha256_file
from kdkit.core.lockfile import parse_lock
from kdkit.lock.lock import platform_warnings
from kdkit.lock.pipcompile import compile_arguments
from kdkit.lock.pipconfig import pip_configuration
from kdkit.lock.staleness import require_fresh_lock
from tests.conftest import invoke, tree_snapshot

TORCH_WHEELS = Path(os.environ.get("KDKIT_TEST_TORCH_WHEELS", "/opt/wheels"))
needs_torch_wheels = pytest.mark.skipif(not any(TORCH_WHEELS.glob("torch-*.whl")),
                                        reason=(
                                            f"no torch wheel in {TORCH_WHEELS} "
                                            "(KDKIT_TEST_TORCH_WHEELS)"))


def lock_cpu(project: Path, *extra: str) -> object:
    return invoke("lock", project, "--backend", "cpu", "--torch-find-links", TORCH_WHEELS, *extra)


@needs_torch_wheels
def test_lock_cpu_writes_hashed_lock_with_provenance(project: Path) -> None:
    result = invoke("lock", project, "--backend", "cpu", "--torch-find-links", TORCH_WHEELS)
    assert result.exit_code == 0, result.stderr
    lock_path = project / "requirements" / "cpu.txt"
    assert result.stdout.startswith(f"Wrote {lock_path}: ")
    assert "torch==2.13.0+cpu (resolved on this host, Python " in result.stdout
    lock = parse_lock(lock_path)  # every line pinned and hashed, or this raises
    assert lock.pins["torch"].version == "2.13.0+cpu" and lock.pins["torch"].local == "cpu"
    assert all(pin.hashes for pin in lock.pins.values()) and len(lock.pins) > 3
    header = lock.header
    assert header["backend"] == "cpu" and header["resolved-in"] == "host"
    assert header["torch-index"] == "https://download.pytorch.org/whl/cpu"
    # the folder is a path of this machine
    assert header["torch-source"] == "find-links (replaces torch-index)"
    assert {"kdkit-version", "python", "platform",
            "resolver", "indexes", "machine-local"} <= set(header)
    # the default resolver, and its version
    assert re.fullmatch(r"pip-tools \d+\.\d+\.\d+", header["resolver"])
    # torch came from the folder, not the torch index: the lock names only the http(s) indexes pip used
    assert all(value.startswith(("http://", "https://")) and "download.pytorch.org" not in value
               for _option, value in lock.options)
    text = lock_path.read_text(encoding="utf-8")
    assert "file:/" not in text and str(TORCH_WHEELS) not in text and "--find-links" not in text
    assert lock.inputs() == {
        "requirements/base.in": sha256_file(project / "requirements" / "base.in")}


@needs_torch_wheels
def test_stale_lock_reported_by_validate_and_build(project: Path) -> None:
    assert lock_cpu(project).exit_code == 0  # type: ignore[attr-defined]
    fresh = invoke("validate", project)
    assert "cpu.txt" not in fresh.stdout + fresh.stderr
    assert require_fresh_lock(load_project(project), "cpu") == project / "requirements" / "cpu.txt"

    base_in = project / "requirements" / "base.in"
    base_in.write_text(base_in.read_text(encoding="utf-8") + "filelock\n", encoding="utf-8")
    stale = invoke("validate", project)
    assert stale.exit_code == 2
    message = (
        "stale: requirements/base.in changed since this lock was written; run `kdkit lock "
         "--backend cpu`")
    assert f"{project / 'requirements' / 'cpu.txt'}: header: {message}" in stale.stdout + stale.stderr
    with pytest.raises(BadInput, match=r"cpu.txt: stale: requirements/base.in changed"):
        require_fresh_lock(load_project(project), "cpu")

    assert lock_cpu(
        project, "--upgrade-package", "filelock").exit_code == 0  # type: ignore[attr-defined]
    assert "filelock" in parse_lock(project / "requirements" / "cpu.txt").pins
    require_fresh_lock(load_project(project), "cpu")


def test_build_needs_a_lock(project: Path) -> None:
    with pytest.raises(BadInput) as caught:
        require_fresh_lock(load_project(project), "cuda")
    assert str(
        caught.value) == (f"{project / 'requirements' / 'cuda.txt'}: no lock for backend cuda; "
                                 "run `kdkit lock --backend cuda`")


@needs_torch_wheels
def test_label_of_another_backend_is_refused(project: Path) -> None:
    """Locking cuda from a folder that only holds the +cpu wheel: refused before pip-compile, nothing written."""
    # the scaffold's default, from kdkit's pairings
    index = load_project(project).backend("cuda").torch_index
    label = index.rsplit("/", 1)[-1]
    before = tree_snapshot(project)
    result = invoke("lock", project, "--backend", "cuda", "--torch-find-links", TORCH_WHEELS)
    assert result.exit_code == 2
    held = _and_names(sorted(p.name for p in TORCH_WHEELS.glob("torch-*.whl")))
    python = load_project(project).python
    assert result.stderr.splitlines()[-1] == (
        f"Error: --torch-find-links {TORCH_WHEELS.resolve()}: no torch 2.13.0 +{label} wheel for "
        f"Python {python} on linux-x86_64 (it holds {held}); put that wheel there, or lock from "
        "the torch index without --torch-find-links")
    assert tree_snapshot(project) == before


def _and_names(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


@pytest.mark.parametrize("backend", ["cuda", "rocm", "cpu"])
def test_index_arguments_per_backend(project: Path, backend: str) -> None:
    chosen = load_project(project).backend(backend)
    index = chosen.torch_index
    assert index.startswith("https://download.pytorch.org/whl/")
    args = compile_arguments(chosen, {"index-url": "https://mirror.example/simple"}, None,
                             False, ["numpy"])
    assert args == ["--generate-hashes", "--allow-unsafe", "--strip-extras", "--no-header",
                    "--no-config",
                    "--no-emit-find-links", "--no-emit-index-url", "--index-url", index,
                    "--extra-index-url", "https://mirror.example/simple", "--pip-args",
                    "--timeout 10 --retries 1",
                    "--upgrade-package", "numpy"]
    assert compile_arguments(chosen, {}, None, True, [])[7:] == ["--index-url", index, "--pip-args",
                                                                 "--timeout 10 --retries 1",
                                                                 "--upgrade"]
    assert compile_arguments(chosen, {}, Path("/srv/wheels"), False, [])[7:] == [
        "--find-links", "/srv/wheels", "--pip-args", "--timeout 10 --retries 1"]
    # pip is bounded like the preflight: its own shorter timeout holds, a longer one (180 s) is cut to 10 s
    assert compile_arguments(chosen, {"timeout": "3"}, None,
                             False, [])[-1] == "--timeout 3 --retries 1"
    assert compile_arguments(chosen, {"default-timeout": "180"}, None,
                             False, [])[-1] == "--timeout 10 --retries 1"


def test_default_index_comes_from_pip_itself() -> None:
    from kdkit.lock.pipconfig import pip_default_index

    assert pip_default_index().startswith("https://")


def test_pip_configuration_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", "https://mirror.example/simple")
    assert pip_configuration()["index-url"] == "https://mirror.example/simple"


def test_platform_warning_when_python_differs(project: Path) -> None:
    loaded = load_project(project)
    other = Project(loaded.root, {**loaded.config, "python": "3.9"})
    warnings = platform_warnings(other, other.backend("cpu"))
    assert any(w.endswith("but kdkit.json targets Python 3.9; markers and wheels may differ in the "
                          "image (use --in-container)") for w in warnings)


@pytest.mark.parametrize(
    ("setup", "args", "message"),
    [
        ("drop-in",
         [], "{p}/requirements/base.in: requirements input not found; create it (one requirement a "
             "line, e.g. torch==2.13.0) or fix $.requirements in kdkit.json"),
        (None,
         ["--torch-find-links", "{p}/nope"],
         "--torch-find-links {p}/nope: not a folder; give the folder "
         "holding the torch wheels"),
        (None,
         ["--ca-bundle", "{p}/ca.pem"], "--ca-bundle {p}/ca.pem: not a file; give a PEM file of CA "
                                        "certificates"),
    ],
    ids=["missing-in", "torch-find-links", "ca-bundle"],
)
def test_bad_input_exit_2_nothing_written(project: Path, setup: str | None,
                                          args: list[str], message: str) -> None:
    if setup == "drop-in":
        (project / "requirements" / "base.in").unlink()
    before = tree_snapshot(project)
    result = invoke("lock", project, "--backend", "cpu", *[a.format(p=project) for a in args])
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1] == "Error: " + message.format(p=project)
    assert tree_snapshot(project) == before


@needs_torch_wheels
def test_in_container(project: Path, docker_engine: None) -> None:
    """Resolution inside the backend's base image (here the local test base, nothing is pulled)."""
    image = os.environ.get("KDKIT_TEST_BASE", "kdkit-test/debian-python:3.11")
    config_path = project / "kdkit.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["backends"]["cpu"]["base_image"] = image
    config_path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    result = lock_cpu(project, "--in-container",
                      "--ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "--json")
    assert result.exit_code == 0, result.stderr  # type: ignore[attr-defined]
    report = json.loads(result.stdout)["locks"][0]  # type: ignore[attr-defined]
    assert report["resolved_in"] == f"container {image}" and report["torch"] == "2.13.0+cpu"
    lock = parse_lock(project / "requirements" / "cpu.txt")
    assert lock.header["resolved-in"] == f"container {image}" and lock.pins["torch"].local == "cpu"
