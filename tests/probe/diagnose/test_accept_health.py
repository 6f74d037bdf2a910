"""The health section of `kdkit diagnose --accept`: the driver's facts, read before and without torch, and the
points they make.

No GPU exists here: each scenario puts stand-in `nvidia-smi` / `amd-smi` / `rocm-smi` executables alone on
PATH (tests/smi_standin.py), answering from recorded outputs built on the documented formats
(tests/data/smi/README.md). kdkit's code path is the real one: it runs the program of that name through
kdkit.core.proc.run and parses what it prints.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from kdkit.core.finding import Finding
from kdkit.probe.diagnose import health, health_rules, smi, smi_amd, smi_nvidia
from kdkit.probe.diagnose.host import hardware_hints
from kdkit.probe.diagnose.points import VERDICTS, machine_verdict, reasons, thresholds
from kdkit.probe.diagnose.smi_values import parse
from tests.smi_standin import LOG, PHASE, install


@pytest.fixture
def standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``use(scenario, phase=None)``: that scenario's stand-ins alone on PATH; returns the command log."""

    def use(scenario: str, phase: str | None = None) -> Path:
        bin_dir = install(tmp_path / "bin", scenario)
        monkeypatch.setenv("PATH", str(bin_dir))
        log = tmp_path / "calls.log"
        monkeypatch.setenv(LOG, str(log))
        if phase:
            monkeypatch.setenv(PHASE, phase)
        else:
            monkeypatch.delenv(PHASE, raising=False)
        return log

    return use


def by(points: list[Finding], name: str, gpu: int | None = None) -> Finding:
    found = [point for point in points if point.name == name and point.gpu == gpu]
    assert len(found) == 1, f"{name} GPU {gpu}: {found}"
    return found[0]


def verdicts(points: list[Finding], verdict: str) -> list[tuple[str, int | None]]:
    return [(point.name, point.gpu) for point in points if point.verdict == verdict]


def calls(log: Path, start: str = "") -> list[str]:
    return [line for line in log.read_text().splitlines()
            if line.startswith(start)] if log.exists() else []


def well_formed(points: list[Finding]) -> None:
    """Every point has a verdict, a one-line why, and a provider sentence where it is the provider's to fix."""
    for point in points:
        assert point.section == "health" and point.verdict in VERDICTS and point.why and "\n" not in point.why
        if point.verdict in ("refuse", "degraded") and point.provider:
            assert point.provider.endswith(
                ("machine", "one", "ordered", "on", "limit")), point.provider


# ---------------------------------------------------------------- NVIDIA scenarios


def test_a_healthy_h100_machine_is_accepted_against_its_order(standin: Any) -> None:
    standin("h100x8-healthy")
    facts, points = health.check(cuda="12.8", expected_name="H100 80GB SXM", expected_count=8)
    well_formed(points)
    assert (facts["vendor"], facts["driver_version"], facts["cuda_version"],
            len(facts["gpus"])) == (
        "nvidia", "570.124.06", "12.8", 8)
    assert facts["query"]["renamed"] == {} and facts["query"]["unknown"] == [
        "reset_status.reset_required", "reset_status.drain_and_reset_recommended"]
    assert verdicts(points, "refuse") == verdicts(points, "degraded") == verdicts(points,
                                                                                  "unknown") == []
    assert machine_verdict(points) == "accept"
    assert by(points, "driver.version").threshold == ">= 525.60.13"
    assert by(points, "gpu.count").verdict == "ok"
    for index in range(8):
        assert by(points, "gpu.name", index).verdict == "ok"
        memory = by(points, "gpu.memory", index)
        assert (memory.reading, memory.verdict, memory.unit) == (81559, "ok", "MiB")
        assert by(points, "links.down", index).why == "18 of 18 NVLink links up"
        assert by(points, "recovery_action", index).reading == "None"
        assert by(points, "pcie.gen", index).verdict == by(
            points, "pcie.width", index).verdict == "ok"
        # Row remapping replaces page retirement on Hopper: retired_pages "[N/A]" makes no point.
        assert not [point for point in points if point.name == "retired_pages.pending"]


