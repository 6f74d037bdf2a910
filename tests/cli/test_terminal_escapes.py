"""Nothing the app sends reaches the terminal or a Markdown report raw (issue 24 §7).

A real pilot runs an app whose rejection reasons, exception text and prints carry ESC/CSI/OSC sequences,
CR, BEL, NUL, DEL, C1 controls (U+009B, a CSI on its own), bidi overrides and isolates, Unicode line
separators, and Markdown (a pipe, a leading '#'); the pilot's stdout and stderr (read as bytes from a real
process), summary.md, `--json`, `kdkit close`'s output and campaign-report.md, and error lines on both
sides (the click CLI and the in-container entry) are checked for every raw control character. The set
checked is written out here, independently of kdkit.core.safetext.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kdkit.core.safetext import json_text, md_cell, printable
from tests.conftest import REPO, invoke, tree_snapshot
from tests.probe.pilot.test_pilot import edit_config, use_app

PAYLOADS = {
    "issue": "x\x1b[2J\x1b[HPASS: every ID exactly once, expectations met\r\n\x1b[8m",
    "osc-title-bel": "\x1b]0;owned\x07\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\",
    "cr-overwrite": "real reason\rPASS",
    "nul-del-bs": "a\x00b\x7fc\x08d",
    "c1-csi": "\u009b2J\u009b31mred\u0085next",
    "bidi": "\u202eevil\u202c \u2066iso\u2069 \u200f\u061c",
    "separators": "a\u2028b\u2029c\x0b\x0cd",
    "markdown": "| # not a heading | x\n# heading\n> quote\n1. item",
}
ALL = "".join(PAYLOADS.values())
ARGUMENT = ALL.replace("\x00", "")  # a command line cannot hold NUL
# C0 but tab and newline, DEL, C1, the bidi controls, and the Unicode line and paragraph separators.
RAW = frozenset({*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F, *range(0x80, 0xA0), 0x061C, 0x200E,
                 0x200F,
                 *range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x2028, 0x2029})

APP = f'''\
"""Answers correctly but rejects the first IDs, each with one hostile reason, raises on another, and prints."""
import sys

from src.oracle import predict as correct

PAYLOADS = {list(PAYLOADS.values())!r}
IDS = {{f"doc-{{n:02d}}": text for n, text in enumerate(PAYLOADS, start=1)}}


def predict(items):
    print("app stdout: " + "".join(PAYLOADS), flush=True)
    sys.stderr.write("app stderr: " + "".join(PAYLOADS) + "\\n")
    if any(item["id"] == "doc-10" for item in items):
        raise RuntimeError("exception: " + "".join(PAYLOADS))
    invented = [{{"id": "invented" + "".join(PAYLOADS), "category": "".join(PAYLOADS)}}]  # an ID never asked for
    return [{{"id": answer["id"], "error": IDS[answer["id"]]}} if answer["id"] in IDS else answer
            for answer in correct(items)] + (invented if any(item["id"] == "doc-11" for item in items) else [])
'''


def raw(data: bytes | str) -> list[str]:
    """The raw control characters in ``data`` (which must be UTF-8), by code point."""
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    return sorted({f"U+{ord(c):04X}" for c in text if ord(c) in RAW})


def kdkit(*args: str | Path, cwd: Path | None = None,
          module: str = "kdkit") -> subprocess.CompletedProcess[bytes]:
    """kdkit in a process of its own: its stdout and stderr as the terminal would get them, bytes."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONIOENCODING": "utf-8"}
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=cwd, env=env,
                          capture_output=True,
                          timeout=600, check=False)


