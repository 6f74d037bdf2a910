"""`kdkit lock`: one hashed pip-tools lock per backend, with its provenance, and stale-lock detection.

How the torch index is used. pip has no per-package index, so kdkit makes the
backend's PyTorch wheel index (``backends.<name>.torch_index`` in kdkit.json)
pip-compile's primary ``--index-url`` and re-adds the index the user's pip
configuration names (default PyPI) as ``--extra-index-url``; the rest of that
configuration (extra indexes, find-links, certificate, constraints, proxy
variables) is honoured as pip reads it. Because pip still merges candidates
from every index, kdkit then checks the result: torch must be pinned with the
backend's local label (``torch==2.8.0+cu128``), since a plain ``==2.8.0`` would
also accept a +cpu or +rocm build at install time.

Before pip-compile runs, :func:`kdkit.torchindex.preflight` asks the torch index
itself, with a timeout of seconds: an index that does not answer is exit 3 naming
the URL and the reason, one without a torch build for the requirement, the
project's Python and the image's platform is exit 2 naming the builds the index
family offers. pip itself is bounded too (``--pip-args "--timeout N --retries 1"``).

Where the files came from. After pip-compile, the lock's hashes are compared
with the torch index's sha256 fragments and with the machine-local sources of
pip's configuration (find-links folders, file:// indexes): the header's
``torch-source`` names the index and the wheel, torch taken only from a local
source the user did not name is refused, and pins whose every file is on this
machine only are listed in ``machine-local`` (and warned about).

Locks travel. A lock carries only what another machine can use: pip-compile
emits no index or find-links lines (``--no-emit-index-url --no-emit-find-links``);
kdkit writes the torch index and the http(s) indexes of pip's configuration
itself, never a file:// index or a folder.

Air-gapped machines (and some tests): ``--torch-find-links DIR`` or the
environment variable ``KDKIT_TORCH_FIND_LINKS`` replaces the torch index with a
local folder of wheels; the label check still holds, against the label that
kdkit.json's index promises, and the header records the replacement.

pip-compile runs as a subprocess (``python -m piptools compile``; its Python
API is internal) with ``--generate-hashes --allow-unsafe --strip-extras
--no-header --no-config``; kdkit writes its own ``# kdkit: key = value``
header (see :mod:`kdkit.core.lockfile`). The previous lock is handed to
pip-compile so unchanged pins stay put unless ``--upgrade`` /
``--upgrade-package`` says otherwise, and the new lock replaces the old one
atomically only when everything succeeded.
"""

from __future__ import annotations

import os
import platform
import re
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from kdkit import __version__, torchindex
from kdkit.core import proc
from kdkit.core.builds import BACKENDS, index_label
from kdkit.core.credentials import CREDENTIAL_FIX, find, refuse_credentials_in
from kdkit.core.errors import BadInput, KdkitError
from kdkit.core.jsonio import atomic_write_text, load_json, sha256_file
from kdkit.core.lockfile import HEADER_PREFIX, Lock, parse_lock, parse_lock_text
from kdkit.platforms import cpu_mismatch
from kdkit.project import Backend, Project, load_project
from kdkit.schemacheck import Problem, secret_problems

TORCH_FIND_LINKS_ENV = "KDKIT_TORCH_FIND_LINKS"
TARGET_PLATFORM = ("linux", "x86_64")  # every kdkit image is a Linux x86_64 container
# --no-emit-*: a find-links folder or a file:// index is a path on one machine, and the lock travels;
# kdkit writes the index lines itself (torchindex.option_lines).
COMPILE_FLAGS = ("--generate-hashes", "--allow-unsafe", "--strip-extras", "--no-header", "--no-config",
                 "--no-emit-find-links", "--no-emit-index-url")
# pip options whose values may be local paths the container must see (mounted read-only).
_PATH_OPTIONS = ("index-url", "extra-index-url", "find-links", "cert", "client-cert", "constraint")
_INCLUDE = re.compile(r"^\s*(-r|--requirement|-c|--constraint)(?:\s+|=)(\S+)")

