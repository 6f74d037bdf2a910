"""Every figure the catalog carries names its source (issue 27, item 4), and every card of the catalog, by
its names, its aliases and the name its driver prints, resolves to exactly itself."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from kdkit.config.shipped import data_file
from kdkit.core.errors import BadInput
from kdkit.facts.catalog import FIGURES, carried_figures, load_catalog
from kdkit.probe.diagnose.nominal import lookup

SHIPPED: dict[str, Any] = json.loads(data_file("catalog.json").read_text(encoding="utf-8"))
OFFERS: list[dict[str, Any]] = SHIPPED["offers"]


def _named(key: str, text: str) -> bool:
    """Whether a source key stands as a word of the text (``cuda_gpus`` is not named by ``cuda_gpus_older``)."""
    return re.search(rf"(^|[\s,(;:]){re.escape(key)}($|[\s,);:])", text) is not None


@pytest.mark.parametrize("offer", OFFERS, ids=[o["name"] for o in OFFERS])
def test_every_figure_a_card_carries_names_a_source(offer: dict[str, Any]) -> None:
    """memory_gb, architecture and each non-null nominal figure are covered by figure_sources; each key it
    cites is a key of $.sources and is named in the offer's nominal.source text (where the reader sees it)."""
    cited = offer.get("figure_sources")
    assert isinstance(cited, dict), f"{offer['name']}: no figure_sources"
    assert {"memory_gb", "architecture"} <= set(carried_figures(offer))
    for figure in carried_figures(offer):
        assert cited.get(figure), f"{offer['name']}: {figure} carries no source"
    for figure, keys in cited.items():
        assert figure in FIGURES
        for key in keys:
            assert key in SHIPPED["sources"], f"{offer['name']}: {figure} cites {key}, not a key of $.sources"
            assert _named(key,
                          offer["nominal"]["source"]), f"{offer['name']}: nominal.source does not name {key}"


@pytest.mark.parametrize("offer", OFFERS, ids=[o["name"] for o in OFFERS])
def test_a_null_figure_says_why(offer: dict[str, Any]) -> None:
    """A figure that is not carried is explained in the note: unsupported, or NOT FOUND (never invented)."""
    nulls = [f for f in FIGURES[2:] if offer["nominal"].get(f) is None]
    if nulls:
        note = offer.get("note", "")
        assert "NOT FOUND" in note or "unsupported" in note or "no TF32" in note or "not exist" in note, offer["name"]


def _offer(**extra: object) -> dict[str, object]:
    base: dict[str, object] = {"name": "My Card", "vendor": "nvidia", "backend": "cuda",
                               "memory_gb": 24,
                               "architecture": "sm_89", "cards_per_lot": 1,
                               "price_per_lot_usd": {"3": 10, "7": 20, "30": 80},
                               "nominal": {"bf16_dense_tflops": 100, "source": "mine"}}
    return {**base, **extra}


def _write(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_a_user_offer_without_figure_sources_still_loads(tmp_path: Path) -> None:
    """Backward compatible: a project catalog.json made before figure_sources existed is read as before."""
    catalog = load_catalog(None, _write(tmp_path / "cat.json", {"offers": [_offer()]}))
    assert catalog.find("My Card").figure_sources == {}


def test_a_user_offer_may_cite_its_own_and_the_shipped_sources(tmp_path: Path) -> None:
    cited = {"memory_gb": ["mine"], "architecture": ["cuda_gpus"], "bf16_dense_tflops": ["mine"]}
    path = _write(tmp_path / "cat.json", {"sources": {"mine": "my provider's page"},
                                          "offers": [_offer(figure_sources=cited)]})
    assert load_catalog(None, path).find("My Card").figure_sources["architecture"] == ("cuda_gpus",)


def test_a_user_offer_with_an_uncovered_figure_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path / "cat.json", {"sources": {"mine": "my page"}, "offers": [
        _offer(figure_sources={"memory_gb": ["mine"], "architecture": ["mine"]})]})
    with pytest.raises(BadInput) as caught:
        load_catalog(None, path)
    assert str(caught.value).startswith(
        f"{path}: $.offers[0]: figure_sources names no source for bf16_dense_tflops")


def test_a_user_offer_citing_an_unknown_source_is_refused(tmp_path: Path) -> None:
    cited = {"memory_gb": ["nowhere"], "architecture": ["cuda_gpus"],
             "bf16_dense_tflops": ["cuda_gpus"]}
    path = _write(tmp_path / "cat.json", {"offers": [_offer(figure_sources=cited)]})
    with pytest.raises(
        BadInput, match=r"\$\.offers\[0\]: figure_sources cites nowhere, which no \$\.sources names"):
        load_catalog(None, path)


def test_figure_sources_keys_are_checked_by_the_schema(tmp_path: Path) -> None:
    path = _write(tmp_path / "cat.json", {"offers": [_offer(figure_sources={"price": ["x"]})]})
    with pytest.raises(BadInput, match=r"\$\.offers\[0\]\.figure_sources"):
        load_catalog(None, path)


# ---------------------------------------------------------------- names


@pytest.mark.parametrize("offer", OFFERS, ids=[o["name"] for o in OFFERS])
def test_each_name_and_alias_finds_exactly_its_card(offer: dict[str, Any]) -> None:
    catalog = load_catalog()
    for spelling in (offer["name"], *offer.get("aliases", [])):
        assert catalog.find(spelling).name == offer["name"], spelling
        assert [o.name for o in catalog.candidates(spelling)] == [offer["name"]], spelling


