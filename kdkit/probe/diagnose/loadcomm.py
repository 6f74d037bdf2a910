"""The load section's all-reduce: one worker process per GPU (torch.distributed, NCCL on CUDA, RCCL
on ROCm under the same name; gloo on the CPU), a checked sum, then timed all-reduces of one buffer.

Bus bandwidth is nccl-tests' definition (github.com/NVIDIA/nccl-tests doc/PERFORMANCE.md): algbw =
bytes / seconds, busbw = algbw * 2(n-1)/n for an all-reduce of n ranks, a figure comparable with the
links' speed whatever n is. kdkit has no nominal interconnect figure per machine, so the reading is
a fact (info); a wrong sum refuses (the machine corrupts data between GPUs).

The workers are this interpreter started on this very kdkit (a venv, the image's folder, kdkit.pyz),
in their own session, killed with their group when they outlast the timeout: a hung NCCL cannot hang
diagnose. Standard library only; torch is imported by the workers.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.core.finding import Finding

if TYPE_CHECKING:
    from typing import TypedDict

    from kdkit.probe.diagnose.points import Rule

    class WorkerConfig(TypedDict):
        """What each all-reduce worker is told (besides its rank and the world size)."""

        backend: str
        device: str
        nbytes: int
        iterations: int
        init: str


GPU_BYTES, CPU_BYTES = 256 << 20, 1 << 20
ITERATIONS = 20
# seconds for the workers together: start, torch import, NCCL rendezvous, the timed loop
TIMEOUT = 180.0


def busbw(nbytes: int, seconds: float, ranks: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s of an all-reduce of ``nbytes`` per rank in ``seconds`` across
    ``ranks``."""
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * 2 * (ranks - 1) / ranks


def allreduce_points(world: int, backend: str, rules: dict[str, Rule], nbytes: int | None = None,
                     timeout: float = TIMEOUT) -> list[Finding]:
    """Run ``world`` workers with ``backend`` (nccl: one per GPU; gloo: on the CPU) and judge the
    result."""
    rule = rules.get("load.allreduce", {})
    kind = "cpu" if backend == "gloo" else "cuda"
    size = nbytes or (CPU_BYTES if kind == "cpu" else GPU_BYTES)
    folder = Path(tempfile.mkdtemp(prefix="kdkit-allreduce-"))
    try:
        result, said = _run_workers(world, {"backend": backend, "device": kind, "nbytes": size,
                                            "iterations": ITERATIONS,
                                            "init": (folder / "rendezvous").as_uri()},
                                    folder, timeout)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    threshold, source = None, rule.get("source")
    if result is None:
        return [Finding("load", "load.allreduce", None, None, "GB/s", threshold, "unknown",
                        f"{backend} all-reduce across {world} processes gave no result: {said}",
                        fix=f"use a torch build with {backend} (the CUDA and ROCm wheels have it); "
                          "NCCL_DEBUG=WARN says why it fails", source=source)]
    algbw, bus = busbw(int(result["bytes"]), float(result["seconds"]), world)
    reading = {"busbw": round(bus, 3), "algbw": round(algbw, 3),
               "bytes": result["bytes"], "ranks": world}
    text = (f"{backend} all-reduce of {result['bytes'] / (1 << 20):,.0f} MiB across {world} ranks: "
            f"busbw {bus:,.2f} GB/s (algbw {algbw:,.2f})")
    if not result["correct"]:
        return [Finding("load", "load.allreduce", None, reading, "GB/s", "the exact sum", "refuse",
                        text + "; the checked all-reduce returned a wrong sum",
                        provider="an all-reduce across the GPUs returns a wrong sum: data is "
                                 "corrupted between them",
                        source=source)]
    return [Finding("load", "load.allreduce", None, reading, "GB/s", threshold, "info",
                    text + "; sum checked (no nominal figure for this machine's interconnect)",
                    source=source)]


