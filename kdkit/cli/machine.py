"""Commands on the machine with the GPU: `kdkit run` (and its --workers), and the forwarders of the
commands that also run inside the container.

A forwarded command's options are defined once, with argparse, in its kdkit.probe module, so the
same command line works as ``kdkit diagnose ...`` on the host, as ``python -m kdkit.probe diagnose
...`` inside an image that has no click, and as ``python3 kdkit.pyz diagnose ...``. ``kdkit diagnose
--help`` shows those options.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from kdkit.cli._options import RunIdType, backend_option, json_option, project_argument, whole
from kdkit.cli._output import container_output, emit_json, say, warn
from kdkit.core.errors import BadInput, Interrupted
from kdkit.probe.entry import run_command

if TYPE_CHECKING:
    from collections.abc import Mapping

    from kdkit.machine.run import RunPlan
    from kdkit.machine.workers import WorkersPlan, WorkersResult


@dataclass(frozen=True)
class Launch:
    """How `kdkit run` follows its containers: in the foreground (default) or detached, copying the
    run folder to ``copy_to`` every ``copy_every`` seconds and at its end (kdkit.machine.copyto)."""

    detach: bool = False
    copy_to: str | None = None
    copy_every: int = 300


def forwarder(name: str, summary: str) -> click.Command:
    """A click command that hands its whole command line to the in-container command ``name``."""

    @click.pass_context
    def forward(ctx: click.Context) -> None:
        code = run_command(name, list(ctx.args))
        if code:
            raise click.exceptions.Exit(code)

    return click.Command(
        name,
        callback=forward,
        help=summary + f"\n\nRuns `python -m kdkit.probe {name}`; see --help for its options.",
        short_help=summary,
        add_help_option=False,
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )


class _CommandAfterDashes(click.Command):
    """Everything after ``--`` is the container's command, never PROJECT_DIR (click would fill it
    first)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            cut = args.index("--")
            ctx.meta["kdkit.command"] = args[cut + 1:]
            args = args[:cut]
        return super().parse_args(ctx, args)

    def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
        return [*super().collect_usage_pieces(ctx), "[-- COMMAND...]"]


def _announced(base: RunPlan, print_only: bool, lines: Callable[[], Iterable[str]]) -> bool:
    """The plan's warnings, then either its shell lines (--print: True, nothing runs) or its host
    checks."""
    for message in base.warnings:
        warn(message)
    if print_only:
        for line in lines():
            say(line)
        return True
    for step in base.host_steps:
        say(f"Host: {step.description}", err=True)
    return False


def _stopped(as_json: bool, report: Mapping[str, Any], lines: list[str]) -> None:
    """After Ctrl-C or SIGTERM: the lines naming each run folder and how to finish it, on stderr;
    the JSON too."""
    for line in lines:
        say(line, err=True)
    if as_json:
        emit_json({**report, "stopped": lines})


@click.command("run", cls=_CommandAfterDashes)
@project_argument
@backend_option
@click.option("--image",
              metavar="IMG", help="Image to run (default: <project>:<backend>-<lock sha256 12>).")
@click.option("--gpus", metavar="all|0,1", help="CUDA: all GPUs (default) or these indexes/UUIDs; "
              "ROCm: only these GPUs' render nodes.")
@click.option("--network", type=click.Choice(["none", "bridge", "host"]), default="none",
              show_default=True,
              help="Container network; none keeps the pilot from reaching anything.")
@click.option("--env-file", type=click.Path(dir_okay=False, path_type=Path), metavar="F",
              help=(
                  "NAME=VALUE lines passed as environment at run time only: never printed, logged "
                  "or baked."))
@click.option("--workers", type=whole("2"), metavar="N",
              help="N containers, one per GPU (cpu backend: no GPU limit), each running the pilot "
                   "on its share of the manifest (stable hash of the ID); then one gathering "
                   "proves every ID exactly once.")
@click.option("--resume", metavar="RUN_ID", type=RunIdType("--resume"),
              help="Finish run RUN_ID (runs/RUN_ID, left by a kill or a stop): diagnose and "
                   "verify-env first, then the pilot skips its finished items and redoes the rest.")
@click.option("--mount", "mounts", multiple=True, metavar="SRC:NAME",
              help="Also mount folder SRC as the project's declared mount NAME (kdkit.json "
                   "\"mounts\"), read-only unless declared writable; repeatable.")
@click.option("--detach", is_flag=True,
              help="Start the container and return at once with its run ID; follow it with `kdkit "
                   "status`, `kdkit wait`, `kdkit logs`.")
@click.option("--copy-to", metavar="DEST",
              help="Copy the run folder during the run and at its end to DEST (a folder, "
                   "user@host:path or an rclone remote:path), verified there.")
