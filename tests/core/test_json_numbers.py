"""Issue 10 §9 (files): no JSON file kdkit reads may hold a non-finite number, and none it writes does.

``min_quality: NaN`` once passed validate and switched the quality gate off (every comparison
with NaN is false). One loader (kdkit.core.jsonio.parse_json) refuses NaN, Infinity, -Infinity and
literals that overflow a float, naming file, line and column; every writer is strict JSON.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kdkit.core.errors import BadInput
from kdkit.core.jsonio import atomic_write_json, parse_json
from tests.conftest import invoke, tree_snapshot

TOKENS = ["NaN", "Infinity", "-Infinity", "1e999", "-1e999", "1E400", "123456789e999"]


def put_raw(path: Path, key: str, token: str) -> None:
    """Set ``key`` (top level) to a raw JSON token that json.dumps would never write."""
    data = json.loads(path.read_text())
    data[key] = "__PLACEHOLDER__"
    path.write_text(json.dumps(data, indent=2).replace('"__PLACEHOLDER__"', token))


FILES = [("config/pilot.json", "min_quality"), ("config/pilot.json", "batch_size"),
         ("kdkit.json", "target_gpu"), ("data/pilot/manifest.json", "version")]


@pytest.mark.parametrize("token", TOKENS)
@pytest.mark.parametrize(("file", "key"), FILES)
def test_validate_and_pilot_refuse_a_non_finite_number(project: Path, file: str,
                                                       key: str, token: str) -> None:
    put_raw(project / file, key, token)
    before = tree_snapshot(project)
    for command in ("validate", "pilot"):
        result = invoke(command, project)
        assert result.exit_code == 2, (command, result.output)
        assert re.search(fr"{re.escape(file)}(:\d+:\d+|: line \d+ column \d+): "
                         fr"{re.escape(token[:40])} is not a "
                         "finite number", result.stderr), result.stderr
        assert "Traceback" not in result.output
    assert tree_snapshot(project) == before


def test_min_quality_nan_can_no_longer_switch_the_gate_off(project: Path) -> None:
    """The case of the issue, end to end: the pilot refuses to start rather than pass a bad app."""
    put_raw(project / "config/pilot.json", "min_quality", "NaN")
    result = invoke("pilot", project)
    assert result.exit_code == 2 and "NaN is not a finite number" in result.stderr
    assert not any((project / "runs").iterdir())


@pytest.mark.parametrize("token", TOKENS)
def test_close_refuses_an_order_with_a_non_finite_amount(project: Path, token: str) -> None:
    order = project / "order.json"
    order.write_text('{"gpu": "RTX 4090", "total": ' + token + "}")
    result = invoke("close", project, "--order", order)
    assert result.exit_code == 2 and "is not a finite number" in result.stderr, result.output


def test_the_place_is_the_token_not_a_string_that_spells_it() -> None:
    text = '{\n  "note": "NaN and Infinity are words here",\n  "x": [1, 2,\n        NaN]\n}'
    with pytest.raises(BadInput, match=r"^f.json:4:9: NaN is not a finite number"):
        parse_json(text, "f.json")


@pytest.mark.parametrize("text",
                         ['{"a": 1.5}', '{"a": -0.0}', '{"a": 1e308}', '{"a": "NaN"}', '[1e-400]'])
def test_finite_numbers_and_strings_still_read(text: str) -> None:
    assert parse_json(text, "f.json") == json.loads(text)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_writers_refuse_to_write_a_non_finite_number(tmp_path: Path, value: float) -> None:
    target = tmp_path / "out.json"
    with pytest.raises(ValueError, match="JSON compliant"):
        atomic_write_json(target, {"x": value})
    assert list(tmp_path.iterdir()) == []  # not even the temporary file


def test_an_integer_too_long_to_convert_is_one_line() -> None:
    with pytest.raises(BadInput, match="unreadable number"):
        parse_json('{"a": ' + "9" * 5000 + "}", "f.json")