def test_the_wrong_card_or_too_few_are_refused_and_an_unknown_order_is_not_judged(
    standin: Any) -> None:
    standin("h100x8-healthy")
    facts = smi.read()
    wrong = health.health_points(facts, "12.8", expected_name="H200", expected_count=16)
    assert by(wrong, "gpu.count").verdict == "refuse"
    assert "the driver sees 8 x NVIDIA H100 80GB HBM3; the order is for 16" in by(wrong,
                                                                                  "gpu.count").why
    name = by(wrong, "gpu.name", 3)
    assert name.verdict == "refuse" and name.provider == (
        "GPU 3 (NVIDIA H100 80GB HBM3, serial 1652823054324) is not the H200 ordered; please give "
        "me the card ordered")
    odd = health.health_points(facts, "12.8", expected_name="Banana 9000", expected_count=None)
    assert by(odd, "gpu.name", 0).verdict == "unknown" and by(odd, "gpu.count").verdict == "info"
    names = [point for point in health.health_points(facts) if point.name == "gpu.name"]
    assert [(point.verdict, point.reading)
            for point in names] == [("info", "NVIDIA H100 80GB HBM3")] * 8
    assert names[7].why == "GPU 7 (NVIDIA H100 80GB HBM3, serial 1652823054328)"
    # no lock CUDA to compare with
    assert by(health.health_points(facts), "driver.version").verdict == "info"


def test_h200_thermal_throttling_shows_in_the_samples_under_load(standin: Any) -> None:
    log = standin("h200x4-thermal")
    _, idle = health.check(cuda="12.8", expected_name="H200", expected_count=4)
    assert machine_verdict(idle) == "accept"
    assert all(by(idle, "throttle", index).verdict == "ok" for index in range(4))
    standin("h200x4-thermal", phase="load")
    first = smi.sample()
    assert sorted(first) == [0, 1, 2, 3]
    hot = first[2]
    assert (hot["sm_clock"], hot["sm_clock_max"], hot["temperature"],
            hot["throttle.hw_thermal_slowdown"],
            hot["throttle.gpu_idle"],
            hot["bus_id"]) == (1095, 1980, 92, True, False, "00000000:4C:00.0")
    assert first[0]["throttle.sw_power_cap"] is True and first[0]["throttle.hw_thermal_slowdown"] is False
    before = len(calls(log, "nvidia-smi --query-gpu"))
    smi.sample()
    # each sample: one run of nvidia-smi
    assert len(calls(log, "nvidia-smi --query-gpu")) == before + 1
    loaded = health.health_points(smi.read(), "12.8")
    throttle = by(loaded, "throttle", 2)
    assert throttle.verdict == "degraded" and "hw_thermal_slowdown" in throttle.why
    assert throttle.provider is not None and throttle.provider.startswith(
        "GPU 2 (NVIDIA H200, serial 1653224015532)")
    assert by(loaded, "throttle", 0).verdict == "ok"  # sw_power_cap under load is expected


def test_a100_with_volatile_ecc_errors_and_a_pending_remap_is_refused(standin: Any) -> None:
    standin("a100x4-remap-ecc")
    facts, points = health.check(cuda="12.2", expected_name="A100 80GB SXM", expected_count=4)
    well_formed(points)
    assert facts["query"]["unknown"] == ["gpu_recovery_action"]  # R535: reset_status.* instead
    ecc = by(points, "ecc.volatile_uncorrected", 1)
    assert (ecc.reading, ecc.verdict, ecc.threshold) == (3, "refuse", "<= 0")
    assert ecc.provider == ("GPU 1 (NVIDIA A100-SXM4-80GB, serial 1323121035406) reports 3 "
                            "volatile uncorrectable ECC errors; please replace the card or the "
                            "machine")
    assert "docs.nvidia.com" in (ecc.source or "")
    assert by(points, "ecc.aggregate_uncorrected", 1).verdict == "info"
    remap = by(points, "remapped_rows.pending", 1)
    assert remap.verdict == "degraded" and remap.fix == "with root, no process on the GPU: sudo nvidia-smi -r -i 1"
    assert by(points, "remapped_rows.failure", 1).verdict == "ok"
    assert by(points, "recovery_action", 1).why == "no GPU reset required (reset_status)"
    assert machine_verdict(points) == "refuse"
    assert [(point.name, point.gpu)
            for point in reasons(points)] == [("ecc.volatile_uncorrected", 1)]
    for index in (0, 2, 3):
        assert by(points, "ecc.volatile_uncorrected", index).verdict == "ok"
        assert by(points, "remapped_rows.pending", index).verdict == "ok"


def test_a_project_may_loosen_a_threshold_and_the_point_says_whose_it_is(standin: Any) -> None:
    standin("a100x4-remap-ecc")
    points = health.health_points(smi.read(), "12.2",
                                  overrides={"health": {"ecc.volatile_uncorrected": {"value": 5}}})
    ecc = by(points, "ecc.volatile_uncorrected", 1)
    assert (ecc.verdict, ecc.source) == ("ok", "kdkit.json (this project)")


