"""`kdkit plan`: the provider's order number and status (recorded by --save, updated by --order, the plan never
rewritten) and --from-report (the next plan from a closed campaign's measured hours)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kdkit.order.orderfile import load_order
from tests.conftest import invoke, tree_snapshot

PLAN = ("plan", "--gpu", "RTX 4090", "--days", "3", "--lots", "1")


def _save(tmp_path: Path, *args: str) -> Path:
    path = tmp_path / "order.json"
    result = invoke(*PLAN, "--hours", "48", "--save", path, *args)
    assert result.exit_code == 0, result.output
    return path


# ---------------------------------------------------------------- order number and status


def test_save_records_the_order_number_and_status_and_shows_them(tmp_path: Path) -> None:
    path = tmp_path / "order.json"
    result = invoke(*PLAN, "--hours", "48", "--save", path, "--order-number",
                    "IG-2026-0042", "--order-status", "paid")
    assert result.exit_code == 0, result.output
    assert "Provider's order number: IG-2026-0042; status: paid (declared by you)." in result.output
    order = load_order(path)
    assert order["order_number"] == "IG-2026-0042" and order["order_status"] == "paid"
    assert "order_updates" not in order


def test_a_plan_without_them_records_nulls(tmp_path: Path) -> None:
    order = load_order(_save(tmp_path))
    assert order["order_number"] is None and order["order_status"] is None


def test_order_updates_number_and_status_and_keeps_the_plan(tmp_path: Path) -> None:
    path = _save(tmp_path, "--order-status", "paid")
    before = load_order(path)
    result = invoke("plan", "--order", path, "--order-number",
                    "IG-77", "--order-status", "confirmed")
    assert result.exit_code == 0, result.output
    assert "Provider's order number: IG-77; status: confirmed" in result.output
    assert f"Order {path} updated (its plan unchanged)." in result.output
    assert invoke("plan", "--order", path, "--order-status", "received").exit_code == 0
    after = load_order(path)
    assert after["order_number"] == "IG-77" and after["order_status"] == "received"
    assert [{k: v for k, v in u.items() if k != "at"} for u in after["order_updates"]] == [
        {"order_number": "IG-77", "order_status": "confirmed"}, {"order_status": "received"}]
    plan_keys = set(before) - {"order_number", "order_status"}
    # figures never rewritten
    assert {k: after[k] for k in plan_keys} == {k: before[k] for k in plan_keys}
    data = json.loads(
        invoke("plan", "--order", path, "--order-status", "received", "--json").output)
    assert len(data["order_updates"]) == 2  # nothing changed: nothing appended


BAD_ORDER = [
    (["--order-status", "received", "--gpu", "RTX 4090"],
     "--order {path} records the order number and status "
     "only; the plan is never rewritten: leave out --gpu (or make a new plan with --save)"),
    (["--hours", "3", "--save", "x.json"], "leave out --hours, --save"),
    ([], "--order {path}: nothing to record; pass --order-number TEXT and/or --order-status "
         "paid|confirmed|received"),
    (["--order-number", "IG\x1b[31m1"],
     "--order-number \"IG\\u001b[31m1\": expected the provider's order number, 1 to "
     "100 characters on one line without control characters"),
    (["--order-number", "x" * 101], "expected the provider's order number, 1 to 100 characters"),
    (["--order-number", "  "], "expected the provider's order number"),
]


@pytest.mark.parametrize(("args", "message"), BAD_ORDER)
def test_bad_order_updates_exit_2_and_change_nothing(tmp_path: Path,
                                                     args: list[str], message: str) -> None:
    path = _save(tmp_path)
    before = tree_snapshot(tmp_path)
    result = invoke("plan", "--order", path, *args)
    assert result.exit_code == 2, result.output
    assert message.format(path=path) in result.output and result.output.count("\n") == 1
    assert tree_snapshot(tmp_path) == before


def test_order_status_outside_the_three_is_refused(tmp_path: Path) -> None:
    path = _save(tmp_path)
    result = invoke("plan", "--order", path, "--order-status", "shipped")
    assert result.exit_code == 2 and "'shipped' is not one of 'paid', 'confirmed', 'received'" in result.output


def test_order_number_without_save_is_refused(tmp_path: Path) -> None:
    result = invoke(*PLAN, "--order-number", "IG-1")
    assert result.exit_code == 2
    assert "--order-number/--order-status are recorded in the order: pass --save FILE" in result.output


def test_a_plan_needs_gpu_days_and_lots(tmp_path: Path) -> None:
    result = invoke("plan", "--gpu", "RTX 4090")
    assert result.exit_code == 2 and "--gpu, --days and --lots make a plan" in result.output


def test_order_on_a_file_that_is_not_an_order_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "order.json"
    bad.write_text('{"kdkit_order": 1}', encoding="utf-8")
    result = invoke("plan", "--order", bad, "--order-status", "paid")
    assert result.exit_code == 2 and bad.read_text(encoding="utf-8") == '{"kdkit_order": 1}'


# ---------------------------------------------------------------- --from-report


def _report(tmp_path: Path, **content: Any) -> Path:
    path = tmp_path / "campaign-report.json"
    path.write_text(json.dumps({"kdkit_report": 1, **content}), encoding="utf-8")
    return path


def test_from_report_books_the_observed_hours(tmp_path: Path) -> None:
    report = _report(tmp_path, hours={"window": 72, "booked": 48, "observed": 52.5})
    result = invoke(*PLAN, "--from-report", report, "--json")
    assert result.exit_code == 0, result.output
    sched = json.loads(result.output)["schedule"]
    assert sched["booked_hours"] == 52.5 and sched["left_hours"] == 19.5
    assert sched["from_report"]["observed_hours"] == 52.5
    assert sched["from_report"]["observed_from"] == "$.hours.observed"
    text = invoke(*PLAN, "--from-report", report).output
    assert f"From {report}: observed 52.5 h in all" in text


@pytest.mark.parametrize("stages", [
    [{"name": "control", "booked": 30, "observed": 34}, {"name": "sweep", "observed": 2}],
    {"control": 34, "sweep": {"observed": 2}},
])
def test_from_report_with_a_schedule_uses_the_measured_stage_hours(
    tmp_path: Path, stages: Any) -> None:
    report = _report(tmp_path, hours={"observed": 40}, stages=stages)
    schedule = tmp_path / "schedule.json"
    schedule.write_text(json.dumps({"stages": [
        {"name": "setup", "machine_hours": 8},
        {"name": "control", "machine_hours": 30, "after": ["setup"]},
        {"name": "variant", "machine_hours": 30, "after": ["setup"], "category": "useful"}]}),
                        encoding="utf-8")
    result = invoke(*PLAN, "--schedule", schedule, "--from-report", report,
                    "--save", tmp_path / "order.json")
    assert result.exit_code == 0, result.output
    assert "control 30 → 34 h" in result.output and "in the report only: sweep" in result.output
    sched = load_order(tmp_path / "order.json")["schedule"]
    assert sched["booked_hours"] == 72 and sched["fits"] is True  # 8 + 34 + 30: exactly the window
    assert sched["from_report"]["replaced"] == [{"stage": "control", "planned": 30, "measured": 34}]
    assert sched["from_report"]["unmatched"] == [
        "sweep"] and sched["from_report"]["stages_from"] == "$.stages"


def test_from_report_reads_what_kdkit_close_writes(tmp_path: Path) -> None:
    report = _report(tmp_path, hours={"observed": 50.0},
                     work={"observed_hours": 50.0, "by_kind": {"train": 41.0}},
                     stages=[{"stage": "control", "booked_hours": 30,
                              "observed_hours": 41.0, "intervals": 2},
                             {"stage": "variant", "booked_hours": 30,
                              "observed_hours": 0.0, "intervals": 0},
                             {"stage": "(unscheduled)", "booked_hours": None,
                              "observed_hours": 9.0, "intervals": 1}],
                     measured_durations={"unit": "hours", "observed_hours": 50.0,
                                         "by_kind": {"train": 41.0},
                                         "by_stage": {"control": 41.0,
                                                      "variant": 0.0, "(unscheduled)": 9.0}})
    schedule = tmp_path / "schedule.json"
    schedule.write_text(json.dumps({"stages": [{"name": "control", "machine_hours": 30},
                                               {"name": "variant", "machine_hours": 30}]}),
                        encoding="utf-8")
    data = json.loads(
        invoke(*PLAN, "--schedule", schedule, "--from-report", report, "--json").output)["schedule"]
    assert data["booked_hours"] == 71  # control measured 41 h; variant never ran: its 30 h are kept
    assert data["from_report"]["stages_from"] == "$.measured_durations.by_stage"
    assert data["from_report"]["replaced"] == [{"stage": "control", "planned": 30, "measured": 41}]
    assert data["from_report"]["unmatched"] == ["(unscheduled)"]
    alone = json.loads(invoke(*PLAN, "--from-report", report, "--json").output)["schedule"]
    assert alone["booked_hours"] == 50
    assert alone["from_report"]["observed_from"] == "$.measured_durations.observed_hours"


def test_from_report_reads_stages_under_hours_too(tmp_path: Path) -> None:
    report = _report(tmp_path, hours={"observed": 40, "by_stage": {"control": 12.25}})
    schedule = tmp_path / "schedule.json"
    schedule.write_text(
        json.dumps({"stages": [{"name": "control", "machine_hours": 30}]}), encoding="utf-8")
    data = json.loads(
        invoke(*PLAN, "--schedule", schedule, "--from-report", report, "--json").output)
    assert data["schedule"]["booked_hours"] == 12.25
    assert data["schedule"]["from_report"]["stages_from"] == "$.hours.by_stage"


NO_HOURS = ("$.measured_durations.observed_hours: the report holds no observed hours (nor "
            "$.hours.observed); plan with --hours or --schedule")
BAD_REPORTS = [
    ({"kdkit_report": 1, "hours": {"observed": None}}, NO_HOURS),
    ({"kdkit_report": 1, "hours": {"observed": -3}, "measured_durations": {"observed_hours": "7"}},
     NO_HOURS),
    ({"something": 1}, "$.kdkit_report: not a kdkit campaign report; write one with `kdkit close`"),
]


@pytest.mark.parametrize(("content", "message"), BAD_REPORTS)
def test_bad_reports_exit_2_and_write_nothing(tmp_path: Path,
                                              content: dict[str, Any], message: str) -> None:
    report = tmp_path / "campaign-report.json"
    report.write_text(json.dumps(content), encoding="utf-8")
    before = tree_snapshot(tmp_path)
    result = invoke(*PLAN, "--from-report", report, "--save", tmp_path / "order.json")
    assert result.exit_code == 2
    assert result.output.strip() == f"Error: {report}: {message}" or message in result.output
    assert result.output.count("\n") == 1 and tree_snapshot(tmp_path) == before


def test_hours_and_from_report_together_are_refused(tmp_path: Path) -> None:
    report = _report(tmp_path, hours={"observed": 40})
    result = invoke(*PLAN, "--hours", "48", "--from-report", report)
    assert result.exit_code == 2 and "the report gives the hours; pass one of them" in result.output