Progress = Callable[[str], None]


@dataclass(frozen=True)
class LockResult:
    """What one backend's lock run produced (the command prints it)."""

    backend: str
    path: Path
    pins: int
    torch: str | None
    resolved_in: str
    python: str
    platform: str
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "lock": str(self.path), "pins": self.pins, "torch": self.torch,
                "resolved_in": self.resolved_in, "python": self.python, "platform": self.platform,
                "warnings": self.warnings}


@dataclass(frozen=True)
class Resolution:
    """pip-compile's output and the facts of the interpreter that produced it."""

    text: str
    python: str
    platform: str
    pip_tools: str
    resolved_in: str


# ---------------------------------------------------------------- pip configuration and indexes


def pip_configuration(python: str = sys.executable) -> dict[str, str]:
    """The user's effective pip options (``pip config list``): environment over install over global."""
    done = proc.run([python, "-m", "pip", "config", "list"], timeout=60)
    ranks = {":env:": 3, "install": 2, "global": 1}
    best: dict[str, tuple[int, str]] = {}
    for line in done.stdout.splitlines():
        match = re.match(r"^(?P<scope>[^.]+)\.(?P<key>[\w-]+)=(?P<value>.*)$", line.strip())
        if match is None or match.group("scope") not in ranks:
            continue
        rank, value = ranks[match.group("scope")], match.group("value").strip("'\"")
        if rank >= best.get(match.group("key"), (0, ""))[0]:
            best[match.group("key")] = (rank, value)
    config = {key: value for key, (_rank, value) in best.items()}
    if "index-url" not in config:
        config["index-url"] = pip_default_index(python)
    return config


@lru_cache(maxsize=4)
def pip_default_index(python: str = sys.executable) -> str:
    """The index pip uses when nothing is configured, asked of pip itself (kdkit names no host)."""
    done = proc.run([python, "-c", "from pip._internal.models.index import PyPI; print(PyPI.simple_url)"],
                    timeout=60)
    return done.stdout.strip() if done.ok else ""


def torch_find_links(option: Path | None) -> Path | None:
    """The local folder replacing the torch index, from the option or KDKIT_TORCH_FIND_LINKS."""
    chosen = option or (Path(os.environ[TORCH_FIND_LINKS_ENV]) if os.environ.get(TORCH_FIND_LINKS_ENV) else None)
    if chosen is not None and not chosen.is_dir():
        raise BadInput(f"--torch-find-links {chosen}: not a folder; give the folder holding the torch wheels")
    return chosen.resolve() if chosen else None


def index_arguments(backend: Backend, pip_config: dict[str, str], local_torch: Path | None) -> list[str]:
    """The index options kdkit adds for ``backend``; the rest of pip's configuration still applies."""
    if local_torch is not None:
        return ["--find-links", str(local_torch)]
    user_index = pip_config.get("index-url", "")
    args = ["--index-url", backend.torch_index]
    if user_index and user_index.rstrip("/") != backend.torch_index.rstrip("/"):
        args += ["--extra-index-url", user_index]
    return args


def backend_label(backend: Backend) -> str | None:
    """The torch local label a backend's index serves: the index URL's last segment (cu128, rocm6.4, cpu)."""
    return index_label(backend.torch_index)


# ---------------------------------------------------------------- inputs and the header


def input_files(requirements: Path) -> list[Path]:
    """The .in file and every file it includes with -r / -c, recursively, in order."""
    if not requirements.is_file():
        raise BadInput(f"{requirements}: requirements input not found; create it (one requirement a line, "
                       "e.g. torch==2.13.0) or fix $.requirements in kdkit.json")
    seen: list[Path] = []
    pending = [requirements.resolve()]
    while pending:
        path = pending.pop(0)
        if path in seen:
            continue
        seen.append(path)
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            match = _INCLUDE.match(line)
            if match:
                included = (path.parent / match.group(2)).resolve()
                if not included.is_file():
                    raise BadInput(f"{path}:{number}: includes {match.group(2)}, which does not exist")
                pending.append(included)
    return seen


