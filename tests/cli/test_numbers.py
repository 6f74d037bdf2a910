"""Numbers on the command line (issue 10 §9): every numeric option of every host command refuses NaN,
infinities, literals that overflow, "" and words with one line and exit 2, and writes nothing.

The numeric options are found by walking the click command tree, so a new one is tested the day it
is added, and one declared with click's own int/float types (which let "nan" through or print
usage blocks) fails here.
"""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest

from kdkit.cli import cli
from kdkit.cli._options import FiniteNumber
from kdkit.core.errors import BadInput
from kdkit.order.plan import parse_price
from tests.conftest import invoke, tree_snapshot

# Hostile values for any number, then variants of our own.
NOT_NUMBERS = ["nan", "inf", "-inf", "1e999", "1e400", "", "many",
               "NaN", "-nan", "+inf", "Infinity", "-1e309", "9" * 400, "1e999999999999", " ",
               "0x10", "1,5",
               "1e", "3 4", "1e-", "0b1", "-"]
NOT_WHOLE = ["3.5", "1e-3", "0.1"]

# A valid command line for each command that has numeric options; {} is replaced by the option and its value.
BASE = {
    "plan": ["plan", "--gpu", "RTX 4090", "--days", "3", "--lots", "1"],
    "close": ["close", "{project}", "--order", "{project}/order.json"],
    "run": ["run", "{project}"],
    "resume-test": ["resume-test", "{project}"],
    "sweep": ["sweep", "{project}"],
    "serve-test": ["serve-test", "{project}", "--url", "http://127.0.0.1:1/"],
    "wait": ["wait", "20260101T000000Z-00000000", "--project", "{project}"],
}


def numeric_options() -> list[tuple[str, str, bool]]:
    """(command, option, whole) for every option of every command whose type is a FiniteNumber, or for a
    command forwarded to its argparse module, a Count (kdkit.probe.measure.options)."""
    found = []
    for name, command in sorted(_commands().items()):
        for param in command.params:
            if isinstance(param.type, FiniteNumber):
                found.append((name, param.opts[0], param.type.integral))
        found += _forwarded_counts(name)
    return found


def _commands() -> dict[str, click.Command]:
    with click.Context(cli) as ctx:
        return {name: command for name in cli.list_commands(ctx)
                if (command := cli.get_command(ctx, name))}


def _forwarded_counts(name: str) -> list[tuple[str, str, bool]]:
    import importlib

    from kdkit.core.commands import COMMANDS, CONTAINER
    from kdkit.probe.measure.options import Count

    module, _section, _summary, where = COMMANDS[name]
    parser = getattr(
        importlib.import_module(module), "build_parser", None) if CONTAINER in where else None
    actions = parser()._actions if parser is not None else []
    return [(name, action.option_strings[0], True) for action in actions
            if isinstance(action.type, Count)]


def test_every_numeric_option_goes_through_the_finite_type() -> None:
    assert numeric_options() == [
        ("close", "--accepted", True), ("plan", "--days", True), ("plan", "--lots", True),
        ("plan", "--hours", False), ("plan", "--accepted", True), ("resume-test", "--steps", True),
        ("resume-test", "--save-at", True), ("resume-test", "--nproc-per-node", True),
        ("run", "--workers", True),
        ("run", "--copy-every", True), ("serve-test", "--max-tokens", True),
        ("serve-test", "--timeout", True),
        ("sweep", "--groups", True), ("wait", "--timeout", False),
        ("wait", "--copy-every", True)]
    plain = [(name, param.opts[0]) for name,
             command in _commands().items() for param in command.params
             if isinstance(param.type, (click.types.IntParamType, click.types.FloatParamType))]
    assert plain == []  # click's int/float accept "nan"/"inf" or print usage: none is left


def _line(project: Path, command: str, option: str, value: str) -> list[str]:
    args = [a.format(project=project) for a in BASE[command]]
    if option in args:
        at = args.index(option)
        return [*args[:at], option, value, *args[at + 2:]]
    return [*args, option, value]


CASES = [(command, option, value) for command, option, whole in numeric_options()
         for value in NOT_NUMBERS + (NOT_WHOLE if whole else [])]


@pytest.mark.parametrize(("command", "option", "value"), CASES)
def test_a_hostile_number_is_one_line_and_exit_2(project: Path, command: str,
                                                 option: str, value: str) -> None:
    (project / "order.json").write_text("{}", encoding="utf-8")
    before = tree_snapshot(project.parent)
    result = invoke(*_line(project, command, option, value))
    assert result.exit_code == 2, result.output
    lines = result.output.splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith(f"Error: {option} {value!r}: "), lines[0]
    assert f"; e.g. {option} " in lines[0]  # what to give instead
    assert "Traceback" not in result.output
    assert tree_snapshot(project.parent) == before


@pytest.mark.parametrize(("value", "number"),
                         [("3", 3), ("3.0", 3), ("+3", 3), (" 3 ", 3), ("1e1", 10),
                          ("12345678901234567891", 12345678901234567891)])
def test_whole_numbers_are_read_exactly(value: str, number: int) -> None:
    from kdkit.cli._options import whole

    assert whole("3").convert(value, None, None) == number


def test_valid_numbers_still_plan() -> None:
    result = invoke("plan", "--gpu", "RTX 4090", "--days", "3.0", "--lots", "2",
                    "--hours", "48.5", "--json")
    assert result.exit_code == 0, result.output
    order = json.loads(result.stdout)
    assert (order["days"], order["lots"], order["schedule"]["booked_hours"]) == (3, 2, 48.5)


# ---------------------------------------------------------------- money and bounds owned by the domain


