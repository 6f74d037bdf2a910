"""Killed and resumed, every kind: text, json and category answers survive a SIGKILL at seeded random points.

The vector kind's crash test lives in tests/probe/pilot/test_output_kinds.py; this file reuses its project builder and
readers and adds the same trial for the other kinds (issue 25, "Done means": at least 20 trials per kind,
4 fast seeds and 20 more marked slow). Each trial is real: a pilot in a subprocess killed with SIGKILL after a
seeded number of result lines (and a seeded pause), then resumed to its end. Every finished output must be
kept exactly once, its value intact (text in full, character for character; json equal), and the closed
folder must verify as copy-out verifies it.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, invoke
from tests.probe.pilot.test_output_kinds import (
    JSON_ANSWERS,
    SCHEMA,
    TEXT_ANSWERS,
    make_project,
    pilot,
    records,
    verified,
)

ITEMS = 16
Docs = list[tuple[str, str, dict[str, Any]]]


def _text(n: int) -> str:
    """Item n's input: words of several scripts, a different length each (no edge spaces: the app strips)."""
    words = ["grüße", "naïve", "漢字", "emoji-\U0001f600", "tab\there"][: 1 + n % 5]
    return f"doc-{n:02d} " + " ".join(words * (n + 1))


DOCS: Docs = [(f"k-{n:02d}", _text(n), {}) for n in range(ITEMS)]
CATEGORY_ANSWERS = '''
ANSWERS = {"plain": lambda text: "long" if len(text) > 60 else "short"}
'''


def _category(text: str) -> str:
    return "long" if len(text) > 60 else "short"


def _json(text: str) -> dict[str, Any]:
    return {"length": len(text), "words": text.split()}


# kind -> (output declaration, the app's answers, the record's field, the value each input must keep)
KINDS: dict[str, tuple[dict[str, Any], str, str, Any]] = {
    "text": ({"kind": "text", "max_chars": 4000}, TEXT_ANSWERS, "output", str.upper),
    "json": ({"kind": "json", "schema": "config/answer.schema.json"},
             JSON_ANSWERS, "output", _json),
    "category": ({"kind": "category", "categories": ["long", "short"]},
                 CATEGORY_ANSWERS, "category", _category),
}


def _make(project: Path, kind: str) -> Path:
    output, answers, _, _ = KINDS[kind]
    if kind == "json":
        (project / "config" / "answer.schema.json").write_text(json.dumps(SCHEMA))
    # The category kind's quality is accuracy against the manifest's labels: each item's label is given.
    docs = [(i, t, {"label": _category(t)}) for i, t, _ in DOCS] if kind == "category" else DOCS
    return make_project(project, output, answers, docs)


def _kill_then_finish(project: Path, seed: int) -> Path:
    """A pilot killed with SIGKILL after a seeded number of result lines, then resumed (or, killed before its
    run folder existed, started again) to its end. Returns the run folder."""
    rng = random.Random(seed)
    run_id, log = f"kill{seed}", project.parent / "killed-pilot.log"
    with log.open("wb") as stderr:
        process = subprocess.Popen([sys.executable, "-m", "kdkit", "pilot", str(project), "--json",
                                    "--quiet",
                                    "--run-id", run_id], cwd=REPO,
                                   env={**os.environ, "SLOW_APP": "0.05"},
                                   stdout=subprocess.DEVNULL, stderr=stderr)
    run_dir = project / "runs" / run_id
    wanted, deadline = rng.randint(0, ITEMS - 2), time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        results = run_dir / "results.jsonl"
        if results.exists() and results.read_bytes().count(b"\n") >= wanted:
            time.sleep(rng.random() * 0.05)
            break
        time.sleep(0.002)
    process.send_signal(signal.SIGKILL)
    process.wait()
    results = run_dir / "results.jsonl"
    lines = results.read_bytes().count(b"\n") if results.exists() else "-"
    print(f"seed {seed}: exit {process.returncode} with {lines} lines")  # seen with -s
    assert process.returncode in (0, -signal.SIGKILL), log.read_text(errors="replace")[-2000:]
    if not (run_dir / "params.json").exists():
        code, summary = pilot(project, "--run-id", run_id)
    elif process.returncode != 0:
        code, summary = pilot(project, "--resume", run_id)
    else:  # it ended before the signal: already closed
        code, summary = 0, {}
    assert code == 0, summary.get("problems")
    return run_dir


def _assert_each_output_once_and_whole(run_dir: Path, kind: str) -> None:
    _, _, field, expected = KINDS[kind]
    lines = (run_dir / "results.jsonl").read_text(encoding="utf-8").splitlines()
    ids = [json.loads(line)["id"] for line in lines]
    # each item exactly once, none lost
    assert sorted(ids) == sorted(ident for ident, _, _ in DOCS), ids
    kept = records(run_dir)
    for ident, text, _ in DOCS:
        record = kept[ident]
        assert record["outcome"] == "accepted", record
        # the value intact: text in full, json equal
        assert record[field] == expected(text), (ident, record)
    assert verified(run_dir) == []
    assert invoke("copy-out", run_dir, "--verify").exit_code == 0
    assert json.loads((run_dir / "summary.json").read_text())["verdict"] == "pass"


def _trial(project: Path, kind: str, seed: int) -> None:
    _make(project, kind)
    run_dir = _kill_then_finish(project, seed)
    _assert_each_output_once_and_whole(run_dir, kind)


def test_the_inputs_and_answers_are_what_the_trials_need() -> None:
    """Both categories occur, the texts reach several hundred characters, every json answer is distinct."""
    assert {_category(text) for _, text, _ in DOCS} == {"long", "short"}
    assert max(len(text) for _,
               text, _ in DOCS) > 300 and all(text == text.strip() for _, text, _ in DOCS)
    assert len({json.dumps(_json(text)) for _, text, _ in DOCS}) == ITEMS


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("seed", range(4))
def test_sigkill_then_resume_keeps_every_output_once_and_whole(
    project: Path, kind: str, seed: int) -> None:
    _trial(project, kind, seed)


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("seed", range(4, 24))
def test_sigkill_at_twenty_more_seeded_points(project: Path, kind: str, seed: int) -> None:
    _trial(project, kind, seed)