def test_a_link_trained_at_gen3_x8_is_info_at_idle_and_sampled_under_load(standin: Any) -> None:
    standin("h100pcie-gen3x8")
    _, points = health.check(cuda="12.8", expected_name="H100 PCIe", expected_count=1)
    gen, width = by(points, "pcie.gen", 0), by(points, "pcie.width", 0)
    assert (gen.reading, gen.threshold, gen.verdict) == (3, "Gen5", "info")
    assert (width.reading, width.threshold, width.verdict) == (8, "x16", "info")
    assert "judges it under load" in gen.why
    # a PCIe card lists no link
    assert [point for point in points if point.name == "links.down"] == []
    assert machine_verdict(points) == "accept"
    standin("h100pcie-gen3x8", phase="load")
    link = smi.sample()[0]
    assert (link["pcie_gen"], link["pcie_gen_max"], link["pcie_width"],
            link["pcie_width_max"]) == (3, 5, 8, 16)


def test_a_mig_slice_gives_unknown_readings_not_verdicts(standin: Any) -> None:
    standin("a100-mig-slice")
    _, points = health.check(cuda="12.8", expected_name="A100 40GB SXM", expected_count=1)
    well_formed(points)
    assert by(points, "mig.mode", 0).verdict == "info"
    for name in ("gpu.memory", "ecc.volatile_uncorrected",
                 "remapped_rows.pending", "recovery_action", "throttle"):
        assert by(points, name, 0).verdict == "unknown", name
    power = by(points, "power.limit", 0)
    assert power.verdict == "unknown" and "[Insufficient Permissions]" in power.why
    assert verdicts(points, "refuse") == verdicts(points, "degraded") == []


def test_an_old_driver_is_read_with_the_old_throttle_names_and_refused_for_a_cuda_12_lock(
    standin: Any) -> None:
    log = standin("v100x2-old-driver")
    facts, points = health.check(cuda="12.8")
    renamed = facts["query"]["renamed"]
    assert renamed["clocks_event_reasons.hw_thermal_slowdown"] == "clocks_throttle_reasons.hw_thermal_slowdown"
    assert len(renamed) == 8 and facts["query"]["unknown"] == [
        "gpu_recovery_action", "reset_status.reset_required",
        "reset_status.drain_and_reset_recommended"]
    # three fields dropped, one family renamed at once
    assert len(calls(log, "nvidia-smi --query-gpu")) == 5
    assert "clocks_event_reasons.* as clocks_throttle_reasons.* (8 fields)" in by(points,
                                                                                  "driver.fields").why
    assert by(points, "throttle", 0).verdict == "ok" and by(
        points, "retired_pages.pending", 0).verdict == "ok"
    # Volta retires pages
    assert [point for point in points if point.name.startswith("remapped_rows")] == []
    driver = by(points, "driver.version")
    assert (driver.verdict, driver.threshold) == ("refuse", ">= 525.60.13")
    assert driver.provider == ("The NVIDIA driver 470.182.03 is older than 525.60.13, which CUDA "
                               "12.8 needs; please update the driver to 525.60.13 or newer, or "
                               "give me a machine with one")
    assert by(health.health_points(facts, "11.8"), "driver.version").verdict == "ok"
    sample = smi.sample()
    assert sample[1]["throttle.gpu_idle"] is True and sample[1]["pcie_gen"] == 3


def test_odd_output_gives_unknown_readings_not_a_crash(standin: Any) -> None:
    standin("odd-formats")
    facts, points = health.check(cuda="12.8", expected_name="H100 80GB SXM", expected_count=3)
    well_formed(points)
    assert [gpu["index"] for gpu in facts["gpus"]] == [0, 1, 2]
    first = facts["gpus"][0]
    assert (first["memory_mib"], first["power_draw"], first["temperature"]) == (81559, 69.83, None)
    assert first["unread"]["temperature"] == "not a number: 'hot'"
    assert by(points, "ecc.mode", 0).verdict == "unknown" and "'Enabled?'" in by(
        points, "ecc.mode", 0).why
    assert by(points, "remapped_rows.pending", 0).verdict == "unknown"
    for index in (1, 2):
        assert by(points, "gpu.readings", index).verdict == "unknown"
    output = by(points, "driver.output")
    assert "WARNING: infoROM is corrupted" in output.why and "printed 7 values for 33 fields" in output.why
    assert by(points, "driver.cuda").reading is None


