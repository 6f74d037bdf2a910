"""``kdkit wait`` and ``kdkit logs``, a status shown in lines, the GPUs' use (kdkit.machine.watch
says what a run is made of), and what kdkit says when its connection is lost (SIGHUP) while it
follows a run.

``kdkit wait RUN_ID`` polls the run's state (its folder and its containers, as ``kdkit status``
reads them) until it no longer runs; a workers run is then gathered (kdkit.probe.pilot.gather, as
``kdkit run --workers`` does in the foreground). Its exit code is the verdict: 0 pass, 1 fail, the
container's own code when it died before its summary; :data:`TIMED_OUT` when ``--timeout`` passed
first (the run goes on). The ended containers it waited on are removed.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.core.errors import BadInput, KdkitError, Unavailable
from kdkit.core.runid import RunId, gathered_folder
from kdkit.machine.naming import LABEL_PROJECT, LABEL_ROLE, LABEL_RUN
from kdkit.machine.watch import WAIT_POLL_S, Place, folders_of, run_status

if TYPE_CHECKING:
    from typing import TypedDict

    class GpuUsage(TypedDict):
        """One GPU's use as nvidia-smi or amd-smi reports it (a reading it lacks: None)."""

        index: str
        name: str  # "" from amd-smi
        utilization_percent: float | str | None
        memory_used_mib: float | str | None
        memory_total_mib: float | str | None

TIMED_OUT = 124  # as timeout(1): the run did not end within --timeout
LOGS_FOLDER = ".kdkit-logs"  # in the project: the output of the containers `kdkit wait` removed
WORKER_LOG = re.compile(r"-w\d+\.log")


def _verdict(report: dict[str, Any]) -> int:
    """The exit code a run's state stands for."""
    if report["state"] == "passed":
        return 0
    parts = report.get("workers") or [report]
    codes = [(part.get("container") or {}).get("exit_code") for part in parts
             if part.get("state") == "failed"]
    died = next((code for code in codes if isinstance(code, int) and code > 1), None)
    return died if died is not None and not any(part.get("verdict") for part in parts) else 1


def _gathered(project: Place, run_id: RunId) -> dict[str, Any]:
    """A workers run whose workers have all ended: gathered (once), and its status read again."""
    from kdkit.probe.pilot.gather import gather

    runs = project.runs
    folders = [folder for folder in folders_of(runs, run_id) if folder.is_dir()]
    if folders and not (runs / gathered_folder(run_id)).is_dir():
        gather(folders, runs / gathered_folder(run_id), project.root)
    return run_status(project, run_id)


def wait_run(project: Place, run_id: RunId, timeout: float | None = None,
             sleep: Callable[[float], None] = time.sleep) -> tuple[int, dict[str, Any]]:
    """Block until run ``run_id`` no longer runs; (its verdict's exit code, its status). Ctrl-C or
    SIGTERM (kdkit.core.stopsignals.interrupts, in the caller) stops the waiting, never the run."""
    if timeout is not None and timeout < 0:
        raise BadInput(f"--timeout {timeout:g}: expected 0 or more seconds, e.g. --timeout 600")
    deadline = None if timeout is None else time.monotonic() + timeout
    report = run_status(project, run_id)
    # a closed folder's container ends a moment later
    while report["state"] == "running" or _still_up(report):
        if deadline is not None and time.monotonic() >= deadline:
            return TIMED_OUT, report
        sleep(WAIT_POLL_S)
        report = run_status(project, run_id)
    if report.get("workers") is not None and report.get("state") == "ended":
        report = _gathered(project, run_id)
    _remove_ended(project, report)
    return _verdict(report), report


def _still_up(report: dict[str, Any]) -> bool:
    return any(part.get("container") and part["container"].get("state") not in ("exited", "dead")
               for part in report.get("workers") or [report])


