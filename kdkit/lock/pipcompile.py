"""pip-compile for `kdkit lock` (``--resolver pip-tools``, the default): its options (kdkit's index
options, pip bounded like the preflight), and running it on this host or inside the backend's base
image (pip-tools brought in from the host, pip's configuration, proxies, CA bundle and local paths
handed over).

pip-compile runs as a subprocess (``python -m piptools compile``; its Python API is internal) with
``--generate-hashes --allow-unsafe --strip-extras --no-header --no-config``. It reads pip's own
configuration itself (pip.conf and ``PIP_*``); what both resolvers share is
:mod:`kdkit.lock.resolution`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

from kdkit.config.project import Backend, Project
from kdkit.core import proc
from kdkit.core.errors import KdkitError
from kdkit.lock.fetch import Network
from kdkit.lock.inputs import relative
from kdkit.lock.resolution import (
    CONTAINER_CA,
    ContainerRun,
    Resolution,
    host_facts,
    index_arguments,
    run_in_container,
)

TOOL = "pip-compile"
# --no-emit-*: a find-links folder or a file:// index is a path on one machine, and the lock
# travels; kdkit writes the index lines itself (provenance.option_lines).
COMPILE_FLAGS = ("--generate-hashes", "--allow-unsafe", "--strip-extras", "--no-header",
                 "--no-config",
                 "--no-emit-find-links", "--no-emit-index-url")


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


def version() -> str:
    """The header's ``resolver`` value for this host's pip-tools."""
    return f"pip-tools {metadata.version('pip-tools')}"


def compile_on_host(project: Project, args: list[str], output: Path,
                    ca_bundle: Path | None) -> Resolution:
    env = {"PIP_CERT": str(ca_bundle)} if ca_bundle else None
    rel_in = relative(project.root, project.requirements)
    done = proc.run([sys.executable, "-m", "piptools", "compile", *args, "--output-file",
                     str(output), rel_in],
                    cwd=project.root, extra_env=env, timeout=1800)
    if not done.ok:
        raise KdkitError(f"pip-compile failed for {rel_in}: {done.first_error_line()}")
    python, plat = host_facts()
    return Resolution(output.read_text(encoding="utf-8"), python, plat, version(), "host")


def _pip_tools_wheels(dest: Path, python_version: str) -> None:
    """Download the host's pip-tools version (pure-Python wheels) for the container, via the host's
    pip."""
    done = proc.run([sys.executable, "-m", "pip", "download", "-q", "--dest", str(dest),
                     "--only-binary=:all:",
                     "--python-version", python_version,
                     f"pip-tools=={metadata.version('pip-tools')}"], timeout=600)
    if not done.ok:
        raise KdkitError(f"cannot download pip-tools for the container: {done.first_error_line()}")


def _container_environment(pip_config: dict[str, str], ca_bundle: Path | None) -> dict[str, str]:
    env = {f"PIP_{key.upper().replace('-', '_')}": value for key, value in pip_config.items()}
    env.update({name: os.environ[name] for name in proc.PROXY_VARIABLES if os.environ.get(name)})
    if ca_bundle is not None:
        env["PIP_CERT"] = CONTAINER_CA
    return env


def compile_in_container(project: Project, backend: Backend, args: list[str], workdir: Path,
                         output: Path,
                         pip_config: dict[str, str], ca_bundle: Path | None,
                         local_torch: Path | None) -> Resolution:
    _pip_tools_wheels(workdir / "wheels", project.python)
    run = ContainerRun(TOOL, "pip-tools", "/tmp/kdkit-resolver/bin/python -m piptools compile",
                       args,
                       _container_environment(pip_config, ca_bundle))
    return run_in_container(project, backend, run, workdir, output,
                            pip_config, ca_bundle, local_torch)
