"""`kdkit diagnose --accept` against a hostile tester's findings: credentials in any string of an override,
numbers no float holds, bounds on the drift rule and the references, --expect cpu with a GPU order, MIG
slices, readings not made on a card with a reference, a driver's control characters in acceptance.md."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kdkit.core.errors import BadInput
from kdkit.core.finding import Finding
from kdkit.probe.diagnose import accept, evidence, loadref
from kdkit.probe.diagnose.load import sustained_point
from kdkit.probe.diagnose.loadio import failure_point
from kdkit.probe.diagnose.points import check_overrides, thresholds

RULES = thresholds()
LOAD, REFERENCE = RULES["load"], RULES["reference"]
H100, MIG = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB MIG 1g.10gb"
TOKEN = "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5"  # a GitHub token's shape (not a real one)
WHERE = "kdkit.json: $.acceptance"


def refused(override: Any) -> str:
    with pytest.raises(BadInput) as caught:
        check_overrides(override, WHERE)
    return str(caught.value)


def diagnose(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kdkit", "diagnose", "--accept", "--expect", "cpu",
                           "--seconds", "60",
                           "--out", str(tmp_path / "ev"), *args], capture_output=True, text=True,
                          timeout=300,
                          check=False,
                          env={**os.environ, "PATH": "/usr/local/bin:/usr/bin:/bin"}, cwd=tmp_path)


# ---------------------------------------------------------------- 2: a credential in any string of an override


@pytest.mark.parametrize(("override", "place"), [
    ({"reference": {"H100 SXM": {"copy_gb_s": 2000.0, "bandwidth_source": f"our run {TOKEN}"}}},
     "$.acceptance.reference.H100 SXM.bandwidth_source"),
    ({"reference": {"H100 SXM": {"unit": f"TFLOP/s {TOKEN}"}}},
     "$.acceptance.reference.H100 SXM.unit"),
    ({"load": {"load.gemm.reference": {"about": "x https://me:hunter2secret@example.com/ y"}}},
     "$.acceptance.load.load.gemm.reference.about"),
    ({"load": {"load.throttle": {"value": ["hw_slowdown", TOKEN]}}},
     "$.acceptance.load.load.throttle.value[1]"),
])
def test_a_credential_in_any_string_of_an_override_is_refused_unechoed(
    override: Any, place: str) -> None:
    said = refused(override)
    assert said.startswith(f"{WHERE.split(':')[0]}: {place}: carries "), said
    assert TOKEN not in said and "hunter2secret" not in said


def test_diagnose_refuses_a_credential_in_bandwidth_source_before_any_load(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    override = {
        "reference": {"H100 SXM": {"copy_gb_s": 2000.0, "bandwidth_source": f"run by {TOKEN}"}}}
    (project / "kdkit.json").write_text(json.dumps({"acceptance": override}), encoding="utf-8")
    done = diagnose(tmp_path, "--project", str(project))
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith(
        f"Error: {project / 'kdkit.json'}: $.acceptance.reference.H100 SXM.bandwidth_source")
    assert len(done.stderr.strip().splitlines()) == 1 and TOKEN not in done.stderr + done.stdout
    assert not (tmp_path / "ev").exists()


# ---------------------------------------------------------------- 3: --expect cpu with an order for GPUs


def test_expect_cpu_with_an_order_for_gpus_is_bad_input_before_any_load(tmp_path: Path) -> None:
    order = tmp_path / "order.json"
    order.write_text(json.dumps({"offer": {"name": "H100 SXM"}, "cards": 8}), encoding="utf-8")
    done = diagnose(tmp_path, "--order", str(order))
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip() == (f"Error: --expect cpu judges a CPU machine; {order} orders 8 x "
                                   "H100 SXM: drop --expect cpu or the order")
    assert not (tmp_path / "ev").exists()


# ---------------------------------------------------------------- 4: a MIG slice has no reference


@pytest.mark.parametrize("name", [MIG, "NVIDIA H100 80GB HBM3 MIG 1g.10gb"])
def test_a_mig_slice_is_reported_against_no_reference_and_the_run_stays_complete(name: str) -> None:
    gemm = loadref.gemm_point(0, "cuda:0", name, "bfloat16", 30.0, REFERENCE, LOAD)
    stream = loadref.bandwidth_point(0, "cuda:0", name,
                                     {"copy": 200.0, "triad": 210.0}, REFERENCE, LOAD)
    for point in (gemm, stream):
        assert (point.verdict, point.threshold, point.provider) == ("unknown", None, None), point
        assert "no reference (a MIG slice: a fraction of the card)" in point.why
    assert accept._unmeasured([gemm, stream]) is None


# ---------------------------------------------------------------- 5: a number no float holds


@pytest.mark.parametrize("override", [
    {"load": {"load.gemm.reference": {"value": 10 ** 400}}},
    {"reference": {"H100 SXM": {"value": -(10 ** 400)}}},
])
def test_a_huge_integer_is_one_line_naming_the_place(override: Any) -> None:
    said = refused(override)
    assert ".value: expected a number" in said and "too large" in said and "\n" not in said
    assert str(10 ** 400)[:30] not in said


def test_validate_refuses_a_huge_integer_in_an_override(project: Path) -> None:
    config = json.loads((project / "kdkit.json").read_text(encoding="utf-8"))
    config["acceptance"] = {"load": {"load.copy": {"value": 7 ** 1000}}}
    (project / "kdkit.json").write_text(json.dumps(config), encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "kdkit", "validate", str(project)],
                          capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    said = done.stdout + done.stderr
    assert "$.acceptance.load.load.copy.value: expected a number" in said and "too large" in said
    assert "Traceback" not in said and "OverflowError" not in said


# ---------------------------------------------------------------- 8: a reading not made on a card with a reference


def test_a_stream_failure_on_a_card_with_a_reference_makes_the_run_incomplete() -> None:
    oom = failure_point("load.memory.bandwidth", 0, "cuda:0: the STREAM kernels",
                        RuntimeError("CUDA out of memory. Tried to allocate 512.00 MiB"))
    failed = loadref._unmeasured(oom, "cuda:0", H100, REFERENCE, LOAD)
    assert failed.verdict == "unknown" and failed.threshold and "2,970" in failed.threshold
    why = accept._unmeasured([failed])
    assert why and "load.memory.bandwidth" in why
    assert evidence.verdict([failed], why) == "incomplete"


def test_no_gemm_interval_on_a_card_with_a_reference_is_incomplete_without_one_is_not() -> None:
    h100 = loadref.gemm_point(0, "cuda:0", H100, "bfloat16", None, REFERENCE, LOAD)
    assert h100.verdict == "unknown" and accept._unmeasured([h100])
    for name, kind in (("NVIDIA Quantum Q9", "bfloat16"), (H100, "float16")):
        point = loadref.gemm_point(0, "cuda:0", name, kind, None, REFERENCE, LOAD)
        assert point.verdict == "unknown" and accept._unmeasured([point]) is None
    oom = failure_point("load.memory.bandwidth", None, "cpu: the STREAM kernels",
                        RuntimeError("out of memory"))
    assert accept._unmeasured([loadref._unmeasured(oom, "cpu", "cpu", REFERENCE, LOAD)]) is None
    l40s = failure_point("load.memory.bandwidth", 0, "cuda:0: the STREAM kernels",
                         RuntimeError("out of memory"))
    assert accept._unmeasured(
        [loadref._unmeasured(l40s, "cuda:0", "NVIDIA L40S", REFERENCE, LOAD)]) is None


# ---------------------------------------------------------------- 9: the driver's text in acceptance.md


def test_acceptance_md_escapes_what_the_driver_names() -> None:
    hostile = "NVIDIA H100\x1b]0;pwned\x07\x1b[2J | # x"
    driver = {"gpus": [{"index": 0, "name": hostile, "serial": "\x1b[31m1", "uuid": "GPU-1",
                        "bus_id": "0:1",
                        "memory_mib": 81559}],
              "driver_version": "550\x1b[2J", "cuda_version": "12.4"}
    point = Finding("load", "load.gemm.reference", 0, 1.0, "TFLOP/s", None, "degraded",
                    f"{hostile}: slow",
                  provider=f"GPU 0 {hostile} is slow")
    report = evidence.report_of([point],
                                {"steps": [{"status": "ok", "name": "driver", "detail": hostile}]},
                                started="2026-12-04T00:00:00+00:00", seconds=1.0, incomplete=None,
                                argv=["diagnose", "--accept"], extra={"driver": driver})
    text = evidence.render_markdown(report)
    assert not any((ord(ch) < 32 and ch != "\n") or ord(ch) == 0x7F for ch in text), repr(text)
    assert "pwned" in text and "\n# x" not in text


# ---------------------------------------------------------------- 10: bounds and numbers that are no number


@pytest.mark.parametrize(("key", "value"),
                         [("value", -5), ("value", 0), ("value", 1e300), ("window", -5),
                          ("window", 0), ("window", 1e300), ("window", 0.6)])
def test_the_drift_rule_is_bounded(key: str, value: float) -> None:
    said = refused({"load": {"load.gemm.sustained": {key: value}}})
    assert said.startswith(
        f"{WHERE}.load.load.gemm.sustained.{key}: expected a number above 0 and at most "), said


def test_a_reference_so_small_the_share_is_infinite_is_refused_and_division_is_guarded() -> None:
    said = refused({"reference": {"H100 SXM": {"value": 1e-300}}})
    assert "expected a number above 0.001" in said
    said = refused({"reference": {"H100 SXM": {"triad_gb_s": 1e-300}}})
    assert "expected a number above 0.001" in said
    assert loadref.share_verdict(100.0, 0.0, 0.75)[0] == "degraded"
    assert loadref.share_verdict(1e308, 1e-308, 0.75)[0] == "degraded"
    assert loadref.share_verdict(math.nan, 100.0, 0.75)[0] == "degraded"
    # in bounds
    check_overrides({"load": {"load.gemm.sustained": {"value": 0.9, "window": 0.2}}}, WHERE)


@pytest.mark.parametrize("reading",
                         [{"copy": math.nan, "triad": 2900.0}, {"copy": 2800.0, "triad": math.nan}])
def test_a_nan_copy_or_triad_reading_is_not_ok(reading: dict[str, float]) -> None:
    point = loadref.bandwidth_point(0, "cuda:0", H100, reading, REFERENCE, LOAD)
    assert point.verdict == "degraded", point


# ---------------------------------------------------------------- 12: messages


def test_an_override_of_a_catalog_card_without_a_shipped_reference_says_so() -> None:
    said = refused({"reference": {"A40": {"value": 100.0}}})
    assert said == (f"{WHERE}.reference: kdkit ships no reference for A40; a project can change a "
                    "shipped reference, not add one")


def test_the_provider_is_told_the_projects_reference_not_a_healthy_cards() -> None:
    own = thresholds({"reference": {"H100 SXM": {"value": 900.0, "copy_gb_s": 3200.0}}})
    gemm = loadref.gemm_point(0, "cuda:0", H100, "bfloat16", 400.0, own["reference"], LOAD)
    stream = loadref.bandwidth_point(0, "cuda:0", H100, {"copy": 1000.0, "triad": 2900.0},
                                     own["reference"], LOAD)
    for point in (gemm, stream):
        assert point.verdict == "degraded" and "the project's reference for H100 SXM" in point.provider
        assert "healthy" not in point.provider
    shipped = loadref.gemm_point(0, "cuda:0", H100, "bfloat16", 400.0, REFERENCE, LOAD)
    assert "a healthy H100 SXM measures" in shipped.provider


def test_a_cpu_that_slows_down_is_not_called_gpu_none() -> None:
    point = sustained_point(None, "cpu", [1.0] * 10 + [0.1] * 10, LOAD)
    assert point.verdict == "degraded" and "GPU None" not in point.provider and "the machine (cpu)" in point.provider


def test_a_gemm_loop_that_could_not_allocate_is_incomplete() -> None:
    oom = failure_point("load.gemm", None, "the GEMM loop",
                        RuntimeError("CUDA out of memory. Tried to allocate 2 GiB"))
    assert oom.verdict == "unknown"
    why = accept._unmeasured([oom])
    assert why and "load.gemm: the GEMM loop could not allocate" in why
    assert evidence.verdict([oom], why) == "incomplete"