def saved_log(project: Place, container_name: str) -> Path:
    """Where `kdkit wait` keeps an ended container's output before removing it:
    ``<project>/.kdkit-logs/<name>.log`` (the name is kdkit's own, ``kdkit-<run-id>[-w<i>]``);
    `kdkit logs` reads it once the container is gone."""
    return project.root / LOGS_FOLDER / f"{container_name}.log"


def _remove_ended(project: Place, report: dict[str, Any]) -> None:
    """Remove the run's containers that have ended (their exit code is read: the verdict above holds
    it), each one's output kept first (:func:`saved_log`)."""
    ended = [part["container"] for part in report.get("workers") or [report]
             if part.get("container") and part["container"].get("state") in ("exited", "dead")]
    if not ended:
        return
    from kdkit.core.jsonio import atomic_write_chunks
    from kdkit.core.projectfiles import real_inside
    from kdkit.docker_adapter import connect

    engine = connect()
    # a link out: nothing is kept
    inside = real_inside(project.root, project.root / LOGS_FOLDER) is not None
    for container in ended:
        # gone meanwhile, or no room: the removal still happens
        with contextlib.suppress(KdkitError, OSError):
            if inside:
                atomic_write_chunks(saved_log(project, container["name"]),
                                    engine.logs(container["id"], False))
        engine.remove_container(container["id"])


# ---------------------------------------------------------------- logs


def show_logs(project: Place, run_id: RunId, follow: bool,
              sink: Callable[[str, bytes], None]) -> int:
    """Each of the run's containers' output to ``sink(label, chunk)`` (label "" for a one-container
    run, else "w<i>"); followed as it comes with ``follow``. Unavailable (exit 3) when no container
    of it is left."""
    from kdkit.docker_adapter import connect, labelled_containers

    found = labelled_containers({LABEL_PROJECT: str(project.root), LABEL_RUN: run_id})
    if found is None:
        raise Unavailable(f"run {run_id}: the Docker engine does not answer, so no container "
                          "output can be read; start it (`sudo systemctl start docker`), or "
                          f"`kdkit status {run_id}` reads the run folder")
    if not found:
        return _saved_logs(project, run_id, sink)
    engine = connect()
    named = sorted(found, key=lambda c: c.name)

    def one(container: Any) -> None:
        label = ("" if container.labels.get(LABEL_ROLE) == "run"
                 else container.name.rsplit("-", 1)[-1])
        for chunk in engine.logs(container.id, follow):
            sink(label, chunk)

    threads = [threading.Thread(target=one, args=(c,), daemon=True) for c in named[1:]]
    for thread in threads:
        thread.start()
    one(named[0])
    for thread in threads:
        thread.join()
    return len(named)


def _saved_logs(project: Place, run_id: RunId, sink: Callable[[str, bytes], None]) -> int:
    """An ended run's output as `kdkit wait` kept it; BadInput for a run this project never had."""
    saved = sorted((project.root / LOGS_FOLDER).glob(f"kdkit-{run_id}*.log"))
    saved = [path for path in saved if path.name in (f"kdkit-{run_id}.log",)
             or WORKER_LOG.fullmatch(
        path.name.removeprefix(f"kdkit-{run_id}"))]
    if not saved:
        run_status(project, run_id)  # BadInput when neither a folder nor a container names it
        raise Unavailable(f"run {run_id}: no container of it is left and no output was kept "
                          f"(`kdkit wait` keeps it in {project.root / LOGS_FOLDER}); `kdkit status "
                          f"{run_id}` reads its folder")
    for path in saved:
        label = "" if path.name == f"kdkit-{run_id}.log" else path.stem.rsplit("-", 1)[-1]
        sink(label, path.read_bytes())
    return len(saved)


# ---------------------------------------------------------------- a lost connection


def lost_line(run_id: str | None, containers: list[str]) -> str:
    """What kdkit says (best effort) when SIGHUP ends its following: the run goes on, where to watch
    it."""
    return (f"connection lost: run {run_id or '(unnamed)'} continues in container "
            f"{', '.join(containers)}; follow it with kdkit status {run_id or ''}".rstrip())


