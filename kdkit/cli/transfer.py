"""Moving a project to the rented machine: bundle, verify-bundle, load.

Each command parses its options, calls one domain function of kdkit.transfer.bundle and prints what
it returns.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from kdkit.cli._options import backend_option, force_option, json_option, project_argument
from kdkit.cli._output import emit_json, say, warn

if TYPE_CHECKING:
    from kdkit.transfer.format import BundleInfo


def _progress(message: str) -> None:
    say(f"  {message}", err=True)


def size_mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


@click.command("bundle")
@project_argument
@click.option("--out", "out", required=True, type=click.Path(path_type=Path),
              help=(
                  "New folder outside the project to write the bundle to (refused if it exists, "
                  "unless --force)."))
@backend_option
@click.option("--image",
              default=None, help="Image to pack (default: the tag `kdkit build` gives this lock).")
@click.option("--no-image", is_flag=True, help="Leave the image out: for a host without Docker.")
@click.option("--compressor", type=click.Choice(["zstd", "gzip"]), default="zstd",
              show_default=True,
              help=(
                  "How the image archive is compressed (zstd: smaller and far faster; gzip: "
                  "everywhere)."))
@click.option("--no-kdkit-wheels", is_flag=True,
              help="Leave out kdkit-wheels/ (kdkit itself, to install offline on the rented host).")
@click.option("--wheelhouse", type=click.Path(path_type=Path), default=None, metavar="DIR",
              help="The lock's files (`kdkit wheelhouse`): those of pins only this machine had "
                   "(the lock's machine-local, e.g. torch from --torch-find-links) travel in "
                   "local-wheels/ for RUN.md's path without Docker.")
@force_option(
    "Replace an existing bundle that kdkit wrote at --out (only once the new one is complete).")
@json_option
def bundle_command(project_dir: Path | None, out: Path, backend: str | None, image: str | None,
                   no_image: bool, compressor: str, no_kdkit_wheels: bool, wheelhouse: Path | None,
                   force: bool,
                   as_json: bool) -> None:
    """Pack everything the rented machine needs into one verified folder.

    \b
    The folder holds:
      project/      the project at its git revision (or its files): kdkit.json, config/,
                    requirements/, src/, README*, and what the configs name (locks, pilot
                    inputs and manifest); files named like secrets (.env*, *.pem, .ssh/ ...)
                    are left out and named
      kdkit.pyz     kdkit's in-container part as one file: `python3 kdkit.pyz diagnose`
      kdkit-wheels/ kdkit's wheel and the wheels of its hashed runtime lock, for Linux on
                    the lock's CPU and each CPython 3.10-3.14 that has them all: kdkit
                    installs there offline (fetched once with pip, then from kdkit's cache,
                    KDKIT_CACHE_DIR or ~/.cache/kdkit), unless --no-kdkit-wheels
      local-wheels/ with --wheelhouse DIR: the files of the lock's machine-local pins
                    (a torch locked from a folder of this machine), for the path without Docker
      image.tar.zst the image (`docker save`, compressed while it streams), unless --no-image
      bundle.json   what was packed, file by file: revision, lock hash, image id and labels
      RUN.md        the exact commands for the other machine, block by block: with kdkit
                    and Docker, with Docker only (the same container as `kdkit run`), and
                    without Docker (a venv from the lock, then kdkit.pyz)
      SHA256SUMS    every file's hash (`kdkit verify-bundle` or `sha256sum -c`)
    It is written as .OUT.partial-PID beside --out and renamed when complete; what a
    killed run left there is removed by the next run. --out must lie outside the project.

    \b
    Example:
      kdkit bundle --out ../myproj-bundle && rsync -a ../myproj-bundle gpu-host:
    """
    from kdkit.transfer.bundle import make_bundle

    info = make_bundle(project_dir, out, backend=backend, image=image, include_image=not no_image,
                       compressor=compressor, force=force, kdkit_wheels=not no_kdkit_wheels,
                       progress=_progress, wheelhouse=wheelhouse)
    if as_json:
        emit_json(info)
        return
    _print_bundle(info)


def _print_bundle(info: BundleInfo) -> None:
    """The bundle in a few lines, after its warnings (uncommitted changes, files left out)."""
    from kdkit.config.files import printable_name

    if info["uncommitted"]:
        warn(f"{len(info['uncommitted'])} uncommitted change(s) are NOT in the bundle (it holds "
             f"revision {str(info['revision'])[:12]}): {', '.join(info['uncommitted'][:3])}; "
             "commit them and bundle again")
    if info["left_out"]:
        left = [printable_name(f"{item['file']} ({item['why']})") for item in info["left_out"]]
        more = f" (+{len(left) - 3} more, see bundle.json)" if len(left) > 3 else ""
        warn(f"left out {len(left)} file(s): {'; '.join(left[:3])}{more}; secrets reach the rented "
             "machine at run time only (`kdkit run --env-file`)")
    wheels = info["kdkit_wheels"]
    wheels_line = "not carried (--no-kdkit-wheels)" if not wheels else (
        f"{wheels['folder']}/: {len(wheels['files'])} files, offline for python3 "
        f"{', '.join(wheels['pythons'])}")
    image_line = "no image (--no-image)" if not info["image"] else (
        f"{info['image']['ref']}: {size_mb(info['image']['bytes'])} "
        f"({info['image']['compressor']}, {info['image']['seconds']:.1f} s)")
    say(f"Bundle written to {info['out']} in {info['seconds']:.1f} s\n"
        f"  project  {info['project_files']} files at {info['revision'] or 'no git revision'}\n"
        f"  image    {image_line}\n"
        f"  kdkit    {wheels_line}\n"
        f"Next: copy the folder, then on the other machine follow DIR/RUN.md, block by block")


@click.command("verify-bundle")
@click.argument("bundle_dir", type=click.Path(path_type=Path))
@json_option
def verify_bundle_command(bundle_dir: Path, as_json: bool) -> None:
    """Check every file of a bundle against its SHA256SUMS before anything is loaded.

    Names each altered, missing or added file; exit 1 when any is found. Run it on the
    copy that arrived, not on the original.
    """
    from kdkit.transfer.verify import require_verified, verify_bundle

    report = verify_bundle(bundle_dir, progress=_progress)
    if as_json:
        emit_json(report)
    elif report["ok"]:
        say(f"OK: {report['files']} files match SHA256SUMS in {report['bundle']}")
    else:
        for problem in report["problems"]:
            say(f"  {problem['file']}: {problem['problem']}")
    require_verified(report)


@click.command("load")
@click.argument("bundle_dir", type=click.Path(path_type=Path))
@json_option
def load_command(bundle_dir: Path, as_json: bool) -> None:
    """Verify a bundle, load its image into Docker, and check the image against the bundle.

    Every file is checked first (as verify-bundle does); the archive is decompressed on the
    way in (engines before Docker 25 cannot read zstd); then the loaded image's id and its
    kdkit labels (project, backend, python, lock path and hash, revision) must equal what
    bundle.json recorded.
    """
    from kdkit.transfer.verify import load_bundle

    report = load_bundle(bundle_dir, progress=_progress)
    if as_json:
        emit_json(report)
    else:
        say(f"Loaded {report['image']} ({report['id'][:19]}) in {report['seconds']:.1f} s; "
                   f"{report['files']} files verified, labels match the bundle")
