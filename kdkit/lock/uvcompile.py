"""uv for `kdkit lock --resolver uv`: ``uv pip compile`` given what pip-compile takes from pip's
configuration, on this host or inside the backend's base image.

uv reads no pip configuration
(https://docs.astral.sh/uv/pip/compatibility/#configuration-files-and-environment-variables), so
kdkit translates the part of it that pip-compile applies (``pip config list``,
:func:`uv_arguments`):

* the indexes: kdkit's own (the backend's torch index first,
  :func:`kdkit.lock.resolution.index_arguments`), then the user's index and extra indexes;
  ``no-index``; find-links, ``--torch-find-links`` included;
* TLS: ``--ca-bundle`` or pip's ``cert`` as ``--cert``; without either, pip uses the system's store
  (truststore, pip 24.2 and later:
  https://pip.pypa.io/en/stable/topics/https-certificates/), uv its bundled roots unless
  ``--system-certs``; pip's ``client-cert`` as SSL_CLIENT_CERT, ``trusted-host`` as
  ``--allow-insecure-host`` (https://docs.astral.sh/uv/reference/environment/);
* the network: pip's ``proxy`` as the proxy variables for every host (pip ignores NO_PROXY for it),
  the timeout and retries the preflight gives pip (UV_HTTP_TIMEOUT, UV_HTTP_RETRIES).

pip's ``constraint`` option is not handed over: pip-compile does not apply it either (pip-tools
takes constraints from its own ``-c`` option and the input files), so both resolvers pin the same.

uv's own configuration is kept out, as pip-compile's is (``--no-config``): no uv.toml, no ``UV_*``
variable but the cache folder. The binary is ``KDKIT_UV``, else the ``uv`` package of kdkit's
interpreter (``uv.find_uv_bin()``), else ``uv`` on PATH (:func:`find_uv`).
"""

from __future__ import annotations

import math
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from kdkit.config.project import Backend, Project
from kdkit.core import proc
from kdkit.core.errors import KdkitError, Unavailable
from kdkit.lock.fetch import RETRIES, Network
from kdkit.lock.inputs import relative
from kdkit.lock.provenance import is_remote
from kdkit.lock.resolution import (
    CONTAINER_CA,
    ContainerRun,
    Resolution,
    host_facts,
    index_arguments,
    run_in_container,
)

TOOL = "uv pip compile"
UV_ENV = "KDKIT_UV"
GET_UV = "install it with `pip install 'kdkit[uv]'` (or `pip install uv`)"
INSTALL = f"{GET_UV}, or lock with --resolver pip-tools"
UV_FLAGS = (
    "--generate-hashes", "--no-header", "--quiet",
    # no uv.toml or [tool.uv]: pip's configuration only, as pip-compile runs with --no-config
    "--no-config",
    # pip takes the best version among the candidates of every index and find-links; uv by default
    # stops at the first index that has the name (against dependency confusion). unsafe-best-match
    # is uv's option that searches every index for the best version, as pip does:
    # https://docs.astral.sh/uv/pip/compatibility/#packages-that-exist-on-multiple-indexes
    "--index-strategy", "unsafe-best-match",
)
# What pip-compile needs flags for is uv's default: extras stripped (--strip-extras), pip and
# setuptools pinned (--allow-unsafe; uv warns that it "has no effect"), no index or find-links lines
# (--no-emit-index-url,
# --no-emit-find-links): `uv pip compile --help`.
_KEPT = ("UV_CACHE_DIR",)  # the one uv variable passed on: where its cache is changes no pin
_PROXIES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
# uv publishes manylinux2014 wheels of its binary (https://pypi.org/project/uv/#files)
_WHEEL_PLATFORM = "manylinux2014_{machine}"


def find_uv() -> Path:
    """The uv binary: $KDKIT_UV, else the ``uv`` package of kdkit's interpreter, else ``uv`` on
    PATH; Unavailable (exit 3) saying how to install it."""
    chosen = os.environ.get(UV_ENV)
    if chosen:
        path = Path(chosen).absolute()  # uv runs from the project's folder, not this one
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise Unavailable(f"{UV_ENV}={chosen}: no executable uv there; point {UV_ENV} at the "
                              f"uv binary, or unset it and {INSTALL}")
        return path
    try:
        from uv import find_uv_bin

        return Path(find_uv_bin())
    except (ImportError, FileNotFoundError):
        pass
    found = shutil.which("uv")
    if found is None:
        raise Unavailable(f"uv not found ({UV_ENV} unset, no uv package in {sys.executable}, no uv "
                          f"on PATH); {INSTALL}")
    return Path(found)


def uv_version(uv: Path) -> str:
    """The header's ``resolver`` value: ``uv 0.13.9`` from ``uv --version``."""
    done = proc.run([str(uv), "--version"], timeout=60)
    words = done.stdout.split()
    if not done.ok or len(words) < 2 or words[0] != "uv":
        raise Unavailable(f"{uv} --version: "
                          f"{done.first_error_line() if not done.ok else done.stdout.strip()!r}, "
                          f"not uv's answer; {INSTALL}")
    return f"uv {words[1]}"


def _unique(values: Sequence[str]) -> list[str]:
    seen: list[str] = []
    for value in values:
        if value and value.rstrip("/") not in {v.rstrip("/") for v in seen}:
            seen.append(value)
    return seen


def _pip_flag(pip_config: dict[str, str], key: str) -> bool:
    """A boolean of pip's configuration, as pip reads it (yes, true, on, 1)."""
    return pip_config.get(key, "").strip().lower() in ("1", "y", "yes", "t", "true", "on")


