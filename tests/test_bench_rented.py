"""bench/bench_rented.py's pure parts: its options, repetitions, medians against the floor, goals, the table.

The measures themselves need an engine and minutes of work each; they run as `bench/bench_rented.py --quick`.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module("bench_rented")
    finally:
        sys.path.remove(str(BENCH))


def test_repetitions_default_per_measure_quick_is_one_and_repeat_applies_to_timed_measures(
    bench: ModuleType) -> None:
    plain = bench.parse_args([])
    assert [bench.repeats(plain, m) for m in ("verdict", "rebuild", "size")] == [5, 3, 1]
    quick = bench.parse_args(["--quick", "--only", "verdict"])
    assert quick.only == "verdict" and bench.repeats(quick, "verdict") == 1 and bench.repeats(quick,
                                                                                              "rebuild") == 1
    seven = bench.parse_args(["--repeat", "7"])
    assert [bench.repeats(seven, m) for m in ("verdict", "rebuild", "size")] == [7, 7, 1]


@pytest.mark.parametrize("argv",
                         [["--repeat", "0"], ["--repeat", "11"], ["--quick", "--repeat", "3"],
                          ["--only", "speed"]])
def test_bad_options_exit_2(bench: ModuleType, argv: list[str],
                            capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        bench.parse_args(argv)
    assert exit_.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_one_distinct_package_per_rebuild_none_of_them_in_the_torch_lock(bench: ModuleType) -> None:
    packages = bench.EXTRA_PACKAGES
    assert len(set(packages)) == len(packages) == 10
    assert not set(packages) & {"torch", "filelock", "fsspec", "jinja2", "markupsafe", "mpmath",
                                "networkx",
                                "sympy", "typing-extensions", "setuptools"}


def test_versus_takes_medians_of_each_side_and_judges_the_ratio(bench: ModuleType) -> None:
    times = {"kdkit": [12.0, 10.0, 11.0, 30.0, 10.5], "floor": [10.0, 9.0, 10.0, 9.5, 40.0]}
    result = bench.versus("verdict", times, "kdkit", "floor")
    assert result["median_s"] == {"kdkit": 11.0, "floor": 10.0}
    assert result["value"] == 1.1 and result["goal"] == "<= 1.25" and result["passed"] is True
    slow = bench.versus("verdict", {"kdkit": [13.0], "floor": [10.0]}, "kdkit", "floor")
    assert slow["value"] == 1.3 and slow["passed"] is False


def test_goals_are_limits_met_at_equality(bench: ModuleType) -> None:
    assert bench.judged("rebuild", 0.2)["passed"] and not bench.judged("rebuild", 0.201)["passed"]
    assert bench.judged("size", 1.0)["passed"] and not bench.judged("size", 1.5)["passed"]


def test_table_shows_medians_goal_verdict_and_labels_a_smoke_run(bench: ModuleType) -> None:
    result = {"smoke": True, "valid": True,
              **bench.versus("rebuild", {"full": [100.0], "one": [15.0]}, "one", "full")}
    text = bench.table("rebuild", result)
    assert "SMOKE RUN" in text.splitlines()[0]
    assert "| full | 100.00 | 1 |" in text and "| one | 15.00 | 1 |" in text
    assert text.rstrip().endswith("0.15 (goal <= 0.2): PASS")


def test_table_of_sizes_and_of_an_invalid_measure(bench: ModuleType) -> None:
    sizes = {"bytes": {"image": 1_000_000_000, "base": 120_000_000,
                       "venv": 870_000_000, "overhead": 10_000_000},
             **bench.judged("size", 1.0)}
    text = bench.table("size", sizes)
    assert "SMOKE" not in text and "| overhead | 10.0 |" in text and text.rstrip().endswith("PASS")
    invalid = bench.table("verdict",
                          {"valid": False,
                           "reason": "floor: run x has the verdict 'fail', not pass"})
    assert "INVALID: floor: run x" in invalid and "PASS" not in invalid.replace("not pass", "")
