"""Dependency commands: lock, wheelhouse (verify-env and torch-arch are forwarded to kdkit.probe,
see machine.py)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING

import click

from kdkit.cli._options import backend_option, ca_bundle_option, json_option, project_argument
from kdkit.cli._output import emit_json, say, size_text, warn
from kdkit.core.builds import BACKENDS
from kdkit.lock.resolvers import RESOLVERS

if TYPE_CHECKING:
    from kdkit.lock.lock import LockResult


@click.command("lock")
@project_argument
@click.option("--backend", type=click.Choice([*BACKENDS, "all"]), default=None,
              help="Backend to lock, or 'all' (default: default_backend in kdkit.json).")
@click.option("--upgrade",
              is_flag=True, help="Re-resolve every package to its newest allowed version.")
@click.option("--upgrade-package", "upgrade_packages", multiple=True, metavar="NAME",
              help="Re-resolve only NAME (repeatable); other pins stay as locked.")
@click.option("--in-container", is_flag=True,
              help="Resolve inside the backend's base image (Docker engine), so Linux-only and "
                   "Python-specific dependencies match the image.")
@ca_bundle_option("PEM file of CA certificates for a TLS-intercepting proxy; passed to pip "
                  "(PIP_CERT), mounted read-only into the container with --in-container.")
@click.option("--torch-find-links", "torch_links", type=click.Path(file_okay=False, path_type=Path),
              default=None, envvar="KDKIT_TORCH_FIND_LINKS", show_envvar=True,
              help=(
                  "Air-gapped: take torch from this folder of wheels instead of the backend's "
                  "torch index."))
@click.option("--resolver", type=click.Choice(RESOLVERS), default=None,
              help="pip-tools (pip-compile) or uv (uv pip compile), same lock either way (default: "
                   "\"resolver\" in kdkit.json, else pip-tools). uv is $KDKIT_UV, else the uv "
                   "package of kdkit's Python, else uv on PATH.")
@json_option
def lock(project_dir: Path | None, backend: str | None, upgrade: bool,
         upgrade_packages: tuple[str, ...],
         in_container: bool, ca_bundle: Path | None, torch_links: Path | None, resolver: str | None,
         as_json: bool) -> None:
    """Write requirements/<backend>.txt: a hashed lock of requirements/base.in.

    torch comes from the backend's PyTorch wheel index in kdkit.json and is pinned
    with its local label (torch==2.13.0+cu130), because a plain ==2.13.0 also accepts
    +cpu and +rocm builds. The torch index is asked first (10 s at most): an index
    that does not answer is exit 3 naming it, one without the pinned build is exit 2
    naming the builds its family offers. The lock's header records kdkit's version,
    the Python and platform it was resolved for, the indexes, where torch really
    came from (torch-source) and the sha256 of every input file; `kdkit validate`
    reports a lock whose inputs changed since. A lock names only http(s) indexes:
    nothing of this machine (file:// indexes, find-links) travels in it.

    The resolver is pip-tools' pip-compile, or uv (--resolver uv, or "resolver":
    "uv" in kdkit.json), given the same indexes and pip configuration and held to
    the same checks; the header's `resolver` names the one that ran. uv missing is
    exit 3; set KDKIT_UV to its binary, or `pip install uv`.

    Beside the lock, requirements/pylock.<backend>.toml: the same pins as a PEP 751
    lock (pip 26.1+ and uv install it; `kdkit build --lock-format pylock` builds
    from it), written by uv from the lock itself, for the image's platform, naming
    only files the lock's indexes serve. Without uv, or with --torch-find-links (a
    folder of this machine), the lock is written alone and a warning says why.

    \b
    Examples:
      kdkit lock --backend cuda
      kdkit lock --backend all --upgrade-package numpy
      kdkit lock --backend rocm --in-container --ca-bundle corp-ca.pem
      kdkit lock --backend cpu --torch-find-links /srv/wheels     # no access to download.pytorch.org
      kdkit lock --resolver uv                                    # seconds instead of a minute
    """  # noqa: E501 (verbatim text, as printed)
    from kdkit.lock.lock import lock_project

    progress = None if as_json else (lambda line: say(line, err=True))
    results = lock_project(project_dir, backend, upgrade=upgrade, upgrade_packages=upgrade_packages,
                           in_container=in_container, ca_bundle=ca_bundle, torch_links=torch_links,
                           progress=progress, resolver=resolver)
    if as_json:
        emit_json({"locks": [r.as_dict() for r in results]})
        return
    for result in results:
        _said(result)


def _said(result: LockResult) -> None:
    """One lock run in text: its warnings, then what was written."""
    for message in result.warnings:
        warn(message)
    torch = f", torch=={result.torch}" if result.torch else ""
    where = "on this host" if result.resolved_in == "host" else f"in {result.resolved_in}"
    say(f"Wrote {result.path}: {result.pins} hashed pins{torch} (resolved {where}, "
               f"Python {result.python}, {result.platform})")
    if result.pylock is not None:
        say(f"Wrote {result.pylock}: the same pins as a PEP 751 lock")


@click.command("wheelhouse")
@project_argument
@backend_option
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="Folder to fill (default: wheelhouse/<backend> in the project).")
@json_option
def wheelhouse(project_dir: Path | None, backend: str | None,
               out: Path | None, as_json: bool) -> None:
    """Download the locked files, hash-checked, for offline builds.

    Runs `pip download --require-hashes --no-deps -r requirements/<backend>.txt` on
    this host, honouring pip's configuration (index, certificate, proxy), for the
    image's platform (Linux x86_64, the project's Python). Files already in DIR are
    reused. Then `kdkit build --wheelhouse DIR` installs with --no-index.
    """
    from kdkit.lock.wheelhouse import download_wheelhouse

    if not as_json:
        say("Downloading the locked files (pip download, hash-checked)...", err=True)
    result = download_wheelhouse(project_dir, backend, out)
    if as_json:
        emit_json(result.as_dict())
        return
    total = sum(size for _name, size in result.files)
    say(f"{result.folder}: {len(result.files)} files, {size_text(total)}, every sha256 in "
        f"{result.lock.name}")
    # a line that works as printed
    where = f" {shlex.quote(str(project_dir))}" if project_dir is not None else ""
    say(f"Next: kdkit build{where} --backend {result.backend} --wheelhouse "
        f"{shlex.quote(str(result.folder))}")
