"""What a hand-edited lock or kdkit.json gets on the PyPI and wheel paths: a forged ``torch-build`` header, an
index URL that does not parse, a mirror named with a user and password, the offline switch's spellings. Each is
one line and exit 2 (or a failed point), never a traceback or a verdict on the wrong build."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kdkit.core.builds import is_pypi
from kdkit.core.errors import BadInput
from kdkit.project.init import init_project
from tests.conftest import invoke, tree_snapshot

HASH = "sha256:" + "ab" * 32


def cuda_project(tmp_path: Path, torch_index: str = "https://pypi.org/simple") -> Path:
    project = init_project(tmp_path / "proj", name="proj", backend="cuda")
    config = json.loads((project / "kdkit.json").read_text(encoding="utf-8"))
    config["backends"]["cuda"]["torch_index"] = torch_index
    (project / "kdkit.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    return project


def pypi_lock(project: Path, build: str) -> Path:
    lock = project / "requirements" / "cuda.txt"
    lock.write_text("\n".join([
        "# kdkit: kdkit-version = 0.0.0", "# kdkit: backend = cuda",
        "# kdkit: platform = linux-x86_64",
        f"# kdkit: torch-build = {build} (PyPI torch 2.13 on x86_64: edited)",
        "--index-url https://pypi.org/simple", "torch==2.13.0 \\", f"    --hash={HASH}"])
                    + "\n", encoding="utf-8")
    return lock


@pytest.mark.parametrize("forged", ["cu126", "rocm7.2", "cu999"])
def test_a_forged_torch_build_header_is_refused_not_believed(tmp_path: Path, forged: str) -> None:
    """PyPI's torch 2.13.0 on x86_64 is the cu130 build (the artifact); a header saying otherwise would make
    check judge one build and the image promise another's CUDA."""
    project = cuda_project(tmp_path)
    lock = pypi_lock(project, forged)
    result = invoke("check", project, "--gpu", "RTX 4090", "--offline", "--json")
    points = {p["name"]: p for p in json.loads(result.stdout)["points"]}
    assert result.exit_code == 1 and points["lock"]["verdict"] == "fail", points
    assert f"torch-build = {forged}" in points["lock"]["why"] and "the cu130 build" in points["lock"]["why"]
    assert "kernels" not in points and "driver" not in points
    from kdkit.config.project import load_project
    from kdkit.image.labels import torch_build

    loaded = load_project(project)
    with pytest.raises(
        BadInput, match=f"torch-build = {forged}, but PyPI's torch 2.13.0 on x86_64 is the cu130"):
        torch_build(lock, loaded.backend("cuda"), loaded.python)


def test_the_true_header_is_judged_as_its_build(tmp_path: Path) -> None:
    project = cuda_project(tmp_path)
    pypi_lock(project, "cu130")
    result = invoke("check", project, "--gpu", "RTX 4090", "--offline", "--json")
    points = {p["name"]: p for p in json.loads(result.stdout)["points"]}
    assert "2.13.0+cu130" in points["build"]["why"] and points["kernels"]["verdict"] == "ok"


@pytest.mark.parametrize(("url", "why"), [("http://[::1/whl/cu130", "Invalid IPv6 URL"),
                                          ("http://127.0.0.1:99999/simple", "Port out of range")])
def test_an_index_url_that_does_not_parse_is_one_line(tmp_path: Path, url: str, why: str) -> None:
    project = cuda_project(tmp_path, url)
    before = tree_snapshot(project)
    for args in (("lock", project, "--backend", "cuda"), ("check", project, "--gpu", "RTX 4090"),
                 ("validate", project)):
        result = invoke(*args)
        assert result.exit_code == 2, (args, result.output)
        assert "Traceback" not in result.output and "$.backends.cuda.torch_index" in result.output
        assert why in result.output, result.output
    assert tree_snapshot(project) == before


def test_pypi_and_a_mirror_are_one_place_whatever_the_case_slash_or_user() -> None:
    assert is_pypi("HTTPS://PYPI.ORG/simple/") and is_pypi("https://pypi.org/simple//")
    assert is_pypi("http://127.0.0.1:1/simple", ("http://alice:pw@127.0.0.1:1/simple/",))
    assert not is_pypi("https://pypi.org/") and not is_pypi("http://[::1/simple")
    assert not is_pypi("http://127.0.0.1:2/simple", ("http://127.0.0.1:1/simple",))


def test_pypi_org_without_simple_is_told_the_index(tmp_path: Path) -> None:
    project = cuda_project(tmp_path, "https://pypi.org/")
    (project / "requirements" / "base.in").write_text("torch==2.13.0\n", encoding="utf-8")
    result = invoke("lock", project, "--backend", "cuda")
    assert result.exit_code == 2 and "or PyPI's own index, https://pypi.org/simple" in result.stderr


@pytest.mark.parametrize(("value", "offline"),
                         [("1", True), ("yes", True), ("0", False), ("false", False),
                          ("No", False), ("off", False), ("", False)])
def test_kdkit_offline_reads_its_spellings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           value: str,
                                           offline: bool) -> None:
    """The lock names no http(s) index here: online, the kernels point says why the wheel was not read;
    offline (the user's choice) it says nothing of the wheel."""
    project = cuda_project(tmp_path)
    lock = pypi_lock(project, "cu130")
    lock.write_text(lock.read_text(encoding="utf-8").replace(
        "--index-url https://pypi.org/simple\n", ""),
                    encoding="utf-8")
    monkeypatch.setenv("KDKIT_OFFLINE", value)
    result = invoke("check", project, "--gpu", "RTX 4090", "--json")
    kernels = {p["name"]: p for p in json.loads(result.stdout)["points"]}["kernels"]
    assert ("the locked wheel was not read" in kernels["why"]) is not offline, kernels