def _relative(root: Path, path: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)


def build_header(project: Project, backend: Backend, resolution: Resolution, indexes: Sequence[tuple[str, str]],
                 origin: torchindex.Provenance) -> str:
    """The provenance block written above the lock's index lines and pip-compile's output."""
    fields: list[tuple[str, str]] = [
        ("kdkit-version", __version__),
        ("backend", backend.name),
        ("resolved-in", resolution.resolved_in),
        ("python", resolution.python),
        ("platform", resolution.platform),
        ("pip-tools", resolution.pip_tools),
        ("torch-index", backend.torch_index),
        ("torch-source", origin.torch_source or "(no torch in the lock)"),
        ("indexes", "; ".join(f"{opt} {value}" for opt, value in indexes) or "(pip defaults)"),
        ("machine-local", ", ".join(origin.machine_local) or "none"),
    ]
    fields += [(f"input:{_relative(project.root, p)}", sha256_file(p)) for p in input_files(project.requirements)]
    lines = [
        "# Hashed lock written by `kdkit lock`; do not edit. Change the .in file(s) and run",
        f"#   kdkit lock --backend {backend.name}",
        "# Install with: pip install --require-hashes -r " + _relative(project.root, backend.lock),
        *(f"{HEADER_PREFIX} {key} = {value}" for key, value in fields),
        "",
    ]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- running pip-compile


def compile_arguments(backend: Backend, pip_config: dict[str, str], local_torch: Path | None,
                      upgrade: bool, upgrade_packages: Sequence[str]) -> list[str]:
    """pip-compile's options for one backend, without the input and output files."""
    args = [*COMPILE_FLAGS, *index_arguments(backend, pip_config, local_torch),
            "--pip-args", torchindex.Network.from_pip(pip_config).pip_args()]
    if upgrade:
        args.append("--upgrade")
    for name in upgrade_packages:
        args += ["--upgrade-package", name]
    return args


def _host_facts() -> tuple[str, str, str]:
    from importlib.metadata import version

    return platform.python_version(), f"{sys.platform}-{platform.machine()}", version("pip-tools")


def _compile_on_host(project: Project, args: list[str], workdir: Path, output: Path,
                     ca_bundle: Path | None) -> Resolution:
    env = {"PIP_CERT": str(ca_bundle)} if ca_bundle else None
    rel_in = _relative(project.root, project.requirements)
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
            path = Path(urlparse(token).path) if token.startswith("file:") else Path(token)
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
    from importlib.metadata import version

    done = proc.run([sys.executable, "-m", "pip", "download", "-q", "--dest", str(dest), "--only-binary=:all:",
                     "--python-version", python_version, f"pip-tools=={version('pip-tools')}"], timeout=600)
    if not done.ok:
        raise KdkitError(f"cannot download pip-tools for the container: {done.first_error_line()}")


def _container_environment(pip_config: dict[str, str], ca_bundle: Path | None) -> dict[str, str]:
    env = {f"PIP_{key.upper().replace('-', '_')}": value for key, value in pip_config.items()}
    env.update({name: os.environ[name] for name in proc.PROXY_VARIABLES if os.environ.get(name)})
    if ca_bundle is not None:
        env["PIP_CERT"] = "/kdkit/ca.pem"
    return env


def _compile_in_container(project: Project, backend: Backend, args: list[str], workdir: Path, output: Path,
                          pip_config: dict[str, str], ca_bundle: Path | None,
                          local_torch: Path | None) -> Resolution:
    from kdkit import docker_adapter

    wheels = workdir / "wheels"
    _pip_tools_wheels(wheels, project.python)
    mounts: list[tuple[Path, str, str]] = [(project.root, "/kdkit/project", "ro"), (workdir, "/kdkit/out", "rw"),
                                           (wheels, "/kdkit/wheels", "ro")]
    shared = {p.resolve() for p in _local_paths([pip_config.get(k, "") for k in _PATH_OPTIONS])}
    shared |= {local_torch} if local_torch else set()
    mounts += [(p, str(p), "ro") for p in sorted(shared)]
    if ca_bundle is not None:
        mounts.append((ca_bundle.resolve(), "/kdkit/ca.pem", "ro"))
    rel_in = _relative(project.root, project.requirements)
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


