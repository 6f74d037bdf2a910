"""The shipped catalog and pairings, user overrides and their precedence, name matching."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest

from kdkit.catalog import code_for, load_catalog, load_pairings
from kdkit.errors import BadInput
from kdkit.resources import data_file, schema_path

OFFERS = ("RTX 4090", "RTX 5090", "L40S", "A100 80GB", "H100 80GB", "H200", "B200", "MI300X")


def _offer(name: str, **extra: object) -> dict[str, object]:
    base: dict[str, object] = {"name": name, "vendor": "nvidia", "backend": "cuda", "memory_gb": 24,
                               "architecture": "sm_89", "cards_per_lot": 1,
                               "price_per_lot_usd": {"3": 10, "7": 20, "30": 80}}
    return {**base, **extra}


def _write(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_shipped_catalog_has_every_offer_with_datasheet_facts() -> None:
    catalog = load_catalog()
    assert catalog.names() == list(OFFERS)
    arch = {o.name: o.architecture for o in catalog.offers}
    assert arch == {"RTX 4090": "sm_89", "RTX 5090": "sm_120", "L40S": "sm_89", "A100 80GB": "sm_80",
                    "H100 80GB": "sm_90", "H200": "sm_90", "B200": "sm_100", "MI300X": "gfx942"}
    assert {o.name: o.cards_per_lot for o in catalog.offers if o.cards_per_lot != 1} == {"B200": 2}
    assert catalog.find("MI300X").backend == "rocm" and catalog.find("MI300X").vendor == "amd"
    for offer in catalog.offers:
        assert offer.nominal is not None and offer.nominal["source"]
        assert "sparsity" in offer.nominal["source"] or "dense" in offer.nominal["source"]


def test_only_the_rtx_4090_has_prices_and_they_are_exact() -> None:
    catalog = load_catalog()
    assert catalog.find("RTX 4090").prices == {3: Decimal("47.14"), 7: Decimal("110"), 30: Decimal("390")}
    for offer in catalog.offers:
        if offer.name != "RTX 4090":
            assert set(offer.prices.values()) == {None}, offer.name


@pytest.mark.parametrize("spelling", ["RTX 4090", "rtx-4090", "rtx4090", "GeForce RTX 4090", "4090"])
def test_names_match_ignoring_case_spaces_and_dashes(spelling: str) -> None:
    assert load_catalog().find(spelling).name == "RTX 4090"


def test_unknown_name_offers_the_closest() -> None:
    with pytest.raises(BadInput) as caught:
        load_catalog().find("RTX 4080")
    assert str(caught.value) == ("--gpu 'RTX 4080': no such offer in the catalog; closest: RTX 4090, RTX 5090 "
                                 "(add your own with a project catalog.json or --catalog FILE)")


def test_far_name_lists_every_offer() -> None:
    with pytest.raises(BadInput, match="offers: RTX 4090, RTX 5090, L40S"):
        load_catalog().find("zzzzzz")


def test_project_then_command_line_catalog_override_by_name(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    _write(project / "catalog.json", {"offers": [
        _offer("H100 80GB", memory_gb=80, architecture="sm_90", price_per_lot_usd={"3": 300, "7": 600, "30": None}),
        _offer("My Card"),
    ]})
    extra = _write(tmp_path / "mine.json", {"offers": [_offer("h100-80gb", memory_gb=80, architecture="sm_90",
                                                                price_per_lot_usd={"3": 250, "7": None, "30": None})]})
    from_project = load_catalog(project)
    assert from_project.find("H100 80GB").price(3) == Decimal("300")
    assert from_project.find("My Card").origin == str(project / "catalog.json")
    assert from_project.names()[-1] == "My Card"
    both = load_catalog(project, extra)
    assert both.find("H100 80GB").price(3) == Decimal("250")
    assert both.files == [str(data_file("catalog.json")), str(project / "catalog.json"), str(extra)]
    # A replaced offer is replaced whole: the shipped aliases are gone with it.
    with pytest.raises(BadInput):
        both.find("H100 SXM")


def test_user_catalog_is_checked_by_the_same_schema(tmp_path: Path) -> None:
    bad = _write(tmp_path / "cat.json", {"offers": [_offer("X", price_per_lot_usd={"3": -1, "7": None, "30": None})]})
    with pytest.raises(BadInput) as caught:
        load_catalog(None, bad)
    assert str(caught.value).startswith(f"{bad}: $.offers[0].price_per_lot_usd.3: ")
    typo = _write(tmp_path / "typo.json", {"offers": [_offer("X", cards=2)]})
    with pytest.raises(BadInput, match=r"\$\.offers\[0\]: unknown key 'cards'"):
        load_catalog(None, typo)


def test_malformed_user_catalog_names_line_and_column(tmp_path: Path) -> None:
    bad = tmp_path / "cat.json"
    bad.write_text('{"offers": [\n  {,}\n]}')
    with pytest.raises(BadInput, match=rf"^{bad}:2:4: malformed JSON"):
        load_catalog(None, bad)


def test_missing_catalog_file_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="catalog file not found"):
        load_catalog(None, tmp_path / "nope.json")


# ---------------------------------------------------------------- pairings


def test_shipped_pairings_carry_the_researched_indexes() -> None:
    torch = load_pairings().data["torch"]
    assert {v: sorted(k for k in labels if k != "cpu") for v, labels in torch.items()} == {
        "2.5": ["cu118", "cu121", "cu124", "rocm6.1", "rocm6.2"],
        "2.6": ["cu118", "cu124", "cu126", "rocm6.1", "rocm6.2.4"],
        "2.7": ["cu118", "cu126", "cu128", "rocm6.3"],
        "2.8": ["cu126", "cu128", "cu129", "rocm6.4"],
        "2.9": ["cu126", "cu128", "cu130", "rocm6.4"],
        "2.10": ["cu126", "cu128", "cu130", "rocm7.1"],
    }


def test_driver_minimums_per_cuda_major() -> None:
    pairings = load_pairings()
    assert [pairings.min_driver(v) for v in ("11.8", "12.4", "12.8", "13.0")] == \
        ["450.80.02", "525.60.13", "525.60.13", "580"]


def test_blackwell_needs_cuda_12_8_and_torch_2_7() -> None:
    pairings = load_pairings()
    for card in ("sm_100", "sm_120"):
        builds = pairings.builds_for(card, "cuda")
        assert builds and all(b.torch not in ("2.5", "2.6") for b in builds)
        assert all(b.label in ("cu128", "cu129", "cu130") for b in builds)
        assert (builds[0].torch, builds[0].label) == ("2.7", "cu128")
    assert {b.label for b in pairings.builds_for("gfx942", "rocm")} == \
        {"rocm6.1", "rocm6.2", "rocm6.2.4", "rocm6.3", "rocm6.4", "rocm7.1"}


@pytest.mark.parametrize(("card", "carried", "expected"), [
    ("sm_89", ["sm_75", "sm_86", "sm_90"], "cubin sm_86"),
    ("sm_100", ["sm_80", "sm_86", "sm_90"], None),
    ("sm_120", ["sm_90", "sm_100"], None),
    ("sm_120", ["sm_90", "compute_120"], "PTX compute_120, compiled by the driver at first load"),
    ("sm_100", ["compute_120"], None),
    ("sm_90", ["sm_90a"], "cubin sm_90a"),
    ("gfx942", ["gfx90a", "gfx942"], "code object for gfx942"),
    ("gfx942", ["gfx90a", "gfx1100"], None),
])
def test_kernel_rules(card: str, carried: list[str], expected: str | None) -> None:
    assert code_for(card, carried) == expected


def test_project_pairings_extend_a_new_torch_release(tmp_path: Path) -> None:
    _write(tmp_path / "pairings.json", {"torch": {"2.13": {"cu128": "cu128"}}})
    build = load_pairings(tmp_path).build("2.13.0", "cu128")
    assert build is not None and "sm_120" in build.architectures


def test_dangling_pairing_is_bad_input(tmp_path: Path) -> None:
    extra = _write(tmp_path / "p.json", {"torch": {"2.13": {"cu128": "no-such-set"}}})
    with pytest.raises(BadInput) as caught:
        load_pairings(None, extra)
    assert str(caught.value) == (f"{extra}: $.torch.2.13.cu128: arch set 'no-such-set' is not under "
                                 "$.arch_sets; add it there")


def test_schemas_are_strict() -> None:
    for name in ("catalog", "pairings", "order"):
        schema = json.loads(schema_path(name).read_text())
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        assert schema["additionalProperties"] is False
