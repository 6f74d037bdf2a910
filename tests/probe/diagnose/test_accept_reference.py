"""`kdkit diagnose --accept` held to measured numbers (kdkit/data/acceptance.json "reference"): the sustained
GEMM judged against each card's measured dense bf16 TFLOP/s and the memory against its measured STREAM
GB/s, degraded below the sourced share; recorded readings for the judging, the real STREAM kernels on
torch's CPU build, and bad project overrides refused as one line before any load."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kdkit.core.builds import shipped_data
from kdkit.core.errors import BadInput
from kdkit.probe.diagnose import loadref
from kdkit.probe.diagnose.core import Context
from kdkit.probe.diagnose.load import Lane, load_points, overall_tflops, sustained_point, tflops_point
from kdkit.probe.diagnose.points import check_overrides, thresholds

torch = pytest.importorskip("torch")
RULES = thresholds()
LOAD, REFERENCE = RULES["load"], RULES["reference"]
H100, RTX4090 = "NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 4090"  # as torch names them


def recorded(dtype: Any, rates: list[float]) -> Lane:
    """A lane carrying recorded intervals (one second each) instead of a run's."""
    lane = Lane(torch, "cpu", 64)
    lane.device, lane.dtype = "cuda:0", dtype
    lane.intervals = [{"t": float(i), "seconds": 1.0, "tflops": rate} for i,
                      rate in enumerate(rates)]
    return lane


def gemm(name: str, rates: list[float], rules: dict[str, Any] = RULES,
         kind: str = "bfloat16") -> Any:
    lane = recorded(torch.bfloat16 if kind == "bfloat16" else torch.float16, rates)
    return loadref.gemm_point(0, "cuda:0", name, kind, overall_tflops(lane), rules["reference"],
                              rules["load"])


# ---------------------------------------------------------------- the GEMM against its measured reference


def test_a_card_at_half_its_reference_throughout_is_degraded_though_it_never_drifts() -> None:
    # 50 % of the H100 SXM's 794.5 measured, from the first interval to the last
    steady = [397.25] * 20
    # today's drift check sees nothing
    assert sustained_point(0, "cuda:0", steady, LOAD).verdict == "ok"
    point = gemm(H100, steady)
    assert (point.verdict, point.reading, point.unit) == ("degraded", 397.25, "TFLOP/s")
    assert "50% of the 794.5 measured on a healthy H100 SXM" in point.why and "H100 SXM" in point.provider
    assert point.threshold == ">= 75% of the measured 794.5 (H100 SXM)"
    assert "stas00/ml-engineering" in point.source and "NVIDIA/DCGM" in point.source
    # 65 %: the datasheet rule (half of 989.5) passes it; the measured reference does not
    assert tflops_point(0, recorded(torch.bfloat16, [516.4] * 20), H100, LOAD).verdict == "ok"
    assert gemm(H100, [516.4] * 20).verdict == "degraded"
    # 88 %: a healthy H100 with kdkit's square 8192 GEMM
    assert gemm(H100, [700.0] * 20).verdict == "ok"


def test_a_4090_above_its_reference_and_its_datasheet_is_ok() -> None:
    point = gemm(RTX4090, [192.8] * 10)  # 108 % of the 178.5 measured, 117 % of the 165.2 datasheet
    assert point.verdict == "ok" and "108% of the 178.5" in point.why
    assert tflops_point(0, recorded(torch.bfloat16, [192.8] * 10), RTX4090, LOAD).verdict == "ok"


def test_a_card_without_a_reference_gets_its_reading_and_no_reference() -> None:
    unknown = gemm("NVIDIA Quantum Q9", [123.4] * 5)
    assert (unknown.verdict, unknown.reading, unknown.threshold) == ("unknown", 123.4, None)
    assert "no reference" in unknown.why and "123 TFLOP/s" in unknown.why
    t4 = gemm("Tesla T4", [50.0] * 5, kind="float16")  # in the catalog, no measured reference, fp16
    assert t4.verdict == "unknown" and "no reference (T4, float16)" in t4.why
    cpu = loadref.gemm_point(None, "cpu", "cpu", "float32", 0.0021, REFERENCE, LOAD)
    assert cpu.verdict == "unknown" and "no reference (a CPU)" in cpu.why
    empty = loadref.gemm_point(0, "cuda:0", H100, "bfloat16",
                               overall_tflops(recorded(torch.bfloat16, [])),
                               REFERENCE, LOAD)
    assert (empty.verdict, empty.reading) == ("unknown", None)


