"""The pilot's heartbeat (kdkit.core.heartbeat) and `kdkit status` read from the run folder alone: a real pilot in
its own process, its heartbeat read while it runs, gone once it has closed (the closed folder verifies as before),
and the states `kdkit status` derives (running, passed, stopped, lost) from a folder and no engine."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from kdkit.core.heartbeat import Heartbeat, read_heartbeat
from kdkit.core.runfolder import HEARTBEAT, run_folders
from kdkit.core.runverify import read_run
from tests.conftest import DATA, REPO, invoke

KEYS = {"run_id", "pid", "host", "state", "done", "total", "accepted", "rejected",
        "rejection_limit", "last_error",
        "started", "updated", "max_seconds", "rate"}


def slow_project(project: Path, seconds: str = "0.2", **stop: Any) -> Path:
    for app in ("oracle", "slow"):
        shutil.copy(DATA / "apps" / f"{app}.py", project / "src" / f"{app}.py")
    path = project / "config" / "pilot.json"
    data = json.loads(path.read_text())
    data.update(entry="src.slow:predict", device="cpu", batch_size=1)
    if stop:
        data["stop"] = {**data.get("stop", {}), **stop}
    path.write_text(json.dumps(data, indent=2))
    return project


def start_pilot(project: Path, logs: Path, *args: str,
                seconds: str = "0.2") -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "kdkit", "pilot", str(project), *args], cwd=REPO,
                            env={**os.environ, "SLOW_SECONDS": seconds},
                            stdout=logs.with_suffix(".out").open("wb"),
                            stderr=logs.with_suffix(".err").open("wb"))


def until(condition: Any, process: subprocess.Popen[bytes] | None = None,
          timeout: float = 300) -> Any:
    """Poll ``condition`` until it is truthy (a hang guard only, never a timing assertion)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        if process is not None and process.poll() is not None:
            found = condition()
            if found:
                return found
            pytest.fail(f"the pilot ended (exit {process.returncode}) first")
        time.sleep(0.05)
    pytest.fail("condition not met within the hang guard")


def running_heartbeat(runs: Path) -> dict[str, Any] | None:
    for folder in run_folders(runs):
        beat = read_heartbeat(folder)
        if beat is not None and isinstance(beat.get("done"), int) and beat["done"] >= 2:
            return beat
    return None


def test_the_writer_writes_at_most_once_a_second_and_atomically(tmp_path: Path) -> None:
    beat = Heartbeat(tmp_path, "R1", 10, 3, 60.0)
    beat.beat(0, 0, force=True)
    first = json.loads((tmp_path / HEARTBEAT).read_text())
    assert set(first) == KEYS and first["state"] == "running" and first["run_id"] == "R1"
    beat.beat(5, 1, last_error="bad\x1b[2Jthing")  # within the second: counted, not written
    assert json.loads((tmp_path / HEARTBEAT).read_text())["done"] == 0
    beat.beat(6, 1, force=True)
    again = read_heartbeat(tmp_path)
    assert again is not None and (again["done"], again["rejected"], again["accepted"]) == (6, 1, 5)
    assert again["last_error"] == "bad\x1b[2Jthing" and again["rejection_limit"] == 3
    assert [p.name for p in tmp_path.iterdir()] == [HEARTBEAT]  # no temporary file left beside it
    beat.remove()
    assert read_heartbeat(tmp_path) is None


