"""`kdkit diagnose --accept` under sustained load: every visible GPU (or the CPU) multiplies
matrices for a bounded time while the driver is sampled, then copies to and from the host, fills its
memory, and, with several GPUs, copies between them and all-reduces across them. Each reading
becomes a Finding of section "load" (kdkit.core.finding), judged against
kdkit/data/acceptance.json's "load" rules, or against the card's nominal figures (nominal.py) where
they are known: never an invented threshold.

The GEMM loop is gpu-burn's method (github.com/wilicc/gpu-burn: compare.cu compares the results of
the same multiplication repeated on the same inputs): the same product is launched again and again
on the same operands, and each interval's result is compared bit for bit with the first one. With
deterministic algorithms on (cuBLAS gives bit-identical results on the same GPU, toolkit and stream,
and torch turns rocBLAS's atomics off when deterministic algorithms are on), any difference is
silent data corruption.

Standard library only; torch is the context's (imported by the torch-import step).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from statistics import fmean
from typing import TYPE_CHECKING, Any

from kdkit.core.finding import Finding
from kdkit.probe.diagnose import loadcomm, loadio, loadref, nominal
from kdkit.probe.diagnose.core import Context, synchronize
from kdkit.probe.diagnose.loadio import Mark
from kdkit.probe.diagnose.loadsensors import Sampler, SensorLog, sensor_points, torch_bus_id
from kdkit.probe.diagnose.points import thresholds
from kdkit.probe.diagnose.steps import _bf16_native

if TYPE_CHECKING:
    from kdkit.probe.diagnose.points import Rule

DEFAULT_SECONDS = 60.0
# The square matrices' side: 8192 in bf16 is 1.1 TFLOP a launch (a few ms on a data-centre card),
# three operands and the reference take 512 MiB; halved (down to MIN_N) while one launch outlasts
# half an interval.
GPU_N, MIN_N, CPU_N = 8192, 1024, 256
# results compared per interval and device (a count of differing elements on the device, no wait)
CHECKS = 8
NOMINAL_SOURCE = ("kdkit/data/catalog.json (the offer's nominal dense TFLOP/s and its datasheet); "
                  "the share: kdkit/probe/diagnose/nominal.py FLAG_BELOW")


class Repeats:
    """The silent-data-corruption check: results of identical launches compared bit for bit with the
    first (NaN included: bits are compared, not values).

    ``queue`` counts the differing elements on the device, in stream order right after the launch it
    checks, without waiting; ``collect`` reads the counts once the device is synchronized. ``check``
    does both: the seam a test feeds two different results to (it compares, nothing is mocked)."""

    __slots__ = ("bits", "compares", "elements", "mismatches", "pending")

    def __init__(self, torch: Any, reference: Any) -> None:
        self.bits = _bits(torch, reference)
        self.compares, self.mismatches, self.elements = 0, 0, 0
        self.pending: list[Any] = []

    def queue(self, torch: Any, result: Any) -> None:
        self.pending.append(torch.count_nonzero(torch.ne(_bits(torch, result), self.bits)))

    def collect(self, torch: Any) -> None:
        counts = [int(count)
                  for count in torch.stack(self.pending).tolist()] if self.pending else []
        self.pending = []
        self.compares += len(counts)
        for count in counts:
            self.mismatches += count > 0
            self.elements = max(self.elements, count)

    def check(self, torch: Any, result: Any) -> bool:
        """True when ``result`` has the reference's bits."""
        before = self.mismatches
        self.queue(torch, result)
        self.collect(torch)
        return self.mismatches == before

    def point(self, gpu: int | None, device: str, rules: dict[str, Rule]) -> Finding:
        """ok, or refuse past the rule's allowance (none): gpu-burn's verdict on a faulty card."""
        rule = rules["load.gemm.bitwise"]
        allowed, source = int(rule["value"]), rule.get("source")
        reading, threshold = {"compares": self.compares,
                              "mismatches": self.mismatches}, f"<= {allowed} mismatches"
        if not self.compares:
            return Finding("load", "load.gemm.bitwise", gpu, reading, "results", threshold,
                           "unknown",
                           f"{device}: no repeated result was compared (the run ended first)",
                           source=(source))
        if self.mismatches <= allowed:
            return Finding("load", "load.gemm.bitwise", gpu, reading, "results", threshold, "ok",
                           f"{device}: {self.compares - self.mismatches} of {self.compares} "
                           "repeated results identical to the first, bit for bit", source=source)
        return Finding("load", "load.gemm.bitwise", gpu, reading, "results", threshold, "refuse",
                       f"{device}: {self.mismatches} of {self.compares} repeated results differ "
                       f"from the first (up to {self.elements} elements): silent data corruption",
                       provider=f"GPU {gpu if gpu is not None else device} returns different "
                              "results for the same matrix product on the same inputs under "
                              "sustained load (silent data corruption)",
                       source=source)


