"""Commands that follow a run from any shell, never from the process that started it: `kdkit
status`, `kdkit wait` (a detached run's verdict, copy and hand-back) and `kdkit logs`. They read the
run folder and the engine's labelled containers (kdkit.machine.watch, kdkit.machine.waiting)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from kdkit.cli._options import FiniteNumber, RunIdType, json_option, whole
from kdkit.cli._output import container_output, emit_json, printable, say, warn

if TYPE_CHECKING:
    from kdkit.core.runid import RunId


def hand_back(folders: list[Path]) -> None:
    """Started by root: what the container's user wrote, made readable by everyone, said
    (machine/handback.py)."""
    from kdkit.machine.handback import readable_by_all

    for line in readable_by_all(folders):
        say(line, err=True)


project_option = click.option("--project", "project_dir",
                              type=click.Path(file_okay=False, path_type=Path),
                              metavar="DIR",
                              help=("The project (default: found upward from the current folder)."))


@click.command("status")
@click.argument("run_id", required=False, type=RunIdType("RUN_ID"))
@project_option
@json_option
def status(run_id: RunId | None, project_dir: Path | None, as_json: bool) -> None:
    """Where a run stands, from any shell: state, items, rate, ETA, GPUs.

    Read from the run folder (the pilot's heartbeat, summary.json, stop.json) and
    the engine (the containers labelled with the run), never from the process
    that started it. Without RUN_ID: every run of the project still running or
    with a container left, and the most recent one.
    """
    from kdkit.machine.waiting import gpu_usage, status_lines
    from kdkit.machine.watch import place, project_status, run_status

    project = place(project_dir)
    report = run_status(project, run_id) if run_id is not None else project_status(project)
    report["gpus"] = gpu_usage()
    if as_json:
        emit_json(report)
        return
    for run in report.get("runs", [report]) if run_id is None else [report]:
        for line in status_lines(run):
            say(line)
    if run_id is None and not report["runs"]:
        say(f"No runs in {report['runs_folder']}")
    for gpu in report["gpus"] or []:
        say(f"GPU {gpu['index']} {printable(str(gpu['name']))}: {gpu['utilization_percent']}% "
            f"busy, {gpu['memory_used_mib']} of {gpu['memory_total_mib']} MiB")


@click.command("wait")
@click.argument("run_id", type=RunIdType("RUN_ID"))
@click.option("--timeout", type=FiniteNumber("600"), metavar="S",
              help="Give up waiting after S seconds (exit 124; the run goes on).")
@click.option("--copy-to", metavar="DEST",
              help="Copy the run's folders to DEST while waiting and at the end "
              "(a folder, user@host:path or an rclone remote:path), verified there.")
@click.option("--copy-every", type=whole("300"), default=300, show_default=True, metavar="S",
              help="With --copy-to: copy after a closed batch at most every S seconds.")
@project_option
@json_option
def wait(run_id: RunId, timeout: float | None, copy_to: str | None, copy_every: int,
         project_dir: Path | None,
         as_json: bool) -> None:
    """Wait for a run to end; exit code = its verdict.

    0 passed, 1 failed, the container's own exit code when it died before its
    summary, 124 when --timeout passed first, 130/143/129 when this wait is
    interrupted or its terminal is gone (the run goes on). A workers run is gathered once every
    worker has ended. The ended containers are removed. --copy-to copies the run's folders while
    waiting and once more at the end, verified at DEST (exit 1 when that copy fails): what `kdkit
    run --copy-to` does for a detached run.
    """
    from kdkit.core.stopsignals import interrupts
    from kdkit.machine.copyto import copy_while_waiting, ended_folders
    from kdkit.machine.waiting import TIMED_OUT, status_lines, wait_run
    from kdkit.machine.watch import place

    project = place(project_dir)
    copier = copy_while_waiting(copy_to, copy_every, project.runs, run_id, warn)
    with interrupts(hangup=True), copier:  # SIGHUP too: 129, the run goes on
        code, report = wait_run(project, run_id, timeout)
    if as_json:
        emit_json({**report, "exit_code": code})
    else:
        for line in status_lines(report):
            say(line, err=True)
        say(f"Verdict: {report['state']} (exit {code})" if code != 124 else
            f"Still running after {timeout:g} s (exit 124); the run goes on", err=True)
    if code != TIMED_OUT:
        folders = ended_folders(project.runs, run_id)
        hand_back(folders)
        code = copier.finish(folders, code, lambda line: say(line, err=True))
    if code:
        raise click.exceptions.Exit(code)


@click.command("logs")
@click.argument("run_id", type=RunIdType("RUN_ID"))
@click.option("-f", "--follow", is_flag=True, help="Keep printing as the container writes.")
@project_option
def logs(run_id: RunId, follow: bool, project_dir: Path | None) -> None:
    """Show (or follow with -f) the output of a run's container, escaped for the terminal."""
    from kdkit.core.stopsignals import interrupts
    from kdkit.machine.waiting import show_logs
    from kdkit.machine.watch import place
    from kdkit.machine.workers import Prefixed

    shown = container_output(False)
    sinks: dict[str, Prefixed] = {}

    def sink(label: str, chunk: bytes) -> None:
        if not label:
            shown(chunk)
            return
        sinks.setdefault(label, Prefixed(label, shown))(chunk)

    with interrupts(hangup=True):
        show_logs(place(project_dir), run_id, follow, sink)
    for prefixed in sinks.values():
        prefixed.flush()
