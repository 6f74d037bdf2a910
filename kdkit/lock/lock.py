"""`kdkit lock`: one hashed lock per backend (pip-tools or uv), with its provenance, and stale-lock
detection.

How the torch index is used. pip has no per-package index, so kdkit makes the
backend's PyTorch wheel index (``backends.<name>.torch_index`` in kdkit.json)
pip-compile's primary ``--index-url`` and re-adds the index the user's pip
configuration names (default PyPI) as ``--extra-index-url``; the rest of that
configuration (extra indexes, find-links, certificate, proxy variables) is
honoured as pip reads it (not its ``constraint`` option: pip-compile does not
apply it). Because pip still merges candidates from every index, kdkit then
checks the result: torch must be pinned with the backend's local label
(``torch==2.8.0+cu128``), since a plain ``==2.8.0`` would also accept a +cpu or
+rocm build at install time. PyPI's plain torch is the exception, its build
read from the facts and written in the header (:mod:`kdkit.lock.pypitorch`).

Before pip-compile runs, :func:`kdkit.lock.preflight.preflight` asks the torch index
itself, with a timeout of seconds: an index that does not answer is exit 3 naming
the URL and the reason, one without a torch build for the requirement, the
project's Python and the image's platform is exit 2 naming the builds the index
family offers. pip itself is bounded too (``--pip-args "--timeout N --retries 1"``).

Where the files came from (:mod:`kdkit.lock.provenance`). After pip-compile, the lock's hashes are
compared with the torch index's sha256 fragments and with the machine-local sources of pip's
configuration (find-links folders, file:// indexes): the header's ``torch-source`` names the index
and the wheel, torch taken only from a local source the user did not name is refused, and pins whose
every file is on this machine only are listed in ``machine-local`` (and warned about).

Locks travel. A lock carries only what another machine can use: pip-compile
emits no index or find-links lines (``--no-emit-index-url --no-emit-find-links``);
kdkit writes the torch index and the http(s) indexes of pip's configuration
itself, never a file:// index or a folder.

Air-gapped machines (and some tests): ``--torch-find-links DIR`` or the
environment variable ``KDKIT_TORCH_FIND_LINKS`` replaces the torch index with a
local folder of wheels; the label check still holds, against the label that
kdkit.json's index promises, and the header records the replacement. pip's configuration and that
folder are read by :mod:`kdkit.lock.pipconfig`.

The resolver is pip-tools' pip-compile (:mod:`kdkit.lock.pipcompile`) or, with ``--resolver uv``
or kdkit.json's ``"resolver": "uv"``, ``uv pip compile`` (:mod:`kdkit.lock.uvcompile`), given the
same indexes and the same part of pip's configuration; either runs as a subprocess, on this host or
in the backend's base image (:mod:`kdkit.lock.resolvers`). Everything above holds for both: the
preflight, the torch label, provenance, the index lines. kdkit writes its own ``# kdkit: key =
value`` header (see
:mod:`kdkit.core.lockfile`; ``resolver`` names the tool and its version). The previous lock is
handed to the resolver so unchanged pins stay put unless ``--upgrade`` / ``--upgrade-package`` says
otherwise, and the new lock replaces the old one atomically only when everything succeeded. Stale
locks: :mod:`kdkit.lock.staleness`.
"""

from __future__ import annotations

import platform
import re
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kdkit import __version__
from kdkit.config.project import Backend, Project, load_project
from kdkit.config.schemas import problem_line, secret_problems
from kdkit.core.builds import BACKENDS, BUILD_HEADER, index_label, is_pypi
from kdkit.core.credentials import CREDENTIAL_FIX, find, refuse_credentials_in
from kdkit.core.errors import BadInput, KdkitError
from kdkit.core.jsonio import atomic_write_text, sha256_file
from kdkit.core.lockfile import HEADER_PREFIX, Lock, parse_lock_text
from kdkit.core.stalestaging import clean_stale, describe_removed
from kdkit.facts.platforms import cpu_mismatch
from kdkit.lock import pypitorch
from kdkit.lock.fetch import Network
from kdkit.lock.inputs import input_files, relative
from kdkit.lock.pages import and_list, torch_requirement
from kdkit.lock.pipconfig import pip_configuration, pip_default_index, torch_find_links
from kdkit.lock.preflight import TorchPage, check_answers, check_find_links, refuse_foreign_index
from kdkit.lock.preflight import preflight as index_preflight
from kdkit.lock.provenance import (
    Provenance,
    emitted_indexes,
    local_sources,
    option_lines,
    provenance,
)
from kdkit.lock.resolution import Resolution
from kdkit.lock.resolvers import Job, Resolver, chosen_resolver, prepare, resolve

