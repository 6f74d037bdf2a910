"""The probe's nominal GPU figures come from the catalog itself (one table, shipped beside the probe),
found by the device name torch reports."""

from __future__ import annotations

import pytest

from kdkit.facts.catalog import Offer, load_catalog
from kdkit.probe.diagnose.nominal import lookup, table

OFFERS = load_catalog().offers


@pytest.mark.parametrize("offer", OFFERS, ids=[o.name for o in OFFERS])
def test_every_offer_is_recognised_by_its_own_name(offer: Offer) -> None:
    figures = lookup(f"NVIDIA {offer.name}" if offer.vendor == "nvidia"
                     else f"AMD Instinct {offer.name}")
    if offer.name == "RX 7900 XTX":
        figures = lookup("AMD Radeon RX 7900 XTX")
    assert figures is not None and figures.name == offer.name
    nominal = offer.nominal or {}
    per_device = 2 if offer.name in ("MI250X", "MI250") else 1
    if nominal.get("bf16_dense_tflops") is not None:
        assert figures.bf16_tflops == pytest.approx(nominal["bf16_dense_tflops"] / per_device)
    if nominal.get("memory_bandwidth_gb_s") is None:
        assert figures.memory_gbps is None
    else:
        assert figures.memory_gbps == pytest.approx(nominal["memory_bandwidth_gb_s"] / per_device)


# Device names as torch.cuda.get_device_name() prints them on these cards.
@pytest.mark.parametrize(("device", "name"), [
    ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"), ("NVIDIA A100-SXM4-40GB", "A100 40GB SXM"),
    ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe"), ("NVIDIA A100-PCIE-40GB", "A100 40GB PCIe"),
    ("NVIDIA H100 80GB HBM3", "H100 SXM"), ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA H200", "H200"), ("NVIDIA H200 NVL", "H200 NVL"), ("NVIDIA GH200 480GB", "GH200"),
    ("NVIDIA B200", "B200"), ("Tesla T4", "T4"), ("NVIDIA L4", "L4"), ("NVIDIA A10", "A10"),
    ("NVIDIA A10G", "A10G"),
    ("NVIDIA L40", "L40"), ("NVIDIA L40S", "L40S"), ("NVIDIA GeForce RTX 4090", "RTX 4090"),
    ("NVIDIA GeForce RTX 5090", "RTX 5090"), ("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada"),
    ("NVIDIA RTX A6000", "RTX A6000"), ("NVIDIA RTX PRO 6000 Blackwell Server Edition",
                                        "RTX PRO 6000 Blackwell Server Edition"),
    ("Tesla V100-SXM2-16GB", "V100 SXM2 16GB"), ("Tesla V100-SXM2-32GB", "V100 SXM2 32GB"),
    ("AMD Instinct MI300X", "MI300X"), ("AMD Instinct MI250X/MI250", "MI250X"),
    ("AMD Radeon RX 7900 XTX", "RX 7900 XTX"),
])
def test_device_names_as_torch_reports_them(device: str, name: str) -> None:
    figures = lookup(device)
    assert figures is not None and figures.name == name


@pytest.mark.parametrize("device",
                         ["NVIDIA GeForce RTX 3080 Ti", "NVIDIA A100", "NVIDIA GeForce RTX 4080",
                          "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "cpu", ""])
def test_other_cards_get_no_figures_rather_than_a_neighbours(device: str) -> None:
    assert lookup(device) is None


def test_each_pattern_claims_only_its_own_card() -> None:
    names = [figures.name for _pattern, figures in table()]
    for offer in OFFERS:
        spellings = [offer.name, *offer.aliases]
        for spelling in spellings:
            claimed = [n for pattern,
                       figures in table() for n in [figures.name] if pattern.search(spelling)]
            assert claimed in ([], [offer.name]), (spelling, claimed)
    assert len(names) == len(set(names))