def _bits(torch: Any, tensor: Any) -> Any:
    """The tensor's bits as integers of its width, so equal bits compare equal even when they are
    NaN."""
    width = {1: torch.uint8, 2: torch.int16, 4: torch.int32,
             8: torch.int64}.get(tensor.element_size())
    return tensor.view(width) if width is not None and tensor.is_contiguous() else tensor


class Lane:
    """One device's part of the GEMM loop: its operands, its time per launch, its intervals and its
    check."""

    __slots__ = ("a", "b", "c", "device", "dtype", "intervals", "n", "per_launch", "repeats")

    def __init__(self, torch: Any, device: str, n: int) -> None:
        self.device, self.n, self.dtype = device, n, _dtype(torch, device)
        generator = torch.Generator(device=device).manual_seed(1234)
        self.a = torch.randn(n, n, device=device, dtype=self.dtype, generator=generator)
        self.b = torch.randn(n, n, device=device, dtype=self.dtype, generator=generator)
        self.c = torch.empty(n, n, device=device, dtype=self.dtype)
        self.launch(torch)
        self.repeats = Repeats(torch, self.c.clone())
        self.per_launch = 0.0
        self.intervals: list[dict[str, float]] = []

    def launch(self, torch: Any) -> None:
        torch.matmul(self.a, self.b, out=self.c)

    @property
    def flops(self) -> float:
        return 2.0 * self.n**3


def _dtype(torch: Any, device: str) -> Any:
    """bf16 where the card has it natively, else fp16; fp32 on the CPU."""
    if device == "cpu":
        return torch.float32
    return torch.bfloat16 if _bf16_native(torch, device) else torch.float16


def _side(torch: Any, device: str) -> int:
    """The matrices' side: GPU_N, halved while the four 2-byte matrices would take over a quarter of
    the free memory; CPU_N on the CPU."""
    if device == "cpu":
        return CPU_N
    free, n = int(torch.cuda.mem_get_info(int(device.split(":")[1]))[0]), GPU_N
    while n > MIN_N and 4 * n * n * 2 > free // 4:
        n //= 2
    return n


def _sized_lane(torch: Any, device: str, interval: float) -> Lane:
    """A lane whose launch fits half an interval: two launches a size (the first warms up and is the
    reference), halved until one fits; the intervals correct the time per launch as they go."""
    n = _side(torch, device)
    while True:
        lane = Lane(torch, device, n)
        synchronize(torch, device)
        started = time.perf_counter()
        lane.launch(torch)
        synchronize(torch, device)
        lane.per_launch = max(time.perf_counter() - started, 1e-9)
        if lane.per_launch <= interval / 2 or n <= (MIN_N if device != "cpu" else 64):
            return lane
        n //= 2


