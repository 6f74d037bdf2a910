"""`kdkit run --workers N`: one container per GPU over separate shares of the pilot, then one
gathering.

Worker ``i`` gets GPU ``i`` only (CUDA: a device request for device id ``i``; ROCm: the
``i``-th render node; the cpu backend: no device, and no GPU limit) and runs the image's own
steps — diagnose, verify-env, the pilot — with ``kdkit pilot --run-id R --worker i --workers N``
into the shared runs/ mount, so its results land in ``runs/R-w<i>of<N>/``. The containers run
side by side; their output is prefixed ``[w<i>]`` line by line.

The gathering then runs on the host, through the same probe code the image carries
(:mod:`kdkit.probe.pilot.gather`): it only reads JSON and hashes files, so it needs neither torch
nor a GPU nor another container start, and the folders it reads are the host's runs/ anyway.
Its verdict is the run's exit code. A worker whose container failed before its pilot began
leaves no folder, which the gathering names; only when no worker left any folder is a
container's own exit code the answer.

Ctrl-C (SIGINT) or SIGTERM to kdkit stops every container the way ``docker stop`` does
(SIGTERM, :data:`~kdkit.docker_adapter.STOP_GRACE_S`, SIGKILL; a second Ctrl-C skips the
grace): each pilot gets the SIGTERM itself, because the containers' command ends with ``exec
kdkit pilot`` under an init that passes it on (``--init``), and closes its folder with
stop.json saying why. kdkit waits for them, removes them, names each folder and how to finish
it (:func:`stopped_lines`), gathers nothing, and exits 130 (SIGINT) or 143 (SIGTERM): 128 +
the signal's number, as shells report it (:class:`kdkit.core.errors.Interrupted`).
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.core.checksums import SUMS
from kdkit.core.errors import BadInput, Interrupted
from kdkit.core.runfolder import gathered_folder, worker_folder
from kdkit.core.runverify import read_run
from kdkit.core.stopsignals import HungUp
from kdkit.core.stopsignals import interrupts as interrupts  # kdkit run's and the CLI's name for it
from kdkit.docker_adapter import SIGNALLED, ContainerSpec, Engine, Running, shell_line
from kdkit.machine.host import HostFacts, device_access
from kdkit.machine.naming import container_name, host_run_id, labels_for
from kdkit.machine.run import APP, RunPlan, prepare_run

if TYPE_CHECKING:
    from typing import TypedDict

    class WorkerAccess(TypedDict):
        """A worker's ContainerSpec device fields: the base spec's replaced by its own GPU's."""

        gpus: str | list[str] | None
        devices: list[str]
        group_add: list[str]

# The image's default CMD (Dockerfile.common), with the worker's share added to the pilot.
# containers side by side on one host: no host has more GPUs; the cpu backend is bounded too
MAX_WORKERS = 256
STEPS = 'kdkit diagnose --expect "$KDKIT_BACKEND" && kdkit verify-env --lock "$KDKIT_LOCK_FILE" && '


def gpu_count(backend: str, host: HostFacts) -> int | None:
    """GPUs this host offers ``backend``: nvidia-smi's rows, or the render nodes; None (no limit) on
    cpu."""
    if backend == "cuda":
        return len(host.nvidia_gpus or []) // 2  # host_facts keeps index and UUID of each GPU
    if backend == "rocm":
        return len(host.render_nodes)
    return None


def check_workers(workers: int, backend: str, host: HostFacts) -> None:
    """One worker per GPU: more workers than GPUs is BadInput (exit 2), with where the count came
    from."""
    count = gpu_count(backend, host)
    if count is not None and workers > count:
        source = "`nvidia-smi -L`" if backend == "cuda" else "/dev/dri/renderD*"
        raise BadInput(f"--workers {workers}: this host has {count} GPU(s) ({source}); one worker "
                       f"per GPU, so use --workers {count} or fewer")


@dataclass(frozen=True)
class WorkersPlan:
    base: RunPlan
    run_id: str
    specs: list[ContainerSpec]
    folders: list[Path]  # runs/<run_id>-w<i>of<N> on the host, one per worker
    out: Path  # where the gathering writes the run's one summary


def worker_spec(base: RunPlan, run_id: str, worker: int, workers: int) -> ContainerSpec:
    """Worker ``worker``'s container: the base spec, its own GPU, the pilot restricted to its
    share."""
    assert base.host is not None
    gpus = None if base.backend == "cpu" else [str(worker)]
    access: WorkerAccess = {"gpus": None, "devices": [], "group_add": [],
                            **device_access(base.backend, base.host, gpus, base.image.labels)}
    # gets SIGTERM
    pilot = f"exec kdkit pilot {APP} --run-id {run_id} --worker {worker} --workers {workers}"
    return replace(base.spec, command=["/bin/sh", "-c", STEPS + pilot], **access)


