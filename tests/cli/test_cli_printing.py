"""The CLI prints its text lines through one point (kdkit.cli._output.say), which escapes every control
character: a path, a name or an app's text holding ESC, CR, BEL or a C1 control (U+009B, read as CSI by some
terminals) never reaches the terminal raw, in a success line as in an error. Real commands on real paths,
their output read from a real pseudo-terminal (so click strips nothing), plus a rule on the code: no module of
kdkit/cli/ but _output.py calls click.echo, click.secho or print."""

from __future__ import annotations

import ast
import os
import select
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from kdkit.core.safetext import printable
from tests.conftest import valid_outside_git
from tests.transfer.test_bundle import write_fresh_lock

CLI = Path(__file__).resolve().parents[2] / "kdkit" / "cli"
# Each: what a hostile name holds. Clear the screen, go back to the line's start, a C1 CSI, a bell; set the
# window's title (OSC); a bidi override (shown reversed); a vertical tab and a DEL.
HOSTILE = ["\x1b[2J\r\u009b\x07", "\x1b]0;owned\x07\u202e", "\x0b\x7f\x1b[8m"]
RAW = [b"\x1b", b"\r", "\u009b".encode(), b"\x07", "\u202e".encode(), b"\x0b", b"\x7f"]


def on_a_terminal(*args: str | Path) -> tuple[int, bytes]:
    return terminal([sys.executable, "-m", "kdkit", *map(str, args)])


def terminal(argv: list[str], timeout: float = 300) -> tuple[int, bytes]:
    """Run ``argv`` with stdout and stderr on one pseudo-terminal (output post-processing off, so a CR in what is
    read came from kdkit); its exit code and every byte it wrote there. TERM=dumb: rich adds no styling."""
    master, slave = os.openpty()
    attrs = termios.tcgetattr(slave)
    attrs[1] &= ~termios.OPOST
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    env = {**os.environ, "TERM": "dumb", "COLUMNS": "200"}
    env.pop("NO_COLOR", None)
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    chunks = []
    try:
        while select.select([master], [], [], timeout)[0]:  # the timeout only catches a hang
            try:
                data = os.read(master, 1 << 16)
            except OSError:  # EIO: every writer closed the terminal
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(master)
    return process.wait(timeout=timeout), b"".join(chunks)


def shown_escaped(code: int, output: bytes, expected: int = 0) -> str:
    assert code == expected, output
    assert [raw for raw in RAW if raw in output] == [], output
    return output.decode("utf-8")


@pytest.mark.parametrize("hostile", HOSTILE)
def test_init_validate_plan_and_close_print_a_hostile_path_escaped(
    tmp_path: Path, hostile: str) -> None:
    target = tmp_path / f"j{hostile}"
    text = shown_escaped(*on_a_terminal("init", target, "--name", "j", "--backend", "cpu"))
    assert f"Created {tmp_path}/j{printable(hostile)}\n" in text and "Next: kdkit validate" in text
    assert len(text.splitlines()) >= 2  # kdkit's own line breaks are kept
    text = shown_escaped(*on_a_terminal("validate", target))
    assert text == valid_outside_git(Path(f"{tmp_path}/j{printable(hostile)}")) + "\n"
    order = tmp_path / f"ord{hostile}.json"
    text = shown_escaped(
        *on_a_terminal("plan", "--gpu", "RTX 4090", "--days", "3", "--lots", "1", "--save", order))
    assert f"Order written to {tmp_path}/ord{printable(hostile)}.json\n" in text and order.is_file()
    report = tmp_path / f"rep{hostile}"
    report.mkdir()
    text = shown_escaped(*on_a_terminal("close", target, "--order", order, "--out", report))
    assert f"Wrote {tmp_path}/rep{printable(hostile)}/campaign-report.md\n" in text
    assert (report / "campaign-report.md").is_file()


@pytest.mark.parametrize("hostile", HOSTILE)
def test_bundle_and_verify_bundle_print_a_hostile_out_escaped(
    project: Path, tmp_path: Path, hostile: str) -> None:
    write_fresh_lock(project)
    out = tmp_path / f"bo{hostile}"
    text = shown_escaped(
        *on_a_terminal("bundle", project, "--out", out, "--no-image", "--no-kdkit-wheels"))
    assert f"Bundle written to {tmp_path}/bo{printable(hostile)} in " in text and (out
                                                                                   / "SHA256SUMS").is_file()
    assert "\nNext: copy the folder" in text
    text = shown_escaped(*on_a_terminal("verify-bundle", out))
    assert text.startswith("OK: ") and text.endswith(f" in {tmp_path}/bo{printable(hostile)}\n")


def test_an_error_naming_a_hostile_path_is_one_escaped_line(tmp_path: Path) -> None:
    missing = tmp_path / f"nothing{HOSTILE[0]}"
    text = shown_escaped(*on_a_terminal("verify-bundle", missing), expected=2)
    assert len(
        text.splitlines()) == 1 and text.startswith(
            "Error: ") and "nothing\\x1b[2J\\r\\x9b\\x07" in text


def _direct_prints(path: Path) -> list[str]:
    """Each call in ``path`` that prints around kdkit.cli._output.say: click.echo/secho, print, echo imported."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module == "click":
            found += [f"{path.name}:{node.lineno}: from click import {a.name}" for a in node.names
                      if a.name in ("echo", "secho")]
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id == "print":
            found.append(f"{path.name}:{node.lineno}: print(...)")
        if isinstance(func, ast.Attribute) and func.attr in ("echo", "secho") and \
                isinstance(func.value, ast.Name) and func.value.id == "click":
            found.append(f"{path.name}:{node.lineno}: click.{func.attr}(...)")
    return found


def test_no_cli_module_prints_around_the_one_printing_point() -> None:
    modules = sorted(p for p in CLI.glob("*.py") if p.name != "_output.py")
    assert len(modules) >= 5
    assert [line for path in modules for line in _direct_prints(path)] == []


def test_the_rule_finds_a_direct_print(tmp_path: Path) -> None:
    sneaky = tmp_path / "sneaky.py"
    sneaky.write_text(
        "import click\nfrom click import echo\nclick.echo('x')\nclick.secho('y')\nprint('z')\n")
    assert _direct_prints(sneaky) == ["sneaky.py:2: from click import echo",
                                      "sneaky.py:3: click.echo(...)",
                                      "sneaky.py:4: click.secho(...)", "sneaky.py:5: print(...)"]


def test_build_progress_on_a_terminal_shows_a_hostile_step_escaped_and_its_markup_as_text() -> None:
    """`kdkit build`'s live progress (rich, on a terminal): a step's text from the engine, markup included,
    is shown as text, every control character escaped."""
    script = (
        "from types import SimpleNamespace\n"
        "from kdkit.cli.images import _build_progress\n"
        "from kdkit.image.buildrun import BuildEvent\n"
        "with _build_progress() as show:\n"
        "    step = SimpleNamespace(number=1, total=2, instruction='RUN \\x1b]0;t\\x07')\n"
        "    show(BuildEvent('step', 'Step 1/2 : RUN x\\x1b[2J\\r\\u009b[bold]y[/bold]', step))\n"
        "    show(BuildEvent('line', 'out \\x1b[8mhidden\\r\\u009b'))\n")
    text = shown_escaped(*terminal([sys.executable, "-c", script]))
    assert text.splitlines() == ["Step 1/2 : RUN x\\x1b[2J\\r\\x9b[bold]y[/bold]",
                                 "  out \\x1b[8mhidden\\r\\x9b"]