if TYPE_CHECKING:
    from typing import TypedDict

    from kdkit.core.report import Progress

    class LockReport(TypedDict):
        """One backend's lock run as `kdkit lock --json` prints it (LockResult.as_dict)."""

        backend: str
        lock: str
        pins: int
        torch: str | None
        resolved_in: str
        python: str
        platform: str
        pylock: str | None
        warnings: list[str]

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
    pylock: Path | None = None  # the PEP 751 lock written beside it, when one could be made

    def as_dict(self) -> LockReport:
        return {"backend": self.backend, "lock": str(self.path), "pins": self.pins,
                "torch": self.torch,
                "resolved_in": self.resolved_in, "python": self.python, "platform": self.platform,
                "pylock": str(self.pylock) if self.pylock else None, "warnings": self.warnings}


# ---------------------------------------------------------------- the torch index's label


def backend_label(backend: Backend) -> str | None:
    """The torch local label a backend's index serves: the index URL's last segment (cu128, rocm6.4,
    cpu)."""
    return index_label(backend.torch_index)


# ---------------------------------------------------------------- inputs and the header

def build_header(project: Project, backend: Backend, resolution: Resolution,
                 indexes: Sequence[tuple[str, str]],
                 origin: Provenance, torch_build: str | None = None) -> str:
    """The provenance block above the lock's index lines and the resolver's output (``torch_build``:
    PyPI's)."""
    fields: list[tuple[str, str]] = [
        ("kdkit-version", __version__),
        ("backend", backend.name),
        ("resolved-in", resolution.resolved_in),
        ("python", resolution.python),
        ("platform", resolution.platform),
        ("resolver", resolution.resolver),
        ("torch-index", backend.torch_index),
        ("torch-source", origin.torch_source or "(no torch in the lock)"),
        *([(BUILD_HEADER, torch_build)] if torch_build else []),
        ("indexes", "; ".join(f"{opt} {value}" for opt, value in indexes) or "(pip defaults)"),
        ("machine-local", ", ".join(origin.machine_local) or "none"),
    ]
    fields += [(f"input:{relative(project.root, p)}", sha256_file(p))
               for p in input_files(project.requirements)]
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
        warnings.append(f"resolving with Python {host_python} but kdkit.json targets Python "
                        f"{project.python}; markers and wheels may differ in the image (use "
                        "--in-container)")
    here = (sys.platform, platform.machine())
    if here != TARGET_PLATFORM:
        warnings.append(f"resolving on {here[0]}-{here[1]} for a {'-'.join(TARGET_PLATFORM)} "
                        "image: Linux-only dependencies (nvidia-*) may be missing from the "
                        f"{backend.name} lock (use --in-container)")
    return warnings


def check_torch_label(lock: Lock, backend: Backend, config_file: Path,
                      page: TorchPage | None = None,
                      inputs: Sequence[Path] = (), python: str = "", tool: str = "pip-compile",
                      mirrors: tuple[str, ...] = ()) -> str | None:
    """torch must carry the label of the backend's index; a bare version would accept any build. An
    index of another family, or one whose label kdkit cannot read, is BadInput (a torch it locks is
    no build of the backend's). The fix names the input file that requires torch and, from the
    preflight's ``page``, the newest build of the index that fits; ``tool`` is the resolver that
    chose the pin. PyPI (or one of ``mirrors``): returns the plain pin's build from the facts (the
    header's ``torch-build``)."""
    pin = lock.pins.get("torch")
    if pin is None:
        return None
    refuse_foreign_index(backend.torch_index, backend.name, config_file, mirrors=mirrors)
    label = backend_label(backend)
    if label is None and is_pypi(backend.torch_index, mirrors):
        return pypitorch.locked_build(pin.public_version, pin.local, "-".join(TARGET_PLATFORM),
                                      backend.name,
                                      config_file, tool, backend.torch_index)
    if label is None or pin.local == label:
        return None
    got = f"+{pin.local}" if pin.local else "no local label"
    newest = page.newest() if page is not None else None
    build = newest or f"{pin.public_version}+{label}"
    why = f" (the newest build {backend.torch_index} serves for Python {python})" if newest else ""
    where = _naming_torch(inputs, config_file.parent) if inputs else Path(lock.path).name
    raise KdkitError(f"{tool} resolved torch=={pin.version} ({got}) for backend {backend.name}, "
                     f"whose index {backend.torch_index} serves +{label} builds; pin "
                     f"torch=={build} in {where}{why} or check the indexes in your pip "
                     "configuration")