@click.option("--copy-every", type=whole("300"), default=300, show_default=True, metavar="S",
              help="With --copy-to: copy after a closed batch at most every S seconds.")
@click.option("--print", "print_only", is_flag=True,
              help="Print the equivalent shell lines (docker run ...) instead of running.")
@json_option
@click.pass_context
def run(ctx: click.Context, /, project_dir: Path | None, workers: int | None, print_only: bool,
        as_json: bool,
        **options: Any) -> None:
    """Run the image here: diagnose, verify-env, pilot; exit code = verdict.

    The host is checked first, each failure with its fix: the engine (exit 3), the
    image and its kdkit labels, the NVIDIA runtime or /dev/kfd, the GPUs named by
    --gpus, the host driver against the image's CUDA. data/pilot is mounted
    read-only, runs/ read-write; the new runs/<id>/ folder is on this host after.
    So are config/ and src/ (edits run unrebuilt), kdkit.json's "mounts" at /mnt/NAME
    (--mount SRC:NAME), and .kdkit-cache/ as /cache (HF_HOME...), kept between runs.
    The container is confined: a non-root user (10001, or yours), no capability,
    no new privileges, the image read-only with /tmp and HOME as tmpfs, a pids
    limit and /dev/shm sized from the host; --print shows every flag.
    Give a command after `--` to run it instead of the image's default.
    Ctrl-C or SIGTERM stops the container(s) as `docker stop` does (SIGTERM,
    30 s, SIGKILL): each pilot closes its run folder with stop.json; kdkit
    names each folder and how to finish it, and exits 130 (143 on SIGTERM).

    \b
    Examples:
      kdkit run --backend cuda --env-file .env
      kdkit run --backend rocm --gpus 0
      kdkit run --print                      # docker run ... : reproduce without kdkit
      kdkit run --resume 20260101T120000Z-1a2b3c4d   # finish a run that was cut off
      kdkit run -- kdkit diagnose --expect cuda --json
      kdkit run --backend cuda --workers 4   # 4 GPUs, 4 shares, one gathered summary
    """
    options["command"] = ctx.meta.get("kdkit.command") or None
    launch = Launch(detach=options.pop("detach"), copy_to=options.pop("copy_to"),
                    copy_every=options.pop("copy_every"))
    if launch.detach and options["command"]:
        raise BadInput("--detach with a command after --: a detached run is the image's own pilot "
                       "(or --resume), followed by its run ID; run the command in the foreground")
    if launch.detach and launch.copy_to:
        raise BadInput("--copy-to with --detach: nothing of kdkit stays to copy a detached run; "
                       "start it, then `kdkit wait RUN_ID --copy-to DEST` copies it while it runs "
                       "and at its end")
    if workers is not None and options["resume"] is not None:
        raise BadInput(
            "--resume with --workers: --resume finishes one run in one container; drop --workers")
    if workers is not None:
        _run_workers(project_dir, workers, print_only, as_json, launch, **options)
    else:
        _run_one(project_dir, print_only, as_json, launch, **options)


def _lost(run_id: str | None, containers: list[str]) -> None:
    """After SIGHUP: say (if the terminal is still there) where the run goes on, and leave at once
    with 129, not waiting for the threads that followed the containers (they run on without
    kdkit)."""
    import os

    from kdkit.core.stopsignals import HANGUP_EXIT, say_lost
    from kdkit.machine.waiting import lost_line

    say_lost(lost_line(run_id, containers))
    os._exit(HANGUP_EXIT)


def _detached(as_json: bool, report: Mapping[str, Any]) -> None:
    if as_json:
        emit_json(report)
        return
    names = report.get("containers") or [report.get("container")]
    say(f"Run {report['run_id']} started in container {', '.join(map(str, names))}; follow it "
        "with:")
    for line in report["follow"]:
        say(f"  {line}")