def _interval(torch: Any, lanes: list[Lane], interval: float,
              deadline: float, log: SensorLog) -> None:
    """One interval: each lane gets the launches that fill ``interval``, round robin so every device
    works at once, CHECKS of them compared with the first result; the clock is checked between
    launches. The driver is sampled while the devices work; then each lane records its TFLOP/s and
    collects its comparisons."""
    wants = [max(1, int(interval / lane.per_launch)) for lane in lanes]
    counts = [0] * len(lanes)
    stop = min(deadline, time.perf_counter() + 2 * interval)
    marks = [Mark(torch, lane.device) for lane in lanes]
    for launch in range(max(wants)):
        for number, lane in enumerate(lanes):
            if launch < wants[number]:
                lane.launch(torch)
                counts[number] += 1
                if counts[number] % max(1, wants[number] // CHECKS) == 0:
                    lane.repeats.queue(torch, lane.c)
        if time.perf_counter() > stop:
            break
    ends = [Mark(torch, lane.device) for lane in lanes]
    log.poll("gemm")
    for number, lane in enumerate(lanes):
        synchronize(torch, lane.device)
        seconds = max(marks[number].seconds_to(ends[number]), 1e-9)
        lane.per_launch = seconds / counts[number]
        lane.intervals.append({"t": round(time.perf_counter() - log.started, 3),
                               "seconds": round(seconds, 6),
                               "tflops": counts[number] * lane.flops / seconds / 1e12})
        lane.repeats.collect(torch)


@contextmanager
def deterministic(torch: Any) -> Iterator[None]:
    """Deterministic algorithms on for the duration, then as they were. Warnings only, and those
    ignored: torch warns at every GEMM when CUBLAS_WORKSPACE_CONFIG is unset, which only matters
    across several streams (https://docs.nvidia.com/cuda/cublas/#results-reproducibility); each
    device here runs on one."""
    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.use_deterministic_algorithms(True, warn_only=True)
        try:
            yield
        finally:
            torch.use_deterministic_algorithms(enabled, warn_only=warn_only)


def burn(torch: Any, devices: list[str], seconds: float, log: SensorLog) -> list[Lane]:
    """Run the GEMM loop on every device at once for at most ``seconds`` (sizing included):
    intervals of a twentieth of the run (at most 1 s), none started that would end past the
    deadline."""
    interval = min(1.0, max(0.05, seconds / 20))
    # its first use imports part of torch (a second on a CPU): before the clock
    with deterministic(torch):
        deadline = time.perf_counter() + seconds
        lanes = [_sized_lane(torch, device, interval) for device in devices]
        log.poll("gemm", force=True)
        estimate = interval
        while time.perf_counter() + estimate <= deadline:
            begun = time.perf_counter()
            _interval(torch, lanes, interval, deadline, log)
            estimate = time.perf_counter() - begun
    return lanes


def tflops_point(gpu: int | None, lane: Lane, name: str, rules: dict[str, Rule]) -> Finding:
    """The whole run's TFLOP/s against the card's nominal dense figure for the dtype used, where
    known."""
    rule = rules.get("load.gemm.tflops") or {"value": nominal.FLAG_BELOW, "source": NOMINAL_SOURCE}
    kind = str(lane.dtype).removeprefix("torch.")
    overall = overall_tflops(lane)
    if overall is None:
        return Finding("load", "load.gemm.tflops", gpu, None, "TFLOP/s", None, "unknown",
                       f"{lane.device}: no interval completed within the time given")
    figures = nominal.lookup(name) if lane.device != "cpu" else None
    if figures is not None:
        figure = {"bfloat16": figures.bf16_tflops, "float16": figures.fp16_tflops}.get(kind)
    else:
        figure = None
    label = lane.device if name == lane.device else f"{lane.device} {name}"
    text = f"{label}: {kind} GEMM ({lane.n}x{lane.n}) {_figure(overall)} TFLOP/s"
    if figure is None:
        return Finding("load", "load.gemm.tflops", gpu, overall, "TFLOP/s", None, "unknown",
                       f"{text}; no nominal {kind} figure for this device")
    share, floor = overall / figure, float(rule["value"])
    threshold = f">= {floor:.0%} of nominal {figure:,.0f}"
    if share >= floor:
        return Finding("load", "load.gemm.tflops", gpu, overall, "TFLOP/s", threshold, "ok",
                       f"{text} = {share:.0%} of nominal", source=rule.get("source"))
    return Finding("load", "load.gemm.tflops", gpu, overall, "TFLOP/s", threshold, "degraded",
                   f"{text} = {share:.0%} of nominal: throttled, shared, or not the card its name "
                   "says",
                   provider=f"GPU {gpu} sustains {overall:,.0f} TFLOP/s in {kind}, {share:.0%} of "
                          f"the {label}'s nominal {figure:,.0f}", source=rule.get("source"))


def overall_tflops(lane: Lane) -> float | None:
    """The whole run's TFLOP/s (each interval weighted by its seconds); None when no interval
    completed."""
    if not lane.intervals:
        return None
    return sum(i["tflops"] * i["seconds"]
               for i in lane.intervals) / sum(i["seconds"] for i in lane.intervals)


def sustained_point(gpu: int | None, device: str, rates: list[float],
                    rules: dict[str, Rule]) -> Finding:
    """The last tenth of the intervals against the first: a drop is thermal or power throttling."""
    rule = rules["load.gemm.sustained"]
    floor, window = float(rule["value"]), float(rule["window"])
    threshold = f">= {floor:.0%} of the first {window:.0%}"
    if len(rates) < 2 or min(rates[:1]) <= 0:
        return Finding("load", "load.gemm.sustained", gpu, None, "share", threshold, "unknown",
                       f"{device}: {len(rates)} interval(s): too few to compare the start with the "
                       "end (run longer)", source=rule.get("source"))
    size = max(1, round(len(rates) * window))
    first, last = fmean(rates[:size]), fmean(rates[-size:])
    kept = last / first
    text = (f"{device}: last {size} of {len(rates)} intervals {_figure(last)} TFLOP/s, first "
            f"{size} {_figure(first)}: {kept:.1%} kept")
    if kept >= floor:
        return Finding("load", "load.gemm.sustained", gpu, round(kept, 4), "share", threshold, "ok",
                       text, source=rule.get("source"))
    who = f"GPU {gpu}" if gpu is not None else f"the machine ({device})"
    return Finding("load", "load.gemm.sustained", gpu, round(kept, 4), "share", threshold,
                   "degraded",
                   text + ": throughput fell under sustained load (thermal or power throttling)",
                   fix="see load.throttle for the reason the driver gives",
                   provider=f"{who} loses {1 - kept:.0%} of its throughput under sustained load",
                   source=rule.get("source"))


def _figure(value: float) -> str:
    """A rate for a person: whole numbers from 100, three significant digits below (a CPU's
    0.00210)."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def lane_points(gpu: int | None, lane: Lane, name: str, rules: dict[str, Rule]) -> list[Finding]:
    rates = [interval["tflops"] for interval in lane.intervals]
    kind = str(lane.dtype).removeprefix("torch.")
    evidence = Finding("load", "load.gemm.intervals", gpu, lane.intervals, "TFLOP/s per interval",
                       None, "info",
                       f"{lane.device}: {len(rates)} intervals of {lane.n}x{lane.n} {kind} GEMM "
                       "(t: seconds since the start)")
    return [tflops_point(gpu, lane, name, rules), sustained_point(gpu, lane.device, rates, rules),
            evidence,
            lane.repeats.point(gpu, lane.device, rules)]


def load_points(ctx: Context, seconds: float = DEFAULT_SECONDS, sampler: Sampler | None = None,
                rules: dict[str, dict[str, Rule]] | None = None) -> list[Finding]:
    """The load section's points for every device of ``ctx`` (its GPUs, or the CPU).

    ``seconds``: the GEMM loop's bound (validated by the caller). ``sampler``: the driver's sampler,
    None without a driver. ``rules``: ``points.thresholds(overrides)`` (None: the shipped ones).
    Never raises for what it finds: a device that fails under load is a point."""
    torch, devices = ctx.torch, ctx.devices()
    every = thresholds() if rules is None else rules
    load_rules, references = every.get("load", {}), every.get("reference", {})
    names = {f"cuda:{dev['index']}": str(dev["name"]) for dev in ctx.facts.get("devices", [])}
    log = SensorLog(sampler)
    points: list[Finding] = []
    try:
        lanes = burn(torch, devices, seconds, log)
    # a device error under load (Xid, ECC) or memory taken by another process
    except Exception as exc:
        points.append(loadio.failure_point("load.gemm", None, "the GEMM loop", exc))
        lanes = []  # the exception (and the tensors its frames hold) goes at the end of this block
    gpus = _driver_indices(torch, devices, log)
    for lane in lanes:
        name, kind = names.get(lane.device, lane.device), str(lane.dtype).removeprefix("torch.")
        points += lane_points(gpus.get(lane.device), lane, name, load_rules)
        points.append(loadref.gemm_point(gpus.get(lane.device), lane.device, name, kind,
                                         overall_tflops(lane),
                                         references, load_rules))
    del lanes
    loadio.release(torch, devices)
    points += loadref.bandwidth_points(torch, devices, gpus, names, log, load_rules, references)
    return points + _after(ctx, devices, log, load_rules)


def _after(ctx: Context, devices: list[str], log: SensorLog,
           rules: dict[str, Rule]) -> list[Finding]:
    """What follows the GEMM loop: copies, memory fill, peers, all-reduce, and the driver's
    samples."""
    torch = ctx.torch
    gpus = _driver_indices(torch, devices, log)
    points = loadio.io_points(torch, devices, gpus, ctx.memory_share, log, rules)
    for gpu in gpus.values():
        points += sensor_points(gpu, log.samples.get(gpu, []), rules)
    if len(gpus) >= 2:
        points += loadio.peer_points(torch, devices)
        points += loadcomm.allreduce_points(len(devices), "nccl", rules)
    return points


def _driver_indices(torch: Any, devices: list[str], log: SensorLog) -> dict[str, int]:
    """Each GPU's index as the driver numbers it (the CPU has none)."""
    indices = {device: int(device.split(":")[1]) for device in devices if device != "cpu"}
    return {device: log.index_of(index, torch_bus_id(torch, index)) for device,
            index in indices.items()}