# The name nvidia-smi / torch.cuda.get_device_name() / rocm-smi print for these cards.
DRIVER_NAMES = [
    ("NVIDIA A40", "A40"), ("NVIDIA A30", "A30"), ("NVIDIA RTX A4000", "RTX A4000"),
    ("NVIDIA RTX A4500", "RTX A4500"),
    ("NVIDIA RTX A5000", "RTX A5000"), ("NVIDIA RTX 2000 Ada Generation", "RTX 2000 Ada"),
    ("NVIDIA RTX 4000 Ada Generation", "RTX 4000 Ada"),
    ("NVIDIA RTX 5000 Ada Generation", "RTX 5000 Ada"),
    ("NVIDIA GeForce RTX 4080 SUPER", "RTX 4080 SUPER"), ("NVIDIA GeForce RTX 5080", "RTX 5080"),
    ("NVIDIA GeForce RTX 3090 Ti", "RTX 3090 Ti"), ("Tesla V100-PCIE-16GB", "V100 PCIe 16GB"),
    ("NVIDIA L20", "L20"),
    ("NVIDIA H20", "H20"), ("AMD Instinct MI210", "MI210"), ("AMD Instinct MI250", "MI250"),
    # Their neighbours keep their own card.
    ("NVIDIA GeForce RTX 3090", "RTX 3090"), ("NVIDIA GeForce RTX 4090", "RTX 4090"),
    ("NVIDIA GeForce RTX 5090", "RTX 5090"),
    ("NVIDIA RTX A6000", "RTX A6000"), ("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada"),
    ("NVIDIA L40", "L40"),
    ("NVIDIA L4", "L4"), ("NVIDIA H200", "H200"), ("Tesla V100-SXM2-16GB", "V100 SXM2 16GB"),
    ("AMD Instinct MI250X", "MI250X"),
]


@pytest.mark.parametrize(("device", "name"), DRIVER_NAMES)
def test_a_driver_printed_name_resolves_to_exactly_its_card(device: str, name: str) -> None:
    figures = lookup(device)
    assert figures is not None and figures.name == name
    assert load_catalog().find(device).name == name


@pytest.mark.parametrize("device", ["NVIDIA GeForce RTX 4080", "NVIDIA RTX 4000 SFF Ada Generation",
                                    "NVIDIA GeForce RTX 3080 Ti", "Tesla V100-PCIE-32GB",
                                    "NVIDIA RTX A2000"])
def test_a_card_the_catalog_lacks_gets_no_neighbours_figures(device: str) -> None:
    assert lookup(device) is None


def test_rocm_smi_names_mi250_and_mi250x_alike_and_the_x_is_read() -> None:
    """rocm-smi prints 'AMD Instinct MI250X/MI250' for both; the MI250 pattern does not claim it (one answer)."""
    figures = lookup("AMD Instinct MI250X/MI250")
    assert figures is not None and figures.name == "MI250X"


@pytest.mark.parametrize(("name", "same"), [
    ("RTX 4080", None), ("RTX 3090", "RTX 3090"), ("RTX 3090 Ti", "RTX 3090 Ti"), ("A40", "A40"),
    ("A4000", "RTX A4000"), ("RTX 4000 SFF Ada", None)])
def test_a_tier_word_makes_another_card(name: str, same: str | None) -> None:
    """An RTX 4080 is no RTX 4080 SUPER (nor suggested as one); a 3090 no 3090 Ti; A40 no A4000."""
    found = [o.name for o in load_catalog().candidates(name)]
    assert found == ([] if same is None else [same])


def test_a_bare_v100_fits_offers_that_share_one_architecture() -> None:
    """`kdkit check --gpu V100` can judge the architecture (sm_70) from these; `find` still asks."""
    fits = load_catalog().candidates("V100")
    assert [o.name for o in fits] == ["V100 SXM2 16GB", "V100 SXM2 32GB", "V100 PCIe 16GB"]
    assert {o.architecture for o in fits} == {"sm_70"}
    with pytest.raises(BadInput, match="fits 3 offers"):
        load_catalog().find("V100")


def test_find_architecture_takes_a_bare_name_whose_offers_share_one() -> None:
    catalog = load_catalog()
    offer, names = catalog.find_architecture("V100")
    assert offer.architecture == "sm_70" and names == (
        "V100 SXM2 16GB", "V100 SXM2 32GB", "V100 PCIe 16GB")
    assert catalog.find_architecture("A40") == (catalog.find("A40"), ("A40",))
    # A100's offers share sm_80; H100's share sm_90; a name whose offers differ still asks.
    assert catalog.find_architecture("A100")[0].architecture == "sm_80"
    with pytest.raises(BadInput, match="no such offer"):
        catalog.find_architecture("RTX 4080")


def test_find_architecture_still_asks_when_the_offers_differ() -> None:
    """'6000' fits the RTX 6000 Ada (sm_89) and both RTX PRO 6000 Blackwell (sm_120): no one architecture."""
    with pytest.raises(BadInput, match="fits 3 offers: RTX 6000 Ada, RTX PRO 6000"):
        load_catalog().find_architecture("6000")
