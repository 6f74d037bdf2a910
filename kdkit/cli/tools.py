"""Measuring and moving a project: resume-test, sweep, bundle, verify-bundle, load.

Each command parses its options, calls one domain function and prints what it returns.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from kdkit.cli._group import cli
from kdkit.cli._options import backend_option, json_option, project_argument, whole
from kdkit.cli._output import console, emit_json, warn
from kdkit.core.errors import CheckFailed


def _progress(message: str) -> None:
    click.echo(f"  {message}", err=True)


def _seconds(value: Any) -> str:
    return "-" if value is None else f"{float(value):.3f} s"


# ---------------------------------------------------------------- resume-test


def _print_resume(report: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table(title=f"Resume test of {report['module']} on {report['device']}", show_header=False)
    table.add_column(no_wrap=True)
    table.add_column(overflow="fold")
    table.add_row("steps", f"{report['steps']} uninterrupted vs {report['save_at']} + checkpoint + resume")
    table.add_row("checkpoint", f"{report['checkpoint_bytes'] / 1e6:.2f} MB  {report['checkpoint']}")
    table.add_row("save / restore", f"{_seconds(report['save_seconds'])} / {_seconds(report['restore_seconds'])}")
    table.add_row("one step", _seconds(report["step_seconds"]))
    if report["save_seconds"] and report["step_seconds"]:
        # What a save costs in steps of lost work: the figure that sets the save interval.
        table.add_row("one save costs", f"{report['save_seconds'] / report['step_seconds']:.2f} steps")
    table.add_row("tolerance", report["tolerance"] or "none: identical on CPU")
    for name in ("missing", "not_restored", "final_differences"):
        table.add_row(name.replace("_", " "), ", ".join(report[name]) or "none")
    console().print(table)
    click.echo(("OK: " if report["ok"] else "FAILED: ") + report["verdict"])


@cli.command("resume-test")
@project_argument
@click.option("--steps", type=whole("20"), default=8, show_default=True, help="Steps of the uninterrupted run.")
@click.option("--save-at", type=whole("7"), default=3, show_default=True,
              help="Step at which the checkpoint is taken.")
@click.option("--module", default=None, help="Train module (default: \"train\" in kdkit.json, else src.train).")
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda or cuda:N (passed on).")
@click.option("--python", "python", default=None, help="Interpreter that runs the loop (default: this one).")
@json_option
def resume_test_command(project_dir: Path | None, steps: int, save_at: int, module: str | None,
                        device: str, python: str | None, as_json: bool) -> None:
    """Prove the training loop resumes exactly from a checkpoint in a NEW process.

    \b
    Runs the loop (its contract: `python -m src.train --steps N --checkpoint PATH
    [--resume PATH] [--metrics PATH] [--device D]`) four times, each a fresh interpreter:
      full     N steps uninterrupted
      save     K steps, then the checkpoint
      restore  resume from it without a step: what comes back must equal what was saved
      resume   resume from it to N: losses and final state must equal the full run
    On a CPU they must be identical; on a GPU within a stated tolerance. The report gives
    the checkpoint size, save and restore time, and names what the checkpoint lacks
    (e.g. scheduler, rng.torch) or what the loop does not put back. Written to
    runs/resume-test-<time>/report.json. Exit 1 when the resume is not exact.

    \b
    Example:
      kdkit resume-test --steps 20 --save-at 7
    """
    from kdkit.resume import resume_test

    report = resume_test(project_dir, steps=steps, save_at=save_at, module=module, device=device,
                         python=python, progress=_progress)
    if as_json:
        emit_json(report)
    else:
        _print_resume(report)
    if not report["ok"]:
        raise CheckFailed(report["verdict"])


# ---------------------------------------------------------------- sweep


def _print_sweep(report: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table(title=f"Batch-size sweep of {report['entry']} on {report['device']}")
    for column in ("group", "batch", "done", "time", "items/s", "peak memory", "errors", "same as batch 1"):
        table.add_column(column, justify="left" if column in ("group", "errors") else "right",
                         no_wrap=column == "group")
    for row in report["rows"]:
        problem = row["limit"] or row["first_error"] or ""
        same = {True: "yes", False: f"NO: {row.get('difference', '')}", None: "-"}[row["same_as_batch_1"]]
        table.add_row(row["group"], str(row["batch_size"]), f"{row['completed']}/{row['inputs']}",
                      _seconds(row["seconds"]), f"{row['items_per_second'] or 0:.1f}",
                      _mb(row["peak_memory_bytes"]), f"{row['errors']} {problem}".strip(), same)
    console().print(table)
    click.echo(f"Peak memory: {report['memory_kind']}. Groups: " + "; ".join(
        f"{g['name']} {g['min_bytes']}-{g['max_bytes']} B ({len(g['ids'])})" for g in report["groups"]))
    for skipped in report["skipped"]:
        click.echo(f"Not swept: {skipped['id']}: {skipped['reason']}")
    click.echo(f"Saved {report['out']}" + (f"; plot {report['plot']}" if report.get("plot") else ""))


@cli.command("sweep")
@project_argument
@click.option("--batch-sizes", default="1,2,4", show_default=True,
              help="Comma-separated positive integers; 1 is always run (the reference for the order check).")
@click.option("--groups", type=whole("3"), default=3, show_default=True,
              help="Length groups the inputs are split into.")
@click.option("--device", default=None, help="auto, cpu, cuda or cuda:N (default: the pilot config's device).")
@click.option("--plot", type=click.Path(path_type=Path), default=None,
              help="Write a PNG: throughput and peak memory against batch size, one line per group.")
@click.option("--force", is_flag=True, help="With --plot: replace an existing file.")
@json_option
def sweep_command(project_dir: Path | None, batch_sizes: str, groups: int, device: str | None,
                  plot: Path | None, force: bool, as_json: bool) -> None:
    """Find the batch size from measurements: each length group at each batch size.

    \b
    The pilot inputs are split by size into groups (short, usual, near the limit); each
    group runs at each batch size through the project's predict(items), recording
    completed inputs, time, items/s, peak memory (max_memory_allocated on a GPU, peak RSS
    on a CPU) and errors. An out-of-memory error is the limit: it is caught, memory is
    freed, and larger batches of that group are not tried. Failures are shown row by row,
    never averaged; every batch size must give batch 1's outputs in batch 1's order.
    Saved to runs/sweep-<time>/sweep.json. Exit 1 on an error or a changed order.

    \b
    Example:
      kdkit sweep --batch-sizes 1,2,4,8,16 --plot sweep.png
    """
    from kdkit.sweep import sweep

    report = sweep(project_dir, batch_sizes=batch_sizes, groups=groups, device=device, plot=plot, force=force,
                   progress=_progress)
    if as_json:
        emit_json(report)
    else:
        _print_sweep(report)
    if not report["ok"]:
        bad = next(r for r in report["rows"] if r["errors"] or r["same_as_batch_1"] is False)
        what = bad["first_error"] or f"outputs differ from batch 1 ({bad.get('difference')})"
        raise CheckFailed(f"sweep: group {bad['group']!r} at batch size {bad['batch_size']}: {what}")


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


# ---------------------------------------------------------------- bundle, verify-bundle, load


@cli.command("bundle")
@project_argument
@click.option("--out", "out", required=True, type=click.Path(path_type=Path),
              help="New folder outside the project to write the bundle to (refused if it exists, unless --force).")
@backend_option
@click.option("--image", default=None, help="Image to pack (default: the tag `kdkit build` gives this lock).")
@click.option("--no-image", is_flag=True, help="Leave the image out: for a host without Docker.")
@click.option("--compressor", type=click.Choice(["zstd", "gzip"]), default="zstd", show_default=True,
              help="How the image archive is compressed (zstd: smaller and far faster; gzip: everywhere).")
@click.option("--force", is_flag=True,
              help="Replace an existing bundle that kdkit wrote at --out (only once the new one is complete).")
@json_option
def bundle_command(project_dir: Path | None, out: Path, backend: str | None, image: str | None,
                   no_image: bool, compressor: str, force: bool, as_json: bool) -> None:
    """Pack everything the rented machine needs into one verified folder.

    \b
    The folder holds:
      project/      the project at its git revision (or its files): kdkit.json, config/,
                    requirements/, src/, README*, and what the configs name (locks, pilot
                    inputs and manifest); files named like secrets (.env*, *.pem, .ssh/ ...)
                    are left out and named
      kdkit.pyz     kdkit's in-container part as one file: `python3 kdkit.pyz diagnose`
      image.tar.zst the image (`docker save`, compressed while it streams), unless --no-image
      bundle.json   what was packed, file by file: revision, lock hash, image id and labels
      RUN.md        the exact commands to run on the other machine
      SHA256SUMS    every file's hash (`kdkit verify-bundle` or `sha256sum -c`)
    It is written as .OUT.partial-PID beside --out and renamed when complete; what a
    killed run left there is removed by the next run. --out must lie outside the project.

    \b
    Example:
      kdkit bundle --out ../myproj-bundle && rsync -a ../myproj-bundle gpu-host:
    """
    from kdkit.bundle import make_bundle, printable_name

    info = make_bundle(project_dir, out, backend=backend, image=image, include_image=not no_image,
                       compressor=compressor, force=force, progress=_progress)
    if as_json:
        emit_json(info)
        return
    if info["uncommitted"]:
        warn(f"{len(info['uncommitted'])} uncommitted change(s) are NOT in the bundle (it holds revision "
             f"{str(info['revision'])[:12]}): {', '.join(info['uncommitted'][:3])}; commit them and bundle again")
    if info["left_out"]:
        left = [printable_name(f"{item['file']} ({item['why']})") for item in info["left_out"]]
        more = f" (+{len(left) - 3} more, see bundle.json)" if len(left) > 3 else ""
        warn(f"left out {len(left)} file(s): {'; '.join(left[:3])}{more}; secrets reach the rented machine at "
             "run time only (`kdkit run --env-file`)")
    image_line = "no image (--no-image)" if not info["image"] else (
        f"{info['image']['ref']}: {_mb(info['image']['bytes'])} ({info['image']['compressor']}, "
        f"{info['image']['seconds']:.1f} s)")
    click.echo(f"Bundle written to {info['out']} in {info['seconds']:.1f} s\n"
               f"  project  {info['project_files']} files at {info['revision'] or 'no git revision'}\n"
               f"  image    {image_line}\n"
               f"Next: copy the folder, then on the other machine: kdkit verify-bundle DIR (see DIR/RUN.md)")


@cli.command("verify-bundle")
@click.argument("bundle_dir", type=click.Path(path_type=Path))
@json_option
def verify_bundle_command(bundle_dir: Path, as_json: bool) -> None:
    """Check every file of a bundle against its SHA256SUMS before anything is loaded.

    Names each altered, missing or added file; exit 1 when any is found. Run it on the
    copy that arrived, not on the original.
    """
    from kdkit.bundle import require_verified, verify_bundle

    report = verify_bundle(bundle_dir, progress=_progress)
    if as_json:
        emit_json(report)
    elif report["ok"]:
        click.echo(f"OK: {report['files']} files match SHA256SUMS in {report['bundle']}")
    else:
        for problem in report["problems"]:
            click.echo(f"  {problem['file']}: {problem['problem']}")
    require_verified(report)


@cli.command("load")
@click.argument("bundle_dir", type=click.Path(path_type=Path))
@json_option
def load_command(bundle_dir: Path, as_json: bool) -> None:
    """Verify a bundle, load its image into Docker, and check the image against the bundle.

    Every file is checked first (as verify-bundle does); the archive is decompressed on the
    way in (engines before Docker 25 cannot read zstd); then the loaded image's id and its
    kdkit labels (project, backend, python, lock path and hash, revision) must equal what
    bundle.json recorded.
    """
    from kdkit.bundle import load_bundle

    report = load_bundle(bundle_dir, progress=_progress)
    if as_json:
        emit_json(report)
    else:
        click.echo(f"Loaded {report['image']} ({report['id'][:19]}) in {report['seconds']:.1f} s; "
                   f"{report['files']} files verified, labels match the bundle")