def _naming_torch(inputs: Sequence[Path], root: Path) -> str:
    """The input file (relative to the project) whose requirement lines name torch; the first
    otherwise."""
    for path in inputs:
        if re.search(r"^\s*torch\s*(?:[\[=<>!~;@]|$)", path.read_text(encoding="utf-8"),
                     re.MULTILINE | re.IGNORECASE):
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
    """Before the resolver: the torch index answers and serves a build the project can install, and
    every other http(s) index kdkit hands to pip answers (pip would wait minutes on one that does
    not)."""
    inputs = input_files(project.requirements)
    requirement = torch_requirement(inputs, project.python, TARGET_PLATFORM)
    page = index_preflight(backend.torch_index, backend.name, requirement, project.python,
                           TARGET_PLATFORM,
                           network, project.root / "kdkit.json", pypitorch.mirrors(pip_config))
    for _option, url in emitted_indexes(backend.torch_index, pip_config, pip_default_index())[1:]:
        key = "index-url" if url == pip_config.get("index-url") else "extra-index-url"
        check_answers(url, f"{key} of pip's configuration, `pip config list`", network)
    return page


def _refuse_early(project: Project, backend: Backend, local_torch: Path | None) -> dict[str, str]:
    """Before anything runs: no credential in the inputs, a torch index of the backend's build (or
    PyPI), the ``--torch-find-links`` folder holding that build. Returns pip's configuration."""
    inputs = input_files(project.requirements)  # a missing .in is bad input before anything runs
    for path in inputs:
        refuse_credentials_in(path, relative(project.root, path))
    requirement = torch_requirement(inputs, project.python, TARGET_PLATFORM)
    pip_config = pip_configuration()
    mirrors = pypitorch.mirrors(pip_config)
    refuse_foreign_index(backend.torch_index, backend.name, project.root / "kdkit.json",
                         torch_needed=requirement is not None, mirrors=mirrors)
    if local_torch is not None:
        check_find_links(local_torch, backend_label(backend), requirement, project.python,
                         TARGET_PLATFORM,
                         plain=is_pypi(backend.torch_index, mirrors))
    return pip_config


def lock_backend(project: Project, backend: Backend, *, upgrade: bool = False,
                 upgrade_packages: Sequence[str] = (), in_container: bool = False,
                 ca_bundle: Path | None = None, local_torch: Path | None = None,
                 resolver: Resolver | None = None) -> LockResult:
    """Resolve (pip-tools unless ``resolver`` says otherwise), check and write ``backend.lock``;
    nothing is written unless every step succeeded."""
    from kdkit.lock.pylockwrite import pylock_text

    resolver = resolver or prepare("pip-tools")
    config_file = project.root / "kdkit.json"
    pip_config = _refuse_early(project, backend, local_torch)
    mirrors = pypitorch.mirrors(pip_config)
    network = Network.from_pip(pip_config, ca_bundle)
    page = None if local_torch else preflight(project, backend, pip_config, network)
    job = Job(project, backend, pip_config, TARGET_PLATFORM, ca_bundle, local_torch, upgrade,
              tuple(upgrade_packages), in_container)
    resolution = resolve(resolver, job)
    warnings = [] if in_container else platform_warnings(project, backend)
    try:
        lock = parse_lock_text(resolution.text, backend.lock)
    except BadInput as exc:  # the resolver's output, not the user's file: name it so
        raise KdkitError(
            f"{resolver.tool} wrote a lock kdkit cannot read, nothing was written: {exc}") from None
    torch_build = check_torch_label(lock, backend, config_file, page,
                                    input_files(project.requirements),
                                    project.python, resolver.tool, mirrors)
    indexes = emitted_indexes(backend.torch_index, pip_config, pip_default_index(),
                              torch_from_index=local_torch is None)
    # the indexes a machine installing the lock asks: those it names, and its own (pip's default
    # here)
    asked = [url for _option, url in indexes]
    asked += ([pip_config["index-url"]] if pip_config.get("index-url")
              and pip_config["index-url"] not in asked else [])
    origin = provenance(lock, page, asked, local_sources(pip_config, local_torch), local_torch,
                        network, project.python, TARGET_PLATFORM)
    head = build_header(project, backend, resolution, indexes, origin, torch_build)
    text = head + option_lines(indexes) + resolution.text.lstrip("\n")
    pylock, why_not = pylock_text(resolver, job, head, text)
    left = _write_files(project, backend, text, pylock)
    torch = lock.pins["torch"].version if "torch" in lock.pins else None
    elsewhere = cpu_mismatch(project, resolution.platform, relative(project.root, backend.lock))
    return LockResult(backend.name, backend.lock, len(lock.pins), torch, resolution.resolved_in,
                      resolution.python, resolution.platform,
                      [*warnings, *origin.warnings, *([elsewhere] if elsewhere else []),
                       *why_not, *left],
                      backend.pylock if pylock is not None else None)