def test_a_running_pilot_beats_and_status_reads_it_then_the_closed_run(
    project: Path, tmp_path: Path) -> None:
    slow_project(project, max_rejected=7)
    process = start_pilot(project, tmp_path / "pilot", seconds="0.3")
    beat = until(lambda: running_heartbeat(project / "runs"), process)
    assert set(KEYS) <= set(beat) and beat["state"] == "running" and beat["rejection_limit"] == 7
    assert beat["pid"] == process.pid and beat["total"] > beat["done"] >= 2
    live = invoke("status", beat["run_id"], "--project", project, "--json")
    assert live.exit_code == 0, live.output
    report = json.loads(live.stdout)
    assert report["state"] == "running" and report["run_id"] == beat["run_id"]
    assert report["total"] == beat["total"] and report["rejection_limit"] == 7 and report["rate"] is not None
    assert process.wait(timeout=600) == 0
    (folder,) = run_folders(project / "runs")
    # gone before the folder closed: SHA256SUMS never lists it
    assert not (folder / HEARTBEAT).exists()
    assert HEARTBEAT not in (folder / "SHA256SUMS").read_text()
    assert read_run(folder).verdict == "pass"
    done = json.loads(invoke("status", beat["run_id"], "--project", project, "--json").stdout)
    assert (done["state"], done["done"], done["total"]) == ("passed", beat["total"], beat["total"])
    listed = json.loads(invoke("status", "--project", project, "--json").stdout)
    assert [run["run_id"] for run in listed["runs"]] == [beat["run_id"]]  # the most recent run


def test_sighup_to_a_host_pilot_closes_it_resumably_and_resume_finishes(
    project: Path, tmp_path: Path) -> None:
    slow_project(project)
    process = start_pilot(project, tmp_path / "pilot", "--json", seconds="0.3")
    beat = until(lambda: running_heartbeat(project / "runs"), process)
    process.send_signal(signal.SIGHUP)
    assert process.wait(timeout=300) == 129
    (folder,) = run_folders(project / "runs")
    stop = json.loads((folder / "stop.json").read_text())
    assert stop["rule"] == "hangup" and "SIGHUP" in stop["reason"]
    assert not (folder / HEARTBEAT).exists() and (folder / "SHA256SUMS").is_file()
    stopped = json.loads(invoke("status", beat["run_id"], "--project", project, "--json").stdout)
    assert stopped["state"] == "stopped" and stopped["rule"] == "hangup"
    resumed = subprocess.run([sys.executable, "-m", "kdkit", "pilot", str(project), "--resume",
                              beat["run_id"],
                              "--json", "--quiet"], cwd=REPO,
                             env={**os.environ, "SLOW_SECONDS": "0"},
                             capture_output=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert read_run(folder).verdict == "pass"


def test_a_heartbeat_with_no_process_and_no_container_is_lost(project: Path) -> None:
    folder = project / "runs" / "20260101T000000Z-deadbeef"
    folder.mkdir(parents=True)
    (folder / HEARTBEAT).write_text(json.dumps({
        "run_id": folder.name, "pid": 2 ** 22 + 7, "host": os.uname().nodename, "state": "running",
        "done": 3,
        "total": 10, "accepted": 3, "rejected": 0, "rejection_limit": None, "last_error": None,
        "started": "2026-01-01T00:00:00+00:00", "updated": "2026-01-01T00:00:05+00:00",
        "max_seconds": None,
        "rate": 0.5}))
    report = json.loads(invoke("status", folder.name, "--project", project, "--json").stdout)
    assert report["state"] == "lost" and report["done"] == 3 and report["eta_seconds"] is None


@pytest.mark.parametrize("bad", ["../x", "a b", "x;rm -rf", "x/y", "é\u202e"])
def test_bad_run_ids_are_exit_2(project: Path, bad: str) -> None:
    for command in ("status", "wait", "logs"):
        result = invoke(command, bad, "--project", project)
        assert result.exit_code == 2, (command, result.output)
        assert "not a valid run ID" in result.output


def test_an_unknown_run_is_exit_2(project: Path) -> None:
    result = invoke("status", "20260101T000000Z-00000000", "--project", project)
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1].startswith(
        "Error: run 20260101T000000Z-00000000: no run folder")


