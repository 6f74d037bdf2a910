"""`kdkit build`, its run: a checked :class:`kdkit.image.build.BuildPlan` built on the engine.

:func:`build_image` assembles the build context, streams the classic builder through the Docker
SDK's low-level API and tags the image only once it is complete, so a failed build never leaves a
half-made image under the project's tag. Before the tag, what the image's own torch says of its
compiled GPU architectures (``/opt/kdkit/torch-arch.json``, written in the final stage) is copied
out of the image without running it and added as labels by a one-line ``FROM <id>`` build
(:func:`add_labels`). The builder's events are read by :class:`_Transcript` into steps, lines,
the image id and the first error.
"""

from __future__ import annotations

import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.core.errors import KdkitError
from kdkit.core.jsonio import atomic_write_text
from kdkit.image.build import BuildPlan, context_entries
from kdkit.image.buildlog import recorded
from kdkit.image.context import write_context
from kdkit.image.labels import ARCH_LIST, ARCH_SOURCE, PROJECT_LABELS, recorded_arch
from kdkit.image.pipcause import first_cause
from kdkit.image.preflight import refuse_machine_local
from kdkit.image.pylockparts import download_pip
from kdkit.lock.wheelhouse import offline_build

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import TypedDict

    class BuildReport(TypedDict):
        """A finished build as `kdkit build --json` prints it (BuildResult.as_dict)."""

        tag: str
        id: str
        size: int
        seconds: float
        network: str
        labels: dict[str, str]
        steps: list[dict[str, Any]]  # each Step as dataclasses.asdict gives it
        ran: list[int]  # the numbers of the steps the builder executed

STEP = re.compile(r"^Step (?P<n>\d+)/(?P<total>\d+) : (?P<instruction>.*)$")
ERROR_LINE = re.compile(r"^(ERROR|E:|error:|fatal:)")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # the builder colours a step's stderr

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

    def as_dict(self) -> BuildReport:
        return {"tag": self.tag, "id": self.image_id, "size": self.size,
                "seconds": round(self.seconds, 2),
                "network": self.network, "labels": self.labels,
                "steps": [asdict(s) for s in self.steps],
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

    def feed(self, event: Mapping[str, Any]) -> None:
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
        if (match := re.match(r"^Successfully built ([0-9a-f]+)$", line.strip())) \
                and not self.image_id:
            self.image_id = match.group(1)

    def first_error(self) -> str:
        for line in self.lines:
            if ERROR_LINE.match(line.strip()) and not line.startswith("ERROR (builder)"):
                return line.strip()
        return self.error or "the builder stopped without an error message"


def _log_path(plan: BuildPlan) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%S")
    name = f"build-{plan.project.name}-{plan.backend.name}-{stamp}.log"
    return Path(tempfile.gettempdir()) / "kdkit" / name


def _ensure_base(engine: Any, plan: BuildPlan, progress: Progress) -> None:
    if engine.image(plan.base_image) is None:
        progress(
            BuildEvent("note", f"base image {plan.base_image} is not on this engine; pulling it"))
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
    report(
        BuildEvent("note",
                   check_fetchable(plan.inputs[0].lock, plan.inputs[0].path,
                                   plan.ca_bundle, offline)))


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
        pip_wheel = download_pip(Path(tools), plan.pip,
                                 lambda line: report(BuildEvent("note", line))) \
            if plan.pip else None
        count = write_context(context_entries(plan, pip_wheel), context)
        size_mb = context.seek(0, 2) / 1e6
        context.seek(0)
        report(
            BuildEvent("note", f"context: {count} files, {size_mb:.1f} MB; network {plan.network}"))
        for event in engine.build(context, dockerfile="Dockerfile", buildargs=plan.buildargs,
                                  nocache=plan.no_cache, network=plan.network):
            transcript.feed(event)
            if transcript.error:
                break
    if transcript.error or not transcript.image_id:
        raise _failed(plan, transcript)
    labels = recorded_arch(engine, transcript.image_id)
    report(
        BuildEvent("note",
                   f"torch architectures: {labels[ARCH_LIST] or '(none)'} ({labels[ARCH_SOURCE]})"))
    # labels only: no layer re-runs
    labels |= {k: v for k, v in plan.labels.items() if k in PROJECT_LABELS}
    engine.tag(add_labels(engine, plan, transcript.image_id, labels), plan.tag)
    # recorded: kdkit.image.buildlog (the hours `kdkit close` counts)
    facts = engine.require_image(plan.tag)
    return recorded(plan.project.root, plan.backend.name, BuildResult(
        plan.tag, facts.id, facts.size, time.monotonic() - started, transcript.steps,
        facts.labels, plan.network))


def add_labels(engine: Any, plan: BuildPlan, image_id: str, labels: dict[str, str]) -> str:
    """A child of ``image_id`` carrying ``labels``: ``FROM <id>`` built through the same SDK call,
    no network.

    Labels known only once the image exists (what its torch says) cannot be build arguments of the
    main build; this one-instruction build adds no layer and is cached like any other.
    """
    transcript = _Transcript(lambda _event: None)
    with tempfile.TemporaryFile(prefix="kdkit-labels-") as context:
        write_context([("Dockerfile", f"FROM {image_id}\n".encode())], context)
        for event in engine.build(context, dockerfile="Dockerfile", buildargs={}, nocache=False,
                                  network="none",
                                  labels=labels):
            transcript.feed(event)
            if transcript.error:
                break
    if transcript.error or not transcript.image_id:
        raise _failed(plan, transcript)
    return transcript.image_id
