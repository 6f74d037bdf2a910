"""`kdkit run --detach`, then `kdkit status`, `kdkit logs` and `kdkit wait` from new processes: the run followed from
its folder and its labelled container, never from the process that started it.

Real: kdkit in its own processes, the session's end-to-end image (tagged kdkit-b26 for these tests), the engine."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kdkit.core.runverify import read_run
from tests.conftest import REPO
from tests.machine.test_run_stop import slow_inputs

TAG = "kdkit-b26:cpu"


@pytest.fixture(scope="module")
def image(built: dict[str, Any]) -> Iterator[str]:
    """The session's image under a tag of these tests' own."""
    from kdkit.docker_adapter import connect

    engine = connect()
    ref = built.get("image") or built.get("tag") or built.get("ref")
    facts = engine.require_image(str(ref))
    engine.tag(facts.id, TAG)
    yield TAG


def kdkit(*args: str | Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """`kdkit ARGS` in a new process, as another shell would run it."""
    return subprocess.run([sys.executable, "-m", "kdkit", *map(str, args)], cwd=REPO,
                          capture_output=True,
                          text=True, timeout=timeout)


def labelled(run_id: str) -> list[dict[str, Any]]:
    import docker

    return list(
        docker.from_env().api.containers(all=True,
                                         filters={"label": [f"dev.kdkit.run-id={run_id}"]}))


def test_print_shows_the_labels_and_the_name(image: str, locked_copy: Path) -> None:
    printed = kdkit("run", locked_copy, "--image", image, "--print")
    assert printed.returncode == 0, printed.stderr
    line = printed.stdout.splitlines()[-1]
    assert "--label dev.kdkit.role=run" in line and f"--label dev.kdkit.project={locked_copy}" in line
    assert "--label dev.kdkit.run-id=" in line and "--name kdkit-" in line and "--env KDKIT_RUN_ID=" in line
    detached = kdkit("run", locked_copy, "--image",
                     image, "--print", "--detach").stdout.splitlines()[-1]
    assert detached.startswith(
        "docker run --detach --pull never ") and "--rm" not in detached.split()


def test_detach_then_status_logs_and_wait_from_new_processes(image: str, locked_copy: Path) -> None:
    total = slow_inputs(locked_copy, copies=20)
    started = kdkit("run", locked_copy, "--image", image, "--detach", "--json", timeout=120)
    assert started.returncode == 0, started.stderr
    report = json.loads(started.stdout)
    run_id, name = report["run_id"], report["container"]
    assert name == f"kdkit-{run_id}" and report["follow"][0].startswith(f"kdkit status {run_id}")
    (container,) = labelled(run_id)
    assert container["Labels"]["dev.kdkit.project"] == str(locked_copy)
    assert container["Labels"]["dev.kdkit.role"] == "run"

    status = kdkit("status", run_id, "--project", locked_copy, "--json")
    assert status.returncode == 0, status.stderr
    seen = json.loads(status.stdout)
    assert seen["run_id"] == run_id and seen["state"] in ("running", "passed")
    assert seen["container"]["name"] == name and seen["container"]["labels"]["dev.kdkit.run-id"] == run_id
    every = json.loads(kdkit("status", "--project", locked_copy, "--json").stdout)
    assert run_id in [run["run_id"] for run in every["runs"]]

    waited = kdkit("wait", run_id, "--project", locked_copy, "--json")
    assert waited.returncode == 0, waited.stderr
    assert json.loads(waited.stdout)["state"] == "passed"
    folder = locked_copy / "runs" / run_id  # the run ID chosen on the host is the folder's name
    assert read_run(folder).verdict == "pass" and read_run(folder).total == total
    assert labelled(run_id) == []  # wait removed the container it waited on
    # issue 31 §6: a detached run is handed back by wait as `run` hands back its own
    if os.geteuid() == 0:
        assert all(p.stat().st_mode & stat.S_IROTH for p in [folder, *folder.rglob("*")])
        assert f"{folder}: made readable by everyone" in waited.stderr

    after = json.loads(kdkit("status", run_id, "--project", locked_copy, "--json").stdout)
    assert (after["state"], after["done"], after["total"],
            after["container"]) == ("passed", total, total, None)
    # the output wait kept before removing the container
    kept = kdkit("logs", run_id, "--project", locked_copy)
    assert kept.returncode == 0 and "PASS" in kept.stdout
    assert (locked_copy / ".kdkit-logs" / f"kdkit-{run_id}.log").is_file()
    (locked_copy / ".kdkit-logs" / f"kdkit-{run_id}.log").unlink()
    gone = kdkit("logs", run_id, "--project", locked_copy)
    assert gone.returncode == 3 and gone.stderr.strip().splitlines()[-1].startswith(
        f"Error: run {run_id}: no container of it is left and no output was kept")
    unknown = kdkit("logs", "20260101T000000Z-00000000", "--project", locked_copy)
    assert unknown.returncode == 2 and "no run folder" in unknown.stderr
    assert kdkit("status", "", "--project", locked_copy).returncode == 2


def test_logs_show_the_containers_output(image: str, locked_copy: Path) -> None:
    started = kdkit("run", locked_copy, "--image", image, "--detach", "--json", timeout=120)
    run_id = json.loads(started.stdout)["run_id"]
    followed = kdkit("logs", run_id, "--project", locked_copy, "-f")  # to the container's end
    assert followed.returncode == 0, followed.stderr
    assert "PASS" in followed.stdout
    assert kdkit("wait", run_id, "--project", locked_copy).returncode == 0
    assert labelled(run_id) == []


def test_wait_copies_a_detached_run_and_detach_refuses_copy_to(image: str, locked_copy: Path,
                                                                tmp_path: Path) -> None:
    refused = kdkit("run", locked_copy, "--image", image, "--detach", "--copy-to",
                    tmp_path / "x", timeout=120)
    assert refused.returncode == 2 and "kdkit wait RUN_ID --copy-to DEST" in refused.stderr
    assert not (tmp_path / "x").exists()
    started = kdkit("run", locked_copy, "--image", image, "--detach", "--json", timeout=120)
    run_id = json.loads(started.stdout)["run_id"]
    waited = kdkit("wait", run_id, "--project", locked_copy, "--copy-to",
                   tmp_path / "evidence", "--copy-every", "1")
    assert waited.returncode == 0, waited.stderr
    assert "verified there" in waited.stderr
    copy = tmp_path / "evidence" / run_id
    assert read_run(copy).verdict == "pass"
    verified = subprocess.run([sys.executable, "-m", "kdkit", "copy-out", "--verify", str(copy)],
                              cwd=REPO,
                              capture_output=True, text=True, timeout=600)
    assert verified.returncode == 0, verified.stderr
    assert labelled(run_id) == []


def test_run_copy_to_copies_during_the_run_and_verifies_the_end(
    image: str, locked_copy: Path, tmp_path: Path) -> None:
    """`kdkit run --copy-to DEST` in the foreground: the closed run folder lands at DEST/<run-id>, verified there."""
    slow_inputs(locked_copy, copies=10)
    ran = kdkit("run", locked_copy, "--image", image, "--copy-to", tmp_path / "evidence",
                "--copy-every", "1",
                "--json")
    assert ran.returncode == 0, ran.stderr
    (folder,) = json.loads(ran.stdout)["run_folders"]
    copy = tmp_path / "evidence" / Path(folder).name
    assert "verified there" in ran.stderr and read_run(copy).verdict == "pass"
    # no staging left beside it
    assert sorted(p.name for p in (tmp_path / "evidence").iterdir()) == [copy.name]
    verified = kdkit("copy-out", "--verify", copy)
    assert verified.returncode == 0, verified.stderr