def _command() -> list[str]:
    """This interpreter, importing the worker from the kdkit this process runs (wherever it
    lies)."""
    import kdkit

    home = os.path.dirname(os.path.dirname(os.path.abspath(kdkit.__file__)))
    boot = (f"import sys; sys.path.insert(0, {home!r}); from kdkit.probe.diagnose.loadcomm import "
            "worker; raise SystemExit(worker(sys.argv[1]))")
    return [sys.executable, "-c", boot]


def _run_workers(world: int, config: WorkerConfig, folder: Path,
                 timeout: float) -> tuple[dict[str, Any] | None, str]:
    """(rank 0's result, or None and the first telling line of the workers' errors)."""
    env = dict(os.environ)
    if config["backend"] == "gloo":
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # every rank is on this machine
    children = []
    for rank in range(world):
        errors = (folder / f"rank{rank}.err").open("wb")
        children.append(subprocess.Popen([*_command(),
                                          json.dumps({**config, "rank": rank, "world": world})],
                                         stdout=subprocess.PIPE if rank == 0
                                         else subprocess.DEVNULL,
                                         stderr=errors, stdin=subprocess.DEVNULL, env=env,
                                         start_new_session=True, close_fds=True))
        errors.close()
    deadline = time.monotonic() + timeout
    try:
        output, _ = children[0].communicate(timeout=max(1.0, deadline - time.monotonic()))
        for child in children[1:]:
            child.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _kill(children)
        return None, f"no result after {timeout:g} s (killed)"
    if any(child.returncode != 0 for child in children):
        return None, _first_error(folder, world)
    lines = output.decode("utf-8", "replace").strip().splitlines()
    try:
        return json.loads(lines[-1]), ""
    except (IndexError, ValueError):
        return None, "rank 0 printed no result"


def _kill(children: list[subprocess.Popen[bytes]]) -> None:
    for child in children:
        if child.poll() is None:
            with contextlib.suppress(OSError):  # gone between the poll and the kill
                os.killpg(child.pid, signal.SIGKILL)
        child.wait()


def _first_error(folder: Path, world: int) -> str:
    for rank in range(world):
        text = (folder / f"rank{rank}.err").read_text(encoding="utf-8", errors="replace")
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        telling = [line for line in lines if "error" in line.lower()] or lines[-1:]
        if telling:
            return f"rank {rank}: {telling[-1][:300]}"
    return "a worker exited with an error and said nothing"


def worker(argument: str) -> int:
    """One rank: join the group, check one all-reduce's sum, time ``iterations`` all-reduces of
    ``nbytes``; rank 0 prints the slowest rank's seconds per all-reduce as one JSON line."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    config = json.loads(argument)
    rank, world = int(config["rank"]), int(config["world"])
    dist.init_process_group(config["backend"], init_method=config["init"], rank=rank,
                            world_size=world,
                            timeout=timedelta(seconds=TIMEOUT))
    device = torch.device("cpu")
    if config["device"] == "cuda":
        torch.cuda.set_device(rank)
        device = torch.device(f"cuda:{rank}")
    check = torch.full((1024,), float(rank + 1), device=device)
    dist.all_reduce(check)
    correct = bool((check == world * (world + 1) / 2).all())
    buffer = torch.zeros(int(config["nbytes"]) // 4, dtype=torch.float32, device=device)
    seconds = _timed(torch, dist, buffer, int(config["iterations"]), device)
    slowest = torch.tensor([seconds], dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    if rank == 0:
        print(
            json.dumps(
                {"seconds": float(slowest.item()),
                 "bytes": int(buffer.numel()) * 4, "correct": correct}))
    dist.destroy_process_group()
    return 0


def _timed(torch: Any, dist: Any, buffer: Any, iterations: int, device: Any) -> float:
    """Seconds per all-reduce of ``buffer``, after two to warm up, from a barrier to the last one's
    end."""
    for _ in range(2):
        dist.all_reduce(buffer)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    dist.barrier()
    started = time.perf_counter()
    for _ in range(iterations):
        dist.all_reduce(buffer)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - started) / iterations
