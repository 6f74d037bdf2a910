"""The pilot under a launcher: where this process stands, said once, and a worker started again.

:func:`place` reads the launchers (kdkit.probe.pilot.launchers.resolve), says on stderr which one
gave the share (``kdkit: share 3 of 8 from torchrun (RANK=3, WORLD_SIZE=8)``), and keeps a process
that shares its node with others on one GPU (:func:`pin`). :func:`local_gpus` counts a node's GPUs
when its launcher does not.

A launcher starts the same command again after a failure: torchrun's ``--max-restarts`` restarts
every worker of the node (TORCHELASTIC_RESTART_COUNT counts them), a Job's pod is retried with the
same index, Slurm requeues a job with the same ID. So a worker placed by a launcher whose run folder
already exists continues it (:func:`continuing`): an unfinished run is resumed (``--resume``'s
checks first, so a changed config, app or input is still refused), a finished one is reported as it
is, never rewritten. A share given by ``--worker``/``--workers`` keeps the usual rule (an existing
folder is refused). Standard library only.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import replace

from kdkit.core.errors import BadInput
from kdkit.core.pilotconfig import PilotConfig, params_hash
from kdkit.core.projectfiles import load_object
from kdkit.core.runfolder import PARAMS
from kdkit.core.runid import RunId
from kdkit.core.runresults import RunFolder
from kdkit.probe.diagnose.host import hardware_hints
from kdkit.probe.pilot.launchers import VISIBLE, Placement, resolve
from kdkit.probe.pilot.origin import check_resume, is_finished
from kdkit.probe.pilot.shares import Share, folder_name


def place(cfg: PilotConfig, worker: int | None, workers: int | None, named: bool) -> Placement:
    """This process's place (``named``: --run-id or --resume was given); said on stderr; its GPU
    kept."""
    placed = resolve(os.environ, worker, workers, named=named,
                     count_gpus=lambda: local_gpus(os.environ, cfg.device))
    if placed.local is not None and placed.share is not None:
        kept = pin(placed.local, os.environ, placed.local_size, amd=hardware_hints() == ["amd"])
        if kept is not None:
            # before the app's process starts: it and its diagnose see one GPU
            os.environ[kept[0]] = kept[1]
        listed = visible_devices(os.environ)
        if listed is not None and len(listed[1]) == 1:
            placed = replace(placed, device=f"{listed[0]}={listed[1][0]}")
    # --worker/--workers: said when a launcher is overruled
    if placed.line() and (placed.launched or placed.note):
        kept_line = f"; keeps {placed.device}" if placed.device else ""
        print(f"kdkit: {placed.line()}{kept_line}", file=sys.stderr, flush=True)
    return placed


def continuing(cfg: PilotConfig, run_id: RunId, share: Share | None,
               placed: Placement) -> tuple[RunId | None, RunFolder | None]:
    """For a worker its launcher started again: (the run ID to resume, None), or (None, its finished
    folder); (None, None) when the worker's folder does not exist yet."""
    path = cfg.runs_dir / folder_name(run_id, share)
    if not (path / PARAMS).is_file():
        return None, None
    run = RunFolder(path)
    again = f" (restart {placed.restarts})" if placed.restarts else ""
    # reported only when it is this very run: the same parameters, app and inputs
    if is_finished(run):
        recorded = load_object(path / PARAMS, "run parameters")
        check_resume(cfg, run, recorded, params_hash(cfg.resolved()),
                     restarted=True, finished_ok=True)
        print(f"kdkit: {path} is finished{again}: nothing to do; its summary follows",
              file=sys.stderr, flush=True)
        return None, run
    print(f"kdkit: {path} exists{again}: resuming it", file=sys.stderr, flush=True)
    return run_id, None


# ---------------------------------------------------------------- the GPUs of this node


def visible_devices(env: Mapping[str, str]) -> tuple[str, list[str]] | None:
    """The first of CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES that is set, and the devices it
    lists."""
    for name in VISIBLE:
        if name in env:
            return name, [item.strip() for item in env[name].split(",") if item.strip()]
    return None


def local_gpus(env: Mapping[str, str], device: str) -> int:
    """The GPUs this process sees: the devices listed for it, else torch's count (imported only
    here, and not for a CPU pilot)."""
    listed = visible_devices(env)
    if listed is not None:
        return len(listed[1])
    if device == "cpu":
        return 0
    try:
        import torch

        return int(torch.cuda.device_count())
    except Exception:  # no torch, or a broken one: the node is one worker, and diagnose says why
        return 0


def pin(local: int, env: Mapping[str, str], local_size: int | None = None, *,
        amd: bool = False) -> tuple[str, str] | None:
    """The variable and device that keep the process of local rank ``local`` on one GPU (None: leave
    them).

    One device listed (CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES): the launcher already gave this
    process its GPU. Several: the ``local``-th of them, in the same variable (refused when there are
    fewer). None listed: device ``local`` (HIP_VISIBLE_DEVICES on an AMD machine), unless the
    process is alone on its node.
    """
    listed = visible_devices(env)
    if listed is not None:
        name, devices = listed
        if len(devices) <= 1:
            return None
        if local >= len(devices):
            raise BadInput(f"{name}={env[name]} lists {len(devices)} GPUs for the processes of "
                           f"this node, but this one is local worker {local}; start one process "
                           "per listed GPU")
        return name, devices[local]
    if local_size == 1:
        return None
    return (VISIBLE[1] if amd else VISIBLE[0]), str(local)
