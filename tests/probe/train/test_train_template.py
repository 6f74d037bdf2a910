"""`kdkit train` on the project template's own loop (src/train.py, CPU torch): a kill of kdkit train after two
checkpoints, then --resume, gives the uninterrupted run's losses and the very same final model bytes; the
final checkpoint reloads in a new process (--verify-reload)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

ARGS = ("--steps", "8", "--save-every", "2", "--device", "cpu")


def train(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kdkit", "train", *args], cwd=root,
                          capture_output=True, text=True,
                          timeout=600, check=False)


def losses(folder: Path) -> list[tuple[int, float]]:
    return [(r["step"], r["loss"])
            for r in map(json.loads, (folder / "metrics.jsonl").read_text().splitlines())]


def test_the_template_loop_killed_and_resumed_equals_the_uninterrupted_run(project: Path) -> None:
    done = train(project, "--run-id", "whole", "--", *ARGS)
    assert done.returncode == 0, done.stderr
    process = subprocess.Popen([sys.executable, "-m", "kdkit", "train", "--run-id", "cut",
                                "--", *ARGS],
                               cwd=project, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = project / "runs" / "cut" / "checkpoints.jsonl"
    deadline = time.monotonic() + 300
    while not (log.exists() and len(log.read_text().splitlines()) >= 2):
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    resumed = train(project, "--resume", "cut", "--json")
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads(resumed.stdout)
    assert summary["resumed_from"] is not None and summary["final_checkpoint"] == "step-00000008"
    whole, cut = project / "runs" / "whole", project / "runs" / "cut"
    assert losses(cut) == losses(whole)
    final = "checkpoints/step-00000008/model.pt"
    assert (cut / final).read_bytes() == (whole / final).read_bytes()
    checked = train(project, "--verify-reload", "cut", "--json")
    assert checked.returncode == 0, checked.stderr
    assert json.loads((cut / "reload-check.json").read_text())["ok"] is True