PRICES = ["nan", "NaN", "sNaN", "-sNaN", "inf", "Infinity", "-Infinity", "1e999", "1e400",
          "1e999999999999999999",
          "1e-999", "0.001", "0.004", "10000000.01", "1e8", "", "$", "abc", "47,14",
          "0", "-0", "-3"]


@pytest.mark.parametrize("price", PRICES)
def test_money_refuses_what_is_not_an_amount(tmp_path: Path, price: str) -> None:
    result = invoke("plan", "--gpu", "RTX 4090", "--days", "3", "--lots", "1", "--price", price,
                    "--save", tmp_path / "order.json")
    assert result.exit_code == 2, result.output
    assert result.output.splitlines() in ([f"Error: --price {price!r}: expected a positive amount "
                                           "in USD for one lot, e.g. 47.14"],
                                          [f"Error: --price {price!r}: expected 0.01 to "
                                           "10000000.00 USD for one lot, e.g. 47.14"])
    assert tree_snapshot(tmp_path) == {}


@pytest.mark.parametrize(("price", "total"),
                         [("0.01", "0.03"), ("10000000", "30000000.00"), ("$47.14", "141.42"),
                          ("47.145", "141.44"), ("4.714e1", "141.42")])
def test_money_at_the_bounds_is_exact(price: str, total: str) -> None:
    result = invoke("plan", "--gpu", "RTX 4090", "--days", "3", "--lots", "3",
                    "--price", price, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["total_usd"] == total
    assert parse_price(price) > 0


@pytest.mark.parametrize("hours", ["8761", "1e300", "1.7e308"])
def test_hours_beyond_a_year_are_refused(tmp_path: Path, hours: str) -> None:
    result = invoke("plan", "--gpu", "RTX 4090", "--days", "3", "--lots", "1", "--hours", hours,
                    "--save", tmp_path / "order.json")
    assert result.exit_code == 2
    assert result.output.splitlines() == [
        f"Error: --hours {float(hours):g}: more than a year (8760 h) of machine time; give the "
        "machine-busy hours of this plan (3, 7 or 30 days: 72, 168 or 720 h)"]
    assert tree_snapshot(tmp_path) == {}


@pytest.mark.parametrize("params",
                         ["1e400", "1e16", "1e999999999", "1e9999999999999999999", "2000000T",
                          "1.0000000000000000000000000000001", "nan", "inf", "-inf",
                          "", "seven", "7 B B"])
def test_parameter_counts_are_bounded_before_any_arithmetic(params: str) -> None:
    result = invoke("estimate-memory", "--params", params)
    assert result.exit_code == 2, result.output
    assert len(
        result.output.splitlines()) == 1 and result.output.startswith(
            f"Error: --params {params!r}: ")


@pytest.mark.parametrize("kv",
                         ["²,1,1,1,1", "1,1,1,1,99999999999", "1," * 4 + "9" * 5000, "1,1,1,1,1e3",
                          "1,1,1,1,nan", "1,1,1,1"])
def test_kv_shapes_are_ascii_and_bounded(kv: str) -> None:
    result = invoke("estimate-memory", "--params", "7B", "--kv", kv)
    assert result.exit_code == 2, result.output
    assert len(
        result.output.splitlines()) == 1 and result.output.startswith(f"Error: --kv {kv!r}: ")


@pytest.mark.parametrize(("value", "message"), [
    (7e9, None),
    (1e300, "$.memory.parameters: 1e+300 is not a whole number from 1 to 1,000,000,000,000,000"),
    (10**400,
     "$.memory.parameters: 1000000000000000000000000000000000000000 is not a whole number"),
    (1.5, "$.memory.parameters: expected integer, got float 1.5")])  # the schema says so first
def test_counts_from_kdkit_json_are_whole_and_bounded(project: Path, value: object,
                                                      message: str | None) -> None:
    config = json.loads((project / "kdkit.json").read_text())
    config["memory"] = {"parameters": value}
    (project / "kdkit.json").write_text(json.dumps(config))
    result = invoke("estimate-memory", project, "--from-config", "--json")
    if message is None:  # JSON Schema's integer admits 7e9: read as 7,000,000,000
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["parameters"] == 7_000_000_000
        return
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"Error: {project / 'kdkit.json'}: {message}")
    assert len(result.output.splitlines()) == 1


# ---------------------------------------------------------------- the in-container argparse commands


@pytest.mark.parametrize(("module", "option"), [("kdkit.probe.measure.sweep", "--groups"),
                                                ("kdkit.probe.measure.resume", "--steps"),
                                                ("kdkit.probe.measure.resume", "--save-at")])
@pytest.mark.parametrize("value", ["nan", "inf", "1e999", "1e400", "", "many", "2.5"])
def test_probe_counts_are_one_line_and_exit_2(project: Path, tmp_path: Path, module: str,
                                              option: str,
                                              value: str) -> None:
    import subprocess
    import sys

    from tests.conftest import REPO

    extra = ["--project", str(project), "--out",
             str(tmp_path / "out")] if module.endswith("resume") else [str(project)]
    before = tree_snapshot(project)
    done = subprocess.run([sys.executable, "-m", module, *extra, option, value],
                          capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith(f"Error: {option} {value!r}: ")
    assert tree_snapshot(project) == before and not (tmp_path / "out").exists()


def test_whole_number_type_is_finite_number() -> None:
    from kdkit.core.jsonio import whole_number

    assert whole_number("--steps")("8") == 8
    with pytest.raises(BadInput, match=r"^--steps 'nan': not a finite number"):
        whole_number("--steps")("nan")