def unescaped_pipes(line: str) -> int:
    return len(re.findall(r"(?<!\\)\|", line.replace("\\\\", "")))


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A project whose app says hostile things, its pilot run in text and in --json, and a close."""
    from kdkit.project.init import init_project

    project = init_project(tmp_path_factory.mktemp("hostile") / "proj", name="proj", backend="cpu")
    use_app(project, "oracle")
    (project / "src" / "hostile.py").write_text(APP)
    edit_config(project, entry="src.hostile:predict",
                stop={"max_rejected": None, "max_seconds": None})
    text = kdkit("pilot", project, "--run-id", "hostile")
    as_json = kdkit("pilot", project, "--run-id", "hostile-json", "--json")
    return {"project": project, "text": text, "json": as_json, "run": project / "runs" / "hostile"}


def test_the_pilot_prints_every_hostile_text_escaped_and_its_real_verdict_last(
    hostile: dict[str, Any]) -> None:
    text = hostile["text"]
    assert text.returncode == 1, text.stderr
    assert raw(text.stdout) == [] and raw(text.stderr) == []
    out = text.stdout.decode().splitlines()
    summary = json.loads((hostile["run"] / "summary.json").read_text())
    problems = summary["problems"]
    # each rejection, the exception, the invented ID, and no more
    assert len(problems) == len(PAYLOADS) + 2
    assert len(out) == 2 + len(problems) + 1  # each problem on its one line, whatever it holds
    assert out[-1] == f"FAIL: {len(problems)} problem(s); details in {hostile['run'] / 'summary.md'}"
    assert not any(line.startswith("PASS") for line in out)
    assert [line[4:] for line in out[2:-1]] == [printable(p) for p in problems]
    assert "\\x1b[2J\\x1b[HPASS" in out[2]  # shown, escaped: a reader sees what the app tried
    errors = text.stderr.decode()
    # the app's prints, relayed
    assert "app stdout: x\\x1b[2J" in errors and "app stderr: x\\x1b[2J" in errors


def test_summary_md_holds_every_hostile_text_as_one_cell_or_line(hostile: dict[str, Any]) -> None:
    md = (hostile["run"] / "summary.md").read_text()
    assert raw(md) == []
    lines = md.splitlines()
    assert [line for line in lines if line.startswith("#")] == [
        "# Pilot run hostile: FAIL",
        "## Problems", "## Every ID", "## A few outputs beside their inputs"]
    rows = [line for line in lines if line.startswith("| doc-")]
    assert len(rows) == 12 and all(unescaped_pipes(row) == 6 for row in rows), rows
    problems = [line for line in lines if line.startswith("- ")][-(len(PAYLOADS) + 2):]
    assert len([line for line in problems if line.startswith("- doc-")]) == len(PAYLOADS) + 1
    assert not any(line.startswith(("> quote", "1. item", "PASS")) for line in lines)


def test_json_stays_valid_and_carries_the_app_s_strings_exactly(hostile: dict[str, Any]) -> None:
    as_json = hostile["json"]
    assert as_json.returncode == 1 and raw(as_json.stdout) == [] and raw(as_json.stderr) == []
    data = json.loads(as_json.stdout)
    for name, payload in PAYLOADS.items():
        # JSON escapes it; a reader gets it back whole
        assert any(payload in p for p in data["problems"]), name
    assert "exception: x" in "".join(data["problems"])


def test_a_stop_reason_from_the_app_is_one_escaped_line(tmp_path: Path) -> None:
    from kdkit.project.init import init_project

    project = init_project(tmp_path / "proj", name="proj", backend="cpu")
    (project / "src" / "broken.py").write_text(f"raise RuntimeError({ALL!r})\n")
    edit_config(project, entry="src.broken:predict", device="cpu")
    result = kdkit("pilot", project, "--run-id", "broken")
    assert result.returncode != 0 and raw(result.stdout) == [] and raw(result.stderr) == []
    stop = json.loads((project / "runs" / "broken" / "stop.json").read_text())
    assert "\x1b[2J" in stop["reason"]  # kept as data in the run's JSON
    md = (project / "runs" / "broken" / "summary.md").read_text()
    assert raw(md) == [] and len(
        [line for line in md.splitlines() if line.startswith("- Stopped early: ")]) == 1
    out = result.stdout.decode().splitlines()
    assert out[-1].startswith("FAIL: ") and sum("stopped early: " in line for line in out) == 1


def test_close_shows_hostile_folder_names_and_reasons_escaped(
    hostile: dict[str, Any], tmp_path: Path) -> None:
    project = hostile["project"]
    forged = project / "runs" / "20990101T000000Z-x|y\x1b[2J\u202e# z"
    forged.mkdir()
    (forged
     / "params.json").write_text(json.dumps({"run_id": forged.name, "params_hash": "h|\x1b[31m"}))
    (forged
     / "summary.json").write_text(
         json.dumps({"run_id": forged.name, "verdict": "pass", "total": 1}))
    order = tmp_path / "order.json"
    assert invoke("plan", "--gpu", "RTX 4090", "--days", "3", "--lots",
                  "1", "--save", order).exit_code == 0
    try:
        result = kdkit("close", project, "--order", order, "--out", tmp_path / "out")
        assert result.returncode == 0, result.stderr
        assert raw(result.stdout) == [] and raw(result.stderr) == []
        md = (tmp_path / "out" / "campaign-report.md").read_text()
        report = json.loads((tmp_path / "out" / "campaign-report.json").read_text())
        as_json = kdkit("close", project, "--order", order, "--out", tmp_path / "out", "--json")
        assert raw(as_json.stdout) == [] and json.loads(as_json.stdout)["runs"] == report["runs"]
    finally:
        for file in forged.iterdir():
            file.unlink()
        forged.rmdir()
    assert raw(md) == []
    rows = [line for line in md.splitlines() if line.startswith("| 20990101T")
            or line.startswith("| hostile")]
    assert len(rows) == 3 and all(unescaped_pipes(row) == 8 for row in rows), rows
    section = md.split("## Deviations\n\n", 1)[1].strip().splitlines()
    assert len(section) == len(report["deviations"]) and all(
        line.startswith("- ") for line in section)
    assert forged.name in {r["run_id"] for r in report["runs"]}  # the JSON keeps the name as it is


@pytest.mark.parametrize("module", ["kdkit", "kdkit.probe"])
def test_an_error_quoting_hostile_text_is_one_escaped_line(tmp_path: Path, module: str) -> None:
    """The one place each side prints an error (kdkit.core.commands.call, the click group)."""
    before = tree_snapshot(tmp_path)
    result = kdkit("copy-out", tmp_path / f"run{ARGUMENT}", "--verify", module=module)
    assert result.returncode == 2 and raw(result.stderr) == [] and result.stdout == b""
    lines = result.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "\\x1b[2J" in lines[0]
    assert tree_snapshot(tmp_path) == before


def test_a_host_only_command_s_error_is_one_escaped_line(project: Path, tmp_path: Path) -> None:
    before = tree_snapshot(tmp_path)
    result = kdkit("close", project, "--order", tmp_path / f"order{ARGUMENT}.json")
    assert result.returncode == 2 and raw(result.stderr) == [] and result.stdout == b""
    lines = result.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "order file not found" in lines[0]
    assert tree_snapshot(tmp_path) == before


@pytest.mark.parametrize("code", sorted(RAW))
def test_each_control_character_is_escaped_by_the_one_rule(code: int) -> None:
    char = chr(code)
    for text in (printable(f"a{char}b"), md_cell(f"a{char}b"),
                 printable(f"a{char}b", lines=True).replace("\n", "")):
        assert raw(text) == [] and text.startswith("a") and text.endswith("b")
    document = json_text(json.dumps({"k": char}, ensure_ascii=False))
    assert raw(document) == [] and json.loads(document) == {"k": char}


@pytest.mark.parametrize(("text", "shown"), [
    ("# heading", "\\# heading"), ("> quote", "\\> quote"), ("- item", "\\- item"),
    ("1. item", "1\\. item"),
    ("---", "\\---"), ("```", "\\```"), ("a | b", "a \\| b"), ("<img src=x>", "\\<img src=x>"),
    ("#tag", "#tag"), ("12.5", "12.5"), ("-3", "-3"), ("a\tb", "a\tb"), ("a\\|b", "a\\\\\\|b"),
])
def test_markdown_cells_cannot_start_another_block(text: str, shown: str) -> None:
    assert md_cell(text) == shown


def test_kdkit_run_shows_a_container_s_output_escaped(
    capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    """What a container writes to its own output without the pilot (a process of the app's that opened the
    pilot's stdout) is escaped by `kdkit run` on the host too, a character split between chunks kept whole."""
    from kdkit.cli._output import container_output

    show = container_output(as_json=False)
    data = ("é " + ALL + " ü\n").encode()
    for at in range(0, len(data), 3):  # chunks that cut escape sequences and UTF-8 characters apart
        show(data[at:at + 3])
    out = capsysbinary.readouterr().out
    assert raw(out) == [] and out.decode().startswith("é x\\x1b[2J") and out.decode().endswith(
        " ü\n")
