"""The load section held to measured numbers: the sustained GEMM's TFLOP/s and the device memory's
GB/s against each card's measured reference (kdkit/data/acceptance.json "reference", each figure
with its source), degraded below a share of it (load.gemm.reference, load.memory.bandwidth: DCGM's
0.75 of its own measurement). A share above 1.0 is fine (GeForce cards boost past their datasheet).
A card without a reference, and the CPU, get their reading and "no reference": never an invented
floor.

The bandwidth is STREAM's copy and triad (BabelStream counts the bytes: copy reads one array and
writes one, triad reads two and writes one), run by torch on the device after the GEMM loop, timed
with the device's events like the GEMM (loadio.Mark). On the CPU it runs for real on CPU tensors.

Standard library only; torch is passed in.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

from kdkit.core.finding import Finding
from kdkit.probe.diagnose import nominal
from kdkit.probe.diagnose.loadio import failure_point, release, timed_repeats
from kdkit.probe.diagnose.loadsensors import SensorLog
from kdkit.probe.diagnose.points import ACCEPTANCE

if TYPE_CHECKING:
    from collections.abc import Mapping

    from kdkit.probe.diagnose.points import Rule

# bytes per array: far past any cache (an H100's L2 is 50 MiB)
GPU_ARRAY, CPU_ARRAY = 512 << 20, 32 << 20
# per kernel, repeated until about this long (the driver is sampled meanwhile)
STREAM_SECONDS = 0.25
ARRAYS = {"copy": 2, "triad": 3}  # arrays each kernel moves, as STREAM and BabelStream count them
NO_REFERENCE = "no reference"
# "NVIDIA A100-SXM4-80GB MIG 1g.10gb"
MIG_SLICE = re.compile(r"\bMIG\s+\d+g\.\d+gb\b", re.IGNORECASE)
MIG_WHOSE = "a MIG slice: a fraction of the card"


def _array_bytes(torch: Any, device: str) -> int:
    """GPU_ARRAY, halved while three arrays would take over a quarter of the free memory; CPU_ARRAY
    on the CPU."""
    if device == "cpu":
        return CPU_ARRAY
    free, size = int(torch.cuda.mem_get_info(int(device.split(":")[1]))[0]), GPU_ARRAY
    while size > (1 << 20) and 3 * size > free // 4:
        size //= 2
    return size


def bandwidth(torch: Any, device: str, log: SensorLog | None = None) -> dict[str, float]:
    """STREAM copy (c = a) and triad (a = b + s*c) on ``device``, float32: GB/s of each and the
    array size. The arrays go when the function returns."""
    size = _array_bytes(torch, device)
    count = size // 4
    a = torch.full((count,), 1.0, dtype=torch.float32, device=device)
    b = torch.full((count,), 2.0, dtype=torch.float32, device=device)
    c = torch.zeros(count, dtype=torch.float32, device=device)
    kernels = {"copy": lambda: c.copy_(a), "triad": lambda: torch.add(b, c, alpha=0.4, out=a)}
    reading: dict[str, float] = {"array_bytes": float(count * 4)}
    for name, kernel in kernels.items():
        repeats, seconds = timed_repeats(torch, device, kernel, STREAM_SECONDS, 200)
        reading[name] = round(repeats * ARRAYS[name] * count * 4 / seconds / 1e9, 2)
        if log is not None:
            log.poll("bandwidth", force=True)
    return reading


def card_of(device_name: str, references: dict[str, Rule]) -> tuple[str | None, Mapping[str, Any]]:
    """(the catalog's card name, its reference entry) for a device name as torch reports it; the
    entry is empty for a card the catalog does not know or the reference section lacks."""
    figures = None if MIG_SLICE.search(device_name) else nominal.lookup(device_name)
    if figures is None:
        return None, {}
    entry = references.get(figures.name)
    return figures.name, entry if isinstance(entry, dict) else {}


def _source(card: str | None, entry: Mapping[str, Any], figures: tuple[str, ...], key: str) -> str:
    """Where the card's ``figures`` come from: their shipped source (``key``), or the project's
    where its kdkit.json "acceptance" changed one of them (its "source", else kdkit.json itself)."""
    if _overridden(card, entry, figures):
        for own in (entry.get(key), entry.get("source")):
            shipped = _shipped(card)
            if own and own != shipped.get(key) and own != shipped.get("source"):
                return str(own)
        return "kdkit.json (this project)"
    return str(_shipped(card).get(key) or entry.get(key))


def _shipped(card: str | None) -> dict[str, Any]:
    from kdkit.core.builds import shipped_data

    found = shipped_data(ACCEPTANCE).get("reference", {}).get(card or "", {})
    return found if isinstance(found, dict) else {}


def _overridden(card: str | None, entry: Mapping[str, Any], figures: tuple[str, ...]) -> bool:
    """Whether the project's kdkit.json changed any of the card's ``figures``."""
    shipped = _shipped(card)
    return any(entry.get(figure) != shipped.get(figure) for figure in figures)


def _whose(card: str | None, entry: Mapping[str, Any], figures: tuple[str, ...]) -> str:
    """Whose figure the provider is told: a healthy card's, or the project's own reference."""
    return f"the project's reference for {card}" if _overridden(
        card, entry, figures) else f"a healthy {card} measures"


def share_verdict(reading: float, reference: float, floor: float) -> tuple[str, float]:
    """("ok" or "degraded", reading / reference): degraded below ``floor``; no ceiling (a share
    above 1.0 is ok)."""
    if not math.isfinite(reading) or not math.isfinite(reference) or reference <= 0:
        # a reading that is no number is no pass (acceptance.json bounds the reference)
        return "degraded", math.nan
    share = reading / reference
    if not math.isfinite(share):
        return "degraded", math.nan
    return ("ok" if share >= floor else "degraded"), share


def _figure(value: float) -> str:
    """A rate for a person: whole numbers from 100, three significant digits below (load._figure's
    rule)."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _label(device: str, device_name: str) -> str:
    return device if device_name == device else f"{device} {device_name}"


def gemm_point(gpu: int | None, device: str, device_name: str, kind: str, overall: float | None,
               references: dict[str, Rule], rules: dict[str, Rule]) -> Finding:
    """The run's dense GEMM TFLOP/s against the card's measured bf16 reference: ok at or above the
    rule's share (no ceiling), degraded below; a CPU, an fp16 run or a card without a reference is
    read, not judged."""
    rule = rules["load.gemm.reference"]
    floor, label = float(rule["value"]), _label(device, device_name)
    card, entry = card_of(device_name, references) if device != "cpu" else (None, {})
    figure = entry.get("value") if kind == "bfloat16" else None
    # with a reference, unknown with a threshold: not measured, the run is incomplete
    if overall is None:
        wanted = (f">= {floor:.0%} of the measured {float(figure):,.1f} ({card})"
                  if figure is not None else None)
        return Finding("load", "load.gemm.reference", gpu, None, "TFLOP/s", wanted, "unknown",
                       f"{label}: no interval completed, nothing to hold to a reference")
    text = f"{label}: {kind} GEMM {_figure(overall)} TFLOP/s"
    if figure is None:
        whose = ("a CPU" if device == "cpu" else f"{card}, {kind}" if card
                 else _nameless(device_name))
        return Finding("load", "load.gemm.reference", gpu, round(overall, 3), "TFLOP/s", None,
                       "unknown",
                       f"{text}; {NO_REFERENCE} ({whose}): reported, not judged")
    verdict, share = share_verdict(overall, float(figure), floor)
    threshold = f">= {floor:.0%} of the measured {float(figure):,.1f} ({card})"
    text += f" = {share:.0%} of the {float(figure):,.1f} measured on a healthy {card}"
    source = f"{_source(card, entry, ('value',), 'source')}; the share: {rule.get('source')}"
    if verdict == "ok":
        return Finding("load", "load.gemm.reference", gpu, round(overall, 3), "TFLOP/s", threshold,
                       "ok", text,
                       source=source)
    return Finding("load", "load.gemm.reference", gpu, round(overall, 3), "TFLOP/s", threshold,
                   "degraded",
                   text
                   + ": slow from the start (power-capped, throttled, shared, or not the card its "
                     "name says)",
                   provider=f"GPU {gpu} sustains {overall:,.0f} TFLOP/s of dense {kind} GEMM, "
                     f"{share:.0%} of the {float(figure):,.1f} {_whose(card, entry, ('value',))}",
                   source=(source))


FIGURES = tuple(f"{kind}_gb_s" for kind in ARRAYS)


def _nameless(device_name: str) -> str:
    """Why a GPU has no catalog card: a MIG slice, or a name the catalog does not know."""
    return MIG_WHOSE if MIG_SLICE.search(device_name) else "a card the catalog does not name"


def _bandwidth_threshold(floor: float, judged: dict[str, float]) -> str:
    return f">= {floor:.0%} of the measured " + ", ".join(
        f"{k} {v:,.0f}" for k, v in judged.items())


def _unmeasured(point: Finding, device: str, device_name: str, references: dict[str, Rule],
                rules: dict[str, Rule]) -> Finding:
    """A STREAM failure on a card with a reference carries the threshold it would have been held to:
    an unknown with a threshold is a reading not made, and the run is incomplete
    (accept._unmeasured)."""
    entry = card_of(device_name, references)[1] if device != "cpu" else {}
    judged = {kind: float(entry[f"{kind}_gb_s"]) for kind in ARRAYS if entry.get(f"{kind}_gb_s")}
    if point.verdict == "unknown" and judged:
        point.threshold = _bandwidth_threshold(
            float(rules["load.memory.bandwidth"]["value"]), judged)
    return point


def bandwidth_point(gpu: int | None, device: str, device_name: str, reading: dict[str, float],
                    references: dict[str, Rule], rules: dict[str, Rule]) -> Finding:
    """STREAM copy and triad GB/s against the card's measured ones: each kind with a reference is
    judged, the worst decides; a CPU or a card without a reference is read, not judged."""
    rule = rules["load.memory.bandwidth"]
    floor, label = float(rule["value"]), _label(device, device_name)
    card, entry = card_of(device_name, references) if device != "cpu" else (None, {})
    text = f"{label}: STREAM copy {reading['copy']:,.1f} GB/s, triad {reading['triad']:,.1f} GB/s"
    judged = {kind: float(entry[f"{kind}_gb_s"]) for kind in ARRAYS if entry.get(f"{kind}_gb_s")}
    if not judged:
        whose = "a CPU" if device == "cpu" else card or _nameless(device_name)
        return Finding("load", "load.memory.bandwidth", gpu, reading, "GB/s", None, "unknown",
                       f"{text}; {NO_REFERENCE} ({whose}): reported, not judged")
    shares = {kind: share_verdict(reading[kind], figure, floor) for kind, figure in judged.items()}
    worst = min(shares,
                key=lambda kind: shares[kind][1] if math.isfinite(shares[kind][1]) else -math.inf)
    threshold = _bandwidth_threshold(floor, judged)
    text += " = " + ", ".join(f"{shares[k][1]:.0%} of {k} {judged[k]:,.0f}"
                              for k in judged) + f" ({card})"
    source = f"{_source(card, entry, FIGURES, 'bandwidth_source')}; the share: {rule.get('source')}"
    if shares[worst][0] == "ok":
        return Finding("load", "load.memory.bandwidth", gpu, reading, "GB/s", threshold, "ok",
                       text, source=source)
    return Finding("load", "load.memory.bandwidth", gpu, reading, "GB/s", threshold, "degraded",
                   text + ": the memory is slower than a healthy card's",
                   provider=f"GPU {gpu}'s memory moves {reading[worst]:,.0f} GB/s in STREAM "
                          f"{worst}, {shares[worst][1]:.0%} of the {judged[worst]:,.0f} "
                          f"{_whose(card, entry, FIGURES)}",
                   source=source)


def bandwidth_points(torch: Any, devices: list[str], gpus: dict[str, int], names: dict[str, str],
                     log: SensorLog | None, rules: dict[str, Rule],
                     references: dict[str, Rule]) -> list[Finding]:
    """Each device's STREAM bandwidth, measured and judged; a device that fails is a point (loadio's
    rule)."""
    points: list[Finding] = []
    for device in devices:
        gpu = gpus.get(device)
        try:
            reading = bandwidth(torch, device, log)
        except Exception as exc:  # memory taken by another process, or a device error
            failed = failure_point("load.memory.bandwidth",
                                   gpu, f"{device}: the STREAM kernels", exc)
            points.append(_unmeasured(failed, device, names.get(device, device), references, rules))
        else:
            points.append(
                bandwidth_point(gpu, device, names.get(device, device), reading, references, rules))
        release(torch, devices)
    return points