def test_a_hanging_nvidia_smi_is_bounded(standin: Any) -> None:
    standin("nvidia-smi-hangs")
    started = time.monotonic()
    facts, points = health.check(cuda="12.8", timeout=2)
    # a hang only: the stand-in never answers, kdkit waits 2 s
    assert time.monotonic() - started < 120
    tool = by(points, "driver.tool")
    assert tool.verdict == "refuse" and "no answer within 2 s" in tool.why
    assert facts["gpus"] == [] and machine_verdict(points) == "refuse"
    started = time.monotonic()
    assert smi.sample(timeout=1) == {}
    assert time.monotonic() - started < 120  # a hang only


def test_a_driver_that_is_not_loaded_is_refused_with_its_message(standin: Any) -> None:
    standin("driver-not-loaded")
    _, points = health.check(cuda="12.8")
    assert [point.name for point in points] == ["driver.tool"]
    tool = points[0]
    assert tool.verdict == "refuse" and "exited 9" in tool.why and "couldn't communicate" in tool.why
    assert tool.provider is not None and tool.provider.startswith(
        "nvidia-smi fails on this machine")
    assert smi.sample() == {}


def test_no_driver_tool_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    facts, points = health.check(cuda="12.8", expected_count=1)
    assert facts["tool"] is None and facts["failure"] == "no nvidia-smi, amd-smi or rocm-smi on PATH"
    assert len(points) == 1 and smi.sample() == {}
    if hardware_hints():  # a machine with GPU device nodes but no tool on PATH
        assert (points[0].name, points[0].verdict) == ("driver.tool", "unknown")
    else:
        assert (points[0].name, points[0].verdict) == ("gpu.present", "refuse")
        assert machine_verdict(points) == "refuse"


# ---------------------------------------------------------------- AMD scenarios


def test_a_healthy_mi300x_machine_on_an_older_amd_smi(standin: Any) -> None:
    standin("mi300x8-healthy")
    facts, points = health.check(expected_name="MI300X", expected_count=8)
    well_formed(points)
    assert (facts["vendor"], facts["tool"], facts["driver_version"],
            len(facts["gpus"])) == ("amd", "amd-smi",
                                                                                             "6.10.5", 8)
    gpu = facts["gpus"][5]
    assert (gpu["name"], gpu["serial"], gpu["memory_mib"], gpu["pcie_gen"],
            gpu["pcie_gen_max"]) == (
        "AMD Instinct MI300X", "692325001005", 196592, 5, 5)
    assert machine_verdict(points) == "accept" and verdicts(points, "unknown") == []
    assert by(points, "gpu.memory", 5).verdict == "ok" and by(
        points, "ecc.uncorrected", 5).verdict == "ok"
    assert by(points, "ecc.mode", 5).verdict == "ok" and by(points, "throttle", 5).verdict == "ok"
    # this amd-smi predates it: links unread
    assert "xgmi --link-status" in by(points, "driver.output").why
    standin("mi300x8-healthy", phase="load")
    sample = smi.sample()
    assert (sample[7]["sm_clock"], sample[7]["pcie_gen"], sample[7]["pcie_gen_max"],
            sample[7]["bus_id"]) == (
        2100, 5, 5, "0000:e5:00.0")


def test_an_mi300x_with_an_xgmi_link_down_is_degraded(standin: Any) -> None:
    standin("mi300x8-xgmi-down")
    _, points = health.check(expected_name="MI300X", expected_count=8)
    well_formed(points)
    for index in (3, 6):
        link = by(points, "links.down", index)
        assert (link.reading,
                link.verdict, link.why) == (1, "degraded", "6 of 7 XGMI links up, 1 down")
        assert by(points, "xgmi.errors", index).verdict == "degraded"
    assert by(points, "links.down", 0).verdict == "ok" and by(
        points, "xgmi.errors", 0).verdict == "ok"
    assert by(points, "throttle", 0).verdict == "ok"  # the ROCm 6.4 violation states, none active
    assert machine_verdict(points) == "degraded"


