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

Before pip-compile runs, :func:`kdkit.lock.preflight.preflight` asks the torch index
itself, with a timeout of seconds: an index that does not answer is exit 3 naming
the URL and the reason, one without a torch build for the requirement, the
project's Python and the image's platform is exit 2 naming the builds the index
family offers. pip itself is bounded too (``--pip-args "--timeout N --retries 1"``).

Where the files came from (:mod:`kdkit.lock.provenance`). After pip-compile, the lock's hashes are compared
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

pip-compile runs as a subprocess (:mod:`kdkit.lock.pipcompile`, on this host or
in the backend's base image); kdkit writes its own ``# kdkit: key = value``
header (see :mod:`kdkit.core.lockfile`). The previous lock is handed to
pip-compile so unchanged pins stay put unless ``--upgrade`` /
``--upgrade-package`` says otherwise, and the new lock replaces the old one
atomically only when everything succeeded. Stale locks: :mod:`kdkit.lock.staleness`.
"""

from __future__ import annotations

import os
import platform
import re
import shlex
import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from kdkit import __version__
from kdkit.config.project import Backend, Project, load_project
from kdkit.config.schemas import secret_problems
from kdkit.core import proc
from kdkit.core.builds import BACKENDS, index_label
from kdkit.core.credentials import CREDENTIAL_FIX, find, refuse_credentials_in
from kdkit.core.errors import BadInput, KdkitError
from kdkit.core.jsonio import atomic_write_text, sha256_file
from kdkit.core.lockfile import HEADER_PREFIX, Lock, parse_lock_text
from kdkit.core.report import Progress
from kdkit.facts.platforms import cpu_mismatch
from kdkit.lock.fetch import Network
from kdkit.lock.inputs import input_files, relative
from kdkit.lock.pages import and_list, torch_requirement
from kdkit.lock.pipcompile import Resolution, compile_arguments, compile_in_container, compile_on_host
from kdkit.lock.preflight import TorchPage, check_answers, check_find_links, refuse_foreign_index
from kdkit.lock.preflight import preflight as index_preflight
from kdkit.lock.provenance import Provenance, emitted_indexes, local_sources, option_lines, provenance

TORCH_FIND_LINKS_ENV = "KDKIT_TORCH_FIND_LINKS"
TARGET_PLATFORM = ("linux", "x86_64")  # every kdkit image is a Linux x86_64 container



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


def backend_label(backend: Backend) -> str | None:
    """The torch local label a backend's index serves: the index URL's last segment (cu128, rocm6.4, cpu)."""
    return index_label(backend.torch_index)


# ---------------------------------------------------------------- inputs and the header

def build_header(project: Project, backend: Backend, resolution: Resolution, indexes: Sequence[tuple[str, str]],
                 origin: Provenance) -> str:
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
    fields += [(f"input:{relative(project.root, p)}", sha256_file(p)) for p in input_files(project.requirements)]
    lines = [
        "# Hashed lock written by `kdkit lock`; do not edit. Change the .in file(s) and run",
        f"#   kdkit lock --backend {backend.name}",
        "# Install with: pip install --require-hashes -r " + relative(project.root, backend.lock),
        *(f"{HEADER_PREFIX} {key} = {value}" for key, value in fields),
        "",
    ]
    return "\n".join(lines) + "\n"


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


def check_torch_label(lock: Lock, backend: Backend, config_file: Path, page: TorchPage | None = None,
                      inputs: Sequence[Path] = (), python: str = "") -> None:
    """torch must carry the label of the backend's index; a bare version would accept any build. An index
    of another family, or one whose label kdkit cannot read, is BadInput (a torch it locks is no build of
    the backend's). The fix names the input file that requires torch and, from the preflight's ``page``,
    the newest build of the index that fits."""
    pin = lock.pins.get("torch")
    if pin is None:
        return
    refuse_foreign_index(backend.torch_index, backend.name, config_file)
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
            return relative(root, path)
    return relative(root, inputs[0])


# ---------------------------------------------------------------- the command


def chosen_backends(project: Project, backend: str | None) -> list[Backend]:
    """``all`` means every backend kdkit.json declares; none means default_backend."""
    if backend == "all":
        return [project.backend(name) for name in BACKENDS if name in project.config["backends"]]
    return [project.backend(backend)]


def preflight(project: Project, backend: Backend, pip_config: dict[str, str],
              network: Network) -> TorchPage:
    """Before pip-compile: the torch index answers and serves a build the project can install, and every
    other http(s) index kdkit hands to pip answers (pip would wait minutes on one that does not)."""
    inputs = input_files(project.requirements)
    requirement = torch_requirement(inputs, project.python, TARGET_PLATFORM)
    page = index_preflight(backend.torch_index, backend.name, requirement, project.python, TARGET_PLATFORM,
                           network, project.root / "kdkit.json")
    for _option, url in emitted_indexes(backend.torch_index, pip_config, pip_default_index())[1:]:
        key = "index-url" if url == pip_config.get("index-url") else "extra-index-url"
        check_answers(url, f"{key} of pip's configuration, `pip config list`", network)
    return page


def lock_backend(project: Project, backend: Backend, *, upgrade: bool = False,
                 upgrade_packages: Sequence[str] = (), in_container: bool = False,
                 ca_bundle: Path | None = None, local_torch: Path | None = None) -> LockResult:
    """Resolve, check and write ``backend.lock``; nothing is written unless every step succeeded."""
    inputs = input_files(project.requirements)  # a missing .in is bad input before anything runs
    for path in inputs:
        refuse_credentials_in(path, relative(project.root, path))
    config_file = project.root / "kdkit.json"
    requirement = torch_requirement(inputs, project.python, TARGET_PLATFORM)
    refuse_foreign_index(backend.torch_index, backend.name, config_file, torch_needed=requirement is not None)
    if local_torch is not None:
        check_find_links(local_torch, backend_label(backend), requirement, project.python, TARGET_PLATFORM)
    pip_config = pip_configuration()
    network = Network.from_pip(pip_config, ca_bundle)
    page = None if local_torch else preflight(project, backend, pip_config, network)
    args = compile_arguments(backend, pip_config, local_torch, upgrade, upgrade_packages)
    resolution, warnings = _resolve(project, backend, args, pip_config, ca_bundle, local_torch, in_container)
    lock = parse_lock_text(resolution.text, backend.lock)
    check_torch_label(lock, backend, config_file, page, input_files(project.requirements), project.python)
    indexes = emitted_indexes(backend.torch_index, pip_config, pip_default_index(),
                              torch_from_index=local_torch is None)
    # the indexes a machine installing the lock asks: those it names, and its own (pip's default here)
    asked = [url for _option, url in indexes]
    asked += [pip_config["index-url"]] if pip_config.get("index-url") and pip_config["index-url"] not in asked else []
    origin = provenance(lock, page, asked, local_sources(pip_config, local_torch), local_torch, network,
                        project.python, TARGET_PLATFORM)
    _write_lock(backend.lock, build_header(project, backend, resolution, indexes, origin) + option_lines(indexes)
                + resolution.text.lstrip("\n"))
    torch = lock.pins["torch"].version if "torch" in lock.pins else None
    elsewhere = cpu_mismatch(project, resolution.platform, relative(project.root, backend.lock))
    return LockResult(backend.name, backend.lock, len(lock.pins), torch, resolution.resolved_in,
                      resolution.python, resolution.platform,
                      [*warnings, *origin.warnings, *([elsewhere] if elsewhere else [])])


def _resolve(project: Project, backend: Backend, args: list[str], pip_config: dict[str, str],
             ca_bundle: Path | None, local_torch: Path | None, in_container: bool) -> tuple[Resolution, list[str]]:
    """pip-compile's resolution, in a scratch folder seeded with the previous lock, and the warnings of
    where it ran (a host that is not the image)."""
    with tempfile.TemporaryDirectory(prefix="kdkit-lock-") as tmp:
        workdir = Path(tmp)
        output = workdir / backend.lock.name
        if backend.lock.is_file():
            shutil.copyfile(backend.lock, output)  # pip-compile keeps existing pins unless upgrading
        if in_container:
            return compile_in_container(project, backend, args, workdir, output, pip_config, ca_bundle,
                                        local_torch), []
        return compile_on_host(project, args, workdir, output, ca_bundle), platform_warnings(project, backend)


def _write_lock(path: Path, text: str) -> None:
    """Write the lock atomically; BadInput, and nothing written, when a line would carry a credential."""
    for number, line in enumerate(text.splitlines(), start=1):
        if found := find(line):  # e.g. an index URL with a password taken from pip's configuration
            raise BadInput(f"{path}:{number}: the lock would carry {found[0].what} ({found[0].redacted}); "
                           f"nothing was written: {CREDENTIAL_FIX}")
    atomic_write_text(path, text)


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
            written = and_list([f"{r.backend} ({relative(project.root, r.path)})" for r in results])
            exc.args = (f"{exc} [backend {chosen.name}; before it, kdkit lock wrote {written}, which stay"
                        f"{'s' if len(results) == 1 else ''}]", *exc.args[1:])
            raise
    return results
