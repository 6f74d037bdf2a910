"""Issue 24 §9: a pilot whose runs/ fills ends in one line, exit 2, with stop.json written first; once
space is freed, --resume finishes the run exactly once.

runs/ is a real tmpfs of a few pages, mounted by the test (root only: skipped, saying why, where mount
is refused), so the disk really fills: sizing it page by page moves the place where space runs out
through every write of the run (the run folder's staging, the room set aside for stop.json, env.json,
results.jsonl, summary.json, summary.md). Each case is a real pilot in a process of its own.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import DATA, REPO, invoke
from tests.probe.pilot.test_pilot import edit_config

PAGE = 4096
SIZES = range(1, 33)  # pages of the tmpfs: from nothing fitting to a whole run fitting


def _mount(where: Path, pages: int) -> None:
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={pages * PAGE}", "tmpfs", str(where)],
                   check=True,
                   capture_output=True, timeout=60)


def _umount(where: Path) -> None:
    done = subprocess.run(["umount", str(where)], capture_output=True, timeout=60, check=False)
    if done.returncode != 0:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=60, check=False)


@pytest.fixture
def small_runs(project: Path) -> Iterator[Path]:
    """The project's runs/ as a tmpfs the test sizes (skipped where mounting is not permitted)."""
    runs = project / "runs"
    runs.mkdir(exist_ok=True)
    try:
        _mount(runs, 1)
    except (OSError, subprocess.CalledProcessError) as exc:
        said = getattr(exc, "stderr", b"") or b""
        pytest.skip(f"mount -t tmpfs is not permitted here (it needs root and CAP_SYS_ADMIN): "
                    f"{said.decode(errors='replace').strip() or exc}")
    _umount(runs)
    shutil.copy(DATA / "apps" / "oracle.py", project / "src" / "oracle.py")
    edit_config(project, entry="src.oracle:predict", device="cpu", batch_size=4)
    try:
        yield runs
    finally:
        if runs.is_mount():
            _umount(runs)


def _pilot(project: Path, *args: str) -> tuple[int, str, str]:
    done = subprocess.run([sys.executable, "-m", "kdkit.probe", "pilot", str(project),
                           "--json", *args],
                          capture_output=True, text=True, cwd=REPO, timeout=600, check=False)
    return done.returncode, done.stdout, done.stderr


def _filled_run(project: Path,
                runs: Path, pages: int) -> tuple[str, dict[str, object] | None] | None:
    """Run the pilot on a runs/ of ``pages`` pages; check what a full disk must leave; return (its one
    line, stop.json or None when the run folder was never made), or None when the whole run fitted."""
    _mount(runs, pages)
    code, stdout, stderr = _pilot(project, "--run-id", "full")
    if code == 0:
        assert json.loads(stdout)["verdict"] == "pass" and stderr == "", stderr
        return None
    lines = stderr.splitlines()
    assert code == 2, (pages, code, stderr)
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "Traceback" not in stderr, (pages,
                                                                                              stderr)
    line = lines[0]
    run = runs / "full"
    if not run.exists():  # the run folder's staging did not fit: nothing is left
        assert "cannot create the run folder (No space left on device); free space on" in line, line
        assert sorted(p.name for p in runs.iterdir()) == [], list(runs.iterdir())
        return line, None
    assert "No space left on device" in line and "kdkit pilot --resume full" in line, line
    names = sorted(p.name for p in run.iterdir())
    # the reserved room never outlives a session
    assert not any(name.endswith(".tmp") for name in names), names
    if "not even stop.json could be written" in line:
        assert "stop.json" not in names and (run / "results.jsonl").read_bytes() == b"", names
        return line, None
    stop = json.loads((run / "stop.json").read_text())
    assert stop["rule"] == "disk-full" and stop["reason"].startswith(
        "the disk is full (No space left on device "), stop
    # stopped while running, closed: the summary says so and its sums verify
    if "summary.json" in names:
        summary = json.loads((run / "summary.json").read_text())
        assert summary["verdict"] == "fail" and summary["stopped"]["rule"] == "disk-full"
        assert invoke("copy-out", run, "--verify").exit_code == 0
    else:  # the closing itself ran out: no closing file of an open folder is left
        assert not {"SHA256SUMS", "summary.md"} & set(names), names
    return line, stop


def _resumed_once(project: Path, runs: Path) -> None:
    subprocess.run(["mount", "-o", "remount,size=4m", str(runs)], check=True,
                   capture_output=True, timeout=60)
    code, stdout, stderr = _pilot(project, "--resume", "full")
    assert code == 0 and "Traceback" not in stderr, (code, stderr)
    summary = json.loads(stdout)
    assert (summary["verdict"], summary["accepted"],
            summary["rejected"]) == ("pass", 11, 1), summary["problems"]
    run = runs / "full"
    ids = Counter(json.loads(line)["id"]
                  for line in (run / "results.jsonl").read_text().splitlines())
    assert ids == Counter(f"doc-{n:02d}" for n in range(1, 13)), ids  # every ID exactly once
    assert invoke("copy-out", run, "--verify").exit_code == 0


def test_a_full_runs_folder_anywhere_is_one_line_stop_json_first_and_resumable(project: Path,
                                                                               small_runs: Path) -> None:
    places = set()
    for pages in SIZES:
        filled = _filled_run(project, small_runs, pages)
        if filled is None:
            break
        line, stop = filled
        if stop is not None or (small_runs / "full").exists():
            _resumed_once(project, small_runs)
        reason = str(stop["reason"]) if stop else line
        places.add(reason.split(" writing ", 1)[1].split(")", 1)[0] if " writing " in reason
                   else "run folder")
        _umount(small_runs)
    else:
        pytest.fail(f"the run did not fit in {SIZES[-1]} pages")
    # the run was stopped at every write it makes before SHA256SUMS (written into the room stop.json kept); the
    # heartbeat (kdkit.core.heartbeat) is removed just before summary.json, and the page it frees holds summary.json
    # of this small run: the close then stops at summary.md, never at summary.json
    assert {"the room set aside for stop.json, before the app started", "stop.json", "env.json",
            "results.jsonl",
            "summary.md"} <= places, places


def test_a_runs_folder_already_full_makes_no_run_folder(project: Path, small_runs: Path) -> None:
    _mount(small_runs, 2)
    (small_runs / "filler").write_bytes(b"f" * 2 * PAGE)  # another writer took every page
    code, stdout, stderr = _pilot(project, "--run-id", "full")
    assert (code, stdout) == (2, "") and len(
        stderr.splitlines()) == 1 and "Traceback" not in stderr, stderr
    assert stderr.startswith(f"Error: {small_runs / 'full'}: cannot create the run folder (No "
                             f"space left on device); free space on {small_runs}"), stderr
    assert sorted(p.name for p in small_runs.iterdir()) == ["filler"]  # no staging left behind
    (small_runs / "filler").unlink()
    subprocess.run(["mount", "-o", "remount,size=4m", str(small_runs)], check=True,
                   capture_output=True, timeout=60)
    code, stdout, _ = _pilot(project, "--run-id", "full")
    assert code == 0 and json.loads(stdout)["verdict"] == "pass"
