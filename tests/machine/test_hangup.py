"""SIGHUP (what a dropped SSH connection sends) to a foreground `kdkit run` and `kdkit run --workers 2` mid-run:
kdkit stops following, says where the run goes on and exits 129; the containers run on to their verdict, never
stopped, never removed; `kdkit status` and `kdkit wait` from a new process give the verdict later (a workers run
gathered by the wait), and the containers are gone after the wait.

Real: kdkit in its own process, the session's end-to-end image (tagged kdkit-b26), the engine. (SIGHUP to a host
`kdkit pilot` is in tests/core/test_heartbeat.py.)"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

from kdkit.core.runverify import read_run

# the fixture: the session's image tagged kdkit-b26
from tests.machine.test_detach_status import image as image
from tests.machine.test_detach_status import kdkit, labelled
from tests.machine.test_run_stop import slow_inputs, start_kdkit, wait_until_batches


def test_sighup_to_kdkit_run_leaves_the_container_to_its_verdict(image: str, locked_copy: Path,
                                                                 tmp_path: Path) -> None:
    total = slow_inputs(locked_copy, copies=60)
    process = start_kdkit("run", locked_copy, "--image", image, logs=tmp_path / "kdkit")
    (folder,) = wait_until_batches(locked_copy / "runs", 1, process)
    process.send_signal(signal.SIGHUP)
    assert process.wait(timeout=120) == 129
    err = (tmp_path / "kdkit.err").read_text()
    run_id = folder.name
    assert (f"connection lost: run {run_id} continues in container kdkit-{run_id}; follow it with "
            f"kdkit status {run_id}") in err
    assert len(labelled(run_id)) == 1  # labelled with its run, still there

    status = json.loads(kdkit("status", run_id, "--project", locked_copy, "--json").stdout)
    assert status["state"] in ("running",
                               "passed") and status["container"]["name"] == f"kdkit-{run_id}"
    waited = kdkit("wait", run_id, "--project", locked_copy)
    assert waited.returncode == 0, waited.stderr
    run = read_run(folder)
    assert (run.verdict, run.total, run.stop_reason) == ("pass", total, None)  # never stopped
    assert labelled(run_id) == []
    after = json.loads(kdkit("status", run_id, "--project", locked_copy, "--json").stdout)
    assert after["state"] == "passed"


def test_sighup_to_kdkit_run_workers_then_wait_gathers(image: str,
                                                       locked_copy: Path, tmp_path: Path) -> None:
    total = slow_inputs(locked_copy, copies=60)
    process = start_kdkit("run", locked_copy, "--image", image, "--workers", "2",
                          logs=tmp_path / "kdkit")
    folders = wait_until_batches(locked_copy / "runs", 2, process)
    process.send_signal(signal.SIGHUP)
    assert process.wait(timeout=120) == 129
    err = (tmp_path / "kdkit.err").read_text()
    run_id = folders[0].name.rsplit("-w", 1)[0]
    assert f"connection lost: run {run_id} continues in container kdkit-{run_id}-w0, kdkit-{run_id}-w1;" in err
    assert {c["Labels"]["dev.kdkit.role"] for c in labelled(run_id)} == {"worker"}

    status: dict[str, Any] = json.loads(
        kdkit("status", run_id, "--project", locked_copy, "--json").stdout)
    assert status["state"] in ("running", "ended") and len(status["workers"]) == 2
    waited = kdkit("wait", run_id, "--project", locked_copy, "--json")
    assert waited.returncode == 0, waited.stderr
    gathered = json.loads(
        (locked_copy / "runs" / f"{run_id}-gathered" / "summary.json").read_text())
    assert (gathered["verdict"], gathered["total"], gathered["workers"]) == ("pass", total, 2)
    assert labelled(run_id) == []
    assert json.loads(
        kdkit("status", run_id, "--project", locked_copy, "--json").stdout)["state"] == "passed"
