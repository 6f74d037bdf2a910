"""`kdkit plan --schedule`: stages placed (one GPU in series, GPUs in parallel, waits, human preparation), the
seeds' arithmetic kept exact, cuts and more lots when over the window, and every bad schedule refused."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from kdkit.core.errors import BadInput
from kdkit.order import schedule as stagelib
from kdkit.order.orderfile import load_order
from tests.conftest import invoke, tree_snapshot

PLAN = ("plan", "--gpu", "RTX 4090", "--days", "3")


def _write(folder: Path, stages: list[dict[str, Any]] | str, name: str = "schedule.json") -> Path:
    path = folder / name
    path.write_text(stages if isinstance(stages, str)
                    else json.dumps({"stages": stages}), encoding="utf-8")
    return path


def _sched(folder: Path, stages: list[dict[str, Any]], *args: str,
           lots: str = "1") -> dict[str, Any]:
    result = invoke(*PLAN, "--lots", lots, "--schedule", _write(folder, stages), *args, "--json")
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.output)["schedule"]
    return data


def _ends(schedule: dict[str, Any]) -> dict[str, Any]:
    return {row["name"]: row["end"] for row in schedule["stages"]["stages"]}


# ---------------------------------------------------------------- the seeds' arithmetic, exact


def test_48_hours_of_stages_in_72_leave_24(tmp_path: Path) -> None:
    stages = [{"name": "install", "machine_hours": 6},
              {"name": "checks", "machine_hours": 2, "after": ["install"]},
              {"name": "compute", "machine_hours": 36, "after": ["checks"]},
              {"name": "export", "machine_hours": 4, "after": ["compute"]}]
    sched = _sched(tmp_path, stages)
    assert {k: v for k, v in sched.items() if k != "stages"} == {
        "window_hours": 72, "booked_hours": 48, "left_hours": 24, "over_hours": None, "fits": True,
        "longer_plan": None, "suggestions": []}
    assert sched["stages"]["last_end_hours"] == 48
    assert sched["stages"]["critical_chain"] == ["install", "checks", "compute", "export"]
    text = invoke(*PLAN, "--lots", "1", "--schedule", tmp_path / "schedule.json").output
    assert "Schedule: 48 h booked in a 72 h window leaves 24 h." in text


def test_30_more_hours_reach_78_six_over_three_days(tmp_path: Path) -> None:
    stages = [{"name": "booked", "machine_hours": 48},
              {"name": "more", "machine_hours": 30, "after": ["booked"]}]
    sched = _sched(tmp_path, stages)
    assert sched["booked_hours"] == 78 and sched["over_hours"] == 6 and sched["fits"] is False
    assert sched["longer_plan"] == {"days": 7, "total_usd": "110.00", "difference_usd": "62.86"}
    assert sched["suggestions"][:2] == [
        "take the 7-day plan: 110.00 USD in total, 62.86 USD more",
        "or reduce the protocol by 6 h to fit 72 h: keep the essential work, move useful and "
        "exploratory runs out"]
    text = invoke(*PLAN, "--lots", "1", "--schedule", tmp_path / "schedule.json").output
    assert "Schedule: 78 h booked exceeds the 72 h window by 6 h." in text


def test_hours_are_decimal_not_float(tmp_path: Path) -> None:
    # 0.1 + 0.2 in binary floating point is 0.30000000000000004; 71.9 + 0.1 must be exactly the window.
    sched = _sched(tmp_path,
                   [{"name": "a", "machine_hours": 0.1}, {"name": "b", "machine_hours": 0.2}])
    assert sched["booked_hours"] == 0.3 and sched["left_hours"] == 71.7
    sched = _sched(tmp_path,
                   [{"name": "a", "machine_hours": 71.9}, {"name": "b", "machine_hours": 0.1}])
    assert sched["booked_hours"] == 72 and sched["left_hours"] == 0 and sched["fits"] is True


# ---------------------------------------------------------------- placing: one GPU in series, GPUs in parallel


def test_two_stages_on_one_gpu_run_in_series(tmp_path: Path) -> None:
    stages = [{"name": "control", "machine_hours": 30, "gpu": 0},
              {"name": "variant", "machine_hours": 30, "gpu": 0}]
    sched = _sched(tmp_path, stages, lots="2")
    assert sched["booked_hours"] == 60 and _ends(sched) == {"control": 30, "variant": 60}
    assert sched["stages"]["gpus"] == [{"gpu": 0, "busy_hours": 60}]


def test_two_stages_on_two_gpus_run_in_parallel(tmp_path: Path) -> None:
    stages = [{"name": "control", "machine_hours": 30, "gpu": 0},
              {"name": "variant", "machine_hours": 30, "gpu": 1}]
    sched = _sched(tmp_path, stages, lots="2")
    assert sched["booked_hours"] == 30 and _ends(sched) == {"control": 30, "variant": 30}
    assert sched["stages"]["gpus"] == [{"gpu": 0, "busy_hours": 30}, {"gpu": 1, "busy_hours": 30}]


def test_a_b200_lot_holds_two_gpus(tmp_path: Path) -> None:
    stages = [{"name": "a", "machine_hours": 30, "gpu": 0},
              {"name": "b", "machine_hours": 30, "gpu": 1}]
    result = invoke("plan", "--gpu", "B200", "--days", "3", "--lots", "1", "--price", "500",
                    "--schedule",
                    _write(tmp_path, stages), "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["schedule"]["booked_hours"] == 30


def test_after_chains_wait_even_across_gpus(tmp_path: Path) -> None:
    stages = [{"name": "setup", "machine_hours": 4, "gpu": 0},
              {"name": "control", "machine_hours": 20, "gpu": 0, "after": ["setup"]},
              {"name": "variant", "machine_hours": 10, "gpu": 1, "after": ["setup"]},
              {"name": "analysis", "machine_hours": 3, "gpu": 1, "after": ["control", "variant"]}]
    sched = _sched(tmp_path, stages, lots="2")
    assert _ends(sched) == {"setup": 4, "control": 24, "variant": 14, "analysis": 27}
    assert sched["stages"]["critical_chain"] == ["setup", "control", "analysis"]
    rows = {r["name"]: r for r in sched["stages"]["stages"]}
    assert rows["analysis"]["waited_for"] == "control" and rows["variant"]["start"] == 4


def test_human_preparation_overlaps_other_machine_work_but_not_other_preparation(
    tmp_path: Path) -> None:
    stages = [{"name": "control", "machine_hours": 10},
              {"name": "variant", "machine_hours": 10, "human_hours": 5}]
    sched = _sched(tmp_path, stages)
    # its 5 h of preparation ran during control: not 25
    assert _ends(sched) == {"control": 10, "variant": 20}
    rows = {r["name"]: r for r in sched["stages"]["stages"]}
    assert rows["variant"]["start"] == 0 and rows["variant"]["machine_start"] == 10
    prep_only = [{"name": "write", "machine_hours": 0, "human_hours": 3, "gpu": None},
                 {"name": "review", "machine_hours": 0, "human_hours": 3, "gpu": None}]
    assert _sched(tmp_path, prep_only)["booked_hours"] == 6  # one person: one preparation at a time
    assert _sched(tmp_path, prep_only)["stages"]["human_hours"] == 6


def test_preparation_waits_for_the_stages_it_needs(tmp_path: Path) -> None:
    stages = [{"name": "pilot", "machine_hours": 10},
              {"name": "full", "machine_hours": 20, "human_hours": 2,
               "after": ["pilot"]}]
    assert _ends(_sched(tmp_path, stages)) == {"pilot": 10, "full": 32}


def test_stages_without_a_gpu_run_side_by_side(tmp_path: Path) -> None:
    stages = [{"name": "copy-out", "machine_hours": 10, "gpu": None},
              {"name": "compute", "machine_hours": 10}]
    assert _sched(tmp_path, stages)["booked_hours"] == 10


def test_ready_stages_go_essential_first_and_the_result_is_deterministic(tmp_path: Path) -> None:
    stages = [{"name": "explore", "machine_hours": 30, "category": "exploratory"},
              {"name": "nice", "machine_hours": 5, "category": "useful"},
              {"name": "control", "machine_hours": 10}]
    sched = _sched(tmp_path, stages)
    assert _ends(sched) == {"control": 10, "nice": 15, "explore": 45}
    assert _sched(tmp_path, stages) == sched


def test_the_longest_chain_allowed_is_placed_and_one_more_stage_is_refused(tmp_path: Path) -> None:
    stages = [{"name": f"s{i}", "machine_hours": 0.05, **({"after": [f"s{i - 1}"]} if i else {})}
              for i in range(200)]
    assert _sched(tmp_path, stages)["booked_hours"] == 10
    result = invoke(*PLAN, "--lots", "1", "--schedule",
                    _write(tmp_path, [*stages, {"name": "x", "machine_hours": 1}]))
    assert result.exit_code == 2 and "$.stages: " in result.output


# ---------------------------------------------------------------- over the window: cut, or take another plan


def test_cuts_exploratory_first_then_useful_never_essential(tmp_path: Path) -> None:
    stages = [{"name": "control", "machine_hours": 40},
              {"name": "nice", "machine_hours": 20, "category": "useful"},
              {"name": "wild", "machine_hours": 15, "category": "exploratory"},
              {"name": "wilder", "machine_hours": 5, "category": "exploratory"}]
    sched = _sched(tmp_path, stages)
    assert sched["booked_hours"] == 80 and sched["over_hours"] == 8
    cut = sched["stages"]["cut"]
    assert [c["name"] for c in cut["stages"]] == ["wild"] and cut == {
        "stages": [{"name": "wild", "category": "exploratory", "machine_hours": 15}],
        "last_end_hours": 65,
        "fits": True}
    stages[0]["machine_hours"] = 60
    cut = _sched(tmp_path, stages)["stages"]["cut"]
    assert [c["name"] for c in cut["stages"]] == ["wild", "wilder", "nice"]
    assert cut["last_end_hours"] == 60 and cut["fits"] is True
    stages[0]["machine_hours"] = 80
    sched = _sched(tmp_path, stages)
    assert sched["stages"]["cut"]["fits"] is False and sched["stages"]["cut"]["last_end_hours"] == 80
    assert any("still 8 h over the window" in s for s in sched["suggestions"])


def test_a_cut_takes_what_waits_on_it_and_spares_what_essential_work_needs(tmp_path: Path) -> None:
    stages = [{"name": "control", "machine_hours": 50},
              {"name": "probe", "machine_hours": 10, "category": "exploratory"},
              {"name": "probe-report", "machine_hours": 10, "category": "exploratory",
               "after": ["probe"]},
              {"name": "needed", "machine_hours": 12, "category": "exploratory"},
              {"name": "final", "machine_hours": 1, "after": ["needed"]}]
    cut = _sched(tmp_path, stages)["stages"]["cut"]
    assert [c["name"] for c in cut["stages"]] == ["probe", "probe-report"]
    assert cut["last_end_hours"] == 63


def test_more_lots_are_priced_and_their_limits_said(tmp_path: Path) -> None:
    stages = [{"name": "control", "machine_hours": 40}, {"name": "variant", "machine_hours": 40}]
    sched = _sched(tmp_path, stages)
    assert sched["stages"]["more_lots"] == {"lots": 2, "gpus": 2, "last_end_hours": 40,
                                            "total_usd": "94.28",
                                            "difference_usd": "47.14"}
    assert any(s.startswith("or order 2 lots (2 GPUs, 94.28 USD in total, 47.14 USD more)") and
               "never shorten one stage nor pool memory" in s for s in sched["suggestions"])
    chain = [{"name": "a", "machine_hours": 40}, {"name": "b", "machine_hours": 40, "after": ["a"]}]
    sched = _sched(tmp_path, chain)
    assert sched["stages"]["more_lots"] == {"lots": None, "gpus": None, "last_end_hours": 80,
                                            "total_usd": None,
                                            "difference_usd": None}
    assert "more lots do not help: the chain of waits alone ends at 80 h" in sched["suggestions"]


def test_stages_crowded_on_one_of_two_ordered_gpus_are_told_to_spread(tmp_path: Path) -> None:
    stages = [{"name": "control", "machine_hours": 40}, {"name": "variant", "machine_hours": 40}]
    sched = _sched(tmp_path, stages, lots="2")
    assert sched["stages"]["more_lots"]["lots"] == 2 and sched["stages"]["more_lots"]["difference_usd"] == "0.00"
    assert any(s.startswith("spread the stages over the 2 GPU(s) already ordered")
               for s in sched["suggestions"])


def test_the_schedule_is_saved_in_the_order_and_shown(tmp_path: Path) -> None:
    stages = [
        {"name": "control", "machine_hours": 30, "human_hours": 2,
         "gpu": 0, "category": "essential"}]
    order_path = tmp_path / "order.json"
    result = invoke(*PLAN, "--lots", "1", "--schedule",
                    _write(tmp_path, stages), "--save", order_path)
    assert result.exit_code == 0, result.output
    assert "control" in result.output and "Last stage ends at 32 h" in result.output
    order = load_order(order_path)
    assert order["schedule"]["booked_hours"] == 32 and order["schedule"]["stages"]["stages"][0]["name"] == "control"
    assert order["schedule"]["stages"]["rule"] == stagelib.RULE


# ---------------------------------------------------------------- bad schedules: one line, exit 2, nothing written


BAD: list[tuple[str, str]] = [
    ('{"stages": [{"name": "a", "machine_hours": 1, "after": ["b"]}, {"name": "b", '
     '"machine_hours": 1, "after": ["c"]}, {"name": "c", "machine_hours": 1, "after": ["a"]}]}',
     "$.stages[2].after: the stages wait for each other in a cycle (a waits for b waits for c "
     "waits for a); remove one of these waits"),
    ('{"stages": [{"name": "a", "machine_hours": 1, "after": ["a"]}]}',
     "$.stages[0].after: the stages wait for each other in a cycle (a waits for a); remove one of "
     "these waits"),
    ('{"stages": [{"name": "a", "machine_hours": 1, "after": ["setpu"]}, {"name": "setup", '
     '"machine_hours": 1}]}',
     "$.stages[0].after[0]: 'setpu' is no stage of this schedule (stages: a, setup); fix the name "
     "or add the stage"),
    ('{"stages": [{"name": "a", "machine_hours": 1}, {"name": "a", "machine_hours": 2}]}',
     "$.stages[1].name: 'a' is also the name of $.stages[0]; give each stage its own name"),
    ('{"stages": [{"name": "a", "machine_hours": -1}]}',
     "$.stages[0].machine_hours: -1 is less than the minimum of 0"),
    ('{"stages": [{"name": "a", "machine_hours": 1, "human_hours": -0.5}]}',
     "$.stages[0].human_hours: -0.5 is less than the minimum of 0"),
    ('{"stages": [{"name": "a", "machine_hours": NaN}]}', ":1:44: NaN is not a finite number"),
    ('{"stages": [{"name": "a", "machine_hours": Infinity}]}',
     ":1:44: Infinity is not a finite number"),
    ('{"stages": [{"name": "a", "machine_hours": 1e400}]}', "not a finite number"),
    ('{"stages": [{"name": "a", "machine_hours": 9000}]}',
     "$.stages[0].machine_hours: 9000 is greater than"),
    ('{"stages": [{"name": "a", "machine_hours": true}]}',
     "$.stages[0].machine_hours: expected number, got bool"),
    ('{"stages": [{"name": "a", "machine_hours": 1, "gpus": 0}]}',
     "$.stages[0]: unknown key 'gpus'"),
    ('{"stages": [], "extra": 1}', "$: unknown key 'extra'"),
    ('{"stages": [{"name": "a", "machine_hours": 1, "category": "optional"}]}',
     "$.stages[0].category: \"optional\" is not allowed"),
    ('{"stages": [{"name": "a", "machine_hours": 1, "gpu": 1}]}',
     "$.stages[0].gpu: GPU 1, but the order holds 1 card(s) (GPU 0 to 0); order more lots (--lots) "
     "or put the stage on a GPU it holds"),
    ('{"stages": [{"name": "a\\u001b[31m", "machine_hours": 1}]}', "$.stages[0].name"),
    ('[1]', "$: expected object, got list"),
]


@pytest.mark.parametrize(("text", "message"), BAD)
def test_bad_schedule_exits_2_naming_file_and_place_and_writes_nothing(tmp_path: Path, text: str,
                                                                       message: str) -> None:
    path = _write(tmp_path, text)
    before = tree_snapshot(tmp_path)
    result = invoke(*PLAN, "--lots", "1", "--schedule", path, "--save", tmp_path / "order.json")
    assert result.exit_code == 2, result.output
    line = result.output.strip()
    assert "\n" not in line and line.startswith(f"Error: {path}"), line
    assert message in line
    assert "\x1b" not in line
    assert tree_snapshot(tmp_path) == before


def test_hours_and_schedule_together_are_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, [{"name": "a", "machine_hours": 1}])
    result = invoke(*PLAN, "--lots", "1", "--hours", "48", "--schedule", path,
                    "--save", tmp_path / "o.json")
    assert result.exit_code == 2
    assert result.output.strip() == (f"Error: --hours 48 and --schedule {path}: the schedule gives "
                                     "the hours; pass one of them")
    assert not (tmp_path / "o.json").exists()


def test_a_missing_schedule_file_is_bad_input(tmp_path: Path) -> None:
    result = invoke(*PLAN, "--lots", "1", "--schedule", tmp_path / "none.json")
    assert result.exit_code == 2 and str(tmp_path / "none.json") in result.output


def test_load_schedule_reads_defaults(tmp_path: Path) -> None:
    stages = stagelib.load_schedule(_write(tmp_path, [{"name": "a", "machine_hours": 1.5}]))
    assert stages == (stagelib.Stage("a", Decimal("1.5"), Decimal(0), 0, (), "essential", 0),)
    with pytest.raises(BadInput):
        stagelib.load_schedule(_write(tmp_path, '{"stages": []}'))
