"""`kdkit build`: the project's image, made from its lock.

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

The build context (what travels and the tar it travels in) is :mod:`kdkit.image.context`; the lock
split into torch's layer and the rest, :mod:`kdkit.image.layers`; the labels and `kdkit inspect`,
:mod:`kdkit.image.labels`.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kdkit.config.project import Backend, Project, load_project
from kdkit.config.shipped import data_root, dockerfile
from kdkit.core import proc
from kdkit.core.credentials import refuse_credentials_in
from kdkit.core.errors import BadInput, KdkitError
from kdkit.core.jsonio import atomic_write_text
from kdkit.facts.platforms import cpu_mismatch
from kdkit.image.buildlog import recorded
from kdkit.image.context import PROJECT_FOLDERS, SHIM, probe_files, project_files, write_context
from kdkit.image.labels import (
    ARCH_LIST,
    ARCH_SOURCE,
    LABEL,
    OCI,
    PROJECT_LABELS,
    default_tag,
    image_labels,
    project_labels,
    recorded_arch,
)
from kdkit.image.layers import LOCK_FORMATS, builder_entries
from kdkit.image.pipcause import first_cause
from kdkit.image.preflight import check_ca_bundle, refuse_machine_local
from kdkit.image.pylockparts import download_pip, plan_pylock_build, require_image_python
from kdkit.lock.locked import LockInput, read_locked
from kdkit.lock.wheelhouse import offline_build, wheelhouse_files

INCLUDE = re.compile(r"^# kdkit:include (?P<name>\S+)[ \t]*$", re.MULTILINE)
# A Docker reference: [registry[:port]/]name[/name...][:tag], lowercase repository.
REFERENCE = re.compile(
    r"^(?:[a-zA-Z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?$")
STEP = re.compile(r"^Step (?P<n>\d+)/(?P<total>\d+) : (?P<instruction>.*)$")
ERROR_LINE = re.compile(r"^(ERROR|E:|error:|fatal:)")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # the builder colours a step's stderr


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
    # its bytes, read once: checked, then sent
    ca_data: bytes | None = field(default=None, repr=False)
    # the lock the image installs, then its twin
    inputs: tuple[LockInput, ...] = field(default=(), repr=False)
    # the project's files, read once
    files: list[tuple[str, bytes]] = field(default_factory=list, repr=False)
    wheels: list[Path] = field(default_factory=list)
    no_cache: bool = False
    # secret-shaped files of config/ and src/, never sent
    left_out: list[str] = field(default_factory=list)
    # e.g. the target card's hosts have another CPU
    warnings: list[str] = field(default_factory=list)
    # or "pylock": the backend's PEP 751 lock (kdkit.image.pylockparts)
    lock_format: str = "requirements"
    pip: str | None = None  # with a pylock: the version of kdkit's own pip, which the builder runs

    @property
    def lock(self) -> Path:
        """The lock the image installs, whose path and sha256 its labels name."""
        return self.backend.pylock if self.lock_format == "pylock" else self.backend.lock

    @property
    def lock_input(self) -> LockInput:
        """The lock the image installs, read once: its sha256 is the label's, its bytes the
        context's."""
        return self.inputs[0]

    @property
    def twin_input(self) -> LockInput:
        """The backend's requirements lock, read once (the lock itself, or the one a pylock was made
        from)."""
        return self.inputs[-1]

    @property
    def network(self) -> str:
        """No network at all from a wheelhouse; else the host's, so a proxy on its loopback is
        reachable."""
        return "none" if self.wheels else "host"


def render_dockerfile(backend: str) -> str:
    """The backend's Dockerfile with its ``# kdkit:include`` line replaced by the shared body."""
    text = dockerfile(backend).read_text(encoding="utf-8")

    def include(match: re.Match[str]) -> str:
        return (data_root() / match.group("name")).read_text(encoding="utf-8")

    return INCLUDE.sub(include, text)



def check_tag(tag: str) -> str:
    if not REFERENCE.fullmatch(tag) or len(tag) > 255:
        raise BadInput(f"--tag {tag!r}: not a valid image reference; use lowercase name[:tag], "
                       "e.g. myproj:cuda-test")
    return tag


