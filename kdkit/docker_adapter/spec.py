"""A container described once (:class:`ContainerSpec`), and its two translations:
:func:`sdk_arguments` for the Docker SDK's ``containers.create`` and :func:`cli_arguments` for the
``docker run`` command line, so ``kdkit run --print`` cannot drift from what ``kdkit run`` does.
Re-exported by
:mod:`kdkit.docker_adapter`.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Mount:
    """A bind mount: host folder -> container path."""

    source: Path
    target: str
    read_only: bool


@dataclass(frozen=True)
class ContainerSpec:
    """Everything that defines a container run, independent of how it is started.

    ``env`` holds values read from ``env_file``; it is never part of a repr, a log or the
    printed command line, which names the file instead.
    """

    image: str
    command: list[str] | None = None
    user: str | None = None
    network: str = "none"
    mounts: list[Mount] = field(default_factory=list)
    workdir: str | None = None
    env_file: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    extra_env: Mapping[str, str] = field(default_factory=dict)
    gpus: str | list[str] | None = None  # CUDA device request: "all" or device ids
    devices: list[str] = field(default_factory=list)
    group_add: list[str] = field(default_factory=list)
    security_opt: list[str] = field(default_factory=list)
    shm_size: str | None = None
    ipc_mode: str | None = None
    # Confinement (kdkit.machine.run.confinement says why each is chosen).
    read_only: bool = False  # the image's own filesystem cannot be written
    tmpfs: Mapping[str, str] = field(default_factory=dict)  # container path -> tmpfs mount options
    cap_drop: list[str] = field(default_factory=list)
    no_new_privileges: bool = False
    pids_limit: int | None = None
    # An init as PID 1 (Docker's --init, its docker-init: tini) that passes SIGTERM on to the
    # command and reaps orphans: a shell or a program as PID 1 ignores a signal it set no handler
    # for (kdkit.image.container).
    init: bool = False
    # Who the container belongs to (kdkit.machine.naming: dev.kdkit.run-id, .project, .role), so one
    # left running after a lost connection is found by its run; ``name`` the engine's name for it
    # (None: the engine's own).
    labels: Mapping[str, str] = field(default_factory=dict)
    name: str | None = None


def sdk_arguments(spec: ContainerSpec) -> dict[str, Any]:
    """``containers.create`` keyword arguments for ``spec``."""
    from docker.types import DeviceRequest
    from docker.types import Mount as SdkMount

    kwargs: dict[str, Any] = {
        "image": spec.image,
        "command": spec.command,
        "user": spec.user,
        "network_mode": spec.network,
        "working_dir": spec.workdir,
        "environment": {**spec.env, **spec.extra_env},
        "mounts": [SdkMount(m.target, str(m.source), type="bind", read_only=m.read_only)
                   for m in spec.mounts],
        "devices": [f"{d}:{d}:rwm" for d in spec.devices],
        "group_add": list(spec.group_add),
        "security_opt": (["no-new-privileges"] if spec.no_new_privileges else [])
        + list(spec.security_opt),
        "shm_size": spec.shm_size,
        "ipc_mode": spec.ipc_mode,
        "read_only": spec.read_only or None,
        "tmpfs": dict(spec.tmpfs),
        "cap_drop": list(spec.cap_drop),
        "pids_limit": spec.pids_limit,
        "init": spec.init or None,
        "labels": dict(spec.labels),
        "name": spec.name,
    }
    if spec.gpus == "all":
        kwargs["device_requests"] = [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    elif spec.gpus:
        kwargs["device_requests"] = [
            DeviceRequest(device_ids=list(spec.gpus), capabilities=[["gpu"]])]
    return {key: value for key, value in kwargs.items() if value not in (None, [], {})}


def cli_arguments(spec: ContainerSpec) -> list[str]:
    """The ``docker run`` argument vector equivalent to :func:`sdk_arguments`.

    ``--rm`` because kdkit removes its containers; ``--pull never`` because kdkit never pulls.
    """
    gpus = "all" if spec.gpus == "all" else f'"device={",".join(spec.gpus)}"' if spec.gpus else None
    mounts = [f"type=bind,{_csv_field(f'source={m.source}', always=True)},"
              f"{_csv_field(f'target={m.target}')}" + (",readonly" if m.read_only else "")
              for m in spec.mounts]
    return ["docker", "run", "--rm", "--pull", "never", *(["--init"] if spec.init else []),
            "--network", spec.network,
            *_flags("--user", [spec.user]), *(["--read-only"] if spec.read_only else []),
            *_flags("--tmpfs", [f"{path}:{options}" for path, options in spec.tmpfs.items()]),
            *_flags("--cap-drop", spec.cap_drop),
            *(["--security-opt", "no-new-privileges"] if spec.no_new_privileges else []),
            *_flags("--pids-limit", [None if spec.pids_limit is None else str(spec.pids_limit)]),
            *_flags("--mount", mounts), *_flags("--workdir", [spec.workdir]),
            *_flags("--env-file", [None if spec.env_file is None else str(spec.env_file)]),
            *_flags("--env", [f"{name}={value}" for name, value in spec.extra_env.items()]),
            *_flags("--gpus", [gpus]), *_flags("--device", spec.devices),
            *_flags("--group-add", spec.group_add),
            *_flags("--security-opt", spec.security_opt), *_flags("--shm-size", [spec.shm_size]),
            *_flags("--ipc", [spec.ipc_mode]), *_flags("--name", [spec.name]),
            *_flags("--label", [f"{k}={v}" for k, v in spec.labels.items()]),
            spec.image, *(spec.command or [])]


def _csv_field(field: str, always: bool = False) -> str:
    """A ``--mount`` field as the docker CLI reads the option (a CSV record: docker/cli
    opts/mount.go reads it with encoding/csv): quoted when it holds a comma, a quote or a shell
    variable whose value might, and a host path (``source``) always, since the host's folder names
    are the user's."""
    if always or any(c in field for c in ',"$\n'):
        return '"' + field.replace('"', '""') + '"'
    return field


def _flags(flag: str, values: Sequence[str | None]) -> list[str]:
    """``flag value`` for each value that is set (neither None nor empty)."""
    return [part for value in values if value for part in (flag, value)]


def split_reference(ref: str) -> tuple[str, str]:
    """``repo[:tag]`` -> (repo, tag); a registry port (``localhost:5000/x``) is not a tag."""
    if ":" in ref.rsplit("/", 1)[-1]:
        repository, _, tag = ref.rpartition(":")
        return repository, tag
    return ref, "latest"


def shell_line(argv: Sequence[str]) -> str:
    return shlex.join(argv)