def test_rocm_smi_on_an_older_stack_gives_name_memory_and_bus(standin: Any) -> None:
    standin("mi250x-rocm-smi")
    facts, points = health.check(expected_name="MI250X", expected_count=4)
    assert (facts["tool"], [gpu["bus_id"] for gpu in facts["gpus"]]) == (
        "rocm-smi", ["0000:C1:00.0", "0000:C6:00.0", "0000:C9:00.0", "0000:CE:00.0"])
    memory = by(points, "gpu.memory", 0)
    assert (memory.reading, memory.verdict) == (65520, "ok")  # one GCD: half of the MI250X's 128 GB
    assert by(points, "gpu.name", 2).verdict == "ok"
    # rocm-smi's RAS is text
    assert not [point for point in points if point.name.startswith(("ecc.", "links."))]
    assert machine_verdict(points) == "accept" and smi.sample() == {}


# ---------------------------------------------------------------- the readers' parts


@pytest.mark.parametrize(("kind", "text", "value", "why"), [
    ("number", " 81559 ", 81559, None), ("number", "69.50", 69.5, None),
    ("number", "32 GT/s", 32, None),
    ("number", "[N/A]", None, "[N/A]"),
    ("number", "[Insufficient Permissions]", None, "[Insufficient Permissions]"),
    ("number", "nan", None, "not a number: 'nan'"), ("number", "", None, "empty"),
    ("number", "N/A", None, "N/A"),
    ("flag", "Enabled", True, None), ("flag", "Not Active", False, None),
    ("flag", "Yes", True, None),
    ("flag", "0", False, None), ("flag", "2", True, None), ("flag", "THROTTLED", True, None),
    ("flag", "sometimes", None, "not a state: 'sometimes'"), ("text", " Default ", "Default", None),
    ("text", "[Not Supported]", None, "[Not Supported]"),
])
def test_one_printed_value(kind: str, text: str, value: Any, why: str | None) -> None:
    assert parse(kind, text) == (value, why)


def test_nvlink_status_lines() -> None:
    text = ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-a)\n\t Link 0: 26.562 GB/s\n\t Link 1: "
            "<inactive>\nGPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-b)\n\t Link 0: 26.562 GB/s\n\t "
            "Link 0, P2P is supported: true\nGPU 2: NVIDIA A10 (UUID: GPU-c)\n")
    assert smi_nvidia.nvlink_status(text) == {0: {"up": 1, "down": 1, "other": 0, "total": 2},
                                              1: {"up": 1, "down": 0, "other": 0, "total": 1},
                                              2: {"up": 0, "down": 0, "other": 0, "total": 0}}


@pytest.mark.parametrize("data", [
    {"link_status": [
        {"gpu": 0, "bdf": "0000:05:00.0", "link_status": ["SELF", "U", "D", "X", "N/A"]}]},
    [{"xgmi": {"nested": [{"gpu": 0, "link_status": ["U/D", "X"]}]}}],
])
def test_xgmi_link_states_are_found_wherever_nested(data: Any) -> None:
    assert smi_amd.link_states(data) == {0: ["U", "D", "X"]}


@pytest.mark.parametrize(("data", "count"),
                         [([{"gpu": 0}, {"gpu": 1}], 2), ({"gpu_data": [{"gpu": 0}]}, 1),
                          ({"gpu_data": "N/A"}, 0), ([{"gpu": "0"}, 3, None], 0), ("text", 0)])
def test_amd_smi_answers_of_either_shape(data: Any, count: int) -> None:
    assert len(smi_amd.entries(data)) == count


def test_the_stand_in_refuses_a_field_as_nvidia_smi_does(standin: Any) -> None:
    import subprocess

    standin("v100x2-old-driver")
    done = subprocess.run([
        "nvidia-smi", "--query-gpu=index,gpu_recovery_action", "--format=csv,noheader,nounits"],
                          capture_output=True, text=True, check=False, env=dict(os.environ))
    assert (done.returncode,
            done.stdout.strip()) == (2,
                                     'Field "gpu_recovery_action" is not a valid field to query.')


def test_every_health_rule_the_points_use_is_shipped() -> None:
    rules = thresholds()
    used = {"gpu.memory", "ecc.mode", "ecc.volatile_uncorrected", "ecc.aggregate_uncorrected",
            "ecc.uncorrected",
            "retired_pages.pending", "remapped_rows.pending", "remapped_rows.failure",
            "recovery_action", "pcie.link",
            "throttle.amd", "power.limit", "persistence_mode", "compute_mode",
            "mig.mode", "links.down", "xgmi.errors"}
    assert used <= set(rules["health"]) and "load.throttle" in rules["load"]
    assert {rules["health"][name].get("verdict", "ok") for name in used} <= set(VERDICTS)
    assert health_rules.SECTION == "health"
