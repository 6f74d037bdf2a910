"""Image commands: build, wheelhouse, inspect, run. Thin: parse, call kdkit.images / runner / wheelhouse, print."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from kdkit.cli._group import cli
from kdkit.cli._options import backend_option, json_option, project_argument, whole
from kdkit.cli._output import console, emit_json, plain, printable, warn

if TYPE_CHECKING:
    from kdkit.images import BuildEvent, BuildResult


def _size(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


@contextmanager
def _build_progress() -> Iterator[Callable[[BuildEvent], None]]:
    """A progress callback: a live status line on a terminal, plain lines otherwise (both on stderr)."""
    if not sys.stderr.isatty():
        def plain(event: BuildEvent) -> None:
            click.echo(event.text if event.kind != "cached" else "  (cached)", err=True)

        yield plain
        return
    out = console(stderr=True)
    with out.status("Starting the build...") as status:
        def live(event: BuildEvent) -> None:
            if event.kind == "step" and event.step:
                status.update(f"Step {event.step.number}/{event.step.total}: {event.step.instruction[:90]}")
                out.print(f"[bold]{event.text}[/bold]", markup=True, highlight=False)
            elif event.kind == "cached":
                out.print("  [green](cached)[/green]", markup=True)
            else:
                out.print(f"  {event.text}", markup=False, style="dim")

        yield live


def _summary(result: BuildResult) -> str:
    ran = result.ran
    steps = f"{len(result.steps)} steps, {len(result.steps) - len(ran)} cached"
    return f"Built {result.tag} ({_size(result.size)}, {result.seconds:.1f} s, {steps})"


@cli.command()
@project_argument
@backend_option
@click.option("--base-image", metavar="IMG", help="Image to start from (default: backends.<b>.base_image).")
@click.option("--tag", metavar="T", help="Image tag (default: <project>:<backend>-<first 12 of the lock sha256>).")
@click.option("--ca-bundle", type=click.Path(path_type=Path), metavar="FILE",
              help="PEM CA bundle for a TLS-intercepting proxy; used by pip in the builder stage only, "
                   "in no layer of the final image.")
@click.option("--wheelhouse", type=click.Path(path_type=Path), metavar="DIR",
              help="Install from this folder (`kdkit wheelhouse`) with --no-index: the build uses no network.")
@click.option("--no-cache", is_flag=True, help="Rebuild every layer.")
@json_option
def build(project_dir: Path | None, backend: str | None, base_image: str | None, tag: str | None,
          ca_bundle: Path | None, wheelhouse: Path | None, no_cache: bool, as_json: bool) -> None:
    """Build the project's image from its lock, through the Docker SDK.

    A builder stage makes a venv and installs requirements/<backend>.txt with
    pip --require-hashes --no-deps; the final stage holds the venv, kdkit's
    in-container commands, kdkit.json, config/, src/ and the lock, and runs as a
    non-root user. The lock's layer comes before the sources', so a source-only
    change rebuilds in seconds. The log streams live; on failure the whole log is
    kept in a file and its first error line is shown. A stale or unhashed lock is
    refused (exit 2); a failed build leaves no image tagged.

    \b
    Examples:
      kdkit build --backend cuda
      kdkit build --ca-bundle /etc/ssl/certs/ca-certificates.crt     # TLS-intercepting proxy
      kdkit wheelhouse --out wh && kdkit build --wheelhouse wh         # no network in the build
    """
    from kdkit.images import build_image, plan_build

    plan = plan_build(project_dir, backend, base_image=base_image, tag=tag, ca_bundle=ca_bundle,
                      wheelhouse=wheelhouse, no_cache=no_cache)
    if plan.left_out:
        warn(f"left out of the image (named like secrets; pass them at run time with --env-file): "
             f"{', '.join(plan.left_out)}")
    for message in plan.warnings:
        warn(message)
    with _build_progress() as progress:
        result = build_image(plan, progress)
    if as_json:
        emit_json(result.as_dict())
        return
    click.echo(_summary(result))
    work = [s for s in result.ran if s.instruction.startswith(("RUN", "COPY"))]
    ran = "; ".join(f"{s.number} {' '.join(s.instruction.split())[:50]}" for s in work) or "none"
    click.echo(f"Ran (not cached): {ran}")
    click.echo(f"Next: kdkit run --backend {plan.backend.name}   (or kdkit inspect {result.tag})")


@cli.command()
@project_argument
@backend_option
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="Folder to fill (default: wheelhouse/<backend> in the project).")
@json_option
def wheelhouse(project_dir: Path | None, backend: str | None, out: Path | None, as_json: bool) -> None:
    """Download the locked files, hash-checked, for offline builds.

    Runs `pip download --require-hashes --no-deps -r requirements/<backend>.txt` on
    this host, honouring pip's configuration (index, certificate, proxy), for the
    image's platform (Linux x86_64, the project's Python). Files already in DIR are
    reused. Then `kdkit build --wheelhouse DIR` installs with --no-index.
    """
    from kdkit.wheelhouse import download_wheelhouse

    if not as_json:
        click.echo("Downloading the locked files (pip download, hash-checked)...", err=True)
    result = download_wheelhouse(project_dir, backend, out)
    if as_json:
        emit_json(result.as_dict())
        return
    total = sum(size for _name, size in result.files)
    click.echo(f"{result.folder}: {len(result.files)} files, {_size(total)}, every sha256 in {result.lock.name}")
    click.echo(f"Next: kdkit build --backend {result.backend} --wheelhouse {result.folder}")


@cli.command()
@click.argument("image")
@click.option("--project", "project_dir", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="Project whose current lock to compare (default: the one around the current folder).")
@json_option
def inspect(image: str, project_dir: Path | None, as_json: bool) -> None:
    """Show an image's labels and whether the project's lock still matches.

    Lists the image's kdkit and OCI labels (project, backend, lock sha256, torch
    and its CUDA/ROCm version, the GPU architectures that torch was compiled for
    and where that was read, kdkit version, revision, source), its platform, size
    and user.

    Exit 0 when the lock matches (or no project is around), 1 when the project's
    lock changed since the image was built, 2 for an image without kdkit's
    labels, 3 when the image or the engine is not there.
    """
    from kdkit.imagelabels import inspect_image, require_lock_match

    report = inspect_image(image, project_dir)
    if as_json:
        emit_json(report)
    else:
        from rich.table import Table

        platform = "/".join(p for p in (report["os"], report["architecture"]) if p)
        table = Table(title=plain(f"{image}  ({platform + ', ' if platform else ''}{_size(report['size'])}, "
                                  f"user {report['user'] or 'root'})"))
        table.add_column("label")
        table.add_column("value", overflow="fold")
        for prefix, group in (("dev.kdkit.", report["kdkit"]), ("org.opencontainers.image.", report["oci"])):
            for key, value in group.items():  # labels come from whoever built the image: plain text only
                table.add_row(plain(prefix + key), plain(value))
        console().print(table)
        click.echo(f"Torch architectures: {printable(_arch_line(report['torch_arch']))}")
        lock = report["lock"]
        if lock["matches"] is None:
            click.echo("Lock: no project here to compare with (pass --project DIR).")
        elif lock["matches"]:
            click.echo(f"Lock: {lock['project_lock']} matches the image ({lock['image_sha256'][:12]}).")
    require_lock_match(report)


def _arch_line(arch: dict[str, Any]) -> str:
    """inspect_image's torch_arch as one line: the tokens and their source, none, unknown and why."""
    if not arch["recorded"]:
        return "not recorded (an image built before kdkit recorded them; rebuild with `kdkit build`)"
    if arch["arch_list"] is None:
        return arch["source"] or "unknown"
    if not arch["arch_list"]:
        return f"none ({arch['source']})"
    return f"{' '.join(arch['arch_list'])} (from {arch['source']})"


