"""The load section's moves of data: host<->device copies from pinned memory against the PCIe link's
nominal, a fill-and-check of most of each card's free memory, and copies between peers.

Standard library only; torch is passed in.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from kdkit.core.finding import Finding
from kdkit.core.gpurules import gib
from kdkit.probe.diagnose.core import synchronize
from kdkit.probe.diagnose.loadsensors import SensorLog, link_of

if TYPE_CHECKING:
    from kdkit.probe.diagnose.points import Rule

# per copy: large enough that the launch cost is noise (nvbandwidth uses 512 MiB)
COPY_BYTES = 256 << 20
# queued copies per direction, so the driver is sampled while the link carries them
COPY_SECONDS = 0.5
FILL_CHUNK, CPU_FILL = 256 << 20, 16 << 20  # the fill's blocks; on the CPU (tests) a small buffer
PATTERNS = (0xA5, 0x5A)  # each bit written as 1 and as 0
# per ordered pair: 56 pairs on 8 GPUs, about 0.2 s each where no peer access stages via the host
PEER_COPIES = 4


class Mark:
    """A point in a device's stream of work: a CUDA event, or the clock on the CPU (launches are
    synchronous)."""

    def __init__(self, torch: Any, device: str) -> None:
        self.event = None
        if device != "cpu":
            self.event = torch.cuda.Event(enable_timing=True)
            self.event.record(torch.cuda.current_stream(device))
        self.clock = time.perf_counter()

    def seconds_to(self, later: Mark) -> float:
        if self.event is not None and later.event is not None:
            return float(self.event.elapsed_time(later.event)) / 1000
        return later.clock - self.clock


def failure_point(name: str, gpu: int | None, what: str, exc: BaseException) -> Finding:
    """A part that raised: memory taken by another process is unknown; a device error under load
    refuses."""
    said = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    if type(exc).__name__ == "OutOfMemoryError" or "out of memory" in said.lower():
        return Finding("load", name, gpu, None, "", None, "unknown",
                       f"{what} could not allocate: {said}",
                       fix=(
                           "stop the other processes on the GPU (nvidia-smi / amd-smi list them) "
                           "and rerun"))
    return Finding("load", name, gpu, None, "", None, "refuse",
                   f"{what} failed: {type(exc).__name__}: {said}",
                   fix="check `dmesg` and nvidia-smi -q / amd-smi for Xid or RAS errors",
                   provider=f"the GPU fails under load ({type(exc).__name__}: {said})")


def release(torch: Any, devices: list[str]) -> None:
    """Give the cached blocks back to the driver, so the next part (or the user) has the memory."""
    if any(device != "cpu" for device in devices):
        torch.cuda.empty_cache()


def io_points(torch: Any, devices: list[str], gpus: dict[str, int], share: float, log: SensorLog,
              rules: dict[str, Rule]) -> list[Finding]:
    """Copies (GPUs only: pinned memory needs a driver) and the memory fill, each device in turn.
    ``gpus``: each GPU's index as the driver numbers it."""
    points: list[Finding] = []
    for device in devices:
        gpu = gpus.get(device)
        if gpu is not None:
            try:
                points += copy_points(torch, device, gpu, log, rules)
            except Exception as exc:
                points.append(
                    failure_point("load.copy", gpu, f"{device}: the host<->device copy", exc))
            release(torch, devices)
        try:
            points.append(fill_point(torch, device, gpu, share, rules))
        except Exception as exc:
            points.append(failure_point("load.memory.fill", gpu, f"{device}: the memory fill", exc))
        release(torch, devices)
    return points


