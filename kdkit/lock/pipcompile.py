"""pip-compile for `kdkit lock`: its options (kdkit's index options, pip bounded like the preflight),
and running it on this host or inside the backend's base image (pip-tools brought in from the host,
pip's configuration, proxies, CA bundle and local paths handed over).

pip-compile runs as a subprocess (``python -m piptools compile``; its Python API is internal) with
``--generate-hashes --allow-unsafe --strip-extras --no-header --no-config``.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from kdkit import docker_adapter
from kdkit.config.project import Backend, Project
from kdkit.core import proc
from kdkit.core.errors import KdkitError
from kdkit.core.jsonio import load_json
from kdkit.lock.fetch import Network
from kdkit.lock.inputs import relative
from kdkit.lock.pages import local_path

# --no-emit-*: a find-links folder or a file:// index is a path on one machine, and the lock travels;
# kdkit writes the index lines itself (provenance.option_lines).
COMPILE_FLAGS = ("--generate-hashes", "--allow-unsafe", "--strip-extras", "--no-header", "--no-config",
                 "--no-emit-find-links", "--no-emit-index-url")
# pip options whose values may be local paths the container must see (mounted read-only).
_PATH_OPTIONS = ("index-url", "extra-index-url", "find-links", "cert", "client-cert", "constraint")


@dataclass(frozen=True)
class Resolution:
    """pip-compile's output and the facts of the interpreter that produced it."""

    text: str
    python: str
    platform: str
    pip_tools: str
    resolved_in: str


def index_arguments(backend: Backend, pip_config: dict[str, str], local_torch: Path | None) -> list[str]:
    """The index options kdkit adds for ``backend``; the rest of pip's configuration still applies."""
    if local_torch is not None:
        return ["--find-links", str(local_torch)]
    user_index = pip_config.get("index-url", "")
    args = ["--index-url", backend.torch_index]
    if user_index and user_index.rstrip("/") != backend.torch_index.rstrip("/"):
        args += ["--extra-index-url", user_index]
    return args


def compile_arguments(backend: Backend, pip_config: dict[str, str], local_torch: Path | None,
                      upgrade: bool, upgrade_packages: Sequence[str]) -> list[str]:
    """pip-compile's options for one backend, without the input and output files."""
    args = [*COMPILE_FLAGS, *index_arguments(backend, pip_config, local_torch),
            "--pip-args", Network.from_pip(pip_config).pip_args()]
    if upgrade:
        args.append("--upgrade")
    for name in upgrade_packages:
        args += ["--upgrade-package", name]
    return args


def _host_facts() -> tuple[str, str, str]:
    return platform.python_version(), f"{sys.platform}-{platform.machine()}", metadata.version("pip-tools")


def compile_on_host(project: Project, args: list[str], workdir: Path, output: Path,
                     ca_bundle: Path | None) -> Resolution:
    env = {"PIP_CERT": str(ca_bundle)} if ca_bundle else None
    rel_in = relative(project.root, project.requirements)
    done = proc.run([sys.executable, "-m", "piptools", "compile", *args, "--output-file", str(output), rel_in],
                    cwd=project.root, extra_env=env, timeout=1800)
    if not done.ok:
        raise KdkitError(f"pip-compile failed for {rel_in}: {done.first_error_line()}")
    python, plat, pip_tools = _host_facts()
    return Resolution(output.read_text(encoding="utf-8"), python, plat, pip_tools, "host")


def _local_paths(values: Sequence[str]) -> Iterator[Path]:
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


_CONTAINER_SCRIPT = r"""
set -e
PY=$(command -v python3 || command -v python || true)
[ -n "$PY" ] || { echo "kdkit: the image has no python3; lock inside an image that has Python" >&2; exit 97; }
"$PY" -m venv /tmp/kdkit-piptools
/tmp/kdkit-piptools/bin/python -m pip install -q --no-index --find-links /kdkit/wheels pip-tools
/tmp/kdkit-piptools/bin/python -c 'import json, platform, sys
from importlib.metadata import version
json.dump({"python": platform.python_version(), "platform": sys.platform + "-" + platform.machine(),
           "pip-tools": version("pip-tools")}, open("/kdkit/out/env.json", "w"))'
cd /kdkit/project
exec /tmp/kdkit-piptools/bin/python -m piptools compile "$@"
"""


def _pip_tools_wheels(dest: Path, python_version: str) -> None:
    """Download the host's pip-tools version (pure-Python wheels) for the container, via the host's pip."""
    done = proc.run([sys.executable, "-m", "pip", "download", "-q", "--dest", str(dest), "--only-binary=:all:",
                     "--python-version", python_version, f"pip-tools=={metadata.version('pip-tools')}"], timeout=600)
    if not done.ok:
        raise KdkitError(f"cannot download pip-tools for the container: {done.first_error_line()}")


def _container_environment(pip_config: dict[str, str], ca_bundle: Path | None) -> dict[str, str]:
    env = {f"PIP_{key.upper().replace('-', '_')}": value for key, value in pip_config.items()}
    env.update({name: os.environ[name] for name in proc.PROXY_VARIABLES if os.environ.get(name)})
    if ca_bundle is not None:
        env["PIP_CERT"] = "/kdkit/ca.pem"
    return env


def compile_in_container(project: Project, backend: Backend, args: list[str], workdir: Path, output: Path,
                          pip_config: dict[str, str], ca_bundle: Path | None,
                          local_torch: Path | None) -> Resolution:
    wheels = workdir / "wheels"
    _pip_tools_wheels(wheels, project.python)
    mounts: list[tuple[Path, str, str]] = [(project.root, "/kdkit/project", "ro"), (workdir, "/kdkit/out", "rw"),
                                           (wheels, "/kdkit/wheels", "ro")]
    shared = {p.resolve() for p in _local_paths([pip_config.get(k, "") for k in _PATH_OPTIONS])}
    shared |= {local_torch} if local_torch else set()
    mounts += [(p, str(p), "ro") for p in sorted(shared)]
    if ca_bundle is not None:
        mounts.append((ca_bundle.resolve(), "/kdkit/ca.pem", "ro"))
    rel_in = relative(project.root, project.requirements)
    command = ["sh", "-c", _CONTAINER_SCRIPT, "kdkit-lock", *args,
               "--output-file", f"/kdkit/out/{output.name}", rel_in]
    code, logs = docker_adapter.run_to_completion(backend.base_image, command, mounts,
                                                  _container_environment(pip_config, ca_bundle), network="host")
    if code != 0:
        last = [ln for ln in logs.splitlines() if ln.strip()][-1:] or [f"exit status {code}"]
        raise KdkitError(f"pip-compile in {backend.base_image} failed for {rel_in}: {last[0].strip()}")
    facts = load_json(workdir / "env.json", what="container facts")
    return Resolution(output.read_text(encoding="utf-8"), str(facts["python"]), str(facts["platform"]),
                      str(facts["pip-tools"]), f"container {backend.base_image}")
