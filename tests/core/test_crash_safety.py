"""Issue 10: SIGKILL at random points never loses a finished result, never duplicates one, never
leaves a half-written final folder, and the next run of the same command cleans the staging left
behind and says so.

Real processes, real SIGKILL, seeded delays (each trial's seed is its number, so a failing trial
can be replayed alone). The pilot is killed at any point from interpreter start to its last
checksum; copy-out while it copies and fsyncs a 24 MB run folder. Trials are bounded: the pilot's
by its run time, copy-out's by a few hundred milliseconds each.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from kdkit.core.runresults import RunFolder
from tests.conftest import DATA, REPO, invoke
from tests.probe.pilot.test_pilot import edit_config

PILOT_TRIALS = 20
COPY_TRIALS = 24
SLEEPY = '''"""The oracle, 150 ms per batch: the write phase of a run spans several batches."""
import time
from src.oracle import predict as correct

def predict(items):
    time.sleep(0.15)
    return correct(items)
'''
# Where a trial's kill falls: a third each from the start (interpreter, git, the run folder, the app's
# process and its torch), the batches (after the first line), and the closing (after summary.json).
WINDOWS = (("start", None, 0.6), ("batches", "results.jsonl", 1.0),
           ("closing", "summary.json", 0.004))


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from kdkit.project.init import init_project

    project = init_project(tmp_path_factory.mktemp("crash") / "proj", name="proj", backend="cpu")
    shutil.copy(DATA / "apps" / "oracle.py", project / "src" / "oracle.py")
    (project / "src" / "sleepy.py").write_text(SLEEPY)
    edit_config(project, entry="src.sleepy:predict", device="cpu", batch_size=2)
    return project


def staged(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".partial-" in p.name
                  or p.name.endswith(".tmp")) \
        if folder.is_dir() else []


def phase(run_dir: Path) -> str:
    if not run_dir.exists():
        return "before the run folder"
    if (run_dir / "SHA256SUMS").exists():
        return "after closing"
    lines = len((run_dir / "results.jsonl").read_bytes().splitlines())
    return "during the batches" if lines else "before the first batch"


@pytest.mark.parametrize("trial", range(PILOT_TRIALS))
def test_sigkill_of_the_pilot_at_a_random_point(template: Path, tmp_path: Path, trial: int) -> None:
    project = shutil.copytree(template, tmp_path / "proj")
    window, after, longest = WINDOWS[trial % len(WINDOWS)]
    delay = random.Random(trial).uniform(0.0, longest)
    run_dir = project / "runs" / "crash"
    process = subprocess.Popen([sys.executable, "-m", "kdkit.probe", "pilot", str(project),
                                "--run-id", "crash",
                                "--quiet"], cwd=REPO, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while after is not None \
            and not ((after == "results.jsonl" and phase(run_dir) == "during the batches")
                                     or (after == "summary.json" and (run_dir / after).exists())):
        assert process.poll() is None and time.monotonic() < deadline, "the pilot ended before the kill"
        time.sleep(0.005)
    time.sleep(delay)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    print(f"trial {trial}: killed {delay:.3f} s into the {window}: {phase(run_dir)}")

    if run_dir.exists():  # never half-written: the folder appears whole, with its parameters
        assert json.loads((run_dir / "params.json").read_text())["run_id"] == "crash"
        assert (run_dir / "results.jsonl").is_file()
        # a torn last line may follow
        complete = (run_dir / "results.jsonl").read_bytes().split(b"\n")[:-1]
        ids = Counter(json.loads(line)["id"] for line in complete)
        assert all(n == 1 for n in ids.values()), ids

    if not run_dir.exists():
        result = invoke("pilot", project, "--run-id", "crash", "--json")
    elif (run_dir / "SHA256SUMS").exists():
        result = invoke("pilot", project, "--resume", "crash", "--json")
        # the finished run is kept as it was
        assert result.exit_code == 2 and "finished" in result.stderr
        assert invoke("copy-out", run_dir, "--verify").exit_code == 0
    else:
        result = invoke("pilot", project, "--resume", "crash", "--json")
    if result.exit_code != 2:
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["verdict"] == "pass"
    lines = (run_dir / "results.jsonl").read_text().splitlines()
    assert Counter(json.loads(line)["id"]
                   for line in lines) == Counter(f"doc-{n:02d}" for n in range(1, 13))
    assert staged(project / "runs") == [] and staged(run_dir) == []


def test_the_next_pilot_removes_what_a_killed_one_was_making_and_says_so(
    template: Path, tmp_path: Path) -> None:
    project = shutil.copytree(template, tmp_path / "proj")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True,
                          check=True).stdout.strip()
    left = project / "runs" / f".crash.partial-{dead}"
    left.mkdir(parents=True)
    (left / "params.json").write_text("{")
    result = invoke("pilot", project, "--run-id", "crash")
    assert result.exit_code == 0, result.output
    assert f"removed {left} (staging left by a process that no longer runs)" in result.stderr
    assert not left.exists()


# ---------------------------------------------------------------- copy-out


@pytest.fixture(scope="module")
def big_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A closed run folder with a 24 MB results.jsonl (written with the harness's own writer)."""
    path = tmp_path_factory.mktemp("bigrun") / "20260101T000000Z-0badc0de"
    path.mkdir()
    run = RunFolder(path)
    for batch in range(300):
        run.append([{"id": f"d{batch:04d}-{k:03d}", "outcome": "accepted", "category": "invoice",
                     "batch": batch,
                     "sha256": "0" * 64, "note": "x" * 600} for k in range(128)])
    run.close()
    for name, data in (("params.json", {"run_id": path.name}), ("env.json", {"verdict": "pass"}),
                       ("summary.json",
                        {"kind": "pilot", "verdict": "pass", "stopped": None, "total": 300 * 128,
                         "accepted": 300 * 128, "rejected": 0})):  # reloadable: counts agree
        run.write_json(name, data)
    run.write_text("summary.md", "# big\n")
    run.write_sums()
    return path


@pytest.mark.parametrize("trial", range(COPY_TRIALS))
def test_sigkill_of_copy_out_at_a_random_point(big_run: Path, tmp_path: Path, trial: int) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    delay = random.Random(1000 + trial).uniform(0.0, 0.6)
    process = subprocess.Popen([sys.executable, "-m", "kdkit.probe", "copy-out", str(big_run),
                                str(dest)], cwd=REPO,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(delay)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    final = dest / big_run.name
    if final.exists():  # a copy in place is a verified, whole copy
        assert invoke("copy-out", final, "--verify").exit_code == 0
        return
    left = staged(dest)
    result = invoke("copy-out", big_run, dest)
    assert result.exit_code == 0, result.output
    for name in left:
        assert f"removed {dest / name} (staging left by a process that no longer runs)" in result.stderr
    assert staged(dest) == []
    assert invoke("copy-out", final, "--verify").exit_code == 0


def test_a_live_owners_staging_is_left_alone(big_run: Path, tmp_path: Path) -> None:
    """Only a staging folder whose process is gone is removed: a copy under way elsewhere is not."""
    dest = tmp_path / "dest"
    dest.mkdir()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        alive = dest / f".{big_run.name}.partial-{sleeper.pid}"
        alive.mkdir()
        result = invoke("copy-out", big_run, dest)
        assert result.exit_code == 0 and alive.exists() and "removed" not in result.stderr
    finally:
        sleeper.kill()
        sleeper.wait()
    os.rmdir(alive)