def uv_index_arguments(backend: Backend, pip_config: dict[str, str],
                       local_torch: Path | None) -> list[str]:
    """The indexes and find-links pip-compile uses, as uv options. pip has no order among indexes;
    uv's order decides whose files of a version it hashes (the first index serving it), so the torch
    index comes first, then the http(s) indexes, whose pages list every file of a version as
    pip-compile's hashes do, and a local mirror's ``file://`` pages last. The last index is uv's
    ``--default-index`` (no PyPI added)."""
    given = index_arguments(backend, pip_config, local_torch)
    pairs = list(zip(given[::2], given[1::2], strict=True))
    links = _unique([url for option, url in pairs if option == "--find-links"]
                    + pip_config.get("find-links", "").split())
    args = [word for link in links for word in ("--find-links", link)]
    if _pip_flag(pip_config, "no-index"):
        return ["--no-index", *args]
    primary = [url for option,
               url in pairs if option == "--index-url"] or [pip_config.get("index-url", "")]
    extras = [url for option, url in pairs if option == "--extra-index-url"]
    indexes = _unique([*primary, *extras, *pip_config.get("extra-index-url", "").split()])
    torch = backend.torch_index if local_torch is None else None
    indexes.sort(key=lambda url: (url != torch, not is_remote(url)))
    for number, url in enumerate(indexes, start=1):
        args += ["--default-index" if number == len(indexes) else "--index", url]
    return args


def uv_arguments(backend: Backend, pip_config: dict[str, str], local_torch: Path | None,
                 upgrade: bool,
                 upgrade_packages: Sequence[str], cert: str | None) -> list[str]:
    """``uv pip compile``'s options for one backend, without the interpreter, input and output
    files."""
    args = [*UV_FLAGS, *uv_index_arguments(backend, pip_config, local_torch)]
    args += ["--cert", cert] if cert else ["--system-certs"]
    for host in pip_config.get("trusted-host", "").split():
        args += ["--allow-insecure-host", host]
    if upgrade:
        args.append("--upgrade")
    for name in upgrade_packages:
        args += ["--upgrade-package", name]
    return args


def uv_environment(pip_config: dict[str, str], base: Mapping[str, str]) -> dict[str, str]:
    """uv's environment: ``base`` without uv's own variables, plus the network part of pip's
    configuration."""
    env = {name: value for name,
           value in base.items() if not name.startswith("UV_") or name in _KEPT}
    network = Network.from_pip(pip_config)
    env.update(UV_HTTP_TIMEOUT=str(max(1, math.ceil(network.timeout))),
               UV_HTTP_RETRIES=str(RETRIES))
    if network.proxy:  # pip's proxy holds for every host, NO_PROXY aside (kdkit.lock.fetch.Network)
        proxy = network.proxy if "://" in network.proxy else f"http://{network.proxy}"
        env.update(dict.fromkeys(_PROXIES, proxy))
        for name in ("NO_PROXY", "no_proxy"):
            env.pop(name, None)
    if pip_config.get("client-cert"):
        env["SSL_CLIENT_CERT"] = pip_config["client-cert"]
    return env


def _failure(done: proc.Completed) -> str:
    """uv's error and its causes on one line (uv prints ``error: ...``, then its causes on lines
    of their own, each indented and starting with ``cause:``)."""
    parts = [line.strip().split(":", 1)[1].strip() for line in done.stderr.splitlines()
             if line.strip().startswith(("error:", "cause:"))]
    return ": ".join(parts) if parts else done.first_error_line()


def compile_on_host(uv: Path, version: str, project: Project, args: list[str], output: Path,
                    pip_config: dict[str, str]) -> Resolution:
    """``uv pip compile`` for this host's interpreter (the one pip-compile would run in)."""
    rel_in = relative(project.root, project.requirements)
    argv = [str(uv), "pip", "compile", *args, "--python", sys.executable, "--output-file",
            str(output), rel_in]
    done = proc.run(argv, cwd=project.root,
                    env=uv_environment(pip_config, os.environ), timeout=1800)
    if not done.ok:
        raise KdkitError(f"{TOOL} failed for {rel_in}: {_failure(done)}")
    python, plat = host_facts()
    return Resolution(output.read_text(encoding="utf-8"), python, plat, version, "host")


def _uv_wheel(dest: Path, version: str, machine: str) -> None:
    """Download the host's uv version for the container (a Linux wheel of the binary), via the
    host's pip."""
    done = proc.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--dest",
                     str(dest),
                     "--only-binary=:all:", "--platform", _WHEEL_PLATFORM.format(machine=machine),
                     f"uv=={version}"], timeout=600)
    if not done.ok:
        raise KdkitError(
            f"cannot download uv {version} for the container: {done.first_error_line()}")


def compile_in_container(version: str, project: Project, backend: Backend, args: list[str],
                         workdir: Path,
                         output: Path, pip_config: dict[str, str], ca_bundle: Path | None,
                         local_torch: Path | None, machine: str) -> Resolution:
    """``uv pip compile`` in the backend's base image, for its Python, with the host's uv
    ``version``."""
    _uv_wheel(workdir / "wheels", version.split()[1], machine)
    proxies = {name: os.environ[name] for name in proc.PROXY_VARIABLES if os.environ.get(name)}
    run = ContainerRun(TOOL, "uv", '/tmp/kdkit-resolver/bin/uv pip compile --python "$PY"', args,
                       uv_environment(pip_config, proxies))
    return run_in_container(project, backend, run, workdir, output,
                            pip_config, ca_bundle, local_torch)


def uv_cert(pip_config: dict[str, str], ca_bundle: Path | None,
            *, in_container: bool) -> str | None:
    """uv's --cert: --ca-bundle (in the container, where it is mounted), else pip's cert (mounted at
    its own path), else None (the system's store, as pip)."""
    if ca_bundle is not None:
        return CONTAINER_CA if in_container else str(ca_bundle)
    return pip_config.get("cert") or None
