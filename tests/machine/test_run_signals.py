"""Signals to `kdkit run` at the moments the first ones missed: while the image's diagnose or verify-env runs
(before the pilot takes over), while the engine creates the container, and after the container has ended.

Every run is real: kdkit in its own process, the session's end-to-end image, the real engine. The moments
are made exact, never waited for by a clock:

* a phase of the image's own command is held by a ``sitecustomize`` module on the container's PYTHONPATH
  (from ``--env-file``, into the mounted runs/ folder): the kdkit command of that phase (``sys.argv``) marks
  that it has started and waits for a file that never comes;
* the engine's answers pass through :class:`engineproxy.SignalingProxy`, which signals kdkit the moment the
  engine answers the chosen request (the container created, started, or waited for), before kdkit hears it.

Without an init as PID 1 the image's ``/bin/sh`` ignores SIGTERM until its ``exec kdkit pilot``: the stop then
waits out its 30 s grace and kills (exit 137). With it, the shell ends at once (exit 143), which is what
these tests assert: by the container's exit code, which kdkit reports, never by a clock.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from kdkit.core.runfolder import run_folders
from kdkit.docker_adapter import cli_arguments, sdk_arguments
from kdkit.image.container import portable_line, portable_spec
from kdkit.machine.run import prepare_run
from tests.conftest import REPO, invoke
from tests.engineproxy import SignalingProxy

GATE = ".gate"  # under runs/: /app/runs/.gate in the container (a hidden name: never a run folder)
SITECUSTOMIZE = """import os, sys, time
if os.path.basename(sys.argv[0]) == "kdkit" and sys.argv[1:2] == [os.environ.get("KDKIT_TEST_GATE")]:
    here = os.path.dirname(os.path.abspath(__file__))
    open(os.path.join(here, "at-" + sys.argv[1]), "w").close()
    while not os.path.exists(os.path.join(here, "go")):
        time.sleep(0.05)
"""
SIGNALS = {"SIGTERM": (signal.SIGTERM, 143), "SIGINT": (signal.SIGINT, 130)}


def containers_of(project: Path) -> list[str]:
    """Every container on the engine, running or not (Created too), that mounts a folder of ``project``: one list
    call, whose answer carries each container's mounts (others' containers may come and go meanwhile)."""
    import docker

    return [c["Id"][:12] for c in docker.from_env().api.containers(all=True)
            if any(str(m.get("Source", "")).startswith(str(project)) for m in c.get("Mounts")
                   or [])]


def gated(project: Path, phase: str) -> Path:
    """runs/.gate with the sitecustomize that holds ``phase``, and the env file that puts it on PYTHONPATH."""
    gate = project / "runs" / GATE
    gate.mkdir(parents=True)
    (gate / "sitecustomize.py").write_text(SITECUSTOMIZE)
    gate.chmod(0o777)  # the container's user (10001 when root runs kdkit) writes its mark there
    env_file = project / "gate.env"
    env_file.write_text(f"PYTHONPATH=/app/runs/{GATE}\nKDKIT_TEST_GATE={phase}\n")
    return env_file


def start(args: list[str | Path], logs: Path,
          docker_host: str | None = None) -> subprocess.Popen[bytes]:
    env = {**os.environ, **({"DOCKER_HOST": docker_host} if docker_host else {})}
    return subprocess.Popen([sys.executable, "-m", "kdkit", *map(str, args)], cwd=REPO, env=env,
                            stdout=logs.with_suffix(".out").open("wb"),
                            stderr=logs.with_suffix(".err").open("wb"))


def wait_for(path: Path, process: subprocess.Popen[bytes], timeout: float = 300) -> None:
    """Until ``path`` exists (a hang guard only)."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if process.poll() is not None:
            pytest.fail(f"kdkit ended (exit {process.returncode}) before {path.name} appeared")
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"{path} did not appear within {timeout} s")
        time.sleep(0.05)


def finished(process: subprocess.Popen[bytes], logs: Path) -> tuple[int, str, str]:
    code = process.wait(timeout=240)  # the stop's grace is 30 s: this only catches a hang
    return code, logs.with_suffix(".out").read_text(), logs.with_suffix(".err").read_text()


# ---------------------------------------------------------------- the spec: an init, in kdkit run and RUN.md alike


def test_every_container_kdkit_starts_has_an_init(built: dict[str, Any], locked_copy: Path) -> None:
    plan = prepare_run(locked_copy)
    assert plan.spec.init and sdk_arguments(plan.spec)["init"] is True
    assert "--init" in cli_arguments(plan.spec)
    printed = invoke("run", locked_copy, "--print")
    assert printed.exit_code == 0, printed.output
    assert " --init " in printed.stdout.splitlines()[-1]
    for backend in ("cpu", "cuda", "rocm"):  # RUN.md's docker run line is the same spec
        assert " --init " in portable_line(
            portable_spec("IMG", "$PWD", "data/pilot", "runs", backend), backend)
    workers = invoke("run", locked_copy, "--workers", "2", "--print")
    assert workers.exit_code == 0, workers.output
    assert all(" --init " in line for line in workers.stdout.splitlines()
               if line.startswith("docker run "))


