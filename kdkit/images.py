"""`kdkit build` and `kdkit inspect`: the project's image, made from its lock, and read back.

A build happens in two halves. :func:`plan_build` does every host-side check
(fresh and hashed lock, PEM bundle, wheelhouse coverage, tag) and computes
the build arguments and labels, without an engine: bad input costs nothing
and leaves nothing. :func:`build_image` then assembles the build context,
streams the classic builder through the Docker SDK's low-level API and tags
the image only once it is complete, so a failed build never leaves a
half-made image under the project's tag. Between the two, what the image's own
torch says of its compiled GPU architectures (``/opt/kdkit/torch-arch.json``,
written in the final stage) is copied out of the image without running it and
added as labels by a one-line ``FROM <id>`` build.

The build context is written as a tar of exactly the files the Dockerfile
copies (never the whole project folder), with normalized owners, modes and
times: two checkouts of the same sources give the same context, so the
builder's cache holds across machines and a source-only change re-runs only
the source layer.
"""

from __future__ import annotations

import io
import os
import re
import ssl
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit, urlunsplit

from kdkit import __version__
from kdkit.core import layout, proc
from kdkit.core.credentials import refuse_credentials_in, secret_file
from kdkit.core.errors import BadInput, CheckFailed, KdkitError
from kdkit.core.jsonio import atomic_write_text, sha256_file
from kdkit.core.projectfiles import real_inside
from kdkit.platforms import cpu_mismatch
from kdkit.project import Backend, Project, find_root, load_project
from kdkit.resources import data_root, dockerfile

LABEL = "dev.kdkit."
OCI = "org.opencontainers.image."
INCLUDE = re.compile(r"^# kdkit:include (?P<name>\S+)[ \t]*$", re.MULTILINE)
SHIM = """#!/bin/sh
# kdkit's in-container commands (diagnose, verify-env, pilot, copy-out), without click.
PYTHONPATH=/opt/kdkit/lib${PYTHONPATH:+:$PYTHONPATH} exec /opt/kdkit/venv/bin/python -m kdkit.probe "$@"
"""
PROJECT_FOLDERS = ("config", "src")
SKIPPED = re.compile(r"(^|/)(__pycache__|\.ipynb_checkpoints)(/|$)|\.py[co]$|(^|/)\.DS_Store$")
# A Docker reference: [registry[:port]/]name[/name...][:tag], lowercase repository.
REFERENCE = re.compile(
    r"^(?:[a-zA-Z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?$")
PEM_BLOCK = re.compile(rb"-----BEGIN CERTIFICATE-----\s+[A-Za-z0-9+/=\s]+-----END CERTIFICATE-----")
STEP = re.compile(r"^Step (?P<n>\d+)/(?P<total>\d+) : (?P<instruction>.*)$")
ERROR_LINE = re.compile(r"^(ERROR|E:|error:|fatal:)")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # the builder colours a step's stderr
# Written in the final stage by `kdkit torch-arch --json` (Dockerfile.common), read back by build_image.
ARCH_FILE = "/opt/kdkit/torch-arch.json"
ARCH_LIST = f"{LABEL}torch.arch_list"
ARCH_SOURCE = f"{LABEL}torch.arch_source"
UNKNOWN_ARCH = "unknown"


# ---------------------------------------------------------------- the plan (host-side, no engine)


@dataclass(frozen=True)
class BuildPlan:
    """Everything a build needs, checked; made by :func:`plan_build`."""

    project: Project
    backend: Backend
    lock_sha256: str
    base_image: str
    tag: str
    dockerfile: str
    buildargs: dict[str, str]
    labels: dict[str, str]
    ca_bundle: Path | None = None
    wheels: list[Path] = field(default_factory=list)
    no_cache: bool = False
    left_out: list[str] = field(default_factory=list)  # secret-shaped files of config/ and src/, never sent
    warnings: list[str] = field(default_factory=list)  # e.g. the target card's hosts have another CPU

    @property
    def network(self) -> str:
        """No network at all from a wheelhouse; else the host's, so a proxy on its loopback is reachable."""
        return "none" if self.wheels else "host"


