"""The container kdkit starts from a project's image, as far as it does not depend on the host.

Where the project sits in the image, who runs it, how it is confined, what it mounts: one
:class:`~kdkit.docker_adapter.ContainerSpec`, made by :func:`container_spec`. `kdkit run`
(:mod:`kdkit.machine.run`) fills it with this host's facts and starts it, or prints it as a
``docker run`` line. A bundle's RUN.md (:mod:`kdkit.transfer.bundle`) fills it with shell
variables that :func:`shell_prelude` computes on the rented host by the same rules, and prints it
through the same :func:`~kdkit.docker_adapter.cli_arguments` (:func:`portable_line`): no flag is
written twice, so RUN.md cannot drift from `kdkit run`. Why each confining flag is chosen is said
once, in :mod:`kdkit.machine.run`.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kdkit.config.project import Project
from kdkit.core.errors import BadInput
from kdkit.core.projectfiles import real_inside
from kdkit.docker_adapter import ContainerSpec, Mount, cli_arguments
from kdkit.probe.diagnose.host import SHM_MINIMUM

APP = "/app"  # the project's folder inside the image (Dockerfile.common)
IMAGE_UID = 10001  # the image's non-root user (Dockerfile.common)
HOME = "/home/kdkit"  # that user's home in the image; a tmpfs in every container kdkit starts
# the run's on-disk cache in the container: the project's CACHE_FOLDER, writable, kept
CACHE = "/cache"
CACHE_FOLDER = ".kdkit-cache"
CACHE_ENV = {"HF_HOME": f"{CACHE}/huggingface", "TORCH_HOME": f"{CACHE}/torch",
             "TRITON_CACHE_DIR": f"{CACHE}/triton",
             "XDG_CACHE_HOME": CACHE}
MOUNTS = "/mnt"  # a declared mount NAME of kdkit.json is at /mnt/NAME
PIDS_PER_CPU = 64
PIDS_FLOOR = 4096
SCRATCH_CAP = 64 << 30  # /dev/shm, /tmp and HOME: a quarter of memory, SHM_MINIMUM to this


def scratch_size(memory_bytes: int) -> str:
    """The size of /dev/shm, /tmp and HOME in Docker's notation: a quarter of the host's memory,
    at least what `kdkit diagnose` asks of /dev/shm (SHM_MINIMUM), at most SCRATCH_CAP."""
    size = min(max(memory_bytes // 4, SHM_MINIMUM), SCRATCH_CAP)
    return f"{size >> 20}m"


def pids_limit(cpus: int) -> int:
    """Room for the threads of every process of a PyTorch job on this host, not for a fork bomb."""
    return max(PIDS_FLOOR, PIDS_PER_CPU * cpus)


def confinement(uid: str, gid: str, size: str, pids: int) -> dict[str, Any]:
    """ContainerSpec fields that confine every container kdkit starts (kdkit.machine.run says
    why)."""
    scratch = f"rw,exec,nosuid,nodev,size={size}"
    return {"user": f"{uid}:{gid}", "read_only": True, "cap_drop": ["ALL"],
            "no_new_privileges": True,
            "pids_limit": pids, "shm_size": size,
            "tmpfs": {
                "/tmp": f"{scratch},mode=1777", HOME: f"{scratch},uid={uid},gid={gid},mode=0700"}}


def project_mounts(root: Path, inputs: str, runs: str) -> list[Mount]:
    """The pilot inputs read-only and the runs folder writable, each at its place under APP."""
    return [Mount(root / inputs, f"{APP}/{inputs}", True),
            Mount(root / runs, f"{APP}/{runs}", False)]


def source_mounts(root: Path) -> list[Mount]:
    """The host project's kdkit.json, config/ and src/ read-only over the image's copies
    (kdkit.image.context: PROJECT_FOLDERS): what runs is what the user sees, an edit after `kdkit
    build` runs as edited. Each folder and every link in it must resolve inside the project
    (projectfiles.real_inside), as for the build context."""
    from kdkit.image.context import PROJECT_FOLDERS

    mounts = []
    for folder in PROJECT_FOLDERS:
        base = root / folder
        if not base.is_dir():
            continue
        for path in [base, *(p for p in base.rglob("*") if p.is_symlink())]:
            if real_inside(root, path) is None:
                raise BadInput(f"{path}: leads to {os.path.realpath(path)}, outside the project (a "
                               f"symbolic link); `kdkit run` mounts {folder}/ as it is: copy the "
                               "file in or remove the link")
        mounts.append(Mount(Path(os.path.realpath(base)), f"{APP}/{folder}", True))
    # the project file too: it names the pilot config, extensions
    marker = real_inside(root, root / "kdkit.json")
    return ([Mount(marker, f"{APP}/kdkit.json", True)] if marker is not None and marker.is_file()
            else []) + mounts


def named_mounts(project: Project, pilot: dict[str, Any], inputs: Path) -> list[Mount]:
    """Read-only mounts of what the pilot config names outside the inputs folder and the image's own
    folders (kdkit.image.context: config/, src/): a model's folder, a manifest or answer schema kept
    elsewhere. `kdkit run` adds them to its container; a bundle's RUN.md to its ``docker run`` line
    (bundle.json's ``mounts``)."""
    from kdkit.core.pilotconfig import named_paths
    from kdkit.image.context import PROJECT_FOLDERS

    held, mounts = [inputs, *(project.root / folder for folder in PROJECT_FOLDERS)], []
    for where, value in ((w, os.path.normpath(v)) for w, v in named_paths(pilot)):
        if not any(base == project.root / value or base in (project.root / value).parents
                   for base in held):
            mounts.append(
                Mount(
                    inside_project(project, value, where), f"{APP}/{Path(value).as_posix()}", True))
            held.append(project.root / value)
    return mounts


def inside_project(project: Project, rel: str, what: str) -> Path:
    """The folder the container gets, links resolved (projectfiles.real_inside, kdkit's one
    rule)."""
    path = real_inside(project.root, project.root / rel)
    if path is None:
        raise BadInput(
            f"{project.pilot_config_path}: {what} {rel!r} leaves the project; keep it inside")
    return path


def container_spec(image: str, mounts: list[Mount], confined: Mapping[str, Any],
                   access: Mapping[str, Any], *,
                   network: str = "none", command: list[str] | None = None,
                   env_file: Path | None = None,
                   env: Mapping[str, str] | None = None,
                   extra_env: Mapping[str, str] | None = None) -> ContainerSpec:
    """The one container spec: the project's image at APP, HOME a tmpfs, no network unless asked,
    and an init as PID 1 (``init``: Docker's ``--init``). The image's command is ``/bin/sh -c "kdkit
    diagnose && kdkit verify-env && exec kdkit pilot"``; as PID 1 that shell ignores SIGTERM (the
    kernel delivers no signal to a PID 1 that set no handler for it), so until the ``exec`` a
    ``docker stop`` would wait out its grace and SIGKILL the run, and so would any command given
    after ``--``. Docker's init (docker-init, which is tini) is PID 1 instead, passes the signal on
    and reaps orphans (https://docs.docker.com/reference/cli/docker/container/run/#init): the shell
    ends at once in diagnose or verify-env, the pilot closes its run folder."""
    return ContainerSpec(image=image, command=command or None, network=network, mounts=mounts,
                         workdir=APP,
                         env_file=env_file, env=env or {},
                         extra_env={**(extra_env or {}), "HOME": HOME}, init=True,
                         **confined,
                         **access)


# ---------------------------------------------------------------- the same spec, for a host kdkit
# has not seen

RUNS_OWNER = ("The container runs as you (your uid and gid); started by root, it runs as the "
              f"image's user {IMAGE_UID}, which is given the runs folder (chown; never chmod 777)")
# A shell variable kdkit puts into the spec is marked with NUL, which no path, image name or config
# value holds: a "$PWD" or "$kd_uid" spelled by a value is escaped like any other "$" (shell_words).
_VARIABLES = {"uid": "\0kd_uid\0", "gid": "\0kd_gid\0",
              "size": "\0kd_scratch\0", "pids": "\0kd_pids\0"}
# the device flags the prelude collects for ROCm ("$@"), spliced in before the image
_ROCM_DEVICES = "\0@\0"


def shell_prelude(runs: str, backend: str) -> list[str]:
    """Shell lines that compute, on the host that runs them, what :func:`portable_line` uses: who
    runs the container (never root; root hands ``runs`` to IMAGE_UID), the scratch size, the pids
    limit, and for ROCm /dev/kfd and each render node with the group that owns it. The numbers are
    this module's."""
    floor, cap = SHM_MINIMUM >> 20, SCRATCH_CAP >> 20
    lines = [f"mkdir -p {shlex.quote(runs)}",
             "kd_uid=$(id -u) kd_gid=$(id -g)",
             f'if [ "$kd_uid" = 0 ]; then kd_uid={IMAGE_UID} kd_gid={IMAGE_UID}; '
             f"chown {IMAGE_UID}:{IMAGE_UID} {shlex.quote(runs)}; fi",
             "kd_scratch=$(awk '/^MemTotal:/ { m = int($2 / 4096); "
             f"if (m < {floor}) m = {floor}; if (m > {cap}) m = {cap}; print m \"m\" }}' "
             "/proc/meminfo)",
             f"kd_pids=$(( $(getconf _NPROCESSORS_ONLN) * {PIDS_PER_CPU} )); "
             f'if [ "$kd_pids" -lt {PIDS_FLOOR} ]; then kd_pids={PIDS_FLOOR}; fi']
    # as kdkit.machine.host.rocm_access: each node, and each group owning one (not root's)
    if backend == "rocm":
        lines += ["set -- && kd_groups=",
                  'for node in /dev/kfd /dev/dri/renderD*; do set -- "$@" --device "$node"; '
                  'kd_groups="$kd_groups $(stat -c %g "$node")"; done',
                  'for group in $(printf "%s\\n" $kd_groups | sort -un); do [ "$group" = 0 ] || '
                  'set -- "$@" --group-add "$group"; done']
    return lines


def portable_spec(image: str, root: str, inputs: str, runs: str, backend: str,
                  named: Sequence[str] = ()) -> ContainerSpec:
    """The spec `kdkit run` would make, with the host's facts left as the prelude's shell variables;
    ``root`` is the project's folder on that host, ``$PWD`` or below it (``$PWD/project``);
    ``named``: the project's paths that :func:`named_mounts` mounts read-only (a model's folder), as
    the bundle recorded them. Unlike `kdkit run` (kdkit.machine.mounts), it mounts neither config/
    and src/ over the image's nor the cache nor kdkit.json's declared mounts: this line runs the
    bundle's image as it was verified with the bundle, without kdkit; the declared folders (a model)
    do not travel in a bundle, and `kdkit run` on that host mounts all of them."""
    access: dict[str, str] = {"gpus": "all"} if backend == "cuda" else {}
    confined = confinement(_VARIABLES["uid"], _VARIABLES["gid"], _VARIABLES["size"], PIDS_FLOOR)
    here = Path("\0PWD\0" + root.removeprefix("$PWD") if root.startswith("$PWD") else root)
    mounts = project_mounts(here, inputs, runs) + [Mount(here / rel, f"{APP}/{rel}", True)
                                                   for rel in named]
    return container_spec(image, mounts, confined, access)


def portable_line(spec: ContainerSpec, backend: str) -> str:
    """``docker run`` for :func:`portable_spec`: the words of cli_arguments, the host's facts as
    variables."""
    words = cli_arguments(spec)
    at = words.index("--pids-limit") + 1
    words[at] = _VARIABLES["pids"]
    if backend == "rocm":
        words.insert(words.index(spec.image), _ROCM_DEVICES)
    return shell_words(words)


# the only expansions a RUN.md word may hold, as marked
_SHELL_VARIABLE = re.compile("\0(PWD|kd_[a-z]+)\0")


def shell_words(words: Sequence[str]) -> str:
    """A shell line: a word holding one of the prelude's variables (or ``$PWD``) in double quotes,
    where that variable expands and nothing else does (every other ``$``, quote, backslash and
    backtick escaped, so a path of the project's cannot run anything); the rest quoted only as
    needed."""
    def quote(word: str) -> str:
        if word == _ROCM_DEVICES:
            return '"$@"'
        if not _SHELL_VARIABLE.search(word):
            return shlex.quote(word)
        parts = _SHELL_VARIABLE.split(word)  # text, variable, text, ...
        return '"' + "".join(f"${part}" if i % 2 else re.sub(r'([\\"`$])', r"\\\1", part)
                             for i, part in enumerate(parts)) + '"'

    return " ".join(quote(word) for word in words)