def test_the_readers_names_agree_with_the_run_folders() -> None:
    """kdkit.machine.watch repeats a few of kdkit.core.runfolder's names so that `kdkit status` stays light."""
    from kdkit.core import runfolder, runid
    from kdkit.machine import watch

    assert (watch.PARAMS,
            watch.STOP, watch.SUMMARY) == (runfolder.PARAMS, runfolder.STOP, runfolder.SUMMARY)
    assert (watch.KIND, watch.TRAIN) == (runfolder.KIND, runfolder.TRAIN)
    assert watch.WORKER_FOLDER.pattern == runfolder.WORKER_FOLDER.pattern
    assert runfolder.HEARTBEAT in runfolder.HARNESS_FILES
    # The run-ID rule and the gathering's name are the one rule's (kdkit.core.runid), not copies: status imports them.
    assert watch.as_run_id is runid.as_run_id and watch.gathered_folder is runid.gathered_folder


def test_status_without_an_id_shows_no_folder_whose_name_is_no_run_id(tmp_path: Path) -> None:
    """RUN_ID is checked by its argument's type (test_bad_run_ids_are_exit_2); the runs `kdkit status` finds
    by itself come from folder names and container labels, and one that is no run ID is none of them."""
    from kdkit.machine import watch

    for name in ("a b", "x;rm -rf", "\u202eevil", "20260101T000000Z-00000000"):
        (tmp_path / name).mkdir()
    labelled = [watch.Labelled("c1", "kdkit-up", "running", "Up", {watch.LABEL_RUN: "../up"})]
    os.utime(tmp_path / "a b", (3e9, 3e9))  # the newest folder, named by no run
    assert watch.recent_runs(tmp_path, labelled) == []
    os.utime(tmp_path / "20260101T000000Z-00000000", (4e9, 4e9))
    assert watch.recent_runs(tmp_path, labelled) == ["20260101T000000Z-00000000"]


def test_a_run_kdkit_run_started_whose_container_is_gone_is_lost_at_once(
    docker_engine: None, project: Path) -> None:
    """A fresh heartbeat written in a container (another host name, its own PID 7): with the engine answering and no
    container labelled with the run, a run `kdkit run` started (params.json's launch) is lost now, not in 5 minutes;
    one started by a plain `docker run` (no launch: no label to look for) still reads as running."""
    from datetime import datetime, timezone

    folder = project / "runs" / "20260101T000000Z-0c0c0c0c"
    folder.mkdir(parents=True)
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    (folder / HEARTBEAT).write_text(json.dumps({
        "run_id": folder.name, "pid": 7, "host": "0123456789ab", "state": "running", "done": 3,
        "total": 10,
        "accepted": 3, "rejected": 0, "rejection_limit": None, "last_error": None, "started": now,
        "updated": now,
        "max_seconds": None, "rate": 0.5}))
    (folder / "params.json").write_text(json.dumps({"run_id": folder.name}))
    report = json.loads(invoke("status", folder.name, "--project", project, "--json").stdout)
    assert report["state"] == "running"
    (folder
     / "params.json").write_text(json.dumps({"run_id": folder.name, "launch": {"image": "x"}}))
    report = json.loads(invoke("status", folder.name, "--project", project, "--json").stdout)
    assert report["state"] == "lost" and "container is gone" in report["reason"] and report["eta_seconds"] is None
    waited = invoke("wait", folder.name, "--project", project, "--timeout", "600")
    assert waited.exit_code == 1


def test_a_negative_timeout_or_a_copy_every_under_a_second_is_exit_2(
    project: Path, tmp_path: Path) -> None:
    run_id = "20260101T000000Z-00000000"
    timeout = invoke("wait", run_id, "--project", project, "--timeout", "-1")
    assert timeout.exit_code == 2 and "--timeout -1: expected 0 or more seconds" in timeout.output
    every = invoke("wait", run_id, "--project", project, "--copy-to",
                   tmp_path / "x", "--copy-every", "0")
    assert every.exit_code == 2 and "--copy-every 0: expected at least 1 second" in every.output
    assert not (tmp_path / "x").exists()
