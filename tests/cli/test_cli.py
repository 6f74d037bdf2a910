"""The command group: help, version, exit codes, error lines, light start-up."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kdkit import __version__
from tests.conftest import REPO, invoke


def test_version() -> None:
    result = invoke("--version")
    assert result.exit_code == 0
    assert result.output.strip() == f"kdkit, version {__version__}"


def test_help_groups_commands_and_lists_exit_codes() -> None:
    result = invoke("--help")
    assert result.exit_code == 0
    for heading in ("Project:", "Dependencies:", "On the rented machine:"):
        assert heading in result.output
    for line in ("0  ok",
                 "1  a check ran and failed", "2  bad input",
                 "3  a needed component is unavailable"):
        assert line in result.output


def test_usage_error_is_exit_2() -> None:
    result = invoke("no-such-command")
    assert result.exit_code == 2
    assert "No such command 'no-such-command'" in result.output


def test_error_is_one_line_without_traceback(tmp_path: Path) -> None:
    (tmp_path / "kdkit.json").write_text("{")
    result = subprocess.run(
        [sys.executable, "-m", "kdkit", "validate", str(tmp_path)], capture_output=True, text=True,
        check=False
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[0] == (
        f"{tmp_path}/kdkit.json: line 1 column 2: malformed JSON "
        "(Expecting property name enclosed in double quotes); fix the syntax there"
    )


def test_kdkit_debug_shows_the_traceback(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "kdkit", "validate", str(tmp_path)],
        capture_output=True, text=True, check=False,
        env={"KDKIT_DEBUG": "1", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 2
    assert "Traceback (most recent call last)" in result.stderr
    assert result.stderr.rstrip().splitlines()[-1].startswith("Error: ")


@pytest.mark.parametrize("argv", [["--help"], ["diagnose", "--help"], ["verify-env", "--help"]])
def test_start_up_imports_no_heavy_package(argv: list[str]) -> None:
    """`kdkit --help` and the in-container commands must not pay for rich, jsonschema, docker, torch."""
    code = (
        "import sys\n"
        "from kdkit.cli import cli\n"
        f"try:\n    cli.main({argv!r}, standalone_mode=False)\n"
        "except SystemExit:\n    pass\n"
        "heavy = sorted(m for m in ('rich', 'jsonschema', 'docker', 'torch', 'piptools', "
        "'matplotlib') if m in sys.modules)\n"
        "print('HEAVY=' + ','.join(heavy))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=REPO, check=False)
    assert result.stdout.strip().splitlines()[-1] == "HEAVY=", result.stdout + result.stderr
