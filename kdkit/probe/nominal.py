"""Nominal throughput of the GPUs kdkit's users rent, to flag a throttled or mislabelled card.

A small copy of the vendors' datasheet figures (dense bf16 tensor TFLOP/s, no
sparsity; memory bandwidth GB/s). The host-side catalog (kdkit/data/catalog.json)
holds the offers; the probe cannot read it because it must run with the standard
library alone, from a bare interpreter, so it keeps this table of its own;
tests/test_nominal.py keeps the two in agreement.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Below this share of nominal, a measurement is flagged: datasheet figures are upper
# bounds, and a healthy H200 measures ~0.8 (matmul) and ~0.9 (copy) of them.
FLAG_BELOW = 0.5


@dataclass(frozen=True)
class Nominal:
    name: str
    bf16_tflops: float
    memory_gbps: float


# Ordered: the first pattern that matches the device name wins (specific variants first).
TABLE: tuple[tuple[re.Pattern[str], Nominal], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), Nominal(name, tflops, gbps))
    for pattern, name, tflops, gbps in (
        (r"\bH100\b.*\bPCIe\b", "H100 PCIe", 756.0, 2000.0),
        (r"\bH100\b.*\bNVL\b", "H100 NVL", 835.0, 3900.0),
        (r"\bH100\b", "H100 SXM", 989.0, 3350.0),
        (r"\bH200\b", "H200", 989.0, 4800.0),
        (r"\bB200\b", "B200", 2250.0, 8000.0),
        (r"\bA100\b.*80\s*GB.*\bPCIe\b", "A100 80GB PCIe", 312.0, 1935.0),
        (r"\bA100\b.*80\s*GB", "A100 80GB SXM", 312.0, 2039.0),
        (r"\bA100\b", "A100 40GB", 312.0, 1555.0),
        (r"\bRTX 5090\b", "RTX 5090", 209.5, 1792.0),
        (r"\bRTX 4090\b", "RTX 4090", 165.2, 1008.0),
        (r"\bL40S\b", "L40S", 362.0, 864.0),
        (r"\bMI300X\b", "MI300X", 1307.4, 5300.0),
    )
)


def lookup(device_name: str) -> Nominal | None:
    """The nominal figures for a device name as torch reports it, or None if unknown."""
    for pattern, figures in TABLE:
        if pattern.search(device_name):
            return figures
    return None


def judge(measured: float, nominal: float | None, unit: str, what: str) -> tuple[bool, str]:
    """(healthy, text) for one measurement against its nominal figure."""
    if nominal is None:
        return True, f"{what} {measured:,.0f} {unit} (no nominal figure for this GPU)"
    share = measured / nominal
    text = f"{what} {measured:,.0f} {unit} = {share:.0%} of nominal {nominal:,.0f}"
    return share >= FLAG_BELOW, text