def _write_files(project: Project, backend: Backend, text: str, pylock: str | None) -> list[str]:
    """Write the lock, then the pylock when there is one; returns what a killed earlier run had
    left beside them (removed). Nothing is written unless neither carries a credential."""
    writes = [(backend.lock, text), *([(backend.pylock, pylock)] if pylock is not None else [])]
    left = [line for path in (backend.lock, backend.pylock)
            for line in describe_removed(clean_stale(path))]
    for path, content in writes:  # a credential in either: refused before either is written
        _refuse_credentials(path, content)
    # the lock first: a kill between leaves the old pylock, which validate finds stale
    for number, (path, content) in enumerate(writes):
        _write(path, content, [done for done, _text in writes[:number]], project)
    return left


def _refuse_credentials(path: Path, text: str) -> None:
    """BadInput, naming the line, when the lock would carry a credential."""
    for number, line in enumerate(text.splitlines(), start=1):
        # e.g. an index URL with a password or a token taken from pip's configuration
        if found := find(line):
            raise BadInput(f"{path}:{number}: the lock would carry {found[0].what} "
                           f"({found[0].redacted}); nothing was written: {CREDENTIAL_FIX}")


def _write(path: Path, text: str, written: Sequence[Path], project: Project) -> None:
    """Write ``path`` atomically; a folder that refuses it is one line naming what was written
    before it."""
    try:
        atomic_write_text(path, text)
    except OSError as exc:
        before = (f"; {and_list([relative(project.root, p) for p in written])} was written before "
                  "it" if written else
                  "; nothing was written")
        raise BadInput(f"{path}: cannot write the lock ({exc.strerror or exc}){before}; check the "
                       "folder's permissions and free space, then lock again") from None


def lock_project(project_dir: Path | None, backend: str | None = None, *, upgrade: bool = False,
                 upgrade_packages: Sequence[str] = (), in_container: bool = False,
                 ca_bundle: Path | None = None, torch_links: Path | None = None,
                 progress: Progress | None = None, resolver: str | None = None) -> list[LockResult]:
    """Lock each chosen backend of the project at ``project_dir`` with ``resolver`` (pip-tools or
    uv; None: kdkit.json's ``resolver``, else pip-tools). The library entry point of `kdkit
    lock`."""
    project = load_project(project_dir)
    # as `kdkit validate` refuses
    for problem in secret_problems(project.config, project.root / "kdkit.json"):
        raise BadInput(f"{problem_line(problem)}; nothing was locked")
    if ca_bundle is not None and not ca_bundle.is_file():
        raise BadInput(f"--ca-bundle {ca_bundle}: not a file; give a PEM file of CA certificates")
    local_torch = torch_find_links(torch_links)
    tool = prepare(chosen_resolver(resolver, project))  # uv missing: exit 3 before any request
    results = []
    for chosen in chosen_backends(project, backend):
        if progress:
            where = f"in {chosen.base_image}" if in_container else "on this host"
            progress(
                f"Locking {chosen.name}: {tool.tool} {shlex.quote(str(project.requirements.name))} "
                f"{where}")
        try:
            results.append(lock_backend(project, chosen, upgrade=upgrade,
                                        upgrade_packages=upgrade_packages,
                                        in_container=in_container, ca_bundle=ca_bundle,
                                        local_torch=local_torch,
                                        resolver=tool))
        except KdkitError as exc:
            if not results:
                raise
            written = and_list([f"{r.backend} ({relative(project.root, r.path)})" for r in results])
            exc.args = (f"{exc} [backend {chosen.name}; before it, kdkit lock wrote {written}, "
                        f"which stay{'s' if len(results) == 1 else ''}]", *exc.args[1:])
            raise
    return results