# ---------------------------------------------------------------- a stop before the pilot has begun


@pytest.mark.parametrize(("phase", "name"), [("diagnose", "SIGTERM"), ("diagnose", "SIGINT"),
                                             ("verify-env", "SIGTERM"), ("pilot", "SIGTERM")])
def test_a_stop_before_the_pilot_ends_the_container_at_once(built: dict[str, Any],
                                                            locked_copy: Path,
                                                            tmp_path: Path,
                                                            phase: str, name: str) -> None:
    signum, exit_code = SIGNALS[name]
    env_file = gated(locked_copy, phase)
    process = start(["run", locked_copy, "--env-file", env_file, "--json"], tmp_path / "kdkit")
    # that phase's command has started
    wait_for(locked_copy / "runs" / GATE / f"at-{phase}", process)
    process.send_signal(signum)
    code, out, err = finished(process, tmp_path / "kdkit")

    assert code == exit_code, err
    report = json.loads(out)
    # SIGTERM ended it; 137 would be the SIGKILL after 30 s
    assert report["container_exit_code"] == 143, err
    assert f"Stopped by {'Ctrl-C (SIGINT)' if name == 'SIGINT' else 'SIGTERM'}: the container was stopped " \
           "(exit 143) and removed." in err
    assert "no run folder was made; run it again" in err
    assert run_folders(locked_copy / "runs") == [] and report["run_folders"] == []
    assert containers_of(locked_copy) == []


# ---------------------------------------------------------------- a run that ended before the stop


@pytest.mark.parametrize(("command", "expected", "name"), [
    ([], 0, "SIGTERM"),  # the image's own diagnose -> verify-env -> pilot, which passes
    (["sh", "-c", "exit 1"], 1, "SIGTERM"),
    (["sh", "-c", "exit 3"], 3, "SIGINT"),
    (["sh", "-c", "exit 0"], 0, "SIGINT"),
])
def test_a_run_that_ended_before_the_stop_reports_its_verdict(built: dict[str, Any],
                                                              locked_copy: Path,
                                                              tmp_path: Path, command: list[str],
                                                              expected: int,
                                                              name: str) -> None:
    signum, _code = SIGNALS[name]
    # The engine answers "wait" once the container has exited: the signal lands before kdkit hears its code.
    with SignalingProxy(rb"^POST /v[0-9.]+/containers/[0-9a-f]+/wait", signum) as proxy:
        process = start(["run", locked_copy, *(["--", *command] if command else [])],
                        tmp_path / "kdkit",
                        proxy.url)
        proxy.target(process.pid)
        code, _out, err = finished(process, tmp_path / "kdkit")
    assert proxy.fired.is_set()
    assert code == expected, err
    assert "Stopped by" not in err and "stopped and removed" not in err and "--resume" not in err
    verdict = "passed" if expected == 0 else f"failed (exit {expected})"
    assert f"Verdict: {verdict}; new run folders: " in err
    if not command:  # the pilot's own run folder, finished and passing
        (folder,) = run_folders(locked_copy / "runs")
        assert json.loads((folder / "summary.json").read_text())["verdict"] == "pass"
        assert not (folder / "stop.json").exists()
    assert containers_of(locked_copy) == []


# ---------------------------------------------------------------- a stop while the container is made


@pytest.mark.parametrize(("request_line", "name"), [
    # the engine has made it; kdkit does not know its ID yet
    (rb"^POST /v[0-9.]+/containers/create", "SIGTERM"),
    (rb"^POST /v[0-9.]+/containers/create", "SIGINT"),
    # started; the log stream not yet followed
    (rb"^POST /v[0-9.]+/containers/[0-9a-f]+/start", "SIGTERM"),
])
def test_a_stop_while_the_container_is_made_leaves_none(built: dict[str, Any], locked_copy: Path,
                                                        tmp_path: Path,
                                                        request_line: bytes, name: str) -> None:
    signum, exit_code = SIGNALS[name]
    assert containers_of(locked_copy) == []
    with SignalingProxy(request_line, signum) as proxy:
        process = start(["run", locked_copy], tmp_path / "kdkit", proxy.url)
        proxy.target(process.pid)
        code, _out, err = finished(process, tmp_path / "kdkit")
    assert proxy.fired.is_set()
    assert code == exit_code, err
    assert "Traceback" not in err and "Stopped by " in err
    # not even a Created one, with the project's folders mounted
    assert containers_of(locked_copy) == []
    assert run_folders(locked_copy / "runs") == []