def timed_repeats(torch: Any, device: str, kernel: Any, seconds: float, most: int,
                  log: SensorLog | None = None, tag: str = "") -> tuple[int, float]:
    """(repeats, seconds by the device's events) of ``kernel`` repeated for about ``seconds`` (at
    least 2, at most ``most`` times), after one run to warm up and one to size the count; with
    ``log``, the driver is sampled (under ``tag``) while the last kernels run."""
    kernel()
    synchronize(torch, device)
    started = time.perf_counter()
    kernel()
    synchronize(torch, device)
    repeats = max(2, min(most, int(seconds / max(time.perf_counter() - started, 1e-6))))
    begin = Mark(torch, device)
    for _ in range(repeats):
        kernel()
    end = Mark(torch, device)
    if log is not None:
        log.poll(tag, force=True)
    synchronize(torch, device)
    return repeats, max(begin.seconds_to(end), 1e-9)


def _rate(torch: Any, device: str, copy: Any, nbytes: int, log: SensorLog) -> float:
    """GB/s of ``copy`` repeated for about COPY_SECONDS (timed by the device's events), the driver
    sampled while the copies run."""
    repeats, seconds = timed_repeats(torch, device, copy, COPY_SECONDS, 64, log, "copy")
    return repeats * nbytes / seconds / 1e9


def copy_points(torch: Any, device: str, gpu: int | None, log: SensorLog,
                rules: dict[str, Rule]) -> list[Finding]:
    """Pinned host->device and device->host GB/s, against the link's nominal (its maximum gen and
    width). The buffers go when the function returns."""
    host = torch.empty(COPY_BYTES, dtype=torch.uint8).pin_memory()
    on_device = torch.empty(COPY_BYTES, dtype=torch.uint8, device=device)
    h2d = _rate(torch, device, lambda: on_device.copy_(host, non_blocking=True), COPY_BYTES, log)
    d2h = _rate(torch, device, lambda: host.copy_(on_device, non_blocking=True), COPY_BYTES, log)
    best, top = link_of(log.samples.get(gpu if gpu is not None else -1, []))
    link = top or best
    return [copy_point(gpu, device, "h2d", h2d, link, rules),
            copy_point(gpu, device, "d2h", d2h, link, rules)]


def copy_point(gpu: int | None, device: str, direction: str, gbps: float,
               link: tuple[int, int] | None,
               rules: dict[str, Rule]) -> Finding:
    """One direction's GB/s against ``link``'s nominal (PCI-SIG's per-lane rate times the width)."""
    rule, table = rules["load.copy"], rules["load.pcie.lane_gbps"]
    lane = table["value"].get(str(link[0])) if link else None
    name, words = f"load.copy.{direction}", {
        "h2d": "host->device", "d2h": "device->host"}[direction]
    text = f"{device}: pinned {words} {gbps:,.1f} GB/s"
    if link is None or lane is None:
        known = ("the link's generation and width are unknown" if link is None
                 else f"no nominal for Gen{link[0]}")
        return Finding("load", name, gpu, round(gbps, 2), "GB/s", None, "unknown",
                       f"{text}; {known}",
                       source=table.get("source"))
    figure, floor = float(lane) * link[1], float(rule["value"])
    share = gbps / figure
    threshold = f">= {floor:.0%} of Gen{link[0]} x{link[1]}'s {figure:,.1f} GB/s"
    text += f" = {share:.0%} of Gen{link[0]} x{link[1]}'s nominal {figure:,.1f} GB/s"
    if share >= floor:
        return Finding("load", name, gpu, round(gbps, 2), "GB/s", threshold, "ok", text,
                       source=rule.get("source"))
    return Finding("load", name, gpu, round(gbps, 2), "GB/s", threshold, "degraded",
                   text + ": the link carries less than a link trained one step down could",
                   provider=f"GPU {gpu}'s {words} copies run at {gbps:,.1f} GB/s, {share:.0%} of "
                          f"its PCIe Gen{link[0]} x{link[1]} link", source=rule.get("source"))


def _fill_bytes(torch: Any, device: str, share: float) -> int:
    """``share`` of the card's free memory, less one block for the comparison's scratch; the CPU:
    CPU_FILL."""
    if device == "cpu":
        return CPU_FILL
    free, _total = (int(x) for x in torch.cuda.mem_get_info(int(device.split(":")[1])))
    return max(0, int(free * share) - FILL_CHUNK)