class _CommandAfterDashes(click.Command):
    """Everything after ``--`` is the container's command, never PROJECT_DIR (click would fill it first)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            cut = args.index("--")
            ctx.meta["kdkit.command"] = args[cut + 1:]
            args = args[:cut]
        return super().parse_args(ctx, args)

    def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
        return [*super().collect_usage_pieces(ctx), "[-- COMMAND...]"]


@cli.command(cls=_CommandAfterDashes)
@project_argument
@backend_option
@click.option("--image", metavar="IMG", help="Image to run (default: <project>:<backend>-<lock sha256 12>).")
@click.option("--gpus", metavar="all|0,1", help="CUDA: all GPUs (default) or these indexes/UUIDs; "
              "ROCm: only these GPUs' render nodes.")
@click.option("--network", type=click.Choice(["none", "bridge", "host"]), default="none", show_default=True,
              help="Container network; none keeps the pilot from reaching anything.")
@click.option("--env-file", type=click.Path(dir_okay=False, path_type=Path), metavar="F",
              help="NAME=VALUE lines passed as environment at run time only: never printed, logged or baked.")
@click.option("--workers", type=whole("2"), metavar="N",
              help="N containers, one per GPU (cpu backend: no GPU limit), each running the pilot on its share "
                   "of the manifest (stable hash of the ID); then one gathering proves every ID exactly once.")
@click.option("--print", "print_only", is_flag=True,
              help="Print the equivalent shell lines (docker run ...) instead of running.")
@json_option
@click.pass_context
def run(ctx: click.Context, project_dir: Path | None, backend: str | None, image: str | None, gpus: str | None,
        network: str, env_file: Path | None, workers: int | None, print_only: bool, as_json: bool) -> None:
    """Run the image here: diagnose, verify-env, pilot; exit code = verdict.

    The host is checked first, each failure with its fix: the engine (exit 3), the
    image and its kdkit labels, the NVIDIA runtime or /dev/kfd, the GPUs named by
    --gpus, the host driver against the image's CUDA. data/pilot is mounted
    read-only, runs/ read-write; the new runs/<id>/ folder is on this host after.
    The container is confined: a non-root user (10001, or yours), no capability,
    no new privileges, the image read-only with /tmp and HOME as tmpfs, a pids
    limit and /dev/shm sized from the host; --print shows every flag.
    Give a command after `--` to run it instead of the image's default.

    \b
    Examples:
      kdkit run --backend cuda --env-file .env
      kdkit run --backend rocm --gpus 0
      kdkit run --print                      # docker run ... : reproduce without kdkit
      kdkit run -- kdkit diagnose --expect cuda --json
      kdkit run --backend cuda --workers 4   # 4 GPUs, 4 shares, one gathered summary
    """
    from kdkit.runner import execute, prepare_run, print_lines

    if workers is not None:
        _run_workers(project_dir, workers, print_only, as_json, backend=backend, image=image, gpus=gpus,
                     network=network, env_file=env_file, command=ctx.meta.get("kdkit.command") or None)
        return
    plan = prepare_run(project_dir, backend=backend, image=image, gpus=gpus, network=network,
                       env_file=env_file, command=ctx.meta.get("kdkit.command") or None)
    for message in plan.warnings:
        warn(message)
    if print_only:
        for line in print_lines(plan):
            click.echo(line)
        return
    for step in plan.host_steps:
        click.echo(f"Host: {step.description}", err=True)
    stream = sys.stderr.buffer if as_json else sys.stdout.buffer

    def show(chunk: bytes) -> None:
        stream.write(chunk)
        stream.flush()

    code, folders = execute(plan, show)
    if as_json:
        emit_json({"image": plan.image.ref, "backend": plan.backend, "exit_code": code,
                   "run_folders": [str(f) for f in folders]})
    else:
        where = ", ".join(str(f) for f in folders) or "none"
        verdict = "passed" if code == 0 else f"failed (exit {code})"
        click.echo(f"Verdict: {verdict}; new run folders: {where}", err=True)
    if code:
        raise click.exceptions.Exit(code)


def _run_workers(project_dir: Path | None, workers: int, print_only: bool, as_json: bool, **options: Any) -> None:
    """`kdkit run --workers N`: the N containers side by side, then the gathering; its verdict is the exit code."""
    from kdkit.workers import execute_workers, prepare_workers, print_worker_lines

    plan = prepare_workers(project_dir, workers, **options)
    for message in plan.base.warnings:
        warn(message)
    if print_only:
        for line in print_worker_lines(plan):
            click.echo(line)
        return
    for step in plan.base.host_steps:
        click.echo(f"Host: {step.description}", err=True)
    stream = sys.stderr.buffer if as_json else sys.stdout.buffer

    def show(chunk: bytes) -> None:
        stream.write(chunk)
        stream.flush()

    result = execute_workers(plan, show)
    summary = result.gathered.summary if result.gathered else None
    if as_json:
        emit_json({"image": plan.base.image.ref, "backend": plan.base.backend, "run_id": plan.run_id,
                   "exit_code": result.exit_code, "container_exit_codes": result.codes,
                   "run_folders": [str(f) for f in plan.folders if f.is_dir()],
                   "gathered": str(result.gathered.out) if result.gathered else None, "summary": summary})
    else:
        codes = ", ".join(f"w{i} exit {c}" for i, c in enumerate(result.codes))
        click.echo(f"Workers: {codes}", err=True)
        for problem in (summary or {}).get("problems", [])[:20]:
            click.echo(f"  - {problem}", err=True)
        verdict = "passed" if result.exit_code == 0 else f"failed (exit {result.exit_code})"
        where = result.gathered.out if result.gathered else "none (no worker left a run folder)"
        click.echo(f"Verdict: {verdict}; gathered summary: {where}", err=True)
    if result.exit_code:
        raise click.exceptions.Exit(result.exit_code)