# ---------------------------------------------------------------- shown


def status_lines(run: dict[str, Any]) -> list[str]:
    """A run's state in a few lines; what the app or a stop said, escaped (kdkit.core.safetext)."""
    from kdkit.core.safetext import printable

    parts = run.get("workers") or [run]
    lines = [f"Run {run['run_id']}: {run['state']}" + (f" ({printable(str(run['reason']))})"
                                                       if run.get("reason") and len(parts) > 1
                                                       else "")]
    for part in parts:
        lines.append("  " + "; ".join(part_words(part)))
    return lines


def part_words(part: dict[str, Any]) -> list[str]:
    from kdkit.core.safetext import printable

    words = [f"{part.get('folder') or '(no folder yet)'}: {part['state']}"]
    if part.get("reason"):
        words.append(printable(str(part["reason"])))
    if part.get("step") is not None:  # a training run's (kdkit train)
        words.append(f"step {part['step']}"
                     + (f", {part['rate']} steps/s" if part.get("rate") else ""))
    if part.get("done") is not None:
        words.append(f"{part['done']} of {part.get('total')} done")
    if part.get("rate") and part.get("kind") != "train":
        words.append(f"{part['rate']} items/s"
                     + (f", ETA {part['eta_seconds']:.0f} s" if part.get("eta_seconds")
                          is not None else ""))
    if part.get("rejected") is not None:
        words.append(f"rejected {part['rejected']} (limit {part.get('rejection_limit')})")
    if part.get("last_error"):
        words.append(f"last error: {printable(str(part['last_error']))[:200]}")
    if part.get("elapsed_seconds") is not None:
        left = part.get("remaining_seconds")
        words.append(f"elapsed {part['elapsed_seconds']:.0f} s"
                     + (f", {left:.0f} s left of max_seconds"
                        if left is not None else ""))
    if part.get("container"):
        words.append(f"container {part['container']['name']} ({part['container']['status']})")
    return words


def gpu_usage(timeout: float = 5.0) -> list[GpuUsage] | None:
    """Each GPU's utilisation (%) and memory (MiB) from nvidia-smi (or amd-smi), or None when none
    answers."""
    import shutil

    from kdkit.core import proc

    # the one reader of nvidia-smi's numbers
    from kdkit.probe.diagnose.smi_values import number as _number

    if shutil.which("nvidia-smi") is None:
        return _amd_usage(timeout) if shutil.which("amd-smi") else None
    done = proc.run(["nvidia-smi",
                     "--query-gpu=index,name,utilization.gpu,memory.used,memory.total",
                     "--format=csv,noheader,nounits"], timeout=timeout)
    if not done.ok:
        return None
    gpus: list[GpuUsage] = []
    for line in done.stdout.splitlines():
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) == 5:
            gpus.append({"index": cells[0], "name": cells[1],
                         "utilization_percent": _number(cells[2]),
                         "memory_used_mib": _number(cells[3]),
                         "memory_total_mib": _number(cells[4])})
    return gpus


def _amd_usage(timeout: float) -> list[GpuUsage] | None:
    """amd-smi's ``metric --usage --mem-usage`` per GPU, read by kdkit.probe.diagnose.smi_amd's
    readers."""
    from kdkit.probe.diagnose.smi_amd import dig, entries, json_answer

    data, failure, _ = json_answer(
        ["amd-smi", "metric", "--usage", "--mem-usage", "--json"], timeout)
    if failure is not None:
        return None
    return [{"index": str(entry["gpu"]), "name": "",
             "utilization_percent": dig(entry, ("usage", "gfx_activity")),
             "memory_used_mib": dig(entry, ("mem_usage", "used_vram")),
             "memory_total_mib": dig(entry, ("mem_usage", "total_vram"))}
            for entry in entries(data)]
