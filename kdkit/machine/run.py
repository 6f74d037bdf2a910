"""`kdkit run`: the project's image on this machine, with the right device access, or why not.

:func:`prepare_run` checks the host before anything starts and explains each
failure with its fix: the engine (exit 3); the image and its kdkit labels
(3 / 2); for CUDA an engine without the NVIDIA runtime (the error users
otherwise meet is ``could not select device driver "" with capabilities:
[[gpu]]``), GPUs named by ``--gpus`` that do not exist (2) and a host driver
older than the image's CUDA needs (read from the image's labels); for ROCm a
missing ``/dev/kfd``; then the ``--env-file``, read strictly. It returns a
:class:`RunPlan` whose one :class:`~kdkit.docker_adapter.ContainerSpec`
becomes either the container (:func:`execute`) or the equivalent ``docker
run`` line (``--print``), so the two cannot drift.

The container sees the pilot inputs read-only and ``runs/`` read-write,
the project's kdkit.json, ``config/`` and ``src/`` read-only over the image's, the declared mounts
and the cache (:mod:`kdkit.machine.mounts`, which also writes KDKIT_LAUNCH, what params.json records
of the run), secrets only as environment from ``--env-file`` (never printed, logged or
baked), and no network unless asked. Without a command it runs the image's
own: diagnose, verify-env against the baked lock, the pilot. Its exit code is
the verdict.

It is also confined (:func:`confinement`), each flag from Docker's run reference,
https://docs.docker.com/reference/cli/docker/container/run/ :

* ``--user`` always explicit and never root: the image's user 10001:10001 when root starts
  it, else the invoking person's uid:gid (their runs/ stays theirs);
* ``--cap-drop ALL`` (the process needs no capability: device nodes are opened through
  their group, ``--group-add``) and ``--security-opt no-new-privileges`` (no setuid path back,
  moby/moby#20727);
* ``--read-only``: the image cannot be altered; what must be written goes to ``runs/`` (the
  bind mount) or to two tmpfs mounts, ``/tmp`` and ``HOME``. Both are ``exec``, because
  Docker's tmpfs default is ``noexec`` (docker/docs#8138) and the compilers load what they
  build: torch.compile's Inductor writes and loads its kernels under
  ``/tmp/torchinductor_<user>`` (TORCHINDUCTOR_CACHE_DIR, docs.pytorch.org/tutorials/recipes/
  torch_compile_caching_configuration_tutorial.html; a uid without a name becomes
  ``uid_<n>``, torch/_inductor/runtime/cache_dir_utils.py), Triton under ``~/.triton/cache``
  (triton-lang/triton python/triton/runtime/cache.py), other caches under ``~/.cache``.
  HOME is ``/home/kdkit``, a tmpfs owned by the container's user (mode 0700). Both are
  ``nosuid,nodev``;
* ``--pids-limit``: a fork bomb cannot exhaust the host, while threads, which count against
  the limit, have room: torch starts an intra-op and an inter-op pool per process, one
  thread per core each, in the main process, every DataLoader worker and compile worker and
  every rank; 64 per CPU of the engine's host, at least 4096;
* ``--shm-size``: PyTorch's DataLoader workers hand batches over through ``/dev/shm`` and
  Docker's 64 MB is not enough (pytorch/pytorch README, "Using pre-built images"); a quarter
  of the engine host's memory, at least the 1 GiB ``kdkit diagnose`` asks for, at most 64 GiB.
  ``/tmp`` and HOME get the same size. tmpfs takes memory only as it is filled.

ROCm gets ``/dev/kfd`` and the render nodes ``/dev/dri/renderD*`` (never the whole of
``/dev/dri``, which adds the display nodes) with the numeric groups that own them: the two
device flags AMD names (rocm.docs.amd.com/projects/install-on-linux/en/latest/how-to/
docker.html), the group a non-root user needs to open them (ROCm/ROCm-docker#90). AMD marks
``--security-opt seccomp=unconfined`` optional (NUMA memory binding for numactl-style
placement): it is not given, Docker's default seccomp profile stays on.

Host facts (GPUs, driver, device nodes) and each backend's device access from them are
:mod:`kdkit.machine.host`'s.
"""

from __future__ import annotations

import os
import re
import shlex
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kdkit.config.project import Project, load_project
from kdkit.core.errors import BadInput, Interrupted
from kdkit.core.launchrecord import VARIABLE
from kdkit.core.pilotconfig import inputs_folder
from kdkit.core.runfolder import run_folders
from kdkit.core.runid import RunId
from kdkit.core.safetext import printable
from kdkit.core.stopsignals import interrupts
from kdkit.docker_adapter import ContainerSpec, Engine, ImageFacts
from kdkit.image import container