# Build arguments of Dockerfile.common -> the label that holds each value (one source of truth).
BUILD_ARGS = {"KDKIT_PYTHON": "python", "KDKIT_BACKEND": "backend", "KDKIT_LOCK": "lock.path",
              "KDKIT_PROJECT": "project", "KDKIT_LOCK_SHA256": "lock.sha256", "KDKIT_TORCH_VERSION": "torch.version",
              "KDKIT_TORCH_CUDA": "torch.cuda", "KDKIT_TORCH_ROCM": "torch.rocm", "KDKIT_VERSION": "version"}
OCI_BUILD_ARGS = {"KDKIT_REVISION": "revision", "KDKIT_SOURCE": "source", "KDKIT_IMAGE_VERSION": "version"}


def build_arguments(plan_labels: dict[str, str], base_image: str) -> dict[str, str]:
    """Build arguments for Dockerfile.common, from the labels (one source of truth) and the host's
    proxy."""
    args = {"BASE_IMAGE": base_image, **{arg: plan_labels[f"{LABEL}{key}"] for arg, key in BUILD_ARGS.items()},
            **{arg: plan_labels[f"{OCI}{key}"] for arg, key in OCI_BUILD_ARGS.items()}}
    # Docker's predefined proxy arguments reach RUN steps but are kept out of the image's history.
    args.update({name: os.environ[name] for name in proc.PROXY_VARIABLES if os.environ.get(name)})
    return args


def plan_build(project_dir: Path | None, backend: str | None = None, *, base_image: str | None = None,
               tag: str | None = None, ca_bundle: Path | None = None, wheelhouse: Path | None = None,
               no_cache: bool = False, lock_format: str = "requirements") -> BuildPlan:
    """Check every input of a build and compute its arguments; nothing is written, no engine is
    needed. Each input of the context is read once, here: what is checked, hashed and labelled is
    what the image gets."""
    if lock_format not in LOCK_FORMATS:
        raise BadInput(f"--lock-format {lock_format}: choose one of {', '.join(LOCK_FORMATS)}")
    project = load_project(project_dir)
    chosen = project.backend(backend)
    if lock_format == "pylock":
        require_image_python(project.python, chosen.pylock, chosen.lock)
    locked = read_locked(project, chosen, lock_format)
    lock = locked.installed
    pip = plan_pylock_build(project, lock, wheelhouse is not None) if lock_format == "pylock" else None
    labels = image_labels(project, chosen, lock.sha256, lock.path, lock.lock)
    base = base_image or chosen.base_image
    # and a link out or a credential is refused here, before any build
    files, left_out = project_files(project.root)
    # what `kdkit inspect` compares with the project's config/ and src/
    labels |= project_labels(files)
    refuse_credentials_in(lock.path, lock.path.relative_to(project.root).as_posix()
                          if lock.path.is_relative_to(project.root) else str(lock.path), lock.data)
    ca_path, ca_data = check_ca_bundle(ca_bundle) if ca_bundle else (None, None)
    return BuildPlan(
        project=project, backend=chosen, lock_sha256=lock.sha256, base_image=base,
        tag=check_tag(tag or default_tag(project, chosen.name, lock.sha256)),
        dockerfile=render_dockerfile(chosen.name), buildargs=build_arguments(labels, base), labels=labels,
        ca_bundle=ca_path, ca_data=ca_data, inputs=locked.inputs, files=files,
        wheels=wheelhouse_files(wheelhouse, lock.lock) if wheelhouse else [], no_cache=no_cache, left_out=left_out,
        warnings=[w for w in [_cpu_warning(project)] if w], lock_format=lock_format, pip=pip)


def _cpu_warning(project: Project) -> str | None:
    """The image is built for this engine's CPU (the local machine's); the target card's hosts may
    differ."""
    import platform

    return cpu_mismatch(project, f"linux-{platform.machine()}", "the image built here")


# ---------------------------------------------------------------- the build context


