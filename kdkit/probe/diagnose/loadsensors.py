"""What the driver says about each card while `kdkit diagnose --accept` loads it: the samples taken
about once a second, and the points they make (throttle reasons, clocks, temperature, power, the
PCIe link).

The sampler is the health section's (a callable passed in, ``None`` where there is no driver): it
returns ``{gpu index: {key: value}}``, each value ``None`` where the driver could not read it, and
this module reads these keys when present (kdkit.probe.diagnose.smi_nvidia's SAMPLE_KEYS):

- ``sm_clock``, ``sm_clock_max`` (MHz); ``temperature`` (C); ``power_draw``, ``power_limit`` (W, the
  enforced limit);
- ``throttle.<reason>``: True while that clock event (throttle) reason is active
  (``throttle.hw_slowdown``, nvidia-smi's ``clocks_event_reasons.*`` names);
- ``pcie_gen``, ``pcie_width`` (the link now), ``pcie_gen_max``, ``pcie_width_max`` (the most this
  card and slot can train to);
- ``bus_id`` (``"00000000:18:00.0"``), when given: matches the driver's index to torch's, which
  differ when ``CUDA_VISIBLE_DEVICES`` or ``CUDA_DEVICE_ORDER`` reorders the cards.

Each sample keeps only these (its evidence stays small), the active reasons as one list
``throttle``. A sampler that raises or returns something else is one that returned nothing: the load
goes on, and the points say the reading could not be taken (verdict ``unknown``). Standard library
only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from statistics import median
from typing import TYPE_CHECKING, Any

from kdkit.core.finding import Finding

if TYPE_CHECKING:
    from kdkit.probe.diagnose.points import Rule

Sampler = Callable[[], dict[int, dict[str, Any]]]
FIELDS = ("sm_clock", "sm_clock_max", "temperature", "power_draw", "power_limit", "pcie_gen",
          "pcie_width",
          "pcie_gen_max", "pcie_width_max", "bus_id")
THROTTLE = "throttle."


class SensorLog:
    """The samples of one load run, per driver index, each with its time (``t``, seconds since the
    start) and phase (``gemm`` or ``copy``). ``period``: the least time between two samples."""

    def __init__(self, sampler: Sampler | None, period: float = 1.0) -> None:
        self.sampler, self.period = sampler, period
        self.samples: dict[int, list[dict[str, Any]]] = {}
        self.started = time.perf_counter()
        self.last = float("-inf")
        self.failures = 0

    def poll(self, phase: str, force: bool = False) -> None:
        """Take a sample when ``period`` has passed since the last one (or ``force``); never
        raises."""
        now = time.perf_counter()
        if self.sampler is None or (not force and now - self.last < self.period):
            return
        self.last = now
        try:
            readings = self.sampler()
        # the sampler's fault must not stop the load: counted, reported as unknown
        except Exception:
            self.failures += 1
            return
        if not isinstance(readings, dict):
            self.failures += 1
            return
        for index, reading in readings.items():
            if isinstance(index, int) and isinstance(reading, dict):
                self.samples.setdefault(index, []).append(
                    kept(reading, round(now - self.started, 3), phase))

    def index_of(self, torch_index: int, bus_id: tuple[int, int, int] | None) -> int:
        """The driver's index of torch's card ``torch_index``: by PCI address when both sides give
        one."""
        if bus_id is not None:
            for index, entries in self.samples.items():
                if any(_bus(entry.get("bus_id")) == bus_id for entry in entries):
                    return index
        return torch_index


def kept(reading: dict[str, Any], t: float, phase: str) -> dict[str, Any]:
    """What a sample keeps: its time and phase, FIELDS, and ``throttle``: the active reasons' names
    (None when the driver gave no reason at all)."""
    entry: dict[str, Any] = {"t": t, "phase": phase}
    entry.update((key, reading[key]) for key in FIELDS if key in reading)
    reasons = {key.removeprefix(THROTTLE): value for key,
               value in reading.items() if str(key).startswith(THROTTLE)}
    read = [name for name, value in reasons.items() if value is not None]
    entry["throttle"] = sorted(name for name in read if reasons[name] is True) if read else None
    return entry


def torch_bus_id(torch: Any, index: int) -> tuple[int, int, int] | None:
    """(domain, bus, device) of torch's card ``index``, or None where torch does not say."""
    props = torch.cuda.get_device_properties(index)
    domain, bus, slot = (getattr(props, name, None)
                         for name in ("pci_domain_id", "pci_bus_id", "pci_device_id"))
    if isinstance(domain, int) and isinstance(bus, int) and isinstance(slot, int):
        return (domain, bus, slot)
    return None


def _bus(text: Any) -> tuple[int, int, int] | None:
    """(domain, bus, device) of an address as nvidia-smi and amd-smi print it (``0000:18:00.0``)."""
    if not isinstance(text, str) or text.count(":") != 2:
        return None
    domain, bus, rest = text.strip().split(":")
    try:
        return (int(domain, 16), int(bus, 16), int(rest.split(".")[0], 16))
    except ValueError:
        return None


def sensor_points(gpu: int, entries: list[dict[str, Any]], rules: dict[str, Rule]) -> list[Finding]:
    """The points of one card's samples: throttle reasons, clocks, temperature, power, PCIe link."""
    if not entries:
        return [Finding("load", "load.sensors", gpu, None, "", None, "unknown",
                        "the driver gave no reading during the load (no nvidia-smi/amd-smi, or it "
                        "failed)",
                        fix="check that nvidia-smi (or amd-smi) runs in this container")]
    under_gemm = [entry for entry in entries if entry.get("phase") == "gemm"] or entries
    evidence = Finding("load", "load.samples", gpu, entries, "", None, "info",
                       f"{len(entries)} driver samples during the load (t: seconds since the "
                       "start)")
    return [throttle_point(gpu, entries, rules), *_info_points(gpu, under_gemm),
            pcie_point(gpu, entries, rules),
            evidence]


