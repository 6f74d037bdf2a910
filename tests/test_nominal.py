"""The probe's nominal GPU figures (standard library, in the container) and the host-side catalog
must tell the same story: both are datasheet figures, kept in two places for the probe's sake."""

from __future__ import annotations

import pytest

from kdkit.catalog import Offer, load_catalog
from kdkit.probe.nominal import lookup

OFFERS = load_catalog().offers


@pytest.mark.parametrize("offer", OFFERS, ids=[o.name for o in OFFERS])
def test_probe_table_agrees_with_the_catalog(offer: Offer) -> None:
    assert offer.nominal is not None
    figures = lookup(offer.name)
    assert figures is not None, f"kdkit/probe/nominal.py has no row for {offer.name}"
    assert figures.bf16_tflops == pytest.approx(offer.nominal["bf16_dense_tflops"], rel=0.01)
    assert figures.memory_gbps == pytest.approx(offer.nominal["memory_bandwidth_gb_s"], rel=0.01)


@pytest.mark.parametrize(
    ("device", "name"),
    [("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"), ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe"),
     ("NVIDIA H100 PCIe", "H100 PCIe"), ("NVIDIA H200", "H200"), ("AMD Instinct MI300X", "MI300X")],
)
def test_device_names_as_torch_reports_them(device: str, name: str) -> None:
    figures = lookup(device)
    assert figures is not None and figures.name == name
