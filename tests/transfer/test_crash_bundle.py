"""Staging and crash safety of `kdkit bundle` and `kdkit wheelhouse` (issue 10, classes 6 and 7).

A SIGKILL at any point of `kdkit bundle` leaves --out absent or a complete bundle that
verify-bundle accepts, never half of one; what the killed process staged (``.OUT.partial-PID``,
``.OUT.old-PID``) is removed by the next run, which says so on stderr.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kdkit.core.stalestaging import describe_removed
from tests.conftest import invoke, tree_snapshot
from tests.tinywheels import build_wheel
from tests.transfer.test_bundle import write_fresh_lock

# the installed console script, a real process of its own
KDKIT = Path(sys.executable).parent / "kdkit"
STAGED = re.compile(r"\.bundle\.(partial|old)-[0-9]+")


def _dead_pid() -> int:
    """The PID of a process that has exited (and been reaped)."""
    done = subprocess.Popen(["true"])
    done.wait()
    return done.pid


def _staged(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if STAGED.fullmatch(p.name))


@pytest.fixture
def ready(project: Path) -> Path:
    write_fresh_lock(project)
    return project


def test_next_bundle_removes_stale_staging_and_says_so(ready: Path, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    dead = _dead_pid()
    left = [tmp_path / f".bundle.partial-{dead}", tmp_path / f".bundle.old-{dead}"]
    for folder in left:
        (folder / "project").mkdir(parents=True)
        (folder / "project" / "half.txt").write_text("half-written\n", encoding="utf-8")
    (tmp_path / f".bundle.{dead}.k2j4.tmp").write_text("a staged file\n", encoding="utf-8")
    left.append(tmp_path / f".bundle.{dead}.k2j4.tmp")
    alive = tmp_path / ".bundle.partial-1"  # PID 1 runs: its staging is not ours to remove
    other = tmp_path / f".elsewhere.partial-{dead}"  # staging of another --out
    for folder in (alive, other):
        folder.mkdir()
    result = invoke("bundle", ready, "--out", out, "--no-image")
    assert result.exit_code == 0, result.stderr
    for line in describe_removed(sorted(left)):
        assert f"  {line}\n" in result.stderr
    assert all(not path.exists() for path in left)
    assert alive.is_dir() and other.is_dir()
    assert invoke("verify-bundle", out).exit_code == 0


@pytest.mark.parametrize("bad", ["no lock", "out inside the project", "out exists"])
def test_refused_bundle_leaves_stale_staging_alone(project: Path, tmp_path: Path, bad: str) -> None:
    out = project / "runs" / "b" if bad == "out inside the project" else tmp_path / "bundle"
    if bad != "no lock":
        write_fresh_lock(project)
    if bad == "out exists":
        out.mkdir()
    stale = out.parent / f".{out.name}.partial-{_dead_pid()}"
    stale.mkdir(parents=True)
    before = tree_snapshot(tmp_path)
    result = invoke("bundle", project, "--out", out, "--no-image")
    assert result.exit_code == 2 and stale.is_dir() and tree_snapshot(tmp_path) == before


def test_wheelhouse_stages_beside_out_and_cleans_what_a_killed_run_left(project: Path,
                                                                        tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    wheel = build_wheel(tmp_path / "wheels", "tinypkg", "1.0")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    (project / "requirements" / "base.in").write_text("tinypkg==1.0\n", encoding="utf-8")
    lock = write_fresh_lock(project)
    header = "".join(line for line in lock.read_text(encoding="utf-8").splitlines(keepends=True)
                     if line.startswith("#"))
    lock.write_text(header + f"tinypkg==1.0 \\\n    --hash=sha256:{digest}\n", encoding="utf-8")
    out = tmp_path / "wh" / "cpu"
    out.mkdir(parents=True)
    # pip finds it there (--find-links): no network
    (out / wheel.name).write_bytes(wheel.read_bytes())
    stale = out.parent / f".cpu.partial-{_dead_pid()}"
    stale.mkdir()
    (stale / "half.whl").write_bytes(b"PK\x03\x04")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    result = invoke("wheelhouse", project, "--out", out, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["removed_staging"] == [str(stale)] and not stale.exists()
    assert [f["name"] for f in report["files"]] == [wheel.name]
    assert sorted(p.name for p in out.parent.iterdir()) == ["cpu"]


# ---------------------------------------------------------------- SIGKILL at random points

TRIALS = 24
SEED = 20261201
HANG = 600  # seconds a killed bundle process may take to be reaped: only a hang goes past it


def _run(project: Path, out: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([str(KDKIT), "bundle", str(project), "--out",
                             str(out), "--no-image", "--force"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _window(project: Path, out: Path) -> tuple[float, float]:
    """(when the staging folder first appears, when the run ends), seconds after the start, measured."""
    # A 2 ms poll: the staging folder lives for a tenth of a second or more.
    started = time.monotonic()
    process = _run(project, out)
    first = None
    while process.poll() is None:
        if first is None and _staged(out.parent):
            first = time.monotonic() - started
        time.sleep(0.002)
    total = time.monotonic() - started
    assert process.returncode == 0, process.communicate()[1]
    return (first if first is not None else total * 0.6), total


@pytest.mark.skipif(
    not KDKIT.is_file(), reason=f"{KDKIT}: the installed kdkit console script is needed")
def test_sigkill_at_random_points_never_leaves_half_a_bundle(ready: Path, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    project_before = tree_snapshot(ready)
    # a first bundle, then one that replaces it (what --force adds)
    first, total = _window(ready, out)
    first, total = map(max, zip((first, total), _window(ready, out), strict=True))
    rng = random.Random(SEED)
    outcomes = {"finished": 0, "absent": 0, "complete": 0, "staging left": 0, "cleaned and said": 0}
    left: list[Path] = []
    # bounded by trials, never by the clock: a loaded machine only makes it slower
    for trial in range(TRIALS):
        if trial % 2 == 0 and out.exists():
            shutil.rmtree(out)  # even trials make a first bundle, odd ones replace one (--force)
        process = _run(ready, out)
        started = time.monotonic()
        if trial % 3:
            # Two kills in three are aimed at the writing: once this run's staging exists, at a random
            # point of the span writing took in the measured runs (so the load of the machine does not
            # move them out of the window).
            mine = tmp_path / f".bundle.partial-{process.pid}"
            while not mine.exists() and process.poll() is None:
                time.sleep(0.001)
            time.sleep(rng.uniform(0.0, (total - first) * 1.2))
        else:  # the others anywhere, start-up and the cleaning of stale staging included
            time.sleep(rng.uniform(0.0, total * 1.3))
        delay = time.monotonic() - started
        process.send_signal(signal.SIGKILL)
        # a killed process that never ends is a hang
        _stdout, stderr = process.communicate(timeout=HANG)
        if process.returncode == 0:
            outcomes["finished"] += 1
            # a run that got through cleaned what the last kill left
            for line in describe_removed(left):
                assert line in stderr.decode(), f"trial {trial}: {stderr.decode()}"
            outcomes["cleaned and said"] += bool(left)
        if out.exists():
            verified = invoke("verify-bundle", out)
            assert verified.exit_code == 0, f"trial {trial} (killed after {delay:.3f} s): {verified.output}"
            outcomes["complete"] += 1
        else:
            outcomes["absent"] += 1
        left = _staged(tmp_path)
        outcomes["staging left"] += bool(left)
        assert all(STAGED.fullmatch(p.name) for p in tmp_path.iterdir()
                   if p.name.startswith(".")), \
            f"trial {trial}: {sorted(p.name for p in tmp_path.iterdir())}"
        assert tree_snapshot(ready) == project_before, f"trial {trial}: the project changed"
    assert outcomes["staging left"] > 0, f"no kill landed while staging ({outcomes}, window {first:.3f}-{total:.3f} s)"
    if not left:  # the last trial finished: leave what a kill leaves, to see the next run clean it
        process = _run(ready, out)
        while not _staged(tmp_path) and process.poll() is None:
            time.sleep(0.002)
        process.send_signal(signal.SIGKILL)
        process.communicate()
        left = _staged(tmp_path)
    final = _run(ready, out)
    _stdout, stderr = final.communicate(timeout=60)
    assert final.returncode == 0, stderr
    for line in describe_removed(left):
        assert line in stderr.decode()
    assert _staged(tmp_path) == []
    assert invoke("verify-bundle", out).exit_code == 0
    print(f"\n{TRIALS} SIGKILLs, window {first:.3f}-{total:.3f} s: {outcomes}; {len(left)} staging "
          "cleaned by the next run")
