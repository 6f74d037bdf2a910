"""kdkit.core.report.print_result: one JSON document with --json, else the text, rendered only then."""

from __future__ import annotations

import json

import pytest

from kdkit.core.report import print_result


def test_json_is_indented_and_text_is_not_rendered(capsys: pytest.CaptureFixture[str]) -> None:
    def never() -> str:
        raise AssertionError("the text was rendered for --json")

    print_result(True, {"é": 1}, never)
    out = capsys.readouterr().out
    assert out == json.dumps({"é": 1}, indent=2) + "\n"
    assert "\\u00e9" in out


def test_unicode_and_default(capsys: pytest.CaptureFixture[str]) -> None:
    print_result(True, {"é": object}, "unused", ascii_only=False, default=lambda _: "x")
    assert capsys.readouterr().out == '{\n  "é": "x"\n}\n'


def test_text_string_or_call(capsys: pytest.CaptureFixture[str]) -> None:
    print_result(False, {"a": 1}, "plain")
    print_result(False, {"a": 1}, lambda: "rendered")
    assert capsys.readouterr().out == "plain\nrendered\n"