def context_entries(plan: BuildPlan, pip_wheel: Path | None = None) -> Iterator[tuple[str, Path | bytes]]:
    """(name in the context, host file or bytes) for everything the Dockerfile copies;
    ``pip_wheel``: the pip that installs a pylock (:func:`kdkit.image.pylockparts.download_pip`).
    The lock, its parts, the CA bundle and the project's files are the bytes :func:`plan_build` read
    (never their paths read again); kdkit's own files and the wheels (each hash-checked by pip as it
    installs) are sent from their paths."""
    yield "Dockerfile", plan.dockerfile.encode("utf-8")
    yield f"lock/{plan.labels[f'{LABEL}lock.path']}", plan.lock_input.data
    if plan.lock_format == "pylock":
        from kdkit.image.pylockparts import pylock_builder_entries

        if pip_wheel is None:
            raise KdkitError(f"{plan.lock}: a build from a pylock needs the wheel of the pip that installs it "
                             "(kdkit.image.pylockparts.download_pip)")
        yield from pylock_builder_entries(plan.lock_input, plan.twin_input, plan.project.python, plan.ca_data,
                                          plan.wheels, pip_wheel)
    else:
        yield from builder_entries(plan.lock_input, plan.ca_data, plan.wheels)
    yield "kdkit/bin/kdkit", SHIM.encode("utf-8")
    yield from probe_files()
    yield from plan.files
    for folder in PROJECT_FOLDERS:  # COPY needs the folder even when the project has none
        yield f"project/{folder}/", b""


# ---------------------------------------------------------------- the build (engine)


@dataclass
class Step:
    """One Dockerfile instruction as the builder ran it."""

    number: int
    total: int
    instruction: str
    cached: bool = False
    # FROM and the ARGs before the first FROM are never cached, so never "ran"
    cacheable: bool = True


@dataclass(frozen=True)
class BuildEvent:
    """Progress of a build: ``note`` (kdkit), ``step`` (started), ``cached`` (reused), ``output`` (a
    line)."""

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
    # pip's first real cause, not its last line
    cause = first_cause(transcript.lines) or transcript.first_error()
    return KdkitError(f"build of {plan.tag} failed{where}: {cause}; full log: {log}")


def _preflight(plan: BuildPlan, report: Progress) -> None:
    """What the build's pip will need, checked before any layer (kdkit.image.preflight,
    kdkit.image.fetchable). A pylock names each file by its URL: nothing is machine-local there, and
    pip reads no index for it."""
    if plan.lock_format != "requirements":
        return
    refuse_machine_local(plan.inputs[0], plan.project.root, plan.backend.name, bool(plan.wheels))
    # --no-index: every locked file is in the wheelhouse (kdkit.lock.wheelhouse.wheelhouse_files)
    if plan.wheels:
        return
    from kdkit.image.fetchable import check_fetchable

    offline = offline_build(plan.project.root, plan.backend.name)
    report(BuildEvent("note", check_fetchable(plan.inputs[0].lock, plan.inputs[0].path, plan.ca_bundle, offline)))


def build_image(plan: BuildPlan, progress: Progress | None = None) -> BuildResult:
    """Build ``plan`` through the Docker SDK, streaming events to ``progress``; tag only a complete
    image.

    This is also the library entry point: ``build_image(plan_build(path, "cuda"))``.
    """
    from kdkit.docker_adapter import connect

    report: Progress = progress or (lambda _event: None)
    started = time.monotonic()
    engine = connect()
    _preflight(plan, report)  # before a base image is pulled: seconds, not minutes
    _ensure_base(engine, plan, report)
    transcript = _Transcript(report)
    with tempfile.TemporaryDirectory(prefix="kdkit-tools-") as tools, \
            tempfile.TemporaryFile(prefix="kdkit-context-") as context:
        pip_wheel = download_pip(Path(tools), plan.pip, lambda line: report(BuildEvent("note", line))) \
            if plan.pip else None
        count = write_context(context_entries(plan, pip_wheel), context)
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
    # labels only: no layer re-runs
    labels |= {k: v for k, v in plan.labels.items() if k in PROJECT_LABELS}
    engine.tag(add_labels(engine, plan, transcript.image_id, labels), plan.tag)
    # recorded: kdkit.image.buildlog (the hours `kdkit close` counts)
    facts = engine.require_image(plan.tag)
    return recorded(plan.project.root, plan.backend.name, BuildResult(
        plan.tag, facts.id, facts.size, time.monotonic() - started, transcript.steps, facts.labels, plan.network))



def add_labels(engine: Any, plan: BuildPlan, image_id: str, labels: dict[str, str]) -> str:
    """A child of ``image_id`` carrying ``labels``: ``FROM <id>`` built through the same SDK call,
    no network.

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