# ---------------------------------------------------------------- checks on the result


def platform_warnings(project: Project, backend: Backend) -> list[str]:
    """Why a lock made on this host may not fit the image (the command prints these)."""
    host_python = ".".join(platform.python_version_tuple()[:2])
    warnings = []
    if host_python != project.python:
        warnings.append(f"resolving with Python {host_python} but kdkit.json targets Python {project.python}; "
                        "markers and wheels may differ in the image (use --in-container)")
    here = (sys.platform, platform.machine())
    if here != TARGET_PLATFORM:
        warnings.append(f"resolving on {here[0]}-{here[1]} for a {'-'.join(TARGET_PLATFORM)} image: Linux-only "
                        f"dependencies (nvidia-*) may be missing from the {backend.name} lock (use --in-container)")
    return warnings


def check_torch_label(lock: Lock, backend: Backend, config_file: Path, page: torchindex.TorchPage | None = None,
                      inputs: Sequence[Path] = (), python: str = "") -> None:
    """torch must carry the label of the backend's index; a bare version would accept any build. An index
    of another family, or one whose label kdkit cannot read, is BadInput (a torch it locks is no build of
    the backend's). The fix names the input file that requires torch and, from the preflight's ``page``,
    the newest build of the index that fits."""
    pin = lock.pins.get("torch")
    if pin is None:
        return
    torchindex.refuse_foreign_index(backend.torch_index, backend.name, config_file)
    label = backend_label(backend)
    if label is None or pin.local == label:
        return
    got = f"+{pin.local}" if pin.local else "no local label"
    newest = page.newest() if page is not None else None
    build = newest or f"{pin.public_version}+{label}"
    why = f" (the newest build {backend.torch_index} serves for Python {python})" if newest else ""
    where = _naming_torch(inputs, config_file.parent) if inputs else Path(lock.path).name
    raise KdkitError(f"pip-compile resolved torch=={pin.version} ({got}) for backend {backend.name}, whose index "
                     f"{backend.torch_index} serves +{label} builds; pin torch=={build} in {where}{why} "
                     "or check the indexes in your pip configuration")


def _naming_torch(inputs: Sequence[Path], root: Path) -> str:
    """The input file (relative to the project) whose requirement lines name torch; the first otherwise."""
    for path in inputs:
        if re.search(r"^\s*torch\s*(?:[\[=<>!~;@]|$)", path.read_text(encoding="utf-8"), re.MULTILINE | re.IGNORECASE):
            return _relative(root, path)
    return _relative(root, inputs[0])


# ---------------------------------------------------------------- the command


def chosen_backends(project: Project, backend: str | None) -> list[Backend]:
    """``all`` means every backend kdkit.json declares; none means default_backend."""
    if backend == "all":
        return [project.backend(name) for name in BACKENDS if name in project.config["backends"]]
    return [project.backend(backend)]


def preflight(project: Project, backend: Backend, pip_config: dict[str, str],
              network: torchindex.Network) -> torchindex.TorchPage:
    """Before pip-compile: the torch index answers and serves a build the project can install, and every
    other http(s) index kdkit hands to pip answers (pip would wait minutes on one that does not)."""
    inputs = input_files(project.requirements)
    requirement = torchindex.torch_requirement(inputs, project.python, TARGET_PLATFORM)
    page = torchindex.preflight(backend.torch_index, backend.name, requirement, project.python, TARGET_PLATFORM,
                                network, project.root / "kdkit.json")
    for _option, url in torchindex.emitted_indexes(backend.torch_index, pip_config, pip_default_index())[1:]:
        key = "index-url" if url == pip_config.get("index-url") else "extra-index-url"
        torchindex.check_answers(url, f"{key} of pip's configuration, `pip config list`", network)
    return page


