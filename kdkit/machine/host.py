"""The host as `kdkit run` sees it, and the device access each backend gets from it.

:func:`host_facts` reads this machine and its engine (GPUs and driver through ``nvidia-smi``, the
NVIDIA runtime, ``/dev/kfd`` and the render nodes with the groups owning them, CPUs and memory);
tests stand in a :class:`HostFacts` for NVIDIA and AMD hardware this machine lacks.
:func:`parse_gpus` reads ``--gpus``, and :func:`device_access` turns the facts into the
:class:`~kdkit.docker_adapter.ContainerSpec` fields of one backend, or refuses with the fix: an
engine without the NVIDIA runtime, an unknown GPU, a driver older than the image's CUDA needs, no
``/dev/kfd``. kdkit.machine.run's docstring says why ROCm gets exactly these nodes and groups.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from kdkit.core import proc
from kdkit.core.builds import driver_floor, version_tuple
from kdkit.core.errors import BadInput, Unavailable
from kdkit.docker_adapter import NVIDIA_ERROR, NVIDIA_FIX, Engine
from kdkit.image.labels import LABEL

if TYPE_CHECKING:
    from typing import TypedDict

    class DeviceAccess(TypedDict, total=False):
        """ContainerSpec fields giving a backend its devices (none for the cpu backend)."""

        gpus: str | list[str]  # CUDA: "all" or the chosen GPUs
        devices: list[str]  # ROCm: /dev/kfd and the render nodes
        group_add: list[str]  # ROCm: the groups owning them

# ---------------------------------------------------------------- the host


@dataclass(frozen=True)
class HostFacts:
    """What this machine offers containers; :func:`host_facts` reads the real ones."""

    uid: int
    gid: int
    cpus: int = 1  # of the engine's host (sizes --pids-limit)
    memory_bytes: int = 0  # of the engine's host (sizes /dev/shm, /tmp and HOME)
    # index and UUID of each GPU; None when nvidia-smi is absent
    nvidia_gpus: list[str] | None = None
    nvidia_driver: str | None = None
    nvidia_runtime: bool = False  # the engine can serve a GPU device request
    kfd: bool = False
    render_nodes: list[str] = field(default_factory=list)
    device_gids: list[int] = field(default_factory=list)


def _nvidia_smi() -> tuple[list[str] | None, str | None]:
    if shutil.which("nvidia-smi") is None:
        return None, None
    done = proc.run(
        ["nvidia-smi", "--query-gpu=index,uuid,driver_version", "--format=csv,noheader"],
        timeout=(30))
    if not done.ok:
        return [], None
    rows = [[cell.strip() for cell in line.split(",")] for line in done.stdout.splitlines()
            if line.strip()]
    ids = [cell for row in rows for cell in row[:2]]
    return ids, rows[0][2] if rows and len(rows[0]) > 2 else None


def _amd_nodes() -> tuple[bool, list[str], list[int]]:
    kfd = Path("/dev/kfd")
    nodes = sorted(str(p)
                   for p in Path("/dev/dri").glob("renderD*")) if Path("/dev/dri").is_dir() else []
    gids = sorted({os.stat(p).st_gid for p in [str(kfd), *nodes] if os.path.exists(p)} - {0})
    return kfd.exists(), nodes, gids


def host_facts(engine: Engine, backend: str) -> HostFacts:
    """Read the facts ``backend`` needs from this machine and its engine."""
    info = engine.info()
    facts = HostFacts(uid=os.getuid(), gid=os.getgid(),
                      cpus=int(info.get("NCPU") or os.cpu_count() or 1),
                      memory_bytes=int(info.get("MemTotal") or 0))
    if backend == "cuda":
        gpus, driver = _nvidia_smi()
        runtime = ("nvidia" in engine.runtimes()
                   or shutil.which("nvidia-container-runtime-hook") is not None)
        facts = replace(facts, nvidia_gpus=gpus, nvidia_driver=driver, nvidia_runtime=runtime)
    elif backend == "rocm":
        kfd, nodes, gids = _amd_nodes()
        facts = replace(facts, kfd=kfd, render_nodes=nodes, device_gids=gids)
    return facts


# ---------------------------------------------------------------- --gpus


def parse_gpus(value: str | None) -> str | list[str] | None:
    """``all`` or a comma list of GPU indexes or UUIDs; anything else is BadInput."""
    if value is None or value == "all":
        return value
    ids = [part.strip() for part in value.split(",")]
    if not ids or any(not re.fullmatch(r"\d+|GPU-[0-9a-fA-F-]+", i) for i in ids):
        raise BadInput(
            f"--gpus {value!r}: expected all or a comma list of GPU indexes or UUIDs, e.g. 0,1")
    return ids


# ---------------------------------------------------------------- device access per backend


def cuda_access(host: HostFacts, gpus: str | list[str] | None,
                labels: dict[str, str]) -> DeviceAccess:
    """The device request for CUDA, after checking runtime, GPU ids and driver."""
    if not host.nvidia_runtime:
        raise Unavailable('the Docker engine has no NVIDIA runtime, so the container would fail '
                          f'with `{NVIDIA_ERROR}`; {NVIDIA_FIX}')
    known = host.nvidia_gpus or []
    if isinstance(gpus, list):
        unknown = [g for g in gpus if g not in known]
        if unknown:
            have = ", ".join(known[::2]) if known else "none"
            raise BadInput(f"--gpus {','.join(gpus)}: no GPU {unknown[0]} on this host (GPUs: "
                           f"{have}); see `nvidia-smi -L`")
    cuda = labels.get(f"{LABEL}torch.cuda", "")
    # pairings.json's floor, as diagnose and check apply it
    floor = driver_floor(cuda) if cuda else None
    needed = floor[0] if floor else None
    if needed and host.nvidia_driver and version_tuple(host.nvidia_driver) < version_tuple(needed):
        raise Unavailable(f"NVIDIA driver {host.nvidia_driver} is older than CUDA {cuda} in the "
                          f"image needs (>= {needed}); upgrade the driver or rebuild for an older "
                          "CUDA (torch_index in kdkit.json, then `kdkit lock` and `kdkit build`)")
    return {"gpus": gpus or "all"}


def rocm_access(host: HostFacts, gpus: str | list[str] | None) -> DeviceAccess:
    """/dev/kfd and the render nodes (all, or the chosen ones) with the groups that own them;
    nothing more."""
    if not host.kfd:
        raise Unavailable("/dev/kfd: not present, so no AMD GPU is usable here (the amdgpu kernel "
                          "driver is not loaded); install the AMD GPU driver (`amdgpu-install "
                          "--usecase=dkms`) and reboot, or run on a machine with an AMD GPU")
    if not host.render_nodes:
        raise Unavailable("/dev/dri/renderD*: no render node, so no AMD GPU is usable here "
                          "although /dev/kfd exists; check the amdgpu driver (`dmesg | grep "
                          "amdgpu`) and `rocm-smi`")
    chosen = host.render_nodes
    if isinstance(gpus, list):
        chosen = []
        for gpu in gpus:
            if not gpu.isdigit() or int(gpu) >= len(host.render_nodes):
                raise BadInput(f"--gpus {','.join(gpus)}: no GPU {gpu} on this host (render nodes: "
                               f"{', '.join(host.render_nodes)}); see `rocm-smi`")
            chosen.append(host.render_nodes[int(gpu)])
    return {"devices": ["/dev/kfd", *chosen], "group_add": [str(g) for g in host.device_gids]}


def device_access(backend: str, host: HostFacts, gpus: str | list[str] | None,
                  labels: dict[str, str]) -> DeviceAccess:
    """ContainerSpec fields giving ``backend`` its devices; raises with the fix when the host
    cannot."""
    if backend == "cuda":
        return cuda_access(host, gpus, labels)
    if backend == "rocm":
        return rocm_access(host, gpus)
    if gpus is not None:
        raise BadInput(f"--gpus {gpus if isinstance(gpus, str) else ','.join(gpus)}: the cpu "
                       "backend uses no GPU; drop --gpus or use --backend cuda|rocm")
    return {}
