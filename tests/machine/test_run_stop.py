"""Stopping `kdkit run` (and `--workers N`) with Ctrl-C or SIGTERM, and the engine's own NVIDIA refusal.

Every run is real: kdkit in its own process, the session's end-to-end image on the cpu backend,
real containers stopped by the real engine. The pilot is slowed by its inputs only (the host's
data/pilot is mounted into the container): many documents of about 60 KB each, all correct, so a
run takes long enough to be interrupted and a resumed one still passes.
"""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kdkit.core.errors import Interrupted, Unavailable, interrupted_exit
from kdkit.core.runfolder import WORKER_FOLDER, run_folders
from kdkit.core.runverify import read_run
from kdkit.docker_adapter import NVIDIA_ERROR, NVIDIA_FIX, ContainerSpec, connect
from kdkit.machine.run import execute, prepare_run
from tests.conftest import BASE, REPO, invoke


def slow_inputs(project: Path, copies: int) -> int:
    """``copies`` of each accepted document under new IDs, each ~60 KB (the template's app then takes
    ~12 ms an item on one core); returns how many documents the manifest now holds."""
    inputs = project / "data" / "pilot"
    manifest = json.loads((inputs / "manifest.json").read_text())
    docs = [d for d in manifest["documents"] if d["expect"] == "accept"]
    for doc in docs:
        text = (inputs / doc["file"]).read_text() + "\n"
        (inputs / f"big-{doc['file']}").write_text(text * (60000 // len(text)))
    many = [{**d, "id": f"{d['id']}-{n:04d}", "file": f"big-{d['file']}"} for n in range(copies)
            for d in docs]
    (inputs / "manifest.json").write_text(json.dumps({"documents": many}))
    return len(many)


def start_kdkit(*args: str | Path, logs: Path) -> subprocess.Popen[bytes]:
    """`kdkit ARGS` in its own process (a signal must reach kdkit, not pytest), output to ``logs``.*"""
    return subprocess.Popen([sys.executable, "-m", "kdkit", *map(str, args)], cwd=REPO,
                            stdout=(logs.with_suffix(".out")).open("wb"),
                            stderr=(logs.with_suffix(".err")).open("wb"))


def wait_until_batches(runs: Path, folders: int, process: subprocess.Popen[bytes],
                       timeout: float = 300) -> list[Path]:
    """The run folders once ``folders`` of them each hold a recorded batch: every pilot is in its run loop,
    where its stop guard has taken SIGTERM over (before that, as PID 1, it would not see it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [f for f in run_folders(runs) if (f / "results.jsonl").is_file()
                 and (f / "results.jsonl").read_bytes().count(b"\n") >= 1]
        if len(found) >= folders:
            return found
        if process.poll() is not None:
            pytest.fail(
                f"kdkit ended before every pilot recorded a batch (exit {process.returncode})")
        time.sleep(0.05)
    process.kill()
    pytest.fail(f"no {folders} run folder(s) with a batch under {runs} within {timeout} s")


def containers_of(project: Path) -> list[str]:
    """Every container on the engine, running or not, that mounts a folder of ``project``."""
    import docker

    client = docker.from_env()
    return [c.short_id for c in client.containers.list(all=True)
            if any(str(m.get("Source", "")).startswith(str(project)) for m in c.attrs.get("Mounts")
                   or [])]


def stopped(folder: Path, reason: str) -> None:
    """A folder the pilot closed on a stop: sealed, stop.json with ``reason``, a failing summary."""
    run = read_run(folder)
    assert (folder / "SHA256SUMS").is_file(), f"{folder} is not closed"
    assert (run.verdict, run.stop_reason) == ("fail", reason)
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["stopped"]["rule"] == "terminate"
    share = WORKER_FOLDER.match(folder.name)
    hint = (f"--resume {share['base']} --worker {share['worker']} --workers {share['workers']}"
            if share
            # the options that do finish it (a worker's share named too)
            else f"--resume {folder.name}")
    assert summary["problems"][0] == f"stopped early: {reason}; resume with {hint}"


# ---------------------------------------------------------------- the exit codes


def test_an_interrupt_exits_128_plus_its_signal() -> None:
    assert (Interrupted().exit_code, Interrupted(signal.SIGTERM).exit_code) == (130, 143)
    assert (Interrupted().name, Interrupted(signal.SIGTERM).name) == ("Ctrl-C (SIGINT)", "SIGTERM")
    assert interrupted_exit(KeyboardInterrupt()) == 130
    assert interrupted_exit(Interrupted(signal.SIGTERM)) == 143


def test_the_workers_hand_their_pilot_the_signal(built: dict[str, Any], locked_copy: Path) -> None:
    result = invoke("run", locked_copy, "--workers", "2", "--print")
    assert result.exit_code == 0, result.output
    runs = [ln for ln in result.stdout.splitlines() if ln.startswith("docker run ")]
    # the pilot replaces /bin/sh as PID 1
    assert all("&& exec kdkit pilot /app --run-id " in ln for ln in runs)


# ---------------------------------------------------------------- Ctrl-C during kdkit run --workers 2


def test_ctrl_c_stops_every_worker_and_each_folder_is_closed_with_its_reason(
        built: dict[str, Any], locked_copy: Path, tmp_path: Path) -> None:
    slow_inputs(locked_copy, copies=200)  # 2200 documents: ~13 s of app time per worker
    process = start_kdkit("run", locked_copy, "--workers", "2", logs=tmp_path / "kdkit")
    folders = wait_until_batches(locked_copy / "runs", 2, process)
    sent = time.monotonic()
    process.send_signal(signal.SIGINT)
    code = process.wait(timeout=120)
    took = time.monotonic() - sent
    out, err = (tmp_path / "kdkit.out").read_text(), (tmp_path / "kdkit.err").read_text()

    assert code == 130, err
    assert containers_of(locked_copy) == []  # stopped and removed
    assert [f.name.rsplit("-", 1)[1] for f in folders] == ["w0of2", "w1of2"]
    for folder in folders:
        stopped(folder, "terminated (SIGTERM)")
        assert f"{folder}: closed, stopped: terminated (SIGTERM); finish it: kdkit run {locked_copy} --image " in err
    run_id = folders[0].name.rsplit("-", 1)[0]
    assert "Stopped by Ctrl-C (SIGINT): every container was stopped and removed; nothing was gathered." in err
    assert f"-- kdkit pilot /app --resume {run_id} --worker 1 --workers 2" in err
    assert not (locked_copy / "runs" / f"{run_id}-gathered").exists()
    assert "[w0] FAIL: " in out and "[w1] FAIL: " in out  # each pilot's closing words were shown
    # each pilot closed at once, no SIGKILL after the grace
    assert took < 30, f"the stop took {took:.1f} s"
    print(f"SIGINT to kdkit exit: {took:.2f} s for 2 workers")

    # What kdkit said to do finishes the run: each worker's line, then the gathering.
    said = [line.split(": ", 1)[1] for line in err.splitlines() if "; finish it: kdkit " in line or
            line.startswith("  then gather: kdkit ")]
    for line in [part.split("finish it: ", 1)[-1] for part in said]:
        argv = shlex.split(line)
        assert argv[0] == "kdkit"
        result = invoke(*argv[1:])
        assert result.exit_code == 0, result.output
    gathered = json.loads(
        (locked_copy / "runs" / f"{run_id}-gathered" / "summary.json").read_text())
    assert (gathered["verdict"], gathered["total"], gathered["workers"]) == ("pass", 2200, 2)


# ---------------------------------------------------------------- SIGTERM during kdkit run, then --resume


def test_sigterm_stops_kdkit_run_and_resume_finishes_that_run(built: dict[str, Any],
                                                              locked_copy: Path,
                                                               tmp_path: Path) -> None:
    total = slow_inputs(locked_copy, copies=100)  # 1100 documents: ~13 s of app time
    process = start_kdkit("run", locked_copy, logs=tmp_path / "kdkit")
    (folder,) = wait_until_batches(locked_copy / "runs", 1, process)
    process.send_signal(signal.SIGTERM)
    code = process.wait(timeout=120)
    err = (tmp_path / "kdkit.err").read_text()

    assert code == 143, err
    assert containers_of(locked_copy) == []
    stopped(folder, "terminated (SIGTERM)")
    assert "Stopped by SIGTERM: the container was stopped (exit 143) and removed." in err
    assert f"{folder}: closed, stopped: terminated (SIGTERM); finish it: kdkit run {locked_copy} --image " in err
    assert err.rstrip().endswith(f"--resume {folder.name}")
    done_before = (folder / "results.jsonl").read_bytes().count(b"\n")
    assert 0 < done_before < total

    resumed = invoke("run", locked_copy, "--resume", folder.name, "--json")
    assert resumed.exit_code == 0, resumed.output
    summary = json.loads((folder / "summary.json").read_text())
    assert (summary["verdict"], summary["total"], summary["accepted"],
            summary["resumed"]) == ("pass", total, total,
                                                                                              True)
    # the stop, kept by number
    assert (folder / "stop-1.json").is_file() and not (folder / "stop.json").exists()
    assert containers_of(locked_copy) == []


# ---------------------------------------------------------------- the engine refuses a GPU


def test_the_engines_own_gpu_refusal_is_exit_3_with_the_fix(
    built: dict[str, Any], locked_copy: Path) -> None:
    """A host whose engine lists a GPU runtime but cannot serve a device request (the toolkit's hook
    registered, the toolkit broken or absent): the real engine answers the start with the error, quoted."""
    if "nvidia" in connect().runtimes():
        pytest.skip("this engine has the NVIDIA runtime")
    plan = prepare_run(locked_copy)
    # what cuda_access gives once it sees a runtime
    plan = replace(plan, spec=replace(plan.spec, gpus="all"))
    with pytest.raises(Unavailable) as caught:
        execute(plan)
    message = str(caught.value)
    assert caught.value.exit_code == 3
    assert f"({NVIDIA_ERROR})" in message and message.endswith(NVIDIA_FIX)
    assert message.startswith(
        f"{plan.image.ref}: the Docker engine cannot give the container a GPU (")
    assert containers_of(locked_copy) == []  # created, refused at start, removed
    assert run_folders(locked_copy / "runs") == []


def test_the_refusal_comes_from_the_engine_for_a_bare_image(docker_engine: None) -> None:
    if "nvidia" in connect().runtimes():
        pytest.skip("this engine has the NVIDIA runtime")
    with pytest.raises(
        Unavailable, match=r"could not select device driver \"\" with capabilities: \[\[gpu\]\]"):
        connect().run(ContainerSpec(image=BASE, command=["true"], gpus=["0"]))