def _run_id(base: RunPlan, workers: int) -> str:
    """The run's shared ID: the pilot's own (kdkit.core.runfolder.new_run_id and its one collision
    rule), free for every worker folder and the gathering (kdkit.machine.naming.host_run_id). The
    containers make the folders; a run that takes the name meanwhile makes their pilots refuse it
    (RunFolder.create never reuses a folder)."""
    return host_run_id(base.project, base.runs, lambda candidate: [
        *(worker_folder(candidate, i, workers) for i in range(workers)),
        gathered_folder(candidate)])


def prepare_workers(project_dir: Path | None, workers: int, *, gpus: str | None = None,
                    command: list[str] | None = None, **run_options: Any) -> WorkersPlan:
    """Check the host as `kdkit run` does, then that it has a GPU per worker; nothing is started."""
    if workers < 1:
        raise BadInput(f"--workers {workers}: expected a whole number >= 1")
    if workers > MAX_WORKERS:
        raise BadInput(f"--workers {workers}: at most {MAX_WORKERS} containers side by side on one "
                       "host; use fewer (one per GPU)")
    if gpus is not None:
        raise BadInput(f"--gpus {gpus} with --workers: worker i uses GPU i; drop --gpus")
    if command:
        raise BadInput("--workers runs the pilot in every container; drop the command after --")
    base = prepare_run(project_dir, **run_options)
    assert base.host is not None
    check_workers(workers, base.backend, base.host)
    run_id = _run_id(base, workers)
    specs = [replace(worker_spec(base, run_id, i, workers), name=container_name(run_id, i),
                     labels={**base.spec.labels, **labels_for(base.project.root, run_id, "worker")})
             for i in range(workers)]
    folders = [base.runs / worker_folder(run_id, i, workers) for i in range(workers)]
    return WorkersPlan(base, run_id, specs, folders, base.runs / gathered_folder(run_id))


def gather_line(plan: WorkersPlan) -> list[str]:
    return ["kdkit", "gather", *map(str, plan.folders), "--project", str(plan.base.project.root),
            "--out", str(plan.out)]


def print_worker_lines(plan: WorkersPlan) -> list[str]:
    """Host steps, the N ``docker run`` lines (in the background, side by side), ``wait``, the
    gathering."""
    from kdkit.docker_adapter import cli_arguments

    runs = [shell_line(cli_arguments(spec)) + " &" for spec in plan.specs]
    return [step.shell
            for step in plan.base.host_steps] + runs + ["wait", shell_line(gather_line(plan))]


class Prefixed:
    """One worker's output, a whole line at a time behind ``[w<i>]``, so side-by-side logs stay
    readable."""

    def __init__(self, label: str, sink: Callable[[bytes], None]) -> None:
        self.prefix, self.sink, self.rest = f"[{label}] ".encode(), sink, b""

    def __call__(self, chunk: bytes) -> None:
        lines = (self.rest + chunk).split(b"\n")
        self.rest = lines.pop()
        if lines:
            self.sink(b"".join(self.prefix + line + b"\n" for line in lines))

    def flush(self) -> None:
        if self.rest:
            self.sink(self.prefix + self.rest + b"\n")
            self.rest = b""


@dataclass(frozen=True)
class WorkersResult:
    # each container's exit code; None for one never started (the stop came first)
    codes: list[int | None]
    # kdkit.probe.pilot.gather.Gathered, or None when no worker left a folder or it was stopped
    gathered: Any
    exit_code: int
    interrupted: Interrupted | None = None  # the signal that stopped the run


def _run_one(spec: ContainerSpec, output: Prefixed, engine: Engine | None, running: Running) -> int:
    from kdkit.docker_adapter import connect

    try:
        # a connection per thread: the SDK's is not shared
        return (engine or connect()).run(spec, output, running)
    finally:
        output.flush()


def _stop_all(running: Running, futures: list[Future[int]], engine: Engine | None,
              signum: int) -> tuple[list[int | None], bool]:
    """Stop every container of the run (docker stop, side by side), then each one's exit code once
    it ended, and whether the stop ended any: one the SIGTERM reached exited as a signal ends a
    process, or one never started. When none, every container had ended on its own before the stop,
    with its verdict."""
    from kdkit.docker_adapter import connect

    reached: list[str] | None = None
    # a second interrupt: the stop has killed them without the grace
    with suppress(KeyboardInterrupt):
        reached = (engine or connect()).stop(running.begin_stop(signum))
    codes = [None if future.exception() is not None else future.result() for future in futures]
    return codes, reached is None or None in codes or (bool(reached)
                                                       and any(c >= SIGNALLED for c in codes if c))


