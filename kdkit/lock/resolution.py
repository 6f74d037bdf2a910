"""What both resolvers of `kdkit lock` share (pip-tools' pip-compile, :mod:`kdkit.lock.pipcompile`,
and uv's ``uv pip compile``, :mod:`kdkit.lock.uvcompile`): the :class:`Resolution` each hands back,
the index options kdkit adds for a backend, the facts of this host, and running a resolver inside
the backend's base image (the host's version of the tool brought in as wheels, pip's local paths
mounted read-only).
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kdkit import docker_adapter
from kdkit.config.project import Backend, Project
from kdkit.core.errors import KdkitError
from kdkit.core.jsonio import load_json
from kdkit.lock.inputs import relative
from kdkit.lock.pages import local_path

# pip options whose values may be local paths the container must see (mounted read-only).
PATH_OPTIONS = ("index-url", "extra-index-url", "find-links", "cert", "client-cert", "constraint")
CONTAINER_CA = "/kdkit/ca.pem"  # where --ca-bundle is mounted in the container


@dataclass(frozen=True)
class Resolution:
    """A resolver's output and the facts of the interpreter and tool that produced it."""

    text: str
    python: str
    platform: str
    # the tool and its version, as the header records it: "pip-tools 7.6.2", "uv 0.13.9"
    resolver: str
    resolved_in: str


def index_arguments(backend: Backend, pip_config: dict[str, str],
                    local_torch: Path | None) -> list[str]:
    """The index options kdkit adds for ``backend``; the rest of pip's configuration still
    applies."""
    if local_torch is not None:
        return ["--find-links", str(local_torch)]
    user_index = pip_config.get("index-url", "")
    args = ["--index-url", backend.torch_index]
    if user_index and user_index.rstrip("/") != backend.torch_index.rstrip("/"):
        args += ["--extra-index-url", user_index]
    return args


def host_facts() -> tuple[str, str]:
    """(Python version, platform) of the interpreter a resolver runs for on this host."""
    return platform.python_version(), f"{sys.platform}-{platform.machine()}"


def local_paths(values: Sequence[str]) -> Iterator[Path]:
    """Local files and folders named by pip option values (paths or file:// URLs).

    A local index ``file:///srv/pypi/simple`` links to files beside ``simple/``, so its parent is
    named instead (the usual layout of a local mirror)."""
    for value in values:
        for token in value.split():
            path = Path(local_path(token))
            if token.startswith("file:") and path.name == "simple":
                path = path.parent
            if path.is_absolute() and path.exists():
                yield path


# {package}: the distribution installed from /kdkit/wheels; {command}: the resolver, run with "$@".
_CONTAINER_SCRIPT = r"""
set -e
PY=$(command -v python3 || command -v python || true)
[ -n "$PY" ] || {{ echo "kdkit: the image has no python3; lock inside an image that has Python" >&2; exit 97; }}
"$PY" -m venv /tmp/kdkit-resolver
/tmp/kdkit-resolver/bin/python -m pip install -q --no-index --find-links /kdkit/wheels {package}
/tmp/kdkit-resolver/bin/python -c 'import json, platform, sys
from importlib.metadata import version
json.dump({{"python": platform.python_version(), "platform": sys.platform + "-" + platform.machine(),
           "resolver": "{package} " + version("{package}")}}, open("/kdkit/out/env.json", "w"))'
cd /kdkit/project
exec {command} "$@"
"""  # noqa: E501 (a script, as run)


@dataclass(frozen=True)
class ContainerRun:
    """One resolver run inside the backend's base image: the tool, its arguments and its
    environment."""

    tool: str  # the name in messages: "pip-compile", "uv pip compile"
    package: str  # the distribution in the wheels folder: "pip-tools", "uv"
    command: str  # the shell words that start it, the arguments following
    args: Sequence[str]
    env: Mapping[str, str]


def run_in_container(project: Project, backend: Backend, run: ContainerRun, workdir: Path,
                     output: Path,
                     pip_config: dict[str, str], ca_bundle: Path | None,
                     local_torch: Path | None) -> Resolution:
    """Run ``run`` in ``backend.base_image`` with the wheels of ``workdir/wheels``: the project
    read-only, the output folder, pip's local paths and ``local_torch`` at their own paths,
    --ca-bundle at CONTAINER_CA."""
    mounts: list[tuple[Path, str, str]] = [(project.root, "/kdkit/project", "ro"),
                                           (workdir, "/kdkit/out", "rw"),
                                           (workdir / "wheels", "/kdkit/wheels", "ro")]
    shared = {p.resolve() for p in local_paths([pip_config.get(k, "") for k in PATH_OPTIONS])}
    shared |= {local_torch} if local_torch else set()
    mounts += [(p, str(p), "ro") for p in sorted(shared)]
    if ca_bundle is not None:
        mounts.append((ca_bundle.resolve(), CONTAINER_CA, "ro"))
    rel_in = relative(project.root, project.requirements)
    script = _CONTAINER_SCRIPT.format(package=run.package, command=run.command)
    command = ["sh", "-c", script, "kdkit-lock", *run.args,
               "--output-file", f"/kdkit/out/{output.name}", rel_in]
    code, logs = docker_adapter.run_to_completion(backend.base_image, command, mounts,
                                                  run.env, network="host")
    if code != 0:
        last = [ln for ln in logs.splitlines() if ln.strip()][-1:] or [f"exit status {code}"]
        raise KdkitError(
            f"{run.tool} in {backend.base_image} failed for {rel_in}: {last[0].strip()}")
    facts = load_json(workdir / "env.json", what="container facts")
    return Resolution(output.read_text(encoding="utf-8"), str(facts["python"]),
                      str(facts["platform"]),
                      str(facts["resolver"]), f"container {backend.base_image}")
