"""The one finding type (kdkit.core.finding): its fields, its text line, its JSON form, and that the
check families make it."""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path

import pytest

from kdkit.core.finding import VERDICTS, Finding, finding_json, finding_line, place

KDKIT = Path(__file__).resolve().parents[2] / "kdkit"


def test_a_verdict_outside_the_list_is_refused() -> None:
    with pytest.raises(ValueError, match="verdict 'passed' is not one of"):
        Finding("check", "cpu", None, None, "", None, "passed", "why")
    assert set(VERDICTS) >= {"ok", "info", "note", "skip", "unknown", "warn",
                             "degraded", "fail", "refuse"}


def test_the_text_line_shows_the_reading_and_threshold_only_where_there_are_some() -> None:
    measured = Finding("load", "load.gemm.sustained", 0, 0.5, "of the first 10 %",
                       ">= 0.9", "degraded", "slow")
    assert finding_line(
        measured) == ("DEGRADED gpu0    load.gemm.sustained = 0.5 of the first 10 % (threshold >= "
                                      "0.9): slow")
    unread = Finding("health", "driver.tool", None, None, "", None, "unknown", "no nvidia-smi")
    assert finding_line(unread) == "?        machine driver.tool = not read: no nvidia-smi"
    plain = Finding("check", "cpu", None, None, "", None, "fail", "made on macOS")
    assert finding_line(plain) == "FAIL     -       cpu: made on macOS"
    env = Finding("env", "version", None, "2.0", "", "2.1", "fail",
                  "beta: locked 2.1", where="beta")
    assert place(env) == "beta"
    assert finding_line(env) == "FAIL     beta    version = 2.0 (threshold 2.1): beta: locked 2.1"


def test_an_acceptance_point_with_a_verdict_of_another_family_is_refused_where_the_verdict_is_made() -> None:
    from kdkit.probe.diagnose.points import machine_verdict

    with pytest.raises(ValueError, match=r"verdict outside .*: load.x: fail"):
        machine_verdict([Finding("load", "load.x", 0, 1.0, "", None, "fail", "bad")])
    assert machine_verdict(
        [Finding("load", "load.x", 0, 1.0, "", None, "degraded", "slow")]) == "degraded"


def test_the_json_form_names_every_field_and_is_valid_json() -> None:
    finding = Finding("load", "load.io", 1, [1.0, math.nan, {"x": math.inf}], "GB/s", None, "ok",
                      "fine",
                      source="acceptance.json")
    plain = finding_json(finding)
    assert list(plain) == list(Finding.__slots__)
    assert plain["reading"] == [1.0, None, {"x": None}]
    assert json.loads(json.dumps(plain, allow_nan=False)) == plain


def test_each_check_family_makes_the_one_type() -> None:
    from kdkit.config.schemas import config_problem, config_warning, problem_line
    from kdkit.order.checkmodel import check_point
    from kdkit.probe.diagnose.core import skip
    from kdkit.probe.env.findings import env_finding

    assert type(skip("no GPU expected")) is Finding and skip("x").verdict == "skip"
    problem = config_problem(Path("config/pilot.json"), "$.inputs", "missing")
    assert type(problem) is Finding and (problem.section, problem.where, problem.name) == (
        "config", "config/pilot.json", "$.inputs")
    assert problem_line(problem, Path("/p")) == "/p/config/pilot.json: $.inputs: missing"
    assert config_warning(Path("."), "git", "dirty").verdict == "warn"

    point = check_point("kernels", "ok", "carries sm_90", source="facts")
    difference = env_finding("version", "beta", "warning", "beta: locked 2.1", "2.1", "2.0", 4)
    assert type(point) is Finding and (point.section,
                                       point.verdict, point.why) == ("check", "ok", "carries sm_90")
    assert type(difference) is Finding
    assert (difference.verdict, difference.where, difference.threshold,
            difference.reading, difference.source) == (
        "warn", "beta", "2.1", "2.0", "line 4")


def test_no_module_defines_another_point_or_finding_class() -> None:
    """A new check family makes kdkit.core.finding.Finding; it does not grow a result class of its
    own."""
    found = [f"{path.relative_to(KDKIT).as_posix()}: {node.name}"
             for path in sorted(KDKIT.rglob("*.py"))
             for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
             if isinstance(node, ast.ClassDef)
             and node.name in ("Point", "Finding", "Outcome", "Problem")
             and path.relative_to(KDKIT).as_posix() not in ("core/finding.py",
                                                            "probe/train/supervise.py")]
    assert found == KNOWN_OTHERS, found


# The families not yet moved to the one type: none. (A training's Outcome, probe/train/supervise.py,
# is how a run ended, not what a check found.)
KNOWN_OTHERS: list[str] = []


def test_a_config_problem_carries_no_credential_in_its_file_path_or_message() -> None:
    from kdkit.config.schemas import config_problem, problem_line

    token = "ghp_" + "abcdefghijklmnopqrstuvwxyz0123456789AB"
    problem = config_problem(Path(f"config/{token}.json"), f"$.{token}", f"holds {token}")
    assert token not in problem_line(problem) and token not in json.dumps(finding_json(problem))
    assert problem.where.startswith("config/<redacted: ")
