"""The resolvers of `kdkit lock`: which one runs (``--resolver``, else kdkit.json's ``resolver``,
else pip-tools), and running it for one backend in a scratch folder seeded with the previous lock,
on this host or inside the backend's base image.

Both write the same hashed requirements format into the scratch folder; :mod:`kdkit.lock.lock` then
checks it (the torch label, provenance) and writes the lock with its header, whichever ran.

The previous lock keeps unchanged pins in place unless ``--upgrade`` / ``--upgrade-package`` says
otherwise. pip-compile is handed the lock as it is (it recomputes every hash). uv is handed its pins
only: uv takes the hashes of a pin it keeps from the existing output file without asking the index
(seen with uv 0.13.9: a wrong hash there came through into the new lock), and a lock's hashes must
be the index's.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kdkit.core.errors import BadInput
from kdkit.core.projectfiles import MARKER
from kdkit.core.staging import scratch_beside

# the CLI imports RESOLVERS for --resolver's choices: nothing heavy at import time
if TYPE_CHECKING:
    from kdkit.config.project import Backend, Project
    from kdkit.lock.resolution import Resolution

# kdkit.json's "resolver" enum (schemas/kdkit.schema.json) names the same
RESOLVERS = ("pip-tools", "uv")
DEFAULT_RESOLVER = "pip-tools"
CONFIG_KEY = "resolver"
_PIN_LINE = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9._-]*(?:\[[^\]]*\])?\s*===?\s*[^\s;\\#]+", re.MULTILINE)


def chosen_resolver(option: str | None, project: Project) -> str:
    """``--resolver`` when given, else kdkit.json's ``resolver``, else pip-tools; BadInput for a
    name kdkit does not know (click refuses the option's first; kdkit.json's schema the key's)."""
    if option is not None and option not in RESOLVERS:
        raise BadInput(
            f"--resolver {option}: unknown resolver; choose one of {', '.join(RESOLVERS)}")
    value = option or project.config.get(CONFIG_KEY, DEFAULT_RESOLVER)
    if value not in RESOLVERS:
        raise BadInput(f"{project.root / MARKER}: $.{CONFIG_KEY}: {value!r} is not a resolver "
                       f"kdkit knows; choose one of {', '.join(RESOLVERS)}, or remove the key "
                       f"(default {DEFAULT_RESOLVER})")
    return str(value)


@dataclass(frozen=True)
class Resolver:
    """A resolver ready to run: its name, the tool's name in messages, the header's ``resolver``
    value (the host's tool and version) and uv's binary (None for pip-tools)."""

    name: str
    tool: str
    version: str
    uv: Path | None = None


def prepare(name: str) -> Resolver:
    """The resolver ``name``, its tool found and asked its version: uv missing, or a binary that is
    not uv, is Unavailable (exit 3) before anything is asked or written."""
    if name == "uv":
        from kdkit.lock import uvcompile

        uv = uvcompile.find_uv()
        return Resolver(name, uvcompile.TOOL, uvcompile.uv_version(uv), uv)
    from kdkit.lock import pipcompile

    return Resolver(name, pipcompile.TOOL, pipcompile.version())


@dataclass(frozen=True)
class Job:
    """One backend to resolve: the project, pip's configuration and kdkit's options."""

    project: Project
    backend: Backend
    pip_config: dict[str, str]
    target: tuple[str, str]  # the image's platform, (sys.platform, machine)
    ca_bundle: Path | None = None
    local_torch: Path | None = None
    upgrade: bool = False
    upgrade_packages: Sequence[str] = ()
    in_container: bool = False


def resolve(resolver: Resolver, job: Job) -> Resolution:
    """The resolver's output for ``job.backend``, produced in a scratch folder seeded with the
    previous lock.

    The folder is the lock's staging (kdkit.core.staging: ``.<lock>.partial-PID`` beside it, its
    owner's lock held while the resolver runs), removed at the end. A kdkit killed meanwhile
    (SIGKILL: no ``finally`` runs) leaves it, and its resolver dies with it (kdkit.core.proc); the
    next `kdkit lock` of that backend removes the folder and says so (kdkit.lock.lock:
    ``clean_stale`` of the lock)."""
    with scratch_beside(job.backend.lock) as workdir:
        output = workdir / job.backend.lock.name
        if job.backend.lock.is_file():
            _seed(job.backend.lock, output, pins_only=resolver.uv is not None)
        if resolver.uv is not None:
            return _uv(resolver.uv, resolver.version, job, workdir, output)
        return _pip_tools(job, workdir, output)


def _seed(previous: Path, output: Path, *, pins_only: bool) -> None:
    """The previous lock where the resolver reads it (its pins only, for uv: see the module's
    docstring)."""
    if not pins_only:
        shutil.copyfile(previous, output)
        return
    text = previous.read_text(encoding="utf-8", errors="replace")
    output.write_text(
        "".join(match.group(0) + "\n" for match in _PIN_LINE.finditer(text)), encoding="utf-8")


def _pip_tools(job: Job, workdir: Path, output: Path) -> Resolution:
    from kdkit.lock import pipcompile

    args = pipcompile.compile_arguments(job.backend, job.pip_config, job.local_torch, job.upgrade,
                                        job.upgrade_packages)
    if job.in_container:
        return pipcompile.compile_in_container(job.project, job.backend, args, workdir, output,
                                               job.pip_config,
                                               job.ca_bundle, job.local_torch)
    return pipcompile.compile_on_host(job.project, args, output, job.ca_bundle)


def _uv(uv: Path, version: str, job: Job, workdir: Path, output: Path) -> Resolution:
    from kdkit.lock import uvcompile

    cert = uvcompile.uv_cert(job.pip_config, job.ca_bundle, in_container=job.in_container)
    args = uvcompile.uv_arguments(job.backend, job.pip_config, job.local_torch, job.upgrade,
                                  job.upgrade_packages,
                                  cert)
    if job.in_container:
        return uvcompile.compile_in_container(version, job.project, job.backend, args, workdir,
                                              output,
                                              job.pip_config, job.ca_bundle, job.local_torch,
                                              job.target[1])
    return uvcompile.compile_on_host(uv, version, job.project, args, output, job.pip_config)