def render_dockerfile(backend: str) -> str:
    """The backend's Dockerfile with its ``# kdkit:include`` line replaced by the shared body."""
    text = dockerfile(backend).read_text(encoding="utf-8")

    def include(match: re.Match[str]) -> str:
        return (data_root() / match.group("name")).read_text(encoding="utf-8")

    return INCLUDE.sub(include, text)


def default_tag(project: Project, backend: str, lock_sha256: str) -> str:
    """``<project>:<backend>-<first 12 of the lock's sha256>``: a new lock is a new image."""
    return f"{project.name}:{backend}-{lock_sha256[:12]}"


def check_tag(tag: str) -> str:
    if not REFERENCE.fullmatch(tag) or len(tag) > 255:
        raise BadInput(f"--tag {tag!r}: not a valid image reference; use lowercase name[:tag], "
                       "e.g. myproj:cuda-test")
    return tag


def check_ca_bundle(path: Path) -> Path:
    """A readable PEM file that Python's TLS stack accepts as CA certificates."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BadInput(f"--ca-bundle {path}: cannot read it ({exc.strerror or exc}); give a PEM file") from None
    if not PEM_BLOCK.search(data):
        raise BadInput(f"--ca-bundle {path}: not a PEM bundle (no -----BEGIN CERTIFICATE----- block); give "
                       "the CA file your proxy's certificate chains to, e.g. /etc/ssl/certs/ca-certificates.crt")
    try:
        ssl.create_default_context(cafile=str(path))
    except (ssl.SSLError, ValueError) as exc:
        raise BadInput(f"--ca-bundle {path}: a certificate in it does not load ({exc}); "
                       "re-export the bundle in PEM format") from None
    return path.resolve()


def _file_key(filename: str) -> str:
    return re.sub(r"[-_.]+", "-", filename).lower()


def wheelhouse_files(wheelhouse: Path, lock_path: Path) -> list[Path]:
    """The files of ``wheelhouse`` whose sha256 the lock names; every unconditional pin must have one."""
    from kdkit.core.lockfile import parse_lock

    if not wheelhouse.is_dir():
        raise BadInput(f"--wheelhouse {wheelhouse}: not a folder; create it with `kdkit wheelhouse --out "
                       f"{wheelhouse}`")
    lock = parse_lock(lock_path)
    wanted = {h.split(":", 1)[1].lower(): pin.key for pin in lock.pins.values() for h in pin.hashes}
    prefixes = tuple(f"{key}-" for key in {pin.key for pin in lock.pins.values()})
    chosen: dict[str, Path] = {}
    for path in sorted(wheelhouse.iterdir()):
        if path.is_file() and _file_key(path.name).startswith(prefixes):
            key = wanted.get(sha256_file(path))
            if key is not None:
                chosen.setdefault(key, path)
    missing = [pin for pin in lock.pins.values() if pin.marker is None and pin.key not in chosen]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise BadInput(f"--wheelhouse {wheelhouse}: no file with a locked hash for {missing[0].name}=="
                       f"{missing[0].version}{more}; run `kdkit wheelhouse --out {wheelhouse}`")
    return sorted(chosen.values())


def _git(root: Path, *args: str) -> str | None:
    try:
        done = proc.run(["git", "-C", str(root), *args], timeout=10)
    except KdkitError:
        return None
    return done.stdout.strip() if done.ok and done.stdout.strip() else None


def _public_url(url: str) -> str:
    """A remote URL without credentials (``https://token@host/x`` -> ``https://host/x``)."""
    parts = urlsplit(url)
    if parts.scheme and "@" in parts.netloc:
        return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
    return url


def provenance(root: Path) -> tuple[str, str]:
    """(revision, source) of the project's git checkout; ("unknown", "") outside one."""
    revision = _git(root, "describe", "--always", "--dirty", "--abbrev=40", "--match=NeVeR") or "unknown"
    source = _git(root, "config", "--get", "remote.origin.url") or ""
    return revision, _public_url(source)


def torch_build(lock_path: Path, backend: Backend) -> tuple[str, str, str]:
    """(torch version, CUDA version, ROCm version) promised by the lock's torch pin and its label."""
    from kdkit.core.builds import parse_label
    from kdkit.core.lockfile import parse_lock
    from kdkit.locking import backend_label

    pin = parse_lock(lock_path).pins.get("torch")
    if pin is None:
        return "", "", ""
    build = parse_label(pin.local or backend_label(backend) or "")
    kind, version = build if build else ("", None)
    return pin.version, (version or "") if kind == "cuda" else "", (version or "") if kind == "rocm" else ""


def image_labels(project: Project, backend: Backend, lock_sha256: str) -> dict[str, str]:
    """The labels an image of this project gets: OCI's and kdkit's own."""
    revision, source = provenance(project.root)
    torch, cuda, rocm = torch_build(backend.lock, backend)
    return {
        f"{OCI}title": project.name,
        f"{OCI}revision": revision,
        f"{OCI}source": source,
        f"{OCI}version": f"{backend.name}-{lock_sha256[:12]}",
        f"{LABEL}project": project.name,
        f"{LABEL}backend": backend.name,
        f"{LABEL}python": project.python,
        f"{LABEL}lock.path": backend.lock.relative_to(project.root).as_posix(),
        f"{LABEL}lock.sha256": lock_sha256,
        f"{LABEL}torch.version": torch,
        f"{LABEL}torch.cuda": cuda,
        f"{LABEL}torch.rocm": rocm,
        f"{LABEL}version": __version__,
    }


def build_arguments(plan_labels: dict[str, str], base_image: str) -> dict[str, str]:
    """Build arguments for Dockerfile.common, from the labels (one source of truth) and the host's proxy."""
    import os

    args = {
        "BASE_IMAGE": base_image,
        "KDKIT_PYTHON": plan_labels[f"{LABEL}python"],
        "KDKIT_BACKEND": plan_labels[f"{LABEL}backend"],
        "KDKIT_LOCK": plan_labels[f"{LABEL}lock.path"],
        "KDKIT_PROJECT": plan_labels[f"{LABEL}project"],
        "KDKIT_LOCK_SHA256": plan_labels[f"{LABEL}lock.sha256"],
        "KDKIT_TORCH_VERSION": plan_labels[f"{LABEL}torch.version"],
        "KDKIT_TORCH_CUDA": plan_labels[f"{LABEL}torch.cuda"],
        "KDKIT_TORCH_ROCM": plan_labels[f"{LABEL}torch.rocm"],
        "KDKIT_VERSION": plan_labels[f"{LABEL}version"],
        "KDKIT_REVISION": plan_labels[f"{OCI}revision"],
        "KDKIT_SOURCE": plan_labels[f"{OCI}source"],
        "KDKIT_IMAGE_VERSION": plan_labels[f"{OCI}version"],
    }
    # Docker's predefined proxy arguments reach RUN steps but are kept out of the image's history.
    args.update({name: os.environ[name] for name in proc.PROXY_VARIABLES if os.environ.get(name)})
    return args


def plan_build(project_dir: Path | None, backend: str | None = None, *, base_image: str | None = None,
               tag: str | None = None, ca_bundle: Path | None = None, wheelhouse: Path | None = None,
               no_cache: bool = False) -> BuildPlan:
    """Check every input of a build and compute its arguments; nothing is written, no engine is needed."""
    from kdkit.core.lockfile import parse_lock
    from kdkit.staleness import require_fresh_lock

    project = load_project(project_dir)
    chosen = project.backend(backend)
    lock = require_fresh_lock(project, chosen.name)
    parse_lock(lock)  # an unhashed or malformed lock is refused with its file and line
    lock_sha256 = sha256_file(lock)
    labels = image_labels(project, chosen, lock_sha256)
    base = base_image or chosen.base_image
    left_out = project_files(project.root)[1]  # and a link out or a credential is refused here, before any build
    refuse_credentials_in(lock, lock.relative_to(project.root).as_posix() if lock.is_relative_to(project.root)
                          else str(lock))
    return BuildPlan(
        project=project, backend=chosen, lock_sha256=lock_sha256, base_image=base,
        tag=check_tag(tag or default_tag(project, chosen.name, lock_sha256)),
        dockerfile=render_dockerfile(chosen.name), buildargs=build_arguments(labels, base), labels=labels,
        ca_bundle=check_ca_bundle(ca_bundle) if ca_bundle else None,
        wheels=wheelhouse_files(wheelhouse, lock) if wheelhouse else [], no_cache=no_cache, left_out=left_out,
        warnings=[w for w in [_cpu_warning(project)] if w])


def _cpu_warning(project: Project) -> str | None:
    """The image is built for this engine's CPU (the local machine's); the target card's hosts may differ."""
    import platform

    return cpu_mismatch(project, f"linux-{platform.machine()}", "the image built here")


# ---------------------------------------------------------------- the build context


def project_files(root: Path) -> tuple[list[tuple[str, Path]], list[str]]:
    """(the project files an image carries, the secret-shaped ones left out of it).

    kdkit.json, config/ and src/; a file named like a secret (kdkit.core.credentials.secret_file: .env*,
    keys, .netrc...) never goes into an image, and a link leading outside the project is refused
    (projectfiles.real_inside), as for a bundle.
    """
    files, left_out = [("project/kdkit.json", root / "kdkit.json")], []
    for folder in PROJECT_FOLDERS:
        base = root / folder
        for path in sorted(base.rglob("*")) if base.is_dir() else []:
            rel = path.relative_to(root).as_posix()
            if SKIPPED.search(rel) or not path.is_file():
                continue
            if secret_file(rel) is not None:
                left_out.append(rel)
                continue
            if real_inside(root, path) is None:
                raise BadInput(f"{path}: leads to {os.path.realpath(path)}, outside the project (a symbolic link); "
                               "an image carries only the project's own files: copy it in or remove the link")
            refuse_credentials_in(path, rel)
            files.append((f"project/{rel}", path))
    return files, left_out


def _project_files(root: Path) -> Iterator[tuple[str, Path]]:
    yield from project_files(root)[0]


def _probe_files() -> Iterator[tuple[str, Path]]:
    for rel, path in layout.files():
        yield f"kdkit/lib/kdkit/{rel}", path


def context_entries(plan: BuildPlan) -> Iterator[tuple[str, Path | bytes]]:
    """(name in the context, host file or bytes) for everything the Dockerfile copies."""
    yield "Dockerfile", plan.dockerfile.encode("utf-8")
    yield "requirements.lock", plan.backend.lock
    yield f"lock/{plan.labels[f'{LABEL}lock.path']}", plan.backend.lock
    yield "build/README", b"Builder-stage inputs: ca.pem (--ca-bundle), wheels/ (--wheelhouse).\n"
    if plan.ca_bundle:
        yield "build/ca.pem", plan.ca_bundle
    for wheel in plan.wheels:
        yield f"build/wheels/{wheel.name}", wheel
    yield "kdkit/bin/kdkit", SHIM.encode("utf-8")
    yield from _probe_files()
    yield from _project_files(plan.project.root)
    for folder in PROJECT_FOLDERS:  # COPY needs the folder even when the project has none
        yield f"project/{folder}/", b""


def _tar_info(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name.rstrip("/"))
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = 0
    if name.endswith("/"):
        info.type, info.mode = tarfile.DIRTYPE, 0o755
    else:
        info.size, info.mode = size, 0o755 if name.startswith("kdkit/bin/") else 0o644
    return info


def write_context(entries: Iterable[tuple[str, Path | bytes]], out: IO[bytes]) -> int:
    """Write the entries as a tar with normalized metadata; return the number of files."""
    count = 0
    seen: set[str] = set()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, source in entries:
            if name in seen:
                continue
            seen.add(name)
            if isinstance(source, bytes):
                tar.addfile(_tar_info(name, len(source)), None if name.endswith("/") else io.BytesIO(source))
            else:
                with source.open("rb") as handle:
                    tar.addfile(_tar_info(name, source.stat().st_size), handle)
            count += not name.endswith("/")
    out.seek(0)
    return count


# ---------------------------------------------------------------- the build (engine)


@dataclass
class Step:
    """One Dockerfile instruction as the builder ran it."""

    number: int
    total: int
    instruction: str
    cached: bool = False
    cacheable: bool = True  # FROM and the ARGs before the first FROM are never cached, so never "ran"


@dataclass(frozen=True)
class BuildEvent:
    """Progress of a build: ``note`` (kdkit), ``step`` (started), ``cached`` (reused), ``output`` (a line)."""

    kind: str
    text: str
    step: Step | None = None


@dataclass(frozen=True)
class BuildResult:
    tag: str
    image_id: str
    size: int
    seconds: float
    steps: list[Step]
    labels: dict[str, str]
    network: str

    @property
    def ran(self) -> list[Step]:
        """The steps the builder executed instead of reusing its cache."""
        return [s for s in self.steps if s.cacheable and not s.cached]

    def as_dict(self) -> dict[str, Any]:
        return {"tag": self.tag, "id": self.image_id, "size": self.size, "seconds": round(self.seconds, 2),
                "network": self.network, "labels": self.labels, "steps": [asdict(s) for s in self.steps],
                "ran": [s.number for s in self.ran]}


Progress = Callable[[BuildEvent], None]


class _Transcript:
    """Reads the builder's decoded events: steps, output lines, the image id, the first error."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.lines: list[str] = []
        self.steps: list[Step] = []
        self.image_id: str | None = None
        self.error: str | None = None
        self._partial = ""

    def feed(self, event: dict[str, Any]) -> None:
        if "aux" in event and isinstance(event["aux"], dict) and "ID" in event["aux"]:
            self.image_id = str(event["aux"]["ID"])
        if "error" in event:
            detail = event.get("errorDetail") or {}
            self.error = str(detail.get("message") or event["error"]).strip()
            self._line(f"ERROR (builder): {self.error}")
        if "status" in event:
            self._line(str(event["status"]))
        text = self._partial + str(event.get("stream", ""))
        *complete, self._partial = text.split("\n")
        for line in complete:
            self._line(line)

    def _line(self, line: str) -> None:
        line = ANSI.sub("", line).rstrip("\r")
        self.lines.append(line)
        if match := STEP.match(line):
            instruction = match["instruction"]
            after_from = any(s.instruction.upper().startswith("FROM") for s in self.steps)
            cacheable = after_from and not instruction.upper().startswith("FROM")
            step = Step(int(match["n"]), int(match["total"]), instruction, cacheable=cacheable)
            self.steps.append(step)
            self.progress(BuildEvent("step", line, step))
        elif line.strip() == "---> Using cache" and self.steps:
            self.steps[-1].cached = True
            self.progress(BuildEvent("cached", line, self.steps[-1]))
        elif line.strip():
            self.progress(BuildEvent("output", line, self.steps[-1] if self.steps else None))
        if (match := re.match(r"^Successfully built ([0-9a-f]+)$", line.strip())) and not self.image_id:
            self.image_id = match.group(1)

    def first_error(self) -> str:
        for line in self.lines:
            if ERROR_LINE.match(line.strip()) and not line.startswith("ERROR (builder)"):
                return line.strip()
        return self.error or "the builder stopped without an error message"


def _log_path(plan: BuildPlan) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%S")
    return Path(tempfile.gettempdir()) / "kdkit" / f"build-{plan.project.name}-{plan.backend.name}-{stamp}.log"


def _ensure_base(engine: Any, plan: BuildPlan, progress: Progress) -> None:
    if engine.image(plan.base_image) is None:
        progress(BuildEvent("note", f"base image {plan.base_image} is not on this engine; pulling it"))
        engine.pull(plan.base_image)


def _failed(plan: BuildPlan, transcript: _Transcript) -> KdkitError:
    log = _log_path(plan)
    atomic_write_text(log, "\n".join(transcript.lines) + "\n")
    where = ""
    if transcript.steps:
        last = transcript.steps[-1]
        where = f" at step {last.number}/{last.total} ({' '.join(last.instruction.split())[:60]})"
    return KdkitError(f"build of {plan.tag} failed{where}: {transcript.first_error()}; full log: {log}")


def build_image(plan: BuildPlan, progress: Progress | None = None) -> BuildResult:
    """Build ``plan`` through the Docker SDK, streaming events to ``progress``; tag only a complete image.

    This is also the library entry point: ``build_image(plan_build(path, "cuda"))``.
    """
    from kdkit.docker_adapter import connect

    report: Progress = progress or (lambda _event: None)
    started = time.monotonic()
    engine = connect()
    _ensure_base(engine, plan, report)
    transcript = _Transcript(report)
    with tempfile.TemporaryFile(prefix="kdkit-context-") as context:
        count = write_context(context_entries(plan), context)
        size_mb = context.seek(0, 2) / 1e6
        context.seek(0)
        report(BuildEvent("note", f"context: {count} files, {size_mb:.1f} MB; network {plan.network}"))
        for event in engine.build(context, dockerfile="Dockerfile", buildargs=plan.buildargs,
                                  nocache=plan.no_cache, network=plan.network):
            transcript.feed(event)
            if transcript.error:
                break
    if transcript.error or not transcript.image_id:
        raise _failed(plan, transcript)
    labels = recorded_arch(engine, transcript.image_id)
    report(BuildEvent("note", f"torch architectures: {labels[ARCH_LIST] or '(none)'} ({labels[ARCH_SOURCE]})"))
    engine.tag(add_labels(engine, plan, transcript.image_id, labels), plan.tag)
    facts = engine.require_image(plan.tag)
    return BuildResult(plan.tag, facts.id, facts.size, time.monotonic() - started, transcript.steps,
                       facts.labels, plan.network)


# ---------------------------------------------------------------- the torch architecture labels


def arch_labels(answer: Any) -> dict[str, str]:
    """The two arch labels from the ``kdkit torch-arch --json`` answer read out of an image.

    ``arch_list``: torch's tokens, space-separated ("" for a CPU build) or "unknown"; ``arch_source``:
    where they were read, or ``unknown: <reason>``. Anything not of the answer's shape is unknown:
    the file comes from the image, and a list is never made up.
    """
    from kdkit.core.credentials import redact
    from kdkit.probe.env.torcharch import SOURCE_CPU, SOURCE_FLAGS, SOURCE_HEADER, TORCH_TOKEN

    def unknown(reason: str) -> dict[str, str]:
        line = redact(" ".join(reason.split()))
        return {ARCH_LIST: UNKNOWN_ARCH, ARCH_SOURCE: f"{UNKNOWN_ARCH}: {line[:500]}"}

    if not isinstance(answer, dict):
        return unknown(f"{ARCH_FILE} does not hold a JSON object")
    arch_list, source = answer.get("arch_list"), answer.get("source")
    if arch_list is None:
        reason = answer.get("reason")
        return unknown(reason if isinstance(reason, str) and reason.strip() else "kdkit torch-arch gave no reason")
    if not isinstance(arch_list, list) or len(arch_list) > 128 or not all(
            isinstance(token, str) and TORCH_TOKEN.fullmatch(token) for token in arch_list):
        return unknown(f"{ARCH_FILE}: arch_list is not a list of architecture names")
    if source not in (SOURCE_FLAGS, SOURCE_HEADER, SOURCE_CPU) or (source == SOURCE_CPU) != (not arch_list):
        return unknown(f"{ARCH_FILE}: source {str(source)[:60]!r} does not go with arch_list {arch_list[:4]}")
    return {ARCH_LIST: " ".join(arch_list), ARCH_SOURCE: source}


def recorded_arch(engine: Any, image_id: str) -> dict[str, str]:
    """The arch labels of a built image, from its ARCH_FILE; never raises: a failure is "unknown" with why."""
    from kdkit.core.jsonio import parse_json

    try:
        data = engine.read_file(image_id, ARCH_FILE, limit=64 << 10)
    except KdkitError as exc:
        return arch_labels({"arch_list": None, "reason": f"cannot copy {ARCH_FILE} out of the image: {exc}"})
    if data is None:
        return arch_labels({"arch_list": None, "reason": f"the image has no {ARCH_FILE} (its torch-arch step "
                                                         "wrote nothing; see the build log)"})
    try:
        answer = parse_json(data.decode("utf-8"), ARCH_FILE)
    except (UnicodeDecodeError, BadInput) as exc:
        return arch_labels({"arch_list": None, "reason": f"{ARCH_FILE} is not readable JSON ({exc})"})
    return arch_labels(answer)


def add_labels(engine: Any, plan: BuildPlan, image_id: str, labels: dict[str, str]) -> str:
    """A child of ``image_id`` carrying ``labels``: ``FROM <id>`` built through the same SDK call, no network.

    Labels known only once the image exists (what its torch says) cannot be build arguments of the
    main build; this one-instruction build adds no layer and is cached like any other.
    """
    transcript = _Transcript(lambda _event: None)
    with tempfile.TemporaryFile(prefix="kdkit-labels-") as context:
        write_context([("Dockerfile", f"FROM {image_id}\n".encode())], context)
        for event in engine.build(context, dockerfile="Dockerfile", buildargs={}, nocache=False, network="none",
                                  labels=labels):
            transcript.feed(event)
            if transcript.error:
                break
    if transcript.error or not transcript.image_id:
        raise _failed(plan, transcript)
    return transcript.image_id


def torch_arch(labels: dict[str, str]) -> dict[str, Any]:
    """What an image's labels say of its torch's compiled architectures, for `kdkit inspect`."""
    if ARCH_LIST not in labels:
        return {"recorded": False, "arch_list": None, "source": None}
    value, source = labels[ARCH_LIST], labels.get(ARCH_SOURCE, "")
    if value == UNKNOWN_ARCH:
        return {"recorded": True, "arch_list": None, "source": source}
    return {"recorded": True, "arch_list": value.split(), "source": source}


# ---------------------------------------------------------------- inspect


def _project_for(project_dir: Path | None) -> Project | None:
    if project_dir is not None:
        return load_project(project_dir)
    try:
        return load_project(find_root())
    except BadInput:
        return None  # not inside a project: the image is described on its own


def lock_match(labels: dict[str, str], project: Project | None) -> dict[str, Any]:
    """Whether ``project``'s current lock for the image's backend is the one baked into the image."""
    baked = labels.get(f"{LABEL}lock.sha256", "")
    if project is None:
        return {"image_sha256": baked, "project_lock": None, "project_sha256": None, "matches": None}
    lock = project.backend(labels.get(f"{LABEL}backend")).lock
    current = sha256_file(lock) if lock.is_file() else None
    return {"image_sha256": baked, "project_lock": str(lock), "project_sha256": current,
            "matches": current == baked}


def require_kdkit_labels(ref: str, labels: dict[str, str]) -> None:
    if not labels.get(f"{LABEL}backend") or not labels.get(f"{LABEL}lock.sha256"):
        raise BadInput(f"image {ref}: has no kdkit labels ({LABEL}backend, {LABEL}lock.sha256); "
                       "it was not made by `kdkit build`; build the project's image with `kdkit build`")


def inspect_image(ref: str, project_dir: Path | None = None) -> dict[str, Any]:
    """Labels, size, user and the lock comparison of image ``ref`` (BadInput without kdkit's labels)."""
    from kdkit.docker_adapter import connect

    facts = connect().require_image(ref)
    require_kdkit_labels(ref, facts.labels)
    project = _project_for(project_dir)
    return {"image": ref, "id": facts.id, "size": facts.size, "created": facts.created, "user": facts.user,
            "os": facts.os, "architecture": facts.architecture,
            "kdkit": {k[len(LABEL):]: v for k, v in sorted(facts.labels.items()) if k.startswith(LABEL)},
            "oci": {k[len(OCI):]: v for k, v in sorted(facts.labels.items()) if k.startswith(OCI)},
            "torch_arch": torch_arch(facts.labels), "lock": lock_match(facts.labels, project)}


def require_lock_match(report: dict[str, Any]) -> None:
    """CheckFailed when the project's lock moved on since the image was built."""
    lock = report["lock"]
    if lock["matches"] is False:
        raise CheckFailed(f"image {report['image']}: built from lock {lock['image_sha256'][:12]}, but "
                          f"{lock['project_lock']} is now {str(lock['project_sha256'])[:12]}; rebuild "
                          "with `kdkit build`")
