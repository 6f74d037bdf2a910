"""`kdkit check`: the compatibility verdicts of an offer against the project's lock, with their fixes.

Locks here are small hashed files written by the tests: no PyTorch wheel index is reachable,
and `kdkit check` only reads the pinned torch build.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import invoke, tree_snapshot

HASH = "sha256:" + "ab" * 32
# A check point is a finding (kdkit.core.finding) of the "check" section with no reading, threshold,
# card, provider sentence or place; the kernels point alone names its source.
NO_READING = {"section": "check", "gpu": None, "reading": None, "unit": "", "threshold": None,
              "provider": None,
              "source": None, "where": None}


def write_lock(project: Path, backend: str, torch: str | None, *, index: str | None = None) -> Path:
    """A kdkit-style hashed lock pinning ``torch`` (plus one ordinary package)."""
    lines = ["# kdkit: backend = " + backend, "# kdkit: platform = linux-x86_64"]
    lines += [f"--index-url {index}"] if index else []
    if torch is not None:
        lines += [f"torch=={torch} \\", f"    --hash={HASH}"]
    lines += ["numpy==2.1.0 \\", f"    --hash={HASH}"]
    path = project / "requirements" / f"{backend}.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _check(project: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    result = invoke("check", project, *args, "--json")
    report = json.loads(result.stdout)
    return result.exit_code, report, result.stderr


def _points(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in report["points"]}


def test_rtx_4090_with_a_cu124_lock_holds(project: Path) -> None:
    write_lock(project, "cuda", "2.6.0+cu124")
    code, report, _ = _check(project, "--gpu", "RTX 4090")
    assert code == 0 and report["ok"] is True and report["backend"] == "cuda"
    points = _points(report)
    assert [p["name"] for p in report["points"]] == ["backend", "cpu", "build",
                                                     "kernels", "driver", "memory"]
    assert [p["verdict"] for p in report["points"]] == ["ok", "ok", "ok", "ok", "note", "note"]
    assert points["cpu"]["why"] == "requirements/cuda.txt is for x86_64, as RTX 4090 hosts are"
    assert points["kernels"]["why"].startswith("torch 2.6.0+cu124 carries cubin sm_86, which runs "
                                                  "on sm_89 (pairings: torch 2.6 cu124, "
                                                  "cuda11_build")
    assert points["driver"]["why"] == ("torch 2.6.0+cu124 (CUDA 12.4) on RTX 4090 needs an NVIDIA "
                                          "host driver >= 525.60.13 (the floor of CUDA 12.x "
                                          "builds, pairings.json drivers)")
    text = invoke("check", project, "--gpu", "RTX 4090")
    assert text.exit_code == 0
    assert "RTX 4090: every point holds (notes are yours to confirm)" in text.stdout


def test_b200_with_torch_2_6_cu124_fails_and_says_what_to_lock(project: Path) -> None:
    write_lock(project, "cuda", "2.6.0+cu124")
    before = tree_snapshot(project)
    code, report, stderr = _check(project, "--gpu", "B200")
    assert code == 1 and report["ok"] is False
    kernels = _points(report)["kernels"]
    assert kernels["verdict"] == "fail"
    assert kernels["why"].startswith(
        "torch 2.6.0+cu124 carries sm_50, sm_60, sm_70, sm_75, sm_80, sm_86, sm_90: no code for "
        "B200's sm_100 (pairings: torch 2.6 cu124, cuda11_build")
    assert kernels["why"].endswith("on the machine this is 'no kernel image is available for "
                                      "execution on the device'")
    assert kernels["fix"].startswith(
        "lock torch 2.13.0 from cu130 (published builds that carry sm_100: cu128 2.7-2.11")
    assert kernels["fix"].endswith("set backends.cuda.torch_index to "
                                   "https://download.pytorch.org/whl/cu130, pin torch==2.13.0 in "
                                   "requirements/base.in, then `kdkit lock --backend cuda`")
    assert stderr.strip() == ("Error: B200: not ready (kernels); apply the fixes in the report's "
                              "fix fields, then run `kdkit check` again")
    assert invoke("check", project, "--gpu", "B200").stderr.strip() == (
        "Error: B200: not ready (kernels); apply the fixes above, then run `kdkit check` again")
    assert tree_snapshot(project) == before


def test_rtx_5090_with_torch_2_7_cu128_holds(project: Path) -> None:
    write_lock(project, "cuda", "2.7.1+cu128")
    code, report, _ = _check(project, "--gpu", "RTX 5090")
    assert code == 0
    assert _points(report)["kernels"]["why"].startswith(
        "torch 2.7.1+cu128 carries cubin sm_120, which runs on sm_120")


def test_mi300x_with_a_cuda_lock_fails(project: Path) -> None:
    write_lock(project, "cuda", "2.6.0+cu124")
    code, report, _ = _check(project, "--gpu", "MI300X", "--backend", "cuda")
    assert code == 1
    points = _points(report)
    assert points["backend"]["verdict"] == "fail"
    assert points["backend"]["why"] == "MI300X is an AMD card: it runs the rocm backend, not cuda"
    assert points["build"]["verdict"] == "fail"
    assert points["build"]["why"] == "requirements/cuda.txt has torch 2.6.0+cu124, a cuda build; MI300X (gfx942) " \
        "needs a rocm build"
    assert points["build"]["fix"].startswith("lock torch 2.6.0 from rocm6.2.4 (published builds "
                                             "that carry gfx942: rocm6.1 2.5-2.6, rocm6.2 2.5, "
                                             "rocm6.2.4 2.6,")


def test_mi300x_with_a_cuda_build_in_the_rocm_lock_fails(project: Path) -> None:
    write_lock(project, "rocm", "2.6.0+cu124")
    code, report, _ = _check(project, "--gpu", "MI300X")
    assert code == 1 and report["backend"] == "rocm"
    point = _points(report)["build"]
    assert point == {**NO_READING, "name": "build", "verdict": "fail",
                     "why": "requirements/rocm.txt has torch 2.6.0+cu124, a cuda build; MI300X "
                            "(gfx942) needs a rocm build", "fix": point["fix"]}


def test_mi300x_with_a_rocm_lock_holds(project: Path) -> None:
    write_lock(project, "rocm", "2.6.0+rocm6.2.4")
    code, report, _ = _check(project, "--gpu", "MI300X")
    assert code == 0
    points = _points(report)
    assert points["kernels"]["why"].startswith("torch 2.6.0+rocm6.2.4 carries code object for "
                                                  "gfx942, which runs on gfx942 (pairings: torch "
                                                  "2.6 rocm6.2.4, uv_torch_arch (rocm6.2.4 "
                                                  "measured")
    assert points["driver"]["verdict"] == "note"


def test_label_from_the_index_url_when_the_pin_has_none(project: Path) -> None:
    write_lock(project, "cuda", "2.8.0", index="https://download.pytorch.org/whl/cu128")
    code, report, _ = _check(project, "--gpu", "B200")
    assert code == 0, report


def test_torch_without_a_label_fails(project: Path) -> None:
    write_lock(project, "cuda", "2.8.0")
    code, report, _ = _check(project, "--gpu", "RTX 4090")
    assert code == 1
    assert _points(report)["lock"] == {
        **NO_READING, "name": "lock", "verdict": "fail",
        "why": "requirements/cuda.txt:3: torch==2.8.0 has no build label kdkit can read, so it "
                  "also matches +cpu and +rocm builds",
        "fix": "re-lock with `kdkit lock`, which pins the label"}


def test_missing_lock_fails_with_the_lock_command(project: Path) -> None:
    code, report, _ = _check(project, "--gpu", "H100 SXM")
    assert code == 1
    assert _points(report)["lock"]["fix"] == "`kdkit lock --backend cuda`"


def test_torch_not_pinned_fails(project: Path) -> None:
    write_lock(project, "cuda", None)
    code, report, _ = _check(project, "--gpu", "H100 SXM")
    assert code == 1 and _points(report)["lock"]["why"].endswith("torch is not pinned")


def test_unknown_torch_release_is_unknown_not_ok(project: Path) -> None:
    write_lock(project, "cuda", "2.13.0+cu128")
    code, report, _ = _check(project, "--gpu", "H100 SXM")
    assert code == 1
    kernels = _points(report)["kernels"]
    assert kernels["verdict"] == "unknown"
    assert kernels["why"] == ("kdkit's pairings know no x86_64 build of torch 2.13.0+cu128 from "
                                 "cu128 (torch 2.13 is published for cpu, cu126, cu130, cu132, "
                                 "rocm7.1, rocm7.2)")
    assert kernels["fix"].startswith("build the image and run `kdkit check --image IMG`")
    (project / "pairings.json").write_text(json.dumps({"torch": {"2.13": {"cu128": "cu128-2.11"}}}))
    code, report, _ = _check(project, "--gpu", "H100 SXM")
    assert code == 0, report


def test_target_gpu_from_kdkit_json(project: Path) -> None:
    write_lock(project, "cuda", "2.6.0+cu124")
    config = json.loads((project / "kdkit.json").read_text())
    config["target_gpu"] = "L40S"
    (project / "kdkit.json").write_text(json.dumps(config))
    code, report, _ = _check(project)
    assert code == 0 and report["gpu"]["name"] == "L40S"


def test_memory_estimate_that_cannot_fit_fails(project: Path) -> None:
    write_lock(project, "cuda", "2.6.0+cu124")
    config = json.loads((project / "kdkit.json").read_text())
    config["memory"] = {"parameters": 70_000_000_000, "dtype": "bf16"}
    (project / "kdkit.json").write_text(json.dumps(config))
    code, report, _ = _check(project, "--gpu", "RTX 4090")
    assert code == 1
    memory = _points(report)["memory"]
    assert memory["verdict"] == "fail"
    assert memory["why"] == "lower bound 130.39 GiB against 24 GB per card: does not fit"
    code, report, _ = _check(project, "--gpu", "MI300X", "--backend", "rocm")
    assert _points(report)["memory"]["why"].endswith(
        "against 192 GB per card: may fit — to be measured by the pilot")


def test_memory_shows_the_pilots_measured_peak(project: Path) -> None:
    write_lock(project, "cuda", "2.6.0+cu124")
    run = project / "runs" / "20250101T000000Z-abc123"
    run.mkdir(parents=True)
    (run
     / "summary.json").write_text(
         json.dumps({"peak_memory": {"bytes": 3 * 2**30, "device": "cuda:0"}}))
    code, report, _ = _check(project, "--gpu", "RTX 4090")
    assert code == 0
    assert _points(report)["memory"]["why"] == (
        "no estimate: kdkit.json has no memory section; pilot 20250101T000000Z-abc123 measured 3.0 "
        "GiB on cuda:0")


# ---------------------------------------------------------------- bad input


def test_unknown_gpu_exits_2_with_closest_names(project: Path) -> None:
    before = tree_snapshot(project)
    result = invoke("check", project, "--gpu", "MI300")
    assert result.exit_code == 2
    assert result.stderr.strip() == ("Error: --gpu 'MI300': no such offer in the catalog; did you "
                                     "mean 'MI300X'? pass that name (or add your own with a "
                                     "project catalog.json or --catalog FILE)")
    assert tree_snapshot(project) == before


def test_no_gpu_at_all_exits_2(project: Path) -> None:
    result = invoke("check", project)
    assert result.exit_code == 2
    assert result.stderr.strip() == (f"Error: {project / 'kdkit.json'}: $.target_gpu is null; pass "
                                     "--gpu NAME or set it")


def test_unhashed_lock_exits_2(project: Path) -> None:
    lock = project / "requirements" / "cuda.txt"
    lock.write_text("torch==2.6.0+cu124\n")
    result = invoke("check", project, "--gpu", "RTX 4090")
    assert result.exit_code == 2
    assert result.stderr.startswith(f"Error: {lock}:1: 'torch==2.6.0+cu124' has no --hash")


@pytest.mark.parametrize("option", ["--catalog", "--pairings"])
def test_bad_extra_data_file_exits_2(project: Path, tmp_path: Path, option: str) -> None:
    bad = tmp_path / "extra.json"
    bad.write_text(
        json.dumps({"offers": 3} if option == "--catalog" else {"drivers": {"12": "new"}}))
    result = invoke("check", project, "--gpu", "RTX 4090", option, bad)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"Error: {bad}: $.")


def test_user_text_is_printed_as_text_never_as_markup(project: Path) -> None:
    """A source or name holding rich markup ("[/]", "[bold red]") once crashed the table with a traceback."""
    write_lock(project, "cuda", "2.15.0+cu130")
    (project / "pairings.json").write_text(json.dumps({
        "arch_sets": {
            "mine": {"architectures": ["sm_90"],
                     "complete": True, "source": "[/]my [bold red]notes"}},
        "torch": {"2.15": {"cu130": "mine"}}}))
    result = invoke("check", project, "--gpu", "H100 SXM")
    assert result.exit_code == 0, result.output
    assert "[/]my [bold" in result.stdout and "red]notes)" in result.stdout


def test_empty_gpu_name_is_bad_input(project: Path) -> None:
    result = invoke("check", project, "--gpu", "")
    assert result.exit_code == 2
    assert result.stderr.strip() == 'Error: --gpu: empty name; pass an offer of the catalog, e.g. --gpu "RTX 4090"'


@pytest.mark.parametrize("offline", [False, True])
def test_check_parses_its_lock_once(project: Path, lock_parses: list[str],
                                    monkeypatch: pytest.MonkeyPatch,
                                    offline: bool) -> None:
    """Issue 30 §1: the lock point, the kernels point's locked wheel and the extension points judge one parse of
    the lock (before: three, and a lock replaced between them gave points about two locks)."""
    lock = write_lock(project, "cuda", "2.6.0+cu124", index="http://127.0.0.1:9/simple")
    monkeypatch.setenv("KDKIT_OFFLINE", "1" if offline else "0")
    code, report, _ = _check(project, "--gpu", "RTX 4090")
    assert code == 0 and report["ok"] is True, report
    assert _points(report)["kernels"]["source"] == "facts"
    assert lock_parses.count(os.path.realpath(lock)) == 1, lock_parses