def _run_one(project_dir: Path | None, print_only: bool, as_json: bool, launch: Launch,
             **options: Any) -> None:
    """`kdkit run`: one container; its exit code is the verdict. Ctrl-C or SIGTERM stops it (docker
    stop); SIGHUP leaves it running (kdkit.machine.watch); --detach starts it and returns."""
    from kdkit.cli.follow import hand_back
    from kdkit.core.runfolder import run_folders
    from kdkit.core.stopsignals import HungUp
    from kdkit.machine.copyto import copy_during
    from kdkit.machine.naming import detach, detached_lines, with_run_id
    from kdkit.machine.run import execute, prepare_run, print_lines
    from kdkit.machine.workers import stopped_run_lines

    plan = with_run_id(prepare_run(project_dir, **options))
    if _announced(plan, print_only,
                  lambda: detached_lines(plan) if launch.detach else print_lines(plan)):
        return
    if launch.detach:
        _detached(as_json, detach(plan))
        return
    before = set(run_folders(plan.runs))
    copier = copy_during(launch.copy_to, launch.copy_every, plan.runs,
                         [plan.run_id] if plan.run_id else None, warn)
    try:
        with copier:  # --copy-to: copies while it runs (kdkit.machine.copyto)
            # SIGINT/SIGTERM stop the container while it runs
            code, folders = execute(plan, container_output(as_json))
    except HungUp:
        _lost(plan.run_id, [plan.spec.name or "(unnamed)"])
        raise
    except Interrupted as stop:
        new = [folder for folder in run_folders(plan.runs) if folder not in before]
        _stopped(as_json,
                 {"image": plan.image.ref, "backend": plan.backend, "exit_code": stop.exit_code,
                  "container_exit_code": getattr(stop, "container_exit", None),
                  "run_folders": [str(f) for f in new]}, stopped_run_lines(plan, new, stop))
        raise click.exceptions.Exit(stop.exit_code) from None
    hand_back(folders)
    if as_json:
        emit_json({"image": plan.image.ref, "backend": plan.backend, "exit_code": code,
                   "run_folders": [str(f) for f in folders]})
    else:
        where = ", ".join(str(f) for f in folders) or "none"
        verdict = "passed" if code == 0 else f"failed (exit {code})"
        say(f"Verdict: {verdict}; new run folders: {where}", err=True)
    code = copier.finish(folders, code, lambda line: say(line, err=True))
    if code:
        raise click.exceptions.Exit(code)


def _run_workers(project_dir: Path | None, workers: int, print_only: bool, as_json: bool,
                 launch: Launch,
                 **options: Any) -> None:
    """`kdkit run --workers N`: the N containers side by side, then the gathering; its verdict is
    the exit code."""
    from kdkit.cli.follow import hand_back
    from kdkit.core.stopsignals import HungUp
    from kdkit.machine.copyto import copy_during
    from kdkit.machine.naming import detach_workers
    from kdkit.machine.workers import (
        execute_workers,
        interrupts,
        prepare_workers,
        print_worker_lines,
        stopped_lines,
    )

    plan = prepare_workers(project_dir, workers, **options)
    if _announced(plan.base, print_only, lambda: print_worker_lines(plan)):
        return
    if launch.detach:  # kdkit wait gathers them once every worker has ended
        _detached(as_json, detach_workers(plan))
        return
    copier = copy_during(launch.copy_to, launch.copy_every, plan.base.runs,
                         [f.name for f in plan.folders], warn)
    with interrupts(hangup=True), copier:
        result = execute_workers(plan, container_output(as_json))
    if isinstance(result.interrupted, HungUp):
        _lost(plan.run_id, [spec.name or "(unnamed)" for spec in plan.specs])
    if result.interrupted is not None:
        _stopped(as_json,
                 {"image": plan.base.image.ref, "backend": plan.base.backend, "run_id": plan.run_id,
                  "exit_code": result.exit_code, "container_exit_codes": result.codes,
                  "run_folders": [str(f) for f in plan.folders if f.is_dir()], "gathered": None,
                  "summary": None, "stopped_by": result.interrupted.name},
                 stopped_lines(plan, result.interrupted))
        raise click.exceptions.Exit(result.exit_code)
    _workers_ended(as_json, plan, result)
    copied = [*(f for f in plan.folders if f.is_dir()),
              *([result.gathered.out] if result.gathered else [])]
    hand_back(copied)
    code = copier.finish(copied, result.exit_code, lambda line: say(line, err=True))
    if code:
        raise click.exceptions.Exit(code)


def _workers_ended(as_json: bool, plan: WorkersPlan, result: WorkersResult) -> None:
    """The end of `kdkit run --workers`: its JSON report, or each worker's exit code, the
    gathering's first problems and the verdict, on stderr."""
    summary = result.gathered.summary if result.gathered else None
    if as_json:
        emit_json({"image": plan.base.image.ref, "backend": plan.base.backend,
                   "run_id": plan.run_id,
                   "exit_code": result.exit_code, "container_exit_codes": result.codes,
                   "run_folders": [str(f) for f in plan.folders if f.is_dir()],
                   "gathered": str(result.gathered.out) if result.gathered
                   else None, "summary": summary})
        return
    codes = ", ".join(f"w{i} exit {c}" for i, c in enumerate(result.codes))
    say(f"Workers: {codes}", err=True)
    for problem in (summary or {}).get("problems", [])[:20]:
        say(f"  - {problem}", err=True)
    verdict = "passed" if result.exit_code == 0 else f"failed (exit {result.exit_code})"
    where = result.gathered.out if result.gathered else "none (no worker left a run folder)"
    say(f"Verdict: {verdict}; gathered summary: {where}", err=True)