def write(blocks: list[Any], pattern: int) -> None:
    """Each block filled with its own byte: ``pattern`` plus its number."""
    for number, block in enumerate(blocks):
        block.fill_((pattern + number) & 0xFF)


def count_wrong(blocks: list[Any], pattern: int) -> int:
    """The bytes that differ from what ``write`` put there, counted on the device (one read a
    block)."""
    return sum(int(block.ne((pattern + number) & 0xFF).sum()) for number,
               block in enumerate(blocks))


def fill_point(torch: Any, device: str, gpu: int | None, share: float,
               rules: dict[str, Rule]) -> Finding:
    """Fill most of the free memory block by block, each block its own byte (so two addresses that
    alias show), read every block back after all are written, for each pattern; more wrong bytes
    than the rule allows (none) refuses."""
    rule = rules["load.memory.fill"]
    allowed, want = int(rule["value"]), _fill_bytes(torch, device, share)
    chunk = min(FILL_CHUNK, CPU_FILL // 4 if device == "cpu" else FILL_CHUNK)
    blocks = [torch.empty(min(chunk, want - start), dtype=torch.uint8, device=device)
              for start in range(0, want, chunk)]
    wrong = 0
    for pattern in PATTERNS:
        write(blocks, pattern)
        wrong += count_wrong(blocks, pattern)
    total = sum(int(block.numel()) for block in blocks)
    del blocks
    reading, threshold = {"bytes": total, "mismatches": wrong}, f"<= {allowed} mismatches"
    size = gib(total) if total >= 1 << 30 else f"{total / (1 << 20):.0f} MiB"
    text = (
        f"{device}: {size} written twice ({', '.join(hex(p) for p in PATTERNS)}, per block) and "
        "read back")
    if wrong <= allowed:
        return Finding("load", "load.memory.fill", gpu, reading, "bytes", threshold, "ok",
                       f"{text}: {wrong} bytes wrong", source=rule.get("source"))
    return Finding("load", "load.memory.fill", gpu, reading, "bytes", threshold, "refuse",
                   f"{text}: {wrong} bytes read back wrong",
                   provider=f"GPU {gpu}'s memory returns bytes other than those written ({wrong} "
                            f"of {total})",
                   source=rule.get("source"))


def peer_points(torch: Any, devices: list[str]) -> list[Finding]:
    """For each ordered pair of GPUs: whether one may access the other directly, and the copy's
    GB/s. No nominal (NVLink and PCIe switches vary): facts for the report."""
    points: list[Finding] = []
    gpus = [int(device.split(":")[1]) for device in devices if device != "cpu"]
    for source in gpus:
        for target in gpus:
            if source != target:
                points.append(_peer_point(torch, source, target))
    return points


def _peer_point(torch: Any, source: int, target: int) -> Finding:
    try:
        access = bool(torch.cuda.can_device_access_peer(source, target))
        src = torch.empty(COPY_BYTES, dtype=torch.uint8, device=f"cuda:{source}")
        dst = torch.empty(COPY_BYTES, dtype=torch.uint8, device=f"cuda:{target}")
        dst.copy_(src)
        torch.cuda.synchronize(source)
        torch.cuda.synchronize(target)
        started = time.perf_counter()
        for _ in range(PEER_COPIES):
            dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize(source)
        torch.cuda.synchronize(target)
        gbps = PEER_COPIES * COPY_BYTES / (time.perf_counter() - started) / 1e9
        del src, dst
    except Exception as exc:
        return failure_point("load.p2p", source, f"cuda:{source} -> cuda:{target} copy", exc)
    way = "directly (peer access)" if access else "through the host (no peer access)"
    return Finding("load", "load.p2p", source,
                   {"peer": target, "gbps": round(gbps, 2), "access": access}, "GB/s",
                   None, "info", f"cuda:{source} -> cuda:{target}: {gbps:,.1f} GB/s, {way}")