def test_a_project_sets_the_share_or_its_own_reference_and_the_point_says_whose() -> None:
    loose = {"load": {"load.gemm.reference": {"value": 0.4}}}
    check_overrides(loose, "kdkit.json: $.acceptance")
    point = gemm(H100, [397.25] * 20, thresholds(loose))
    assert point.verdict == "ok" and point.threshold == ">= 40% of the measured 794.5 (H100 SXM)"
    assert point.source.endswith("the share: kdkit.json (this project)")
    own = {
        "reference": {"H100 SXM": {"value": 450.0, "source": "our own mamf-finder run, 2026-11"}}}
    check_overrides(own, "kdkit.json: $.acceptance")
    mine = gemm(H100, [397.25] * 20, thresholds(own))
    assert mine.verdict == "ok" and "88% of the 450.0" in mine.why
    assert mine.source.startswith("our own mamf-finder run, 2026-11; the share: ")
    # no source given: kdkit.json's
    copy = thresholds({"reference": {"H100 SXM": {"copy_gb_s": 2000.0}}})
    point = loadref.bandwidth_point(0, "cuda:0", H100, {"copy": 1900.0, "triad": 2900.0},
                                    copy["reference"], LOAD)
    assert point.verdict == "ok" and point.source.startswith(
        "kdkit.json (this project); the share: ")
    # its GEMM figure is shipped
    assert gemm(H100, [700.0] * 20, copy).source.startswith("stas00/ml-engineering")


# ---------------------------------------------------------------- memory bandwidth


def test_stream_copy_and_triad_run_for_real_on_cpu_torch_and_report_without_a_verdict() -> None:
    reading = loadref.bandwidth(torch, "cpu")
    assert reading["copy"] > 0 and reading["triad"] > 0 and reading["array_bytes"] == loadref.CPU_ARRAY
    (point,) = loadref.bandwidth_points(torch, ["cpu"], {}, {}, None, LOAD, REFERENCE)
    assert (point.name, point.verdict,
            point.unit, point.threshold) == ("load.memory.bandwidth", "unknown", "GB/s",
                                                                         None)
    assert point.reading["copy"] > 0 and "no reference (a CPU)" in point.why


def test_bandwidth_is_judged_against_the_measured_stream_figures() -> None:
    healthy = loadref.bandwidth_point(0, "cuda:0", H100,
                                      {"copy": 2800.0, "triad": 2900.0}, REFERENCE, LOAD)
    assert healthy.verdict == "ok" and "97% of copy 2,900" in healthy.why and "Azure" in healthy.source
    slow = loadref.bandwidth_point(0, "cuda:0", "NVIDIA H200",
                                   {"copy": 4000.0, "triad": 1500.0}, REFERENCE, LOAD)
    assert slow.verdict == "degraded" and "STREAM triad, 36% of the 4,150" in slow.provider
    l40s = loadref.bandwidth_point(0, "cuda:0", "NVIDIA L40S",
                                   {"copy": 700.0, "triad": 710.0}, REFERENCE, LOAD)
    # a GEMM reference, no STREAM one
    assert l40s.verdict == "unknown" and "no reference (L40S)" in l40s.why