# re-exported: kdkit.machine.workers and tests name it here
from kdkit.image.container import APP as APP
from kdkit.image.container import HOME as HOME
from kdkit.image.container import IMAGE_UID, container_spec, inside_project
from kdkit.image.container import named_mounts as named_mounts  # re-exported: tests name it here
from kdkit.image.labels import (
    LABEL,
    built_image,
    project_lock,
    require_kdkit_labels,
    resumed_command,
)
from kdkit.machine.host import HostFacts, device_access, host_facts, parse_gpus
from kdkit.machine.mounts import run_mounts

NETWORKS = ("none", "bridge", "host")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# ---------------------------------------------------------------- inputs


def read_env_file(path: Path) -> dict[str, str]:
    """NAME=VALUE lines, ``#`` comments and blank lines, as ``docker run --env-file`` reads them.

    Values are taken as written (no quotes removed), like Docker does. Errors name the line,
    never its content: the file holds secrets.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(
            f"--env-file {path}: cannot read it "
            f"({getattr(exc, 'strerror', None) or exc})") from None
    env: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.lstrip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        if not sep or not ENV_NAME.fullmatch(name):
            raise BadInput(f"--env-file {path}:{number}: expected NAME=VALUE (NAME of letters, "
                           "digits and _); fix or comment out that line")
        env[name] = value.rstrip("\r")
    return env


# ---------------------------------------------------------------- the plan


@dataclass(frozen=True)
class HostStep:
    """A change to the host the run needs (a folder to create, an owner to set), shown before it is
    made."""

    description: str
    shell: str
    action: Callable[[], None] = field(repr=False, compare=False)


@dataclass(frozen=True)
class RunPlan:
    project: Project
    backend: str
    image: ImageFacts
    spec: ContainerSpec
    host_steps: list[HostStep]
    runs: Path
    warnings: list[str]
    # the facts the plan was checked against (kdkit run --workers counts GPUs)
    host: HostFacts | None = None
    # chosen on the host (kdkit.machine.naming.with_run_id); None: the pilot's own
    run_id: str | None = None


def _identity(host: HostFacts, runs: Path) -> tuple[tuple[int, int], list[HostStep]]:
    """Who the container runs as (never root), and what runs/ needs so that user can write there.

    A non-root person runs the container as themself (the run folders are theirs). For root,
    the image's own non-root user runs it, and runs/ is handed to that user if it cannot write.
    """
    who = (host.uid, host.gid) if host.uid != 0 else (IMAGE_UID, IMAGE_UID)
    return who, writable_steps(host, runs, "run folders")


def writable_steps(host: HostFacts, folder: Path, what: str,
                   project_root: Path | None = None) -> list[HostStep]:
    """What ``folder`` (runs/, the cache, a writable declared mount) needs so the container's user
    can write it: created when missing; handed to the image's user IMAGE_UID when root runs kdkit
    (chown, never chmod 777). A folder outside ``project_root`` (one the user named with --mount) is
    never handed over: its owner is the user's to change, so one the container's user cannot write
    is refused (exit 2) with the line that would."""
    steps = []
    if not folder.exists():
        steps.append(HostStep(f"create {folder}", f"mkdir -p {shlex.quote(str(folder))}",
                              lambda: folder.mkdir(parents=True, exist_ok=True)))
    if host.uid != 0:
        return steps
    info = folder.stat() if folder.exists() else None
    if info is None or (info.st_uid != IMAGE_UID and not info.st_mode & stat.S_IWOTH):
        chown = f"chown {IMAGE_UID}:{IMAGE_UID} {shlex.quote(str(folder))}"
        if project_root is not None and project_root != folder \
                and project_root not in folder.parents:
            raise BadInput(f"--mount {printable(str(folder))}: writable, but the container's user "
                           f"{IMAGE_UID} cannot write it and kdkit changes no owner outside the "
                           f"project; `{printable(chown)}` if that folder may be given to it, or "
                           "mount a folder of the project")
        steps.append(HostStep(f"give {folder} to the image's user {IMAGE_UID} so it can write its "
                              f"{what}", chown,
                              lambda: os.chown(folder, IMAGE_UID, IMAGE_UID)))
    return steps


def confinement(host: HostFacts, uid: int, gid: int) -> dict[str, Any]:
    """ContainerSpec fields that confine every container `kdkit run` starts (the module's docstring
    says why), sized for this host (kdkit.image.container holds the rules, which a bundle's RUN.md
    shares)."""
    return container.confinement(str(uid), str(gid), container.scratch_size(host.memory_bytes),
                                 container.pids_limit(host.cpus))


def _resolve_image(engine: Engine, project: Project, backend: str | None,
                   image: str | None) -> ImageFacts:
    """The image to run: ``image``, else the newest that `kdkit build` made from the backend's
    current requirements lock or pylock (``--lock-format pylock``):
    :func:`kdkit.image.labels.built_image`."""
    if image is None:
        chosen = project.backend(backend)
        if not chosen.lock.is_file():
            raise BadInput(f"{chosen.lock}: no lock, so no image to run; `kdkit lock` and `kdkit "
                           "build`, or pass --image")
        image = built_image(engine, project, chosen)
    facts = engine.require_image(image)
    require_kdkit_labels(image, facts.labels)
    baked = facts.labels[f"{LABEL}backend"]
    if backend is not None and backend != baked:
        raise BadInput(f"--backend {backend}: image {image} was built for {baked}; pass --backend "
                       f"{baked} or the image of that backend")
    return facts


def prepare_run(project_dir: Path | None, *, backend: str | None = None, image: str | None = None,
                gpus: str | None = None, network: str = "none", env_file: Path | None = None,
                command: list[str] | None = None, resume: RunId | None = None,
                engine: Engine | None = None,
                host: HostFacts | None = None, mounts: Sequence[str] = ()) -> RunPlan:
    """Check everything a run needs and describe the container; nothing is written or started."""
    from kdkit.docker_adapter import connect

    if network not in NETWORKS:
        raise BadInput(f"--network {network}: choose one of {', '.join(NETWORKS)}")
    wanted_gpus = parse_gpus(gpus)
    # --resume's ID is data, checked by its option's type before the engine is asked anything
    if resume is not None and command:
        raise BadInput("--resume ID and a command after --: give one or the other")
    env = read_env_file(env_file) if env_file is not None else {}
    project = load_project(project_dir)
    engine = engine or connect()
    facts = _resolve_image(engine, project, backend, image)
    # the image's own diagnose -> verify-env -> pilot, the pilot finishing that run
    if resume is not None:
        command = resumed_command(facts, resume)
    chosen = facts.labels[f"{LABEL}backend"]
    host = host or host_facts(engine, chosen)
    access = device_access(chosen, host, wanted_gpus, facts.labels)
    pilot = project.pilot_config()
    inputs = inside_project(project, inputs_folder(pilot), "inputs")  # a JSONL corpus: its folder
    runs = inside_project(project, str(pilot["runs"]), "runs")
    if not inputs.is_dir():
        raise BadInput(
            f"{inputs}: pilot inputs folder not found; restore it (see "
            f"{project.pilot_config_path})")
    (uid, gid), steps = _identity(host, runs)
    # kdkit.machine.mounts
    bound, extra = run_mounts(project, pilot, inputs, runs, facts, network, mounts)
    spec = container_spec(facts.ref, bound, confinement(host, uid, gid), access, network=network,
                          command=command,
                          env_file=env_file.resolve() if env_file else None, env=env,
                          extra_env={k: v for k,
                                     v in extra.items() if k not in env or k == VARIABLE})
    steps += [step for m in bound if not m.read_only and m.source != runs
              for step in writable_steps(host, m.source, "files", project.root)]
    warnings = []
    current = project_lock(project, facts.labels)
    if current.is_file():
        from kdkit.core.jsonio import sha256_file

        if sha256_file(current) != facts.labels.get(f"{LABEL}lock.sha256"):
            warnings.append(f"image {facts.ref} was built from another lock than {current}; "
                            "`kdkit build` to bring it up to date")
    return RunPlan(project, chosen, facts, spec, steps, runs, warnings, host)


# ---------------------------------------------------------------- doing it


def print_lines(plan: RunPlan) -> list[str]:
    """The shell lines that reproduce the run without kdkit: host steps, then ``docker run``."""
    from kdkit.docker_adapter import cli_arguments, shell_line

    return [step.shell for step in plan.host_steps] + [shell_line(cli_arguments(plan.spec))]


def execute(plan: RunPlan, on_output: Callable[[bytes], None] | None = None,
            engine: Engine | None = None) -> tuple[int, list[Path]]:
    """Make the host steps, run the container to its end; return (exit code, new run folders).

    SIGINT or SIGTERM meanwhile stops it (:meth:`Engine.run`: Stopped, an Interrupted, when the stop
    ended it); SIGHUP (a lost connection) raises HungUp and leaves the container running, labelled
    with its run; once the container's exit code is known the run has ended on its own, and a signal
    stops nothing: that code is the answer."""
    from kdkit.docker_adapter import connect

    for step in plan.host_steps:
        step.action()
    before = set(run_folders(plan.runs))
    code = None
    try:
        # SIGHUP: kdkit stops following (HungUp), the container runs on
        with interrupts(hangup=True):
            code = (engine or connect()).run(plan.spec, on_output)
    except Interrupted:
        if code is None:
            raise
    return code, [folder for folder in run_folders(plan.runs) if folder not in before]