def lock_backend(project: Project, backend: Backend, *, upgrade: bool = False,
                 upgrade_packages: Sequence[str] = (), in_container: bool = False,
                 ca_bundle: Path | None = None, local_torch: Path | None = None) -> LockResult:
    """Resolve, check and write ``backend.lock``; nothing is written unless every step succeeded."""
    for path in input_files(project.requirements):  # a missing .in is bad input before anything runs
        refuse_credentials_in(path, _relative(project.root, path))
    config_file = project.root / "kdkit.json"
    requirement = torchindex.torch_requirement(input_files(project.requirements), project.python, TARGET_PLATFORM)
    torchindex.refuse_foreign_index(backend.torch_index, backend.name, config_file,
                                    torch_needed=requirement is not None)
    if local_torch is not None:
        torchindex.check_find_links(local_torch, backend_label(backend), requirement, project.python, TARGET_PLATFORM)
    pip_config = pip_configuration()
    network = torchindex.Network.from_pip(pip_config, ca_bundle)
    page = None if local_torch else preflight(project, backend, pip_config, network)
    args = compile_arguments(backend, pip_config, local_torch, upgrade, upgrade_packages)
    with tempfile.TemporaryDirectory(prefix="kdkit-lock-") as tmp:
        workdir = Path(tmp)
        output = workdir / backend.lock.name
        if backend.lock.is_file():
            shutil.copyfile(backend.lock, output)  # pip-compile keeps existing pins unless upgrading
        if in_container:
            resolution = _compile_in_container(project, backend, args, workdir, output, pip_config, ca_bundle,
                                               local_torch)
            warnings: list[str] = []
        else:
            resolution = _compile_on_host(project, args, workdir, output, ca_bundle)
            warnings = platform_warnings(project, backend)
    lock = parse_lock_text(resolution.text, backend.lock)
    check_torch_label(lock, backend, config_file, page, input_files(project.requirements), project.python)
    indexes = torchindex.emitted_indexes(backend.torch_index, pip_config, pip_default_index(),
                                         torch_from_index=local_torch is None)
    # the indexes a machine installing the lock asks: those it names, and its own (pip's default here)
    asked = [url for _option, url in indexes]
    asked += [pip_config["index-url"]] if pip_config.get("index-url") and pip_config["index-url"] not in asked else []
    origin = torchindex.provenance(lock, page, asked, torchindex.local_sources(pip_config, local_torch),
                                   local_torch, network, project.python, TARGET_PLATFORM)
    text = build_header(project, backend, resolution, indexes, origin) + torchindex.option_lines(indexes) \
        + resolution.text.lstrip("\n")
    for number, line in enumerate(text.splitlines(), start=1):
        if found := find(line):  # e.g. an index URL with a password taken from pip's configuration
            raise BadInput(f"{backend.lock}:{number}: the lock would carry {found[0].what} ({found[0].redacted}); "
                           f"nothing was written: {CREDENTIAL_FIX}")
    atomic_write_text(backend.lock, text)
    torch = lock.pins["torch"].version if "torch" in lock.pins else None
    elsewhere = cpu_mismatch(project, resolution.platform, _relative(project.root, backend.lock))
    return LockResult(backend.name, backend.lock, len(lock.pins), torch, resolution.resolved_in,
                      resolution.python, resolution.platform,
                      [*warnings, *origin.warnings, *([elsewhere] if elsewhere else [])])