def throttle_point(gpu: int, entries: list[dict[str, Any]], rules: dict[str, Rule]) -> Finding:
    """Which throttle reasons were active, in how many samples; a hardware or thermal one is
    degraded."""
    rule = rules["load.throttle"]
    bad = set(rule["value"])
    read = [entry for entry in entries if entry.get("throttle") is not None]
    counts: dict[str, int] = {}
    for entry in read:
        for name in entry["throttle"]:
            counts[name] = counts.get(name, 0) + 1
    threshold = "none of " + ", ".join(sorted(bad))
    if not read:
        return Finding("load", "load.throttle", gpu, None, "samples", threshold, "unknown",
                       "the driver gave no throttle reasons", source=rule.get("source"))
    found = sorted(name for name in counts if name in bad)
    seen = ", ".join(f"{name} in {count} of {len(read)} samples" for name,
                     count in sorted(counts.items()))
    if found:
        return Finding("load", "load.throttle", gpu, counts, "samples", threshold, "degraded",
                       f"under load the card slowed itself: {seen}",
                       fix="check the machine's airflow and power; rerun after it has cooled down",
                       provider=f"GPU {gpu} throttles under sustained load ({', '.join(found)}): "
                              "cooling or power delivery does not hold the card at its rated "
                              "clocks",
                       source=rule.get("source"))
    why = f"no hardware or thermal slowdown under load ({seen or 'no reason active'})"
    return Finding("load", "load.throttle", gpu, counts, "samples", threshold, "ok", why,
                   source=rule.get("source"))


def _numbers(entries: list[dict[str, Any]], field: str) -> list[float]:
    return [float(entry[field]) for entry in entries
            if isinstance(entry.get(field), (int, float))
            and not isinstance(entry.get(field), bool)]


def _info_points(gpu: int, entries: list[dict[str, Any]]) -> list[Finding]:
    """Clocks, temperature and power under load: facts without a verdict (the throttle reasons
    judge)."""
    points = []
    clocks, top = _numbers(entries, "sm_clock"), _numbers(entries, "sm_clock_max")
    if clocks:
        share = (f", {median(clocks) / max(top):.0%} of its maximum {max(top):.0f} MHz" if top
                 else "")
        points.append(Finding("load", "load.clocks", gpu,
                              {"median": median(clocks), "min": min(clocks),
                                                         "max_clock": max(top) if top else None},
                              "MHz", None,
                              "info",
                              f"SM clock under load: median {median(clocks):.0f} MHz{share}"))
    temperatures = _numbers(entries, "temperature")
    if temperatures:
        points.append(Finding("load", "load.temperature", gpu, max(temperatures), "C", None, "info",
                              f"hottest under load: {max(temperatures):.0f} C (first "
                              f"{temperatures[0]:.0f} C)"))
    power, limit = _numbers(entries, "power_draw"), _numbers(entries, "power_limit")
    if power:
        share = (f", {max(power) / min(limit):.0%} of the enforced limit {min(limit):.0f} W"
                 if limit else "")
        points.append(Finding("load", "load.power", gpu,
                              {"max": max(power), "limit": min(limit) if limit else None},
                              "W",
                              None, "info", f"highest draw under load: {max(power):.0f} W{share}"))
    return points


def link_of(entries: list[dict[str, Any]]) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
    """(the best (gen, width) seen under load, the link's maximum (gen, width)), each None when
    unread."""
    seen = [(int(entry["pcie_gen"]), int(entry["pcie_width"])) for entry in entries
            if isinstance(entry.get("pcie_gen"), int) and isinstance(entry.get("pcie_width"), int)]
    tops = [(int(entry["pcie_gen_max"]), int(entry["pcie_width_max"])) for entry in entries
            if isinstance(entry.get("pcie_gen_max"), int)
            and isinstance(entry.get("pcie_width_max"), int)]
    best = (max(gen for gen, _ in seen), max(width for _, width in seen)) if seen else None
    return best, (tops[-1] if tops else None)


def pcie_point(gpu: int, entries: list[dict[str, Any]], rules: dict[str, Rule]) -> Finding:
    """The link under load (the best sample: an idle link trains down to save power) against its
    maximum."""
    rule = rules.get("load.pcie.link", {})
    best, top = link_of(entries)
    reading = None if best is None else {"gen": best[0], "width": best[1]}
    if best is None or top is None:
        return Finding("load", "load.pcie.link", gpu, reading, "", None, "unknown",
                       "the driver did not give the PCIe link's generation and width (now and "
                       "maximum)",
                       source=rule.get("source"))
    threshold = f"Gen{top[0]} x{top[1]} (the link's maximum)"
    text = f"PCIe Gen{best[0]} x{best[1]} under load, maximum Gen{top[0]} x{top[1]}"
    if best[0] >= top[0] and best[1] >= top[1]:
        return Finding("load", "load.pcie.link", gpu, reading, "", threshold, "ok", text,
                       source=rule.get("source"))
    return Finding("load", "load.pcie.link", gpu, reading, "", threshold, "degraded",
                   text + ": host-device copies run at a fraction of what the slot allows",
                   fix="reseat the card or move it to another slot, when the machine is yours",
                   provider=f"GPU {gpu}'s PCIe link trains at Gen{best[0]} x{best[1]} under load "
                          f"instead of Gen{top[0]} x{top[1]}: a riser, slot or BIOS setting limits "
                          "it",
                   source=rule.get("source"))
