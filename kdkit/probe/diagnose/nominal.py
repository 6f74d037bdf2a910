"""Nominal throughput of the GPUs kdkit's users rent, to flag a throttled or mislabelled card.

The figures are the catalog's (kdkit/data/catalog.json, shipped beside the probe: dense bf16 tensor
TFLOP/s without sparsity, memory bandwidth GB/s, each with its datasheet source); an offer's
``device_pattern`` recognises the device name torch reports for it. One table, read by the host
side (`kdkit plan`, `kdkit check`) and by `kdkit diagnose --deep` in the container alike.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from kdkit.core.builds import shipped_data

CATALOG = "data/catalog.json"
# Below this share of nominal, a measurement is flagged: datasheet figures are upper
# bounds, and a healthy H200 measures ~0.8 (matmul) and ~0.9 (copy) of them.
FLAG_BELOW = 0.5


@dataclass(frozen=True)
class Nominal:
    name: str
    bf16_tflops: float | None
    memory_gbps: float | None
    # dense fp16 tensor TFLOP/s: what a card without bf16 (T4, V100) is held to
    fp16_tflops: float | None = None


@lru_cache(maxsize=1)
def table() -> tuple[tuple[re.Pattern[str], Nominal], ...]:
    """(device-name pattern, figures per device) of every shipped offer that has a pattern, in
    catalog order."""
    rows = []
    for offer in shipped_data(CATALOG)["offers"]:
        pattern, figures = offer.get("device_pattern"), offer.get("nominal") or {}
        if not pattern:
            continue
        per_device = offer.get("devices_per_card", 1)
        bf16, gbps = figures.get("bf16_dense_tflops"), figures.get("memory_bandwidth_gb_s")
        fp16 = figures.get("fp16_dense_tflops")
        rows.append((re.compile(pattern, re.IGNORECASE),
                     Nominal(offer["name"], None if bf16 is None else bf16 / per_device,
                             None if gbps is None else gbps / per_device,
                             None if fp16 is None else fp16 / per_device)))
    return tuple(rows)


def lookup(device_name: str) -> Nominal | None:
    """The nominal figures for a device name as torch reports it, or None if unknown (or
    ambiguous)."""
    found = [figures for pattern, figures in table() if pattern.search(device_name)]
    return found[0] if len(found) == 1 else None


def named(device_name: str) -> tuple[str, ...]:
    """The catalog cards a driver name may be: one, none, or several where the driver names them
    alike (rocm-smi's 'AMD Instinct MI250X/MI250', ROCm 7.2's 'AMD Instinct MI250X / MI250': each
    part read)."""
    parts = [part for part in re.split(r"\s*/\s*", device_name) if part.strip()]
    found = [lookup(part) for part in (parts if len(parts) > 1 else [device_name])]
    return tuple(dict.fromkeys(figures.name for figures in found if figures is not None))


# Words that make another card of the same model number: an RTX 4080 SUPER is no RTX 4080, a 3090 Ti
# no 3090, an RTX 4090 D no RTX 4090 (kdkit.facts.catalog's tier rule, read here from the name
# alone).
TIERS = frozenset({"ti", "super", "d"})
_MODEL = re.compile(r"[A-Za-z]*[0-9][A-Za-z0-9]*")


def tiers(name: str) -> frozenset[str]:
    """The tier words of a card name (``"NVIDIA GeForce RTX 4090 D"`` -> ``{"d"}``)."""
    return TIERS & frozenset(re.findall(r"[a-z]+", name.lower()))


def model(name: str) -> str:
    """The word of a name that holds its model number (``"NVIDIA GeForce RTX 4080"`` ->
    ``4080``)."""
    match = _MODEL.search(name)
    return match.group().lower() if match else ""


def judge(measured: float, nominal: float | None, unit: str, what: str) -> tuple[bool, str]:
    """(healthy, text) for one measurement against its nominal figure."""
    if nominal is None:
        return True, f"{what} {measured:,.0f} {unit} (no nominal figure for this GPU)"
    share = measured / nominal
    text = f"{what} {measured:,.0f} {unit} = {share:.0%} of nominal {nominal:,.0f}"
    return share >= FLAG_BELOW, text