def test_a_cpu_load_reports_both_new_points_beside_the_old_ones() -> None:
    ctx = Context(expect="cpu", memory_share=0.8, project=None)
    ctx.expected, ctx.torch = "cpu", torch
    points = {point.name: point for point in load_points(ctx, seconds=2.0)}
    assert {"load.gemm.tflops", "load.gemm.sustained", "load.gemm.reference",
            "load.memory.bandwidth",
            "load.memory.fill"} <= set(points), points
    reference, bandwidth = points["load.gemm.reference"], points["load.memory.bandwidth"]
    assert reference.verdict == "unknown" and reference.reading > 0, reference
    assert bandwidth.verdict == "unknown" and bandwidth.reading["triad"] > 0, bandwidth


# ---------------------------------------------------------------- the data


def test_every_reference_names_a_catalog_card_and_a_source_for_each_figure() -> None:
    cards = {offer["name"] for offer in shipped_data("data/catalog.json")["offers"]}
    shipped = shipped_data("data/acceptance.json")["reference"]
    assert {"H100 SXM", "H200", "B200", "MI300X", "RTX 4090"} <= set(shipped)
    for card, entry in shipped.items():
        assert card in cards, card
        assert re.search(r"github\.com/|@[0-9a-f]{7}", entry["source"]), card
        assert entry["value"] > 0 and entry["bounds"]["value"] == [0.001, None]
        if "copy_gb_s" in entry or "triad_gb_s" in entry:
            assert entry["copy_gb_s"] > 0 and entry["triad_gb_s"] > 0 and "TB/s" in entry["bandwidth_source"]
    for name in ("load.gemm.reference", "load.memory.bandwidth"):
        assert LOAD[name]["value"] == 0.75 and "0.75" in LOAD[name]["source"] and "diag-skus" in LOAD[name]["source"]


# ---------------------------------------------------------------- bad overrides: one line, exit 2


@pytest.mark.parametrize(("override", "said"), [
    ({"load": {"load.gemm.reference": {"value": -0.5}}},
     "$.acceptance.load.load.gemm.reference.value: expected a number above 0 and at most 1, like "
     "the shipped 0.75, got -0.5"),
    ({"load": {"load.memory.bandwidth": {"value": 1.5}}},
     "$.acceptance.load.load.memory.bandwidth.value: expected a number above 0 and at most 1"),
    ({"load": {"load.gemm.reference": {"value": 0}}},
     "$.acceptance.load.load.gemm.reference.value: expected a "
     "number above 0 and at most 1"),
    ({"load": {"load.gemm.reference": {"value": "0.9"}}},
     "$.acceptance.load.load.gemm.reference.value: expected a number like the shipped 0.75, got "
     "'0.9'"),
    ({"reference": {"H100 SXM": {"value": -1}}},
     "$.acceptance.reference.H100 SXM.value: expected a number above 0.001, like the shipped "
     "794.5"),
    ({"reference": {"H100 SXM": {"triad_gb_s": "fast"}}},
     "$.acceptance.reference.H100 SXM.triad_gb_s: expected a number like the shipped 2970.0, got "
     "'fast'"),
    ({"reference": {"H100 SXM": {"bounds": {}}}},
     "$.acceptance.reference.H100 SXM.bounds: not a key of this rule"),
    ({"reference": {"Quantum Q9": {"value": 100.0}}},
     "$.acceptance.reference: 'Quantum Q9' is not a rule kdkit knows"),
])
def test_a_bad_override_is_one_line_exit_2_before_any_load(tmp_path: Path, override: dict[str, Any],
                                                            said: str) -> None:
    with pytest.raises(BadInput) as caught:
        check_overrides(override, "kdkit.json: $.acceptance")
    assert str(caught.value).startswith(f"kdkit.json: {said}")
    project = tmp_path / "proj"
    project.mkdir()
    (project / "kdkit.json").write_text(json.dumps({"acceptance": override}), encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "kdkit", "diagnose", "--accept", "--expect", "cpu",
                           "--seconds", "60",
                           "--project", str(project), "--out", str(tmp_path / "ev")],
                          capture_output=True, text=True,
                          timeout=300, check=False,
                          env={**os.environ, "PATH": "/usr/local/bin:/usr/bin:/bin"},
                          cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith(f"Error: {project / 'kdkit.json'}: {said}"), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "ev").exists()