def execute_workers(plan: WorkersPlan, on_output: Callable[[bytes], None] | None = None,
                    engine: Engine | None = None) -> WorkersResult:
    """Make the host steps, run the N containers side by side to their end, then gather; an
    interrupt stops them all (the module's docstring) and gathers nothing."""
    from kdkit.probe.pilot.gather import gather

    for step in plan.base.host_steps:
        step.action()
    lock, running = threading.Lock(), Running()

    def sink(data: bytes) -> None:
        with lock:
            (on_output or sys.stdout.buffer.write)(data)

    pool, hung_up = ThreadPoolExecutor(
        max_workers=len(plan.specs), thread_name_prefix="kdkit-worker"), False
    try:
        futures = [pool.submit(_run_one, spec, Prefixed(f"w{i}", sink), engine, running)
                   for i, spec in enumerate(plan.specs)]
        try:
            codes: list[int | None] = [future.result() for future in futures]
        # the connection is gone, not the run: every container runs on, nothing waits
        except HungUp as lost:
            hung_up = True
            return WorkersResult([None] * len(futures), None, lost.exit_code, lost)
        except KeyboardInterrupt as exc:
            stop = exc if isinstance(exc, Interrupted) else Interrupted()
            codes, stopped = _stop_all(running, futures, engine, stop.signum)
            if stopped:
                return WorkersResult(codes, None, stop.exit_code, stop)
    finally:
        # after a hangup the caller leaves at once (os._exit), threads and all
        pool.shutdown(wait=not hung_up)
    present = [folder for folder in plan.folders if folder.is_dir()]
    if not present:
        return WorkersResult(codes, None, next((c for c in codes if c), 1))
    gathered = gather(present, plan.out, plan.base.project.root)
    return WorkersResult(codes, gathered, 0 if gathered.summary["verdict"] == "pass" else 1)


# ---------------------------------------------------------------- after a stop


def folder_state(folder: Path) -> str:
    """What a stop left in one run folder: closed with its stop reason, left open, or no folder at
    all."""
    if not folder.is_dir():
        return f"{folder}: no run folder (the stop came before its pilot began)"
    run = read_run(folder)
    if not (folder / SUMS).is_file():
        return f"{folder}: not closed (its pilot was killed before it could close the folder)"
    said = f"stopped: {run.stop_reason}" if run.stop_reason else f"verdict {run.verdict}"
    return f"{folder}: closed, {said}"


def _run_again(plan: RunPlan, gpu: str | None) -> list[str]:
    """``kdkit run`` with the options that give the same container again (image, GPU, network, env
    file)."""
    spec = plan.spec
    return ["kdkit", "run", str(plan.project.root), "--image", plan.image.ref,
            *(["--gpus", gpu] if gpu is not None and plan.backend != "cpu" else []),
            *(["--network", spec.network] if spec.network != "none" else []),
            *(["--env-file", str(spec.env_file)] if spec.env_file else [])]


def stopped_lines(plan: WorkersPlan, stop: Interrupted) -> list[str]:
    """One line per worker after a stop: where its folder is, in what state, and how to finish it;
    then the gathering to run once every worker is finished."""
    lines = (
        [f"Stopped by {stop.name}: every container was stopped and removed; nothing was gathered."])
    for i, folder in enumerate(plan.folders):
        how = "start it again" if not folder.is_dir() else "finish it"
        pilot = ["kdkit", "pilot", APP, *(["--resume"] if folder.is_dir() else ["--run-id"]),
                 plan.run_id,
                 "--worker", str(i), "--workers", str(len(plan.folders))]
        lines.append(f"  w{i}: {folder_state(folder)}; {how}: "
                     f"{shell_line([*_run_again(plan.base, str(i)), '--', *pilot])}")
    lines.append(f"  then gather: {shell_line(gather_line(plan))}")
    return lines


def stopped_run_lines(plan: RunPlan, folders: list[Path], stop: Interrupted) -> list[str]:
    """The same for a plain ``kdkit run``: its container was stopped; each new folder and
    ``--resume``."""
    # kdkit.docker_adapter.Stopped: how the stop ended it
    ended = getattr(stop, "container_exit", None)
    killed = ": killed after the grace" if ended == SIGNALLED + signal.SIGKILL else ""
    how = f" (exit {ended}{killed})" if ended is not None else ""
    lines = [f"Stopped by {stop.name}: the container was stopped{how} and removed."]
    lines += [f"  {folder_state(folder)}; finish it: "
              f"{shell_line([*_run_again(plan, None), '--resume', folder.name])}"
              for folder in folders]
    return lines if folders else [*lines, "  no run folder was made; run it again"]