def lock_project(project_dir: Path | None, backend: str | None = None, *, upgrade: bool = False,
                 upgrade_packages: Sequence[str] = (), in_container: bool = False,
                 ca_bundle: Path | None = None, torch_links: Path | None = None,
                 progress: Progress | None = None) -> list[LockResult]:
    """Lock each chosen backend of the project at ``project_dir``. The library entry point of `kdkit lock`."""
    project = load_project(project_dir)
    for problem in secret_problems(project.config, project.root / "kdkit.json"):  # as `kdkit validate` refuses
        raise BadInput(f"{problem}; nothing was locked")
    if ca_bundle is not None and not ca_bundle.is_file():
        raise BadInput(f"--ca-bundle {ca_bundle}: not a file; give a PEM file of CA certificates")
    local_torch = torch_find_links(torch_links)
    results = []
    for chosen in chosen_backends(project, backend):
        if progress:
            where = f"in {chosen.base_image}" if in_container else "on this host"
            progress(f"Locking {chosen.name}: pip-compile {shlex.quote(str(project.requirements.name))} {where}")
        try:
            results.append(lock_backend(project, chosen, upgrade=upgrade, upgrade_packages=upgrade_packages,
                                        in_container=in_container, ca_bundle=ca_bundle, local_torch=local_torch))
        except KdkitError as exc:
            if not results:
                raise
            written = _and_text([f"{r.backend} ({_relative(project.root, r.path)})" for r in results])
            exc.args = (f"{exc} [backend {chosen.name}; before it, kdkit lock wrote {written}, which stay"
                        f"{'s' if len(results) == 1 else ''}]", *exc.args[1:])
            raise
    return results


def _and_text(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


# ---------------------------------------------------------------- stale locks


def staleness(root: Path, requirements: str, backend: str, torch_index: str, lock_path: Path) -> str | None:
    """Why the lock at ``lock_path`` no longer matches its inputs, or None when it is fresh."""
    fix = f"run `kdkit lock --backend {backend}`"
    try:
        lock = parse_lock(lock_path)
    except BadInput as exc:
        return f"unreadable lock ({exc}); {fix}"
    if "kdkit-version" not in lock.header:
        return f"no kdkit provenance header (not written by `kdkit lock`); {fix}"
    if lock.header.get("torch-index") != torch_index:
        return (f"locked against torch index {lock.header.get('torch-index')}, kdkit.json now names "
                f"{torch_index}; {fix}")
    recorded = lock.inputs()
    if requirements not in recorded:
        return f"made from {', '.join(recorded) or 'unknown inputs'}, kdkit.json now names {requirements}; {fix}"
    for rel, digest in recorded.items():
        path = root / rel
        if not path.is_file():
            return f"input {rel} no longer exists; {fix}"
        if sha256_file(path) != digest:
            return f"stale: {rel} changed since this lock was written; {fix}"
    return None


def _requirements_rel(root: Path, config: dict[str, Any]) -> str:
    return _relative(root, root / str(config["requirements"]))


def stale_lock_problems(root: Path, config: dict[str, Any]) -> list[Problem]:
    """The `kdkit validate` check: every existing lock whose inputs changed. A missing lock is not a problem
    here (a fresh project has none); `kdkit build` requires one through :func:`require_fresh_lock`."""
    problems = []
    for name, spec in config.get("backends", {}).items():
        lock_path = root / spec["lock"]
        if not lock_path.is_file():
            continue
        reason = staleness(root, _requirements_rel(root, config), name, spec["torch_index"], lock_path)
        if reason:
            problems.append(Problem(Path(spec["lock"]), "header", reason))
    return problems


def require_fresh_lock(project: Project, backend: str) -> Path:
    """The lock of ``backend`` when it exists and is fresh; BadInput otherwise (used by `kdkit build`)."""
    chosen = project.backend(backend)
    if not chosen.lock.is_file():
        raise BadInput(f"{chosen.lock}: no lock for backend {chosen.name}; run `kdkit lock --backend {chosen.name}`")
    reason = staleness(project.root, _requirements_rel(project.root, project.config), chosen.name,
                       chosen.torch_index, chosen.lock)
    if reason:
        raise BadInput(f"{chosen.lock}: {reason}")
    return chosen.lock
