"""Image commands: build, inspect. Thin: parse, call kdkit.image.build and .buildrun, print."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from kdkit.cli._options import backend_option, ca_bundle_option, json_option, project_argument
from kdkit.cli._output import console, emit_json, plain, printable, say, size_text, warn
from kdkit.image.layers import LOCK_FORMATS

if TYPE_CHECKING:
    from collections.abc import Mapping

    from kdkit.image.buildrun import BuildEvent, BuildResult


@contextmanager
def _build_progress() -> Iterator[Callable[[BuildEvent], None]]:
    """A progress callback: a live status line on a terminal, plain lines otherwise (both on
    stderr)."""
    if not sys.stderr.isatty():
        def line(event: BuildEvent) -> None:
            say(event.text if event.kind != "cached" else "  (cached)", err=True)

        yield line
        return
    out = console(stderr=True)
    with out.status("Starting the build...") as status:
        def live(event: BuildEvent) -> None:
            if event.kind == "step" and event.step:
                status.update(
                    plain(
                        f"Step {event.step.number}/{event.step.total}: "
                        f"{event.step.instruction[:90]}"))
                out.print(plain(event.text), style="bold", highlight=False)
            elif event.kind == "cached":
                out.print("  [green](cached)[/green]", markup=True)
            else:
                out.print(plain(f"  {event.text}"), style="dim")

        yield live


def _summary(result: BuildResult) -> str:
    ran = result.ran
    steps = f"{len(result.steps)} steps, {len(result.steps) - len(ran)} cached"
    return f"Built {result.tag} ({size_text(result.size)}, {result.seconds:.1f} s, {steps})"


@click.command("build")
@project_argument
@backend_option
@click.option("--base-image",
              metavar="IMG", help="Image to start from (default: backends.<b>.base_image).")
@click.option("--tag",
              metavar="T",
              help=("Image tag (default: <project>:<backend>-<first 12 of the lock sha256>)."))
@ca_bundle_option("PEM CA bundle for a TLS-intercepting proxy; used by pip in the builder stage "
                  "only, in no layer of the final image.")
@click.option("--wheelhouse", type=click.Path(path_type=Path), metavar="DIR",
              help=(
                  "Install from this folder (`kdkit wheelhouse`) with --no-index: the build uses "
                  "no network."))
@click.option("--lock-format", type=click.Choice(LOCK_FORMATS), default="requirements",
              show_default=True,
              help="Install from requirements/<backend>.txt, or from "
                   "requirements/pylock.<backend>.toml (PEP 751, installed by pip >= 26.1; the "
                   "image's Python must be 3.11 or newer).")
@click.option("--no-cache", is_flag=True, help="Rebuild every layer.")
@json_option
def build(project_dir: Path | None, backend: str | None, base_image: str | None, tag: str | None,
          ca_bundle: Path | None, wheelhouse: Path | None, lock_format: str,
          no_cache: bool, as_json: bool) -> None:
    """Build the project's image from its lock, through the Docker SDK.

    A builder stage makes a venv and installs requirements/<backend>.txt with
    pip --require-hashes --no-deps; the final stage holds the venv, kdkit's
    in-container commands, kdkit.json, config/, src/ and the lock, and runs as a
    non-root user. The lock's layer comes before the sources', so a source-only
    change rebuilds in seconds. The log streams live; on failure the whole log is
    kept in a file and its first error line is shown. A stale or unhashed lock is
    refused (exit 2); a failed build leaves no image tagged.

    With --lock-format pylock the image installs exactly the files the backend's
    PEP 751 lock (requirements/pylock.<backend>.toml, written by `kdkit lock`)
    names, hash-checked, by the pip of kdkit's own interpreter (26.1 or newer),
    and its labels and its verify-env name that lock.

    \b
    Examples:
      kdkit build --backend cuda
      kdkit build --ca-bundle /etc/ssl/certs/ca-certificates.crt     # TLS-intercepting proxy
      kdkit wheelhouse --out wh && kdkit build --wheelhouse wh         # no network in the build
      kdkit build --lock-format pylock                                # from requirements/pylock.<backend>.toml
    """  # noqa: E501 (verbatim text, as printed)
    from kdkit.image.build import plan_build
    from kdkit.image.buildrun import build_image

    plan = plan_build(project_dir, backend, base_image=base_image, tag=tag, ca_bundle=ca_bundle,
                      wheelhouse=wheelhouse, no_cache=no_cache, lock_format=lock_format)
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
    say(_summary(result))
    work = [s for s in result.ran if s.instruction.startswith(("RUN", "COPY"))]
    ran = "; ".join(f"{s.number} {' '.join(s.instruction.split())[:50]}" for s in work) or "none"
    say(f"Ran (not cached): {ran}")
    say(next_after_build(project_dir, plan.backend.name, result.tag, tag is not None))


def next_after_build(project_dir: Path | None, backend: str, built: str, tagged: bool) -> str:
    """The "Next:" line of a build, a command that works as printed: the project named when it was
    given, the image named when --tag chose it (run and bundle look for the default tag
    otherwise)."""
    import shlex

    where = f" {shlex.quote(str(project_dir))}" if project_dir is not None else ""
    image = f" --image {shlex.quote(built)}" if tagged else ""
    return (f"Next: kdkit run{where} --backend {backend}{image}   "
            f"(or kdkit inspect {shlex.quote(built)})")


@click.command("inspect")
@click.argument("image")
@click.option("--project", "project_dir", type=click.Path(file_okay=False, path_type=Path),
              metavar="DIR",
              help=(
                  "Project whose current lock to compare (default: the one around the current "
                  "folder)."))
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
    from kdkit.image.labels import inspect_image, require_lock_match

    report = inspect_image(image, project_dir)
    if as_json:
        emit_json(report)
    else:
        from rich.table import Table

        platform = "/".join(p for p in (report["os"], report["architecture"]) if p)
        where = platform + ", " if platform else ""
        table = Table(title=plain(f"{image}  ({where}{size_text(report['size'])}, "
                                  f"user {report['user'] or 'root'})"))
        table.add_column("label")
        table.add_column("value", overflow="fold")
        for prefix, group in (("dev.kdkit.", report["kdkit"]),
                              ("org.opencontainers.image.", report["oci"])):
            # labels come from whoever built the image: plain text only
            for key, value in group.items():
                table.add_row(plain(prefix + key), plain(value))
        console().print(table)
        say(f"Torch architectures: {printable(_arch_line(report['torch_arch']))}")
        lock = report["lock"]
        if lock["matches"] is None:
            say("Lock: no project here to compare with (pass --project DIR).")
        elif lock["matches"]:
            say(f"Lock: {lock['project_lock']} matches the image ({lock['image_sha256'][:12]}).")
        say(_project_line(report["project"]))
    require_lock_match(report)


def _project_line(project: Mapping[str, Any]) -> str:
    """inspect_image's project comparison as one line (a difference is no failure: `kdkit run`
    mounts them)."""
    if project["matches"] is None:
        return ("Project: no project here to compare with (pass --project DIR)."
                if project["project_sha256"] is None
                else "Project: the image has no project label (built before kdkit recorded it).")
    if project["matches"]:
        return "Project: config/ and src/ match the image's."
    changed = f" Changed: {printable(', '.join(project['changed']))}." if project["changed"] else ""
    return ("Project: config/ and src/ differ from the image's (kdkit run mounts the project's "
            f"own; `kdkit build` to bake them).{changed}")


def _arch_line(arch: Mapping[str, Any]) -> str:
    """inspect_image's torch_arch as one line: the tokens and their source, none, unknown and
    why."""
    if not arch["recorded"]:
        return (
            "not recorded (an image built before kdkit recorded them; rebuild with `kdkit build`)")
    if arch["arch_list"] is None:
        return arch["source"] or "unknown"
    if not arch["arch_list"]:
        return f"none ({arch['source']})"
    return f"{' '.join(arch['arch_list'])} (from {arch['source']})"
