"""The shipped catalog and pairings, user overrides and their precedence, name matching."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest

from kdkit.config.shipped import data_file, schema_path
from kdkit.core.errors import BadInput
from kdkit.facts.catalog import load_catalog
from kdkit.facts.pairings import code_for, load_pairings

# The cards people rent (issue 11): each must be in the shipped catalog.
RENTED = ("T4", "L4", "A10", "A10G", "RTX 3090", "RTX A6000", "RTX 4090", "RTX 5090",
          "RTX 6000 Ada",
          "RTX PRO 6000 Blackwell Workstation Edition", "RTX PRO 6000 Blackwell Server Edition",
          "L40", "L40S",
          "A100 40GB PCIe", "A100 40GB SXM", "A100 80GB PCIe", "A100 80GB SXM", "H100 PCIe",
          "H100 SXM", "H100 NVL",
          "H200", "GH200", "B200", "B300", "MI250X", "MI300X", "MI325X", "MI355X", "RX 7900 XTX",
          # issue 27: RunPod's GPU types and DCGM's SKU table
          "A40", "A30", "RTX A4000", "RTX A4500", "RTX A5000", "RTX 2000 Ada", "RTX 4000 Ada",
          "RTX 5000 Ada",
          "RTX 4080 SUPER", "RTX 5080", "RTX 3090 Ti", "V100 PCIe 16GB", "L20",
          "H20", "MI210", "MI250")


def _offer(name: str, **extra: object) -> dict[str, object]:
    base: dict[str, object] = {"name": name, "vendor": "nvidia", "backend": "cuda", "memory_gb": 24,
                               "architecture": "sm_89", "cards_per_lot": 1,
                               "price_per_lot_usd": {"3": 10, "7": 20, "30": 80}}
    return {**base, **extra}


def _write(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_shipped_catalog_has_the_rented_cards_with_sourced_facts() -> None:
    catalog = load_catalog()
    assert len(catalog.offers) >= 25 and set(RENTED) <= set(catalog.names())
    arch = {o.name: o.architecture for o in catalog.offers}
    assert {n: arch[n]
            for n in ("T4", "A10G", "RTX 4090", "RTX 5090", "A100 40GB SXM", "H200", "B200", "B300",
                      "MI250X", "MI300X", "MI355X", "RX 7900 XTX")} == {
        "T4": "sm_75", "A10G": "sm_86", "RTX 4090": "sm_89", "RTX 5090": "sm_120",
        "A100 40GB SXM": "sm_80",
        "H200": "sm_90", "B200": "sm_100", "B300": "sm_103", "MI250X": "gfx90a", "MI300X": "gfx942",
        "MI355X": "gfx950", "RX 7900 XTX": "gfx1100"}
    assert {o.name: o.cards_per_lot for o in catalog.offers if o.cards_per_lot != 1} == {"B200": 2}
    assert {o.name for o in catalog.offers if o.cpu_arch == "aarch64"} == {"GH200"}
    assert catalog.find("MI300X").backend == "rocm" and catalog.find("MI300X").vendor == "amd"
    sources = json.loads(data_file("catalog.json").read_text())["sources"]
    for offer in catalog.offers:
        nominal = offer.nominal or {}
        assert set(nominal) >= {"tf32_dense_tflops",
                                "fp16_dense_tflops", "bf16_dense_tflops", "source"}, offer.name
        cited = {key for key in sources if key in nominal["source"]}
        assert cited, f"{offer.name}: its figures cite no source of $.sources"
        for field in ("tf32_dense_tflops", "fp16_dense_tflops", "bf16_dense_tflops"):
            assert nominal[field] is not None or offer.note, f"{offer.name}: null {field} is not explained"
    for citation in sources.values():
        assert citation.startswith(("http", "NVIDIA", "AMD", "Stas", "AWS", "Baseten", "Guru3D",
                                    "TechPowerUp",
                                    "LLVM",
                                    "Lightning", "ROCm",
                                    "Older")) or "github" in citation or "://" in citation


def test_nominal_figures_of_well_known_cards_are_the_datasheets_dense_ones() -> None:
    catalog = load_catalog()
    nominal = {name: catalog.find(name).nominal or {}
               for name in ("RTX 4090", "H100 SXM", "MI300X", "A100 80GB SXM")}
    assert nominal["RTX 4090"]["bf16_dense_tflops"] == 165.2 and nominal["RTX 4090"]["memory_bandwidth_gb_s"] == 1008
    assert nominal["H100 SXM"]["bf16_dense_tflops"] == 989.5 and nominal["H100 SXM"]["tf32_dense_tflops"] == 494.5
    assert nominal["MI300X"]["bf16_dense_tflops"] == 1307.4
    assert nominal["A100 80GB SXM"]["tf32_dense_tflops"] == 156 and nominal["A100 80GB SXM"]["memory_bandwidth_gb_s"] \
        == 2039


def test_only_the_rtx_4090_has_prices_and_they_are_exact() -> None:
    catalog = load_catalog()
    assert catalog.find("RTX 4090").prices == {3: Decimal("47.14"), 7: Decimal("110"),
                                               30: Decimal("390")}
    for offer in catalog.offers:
        if offer.name != "RTX 4090":
            assert set(offer.prices.values()) == {None}, offer.name


@pytest.mark.parametrize("spelling",
                         ["RTX 4090", "rtx-4090", "rtx4090", "GeForce RTX 4090", "4090"])
def test_names_match_ignoring_case_spaces_and_dashes(spelling: str) -> None:
    assert load_catalog().find(spelling).name == "RTX 4090"


@pytest.mark.parametrize(("name", "offers"), [
    ("A100", "A100 40GB PCIe, A100 40GB SXM, A100 80GB PCIe, A100 80GB SXM"),
    ("A100 80GB", "A100 80GB PCIe, A100 80GB SXM"),
    ("H100", "H100 PCIe, H100 SXM, H100 NVL"),
    ("V100", "V100 SXM2 16GB, V100 SXM2 32GB, V100 PCIe 16GB"),
    ("RTX PRO 6000",
     "RTX PRO 6000 Blackwell Workstation Edition, RTX PRO 6000 Blackwell Server Edition"),
])
def test_a_name_that_fits_several_offers_asks(name: str, offers: str) -> None:
    with pytest.raises(BadInput) as caught:
        load_catalog().find(name)
    count = offers.count(",") + 1
    assert str(
        caught.value) == (f"--gpu {name!r}: fits {count} offers: {offers}; pass one of them as "
                                 "--gpu (add your own with a project catalog.json or --catalog "
                                 "FILE)")


@pytest.mark.parametrize(("name", "same"), [
    ("Tesla T4 16GB", "T4"), ("MI300", "MI300X"), ("Radeon 7900", "RX 7900 XTX"),
    ("B200 x2", "B200"),
    ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"), ("V100 32GB", "V100 SXM2 32GB"),
    ("A100 SXM 80GB", "A100 80GB SXM"),
    ("NVIDIA H100 SXM5 80GB", "H100 SXM")])
def test_an_unknown_spelling_gets_the_same_card(name: str, same: str) -> None:
    with pytest.raises(BadInput) as caught:
        load_catalog().find(name)
    assert str(
        caught.value) == (f"--gpu {name!r}: no such offer in the catalog; did you mean {same!r}? "
                                 "pass that name (or add your own with a project catalog.json or "
                                 "--catalog FILE)")


@pytest.mark.parametrize("name",
                         ["RTX 4080", "T40", "A1000", "RTX 4900", "zzzzzz", "GB200", "RTX 3080 Ti",
                          "A6000 Ada",
                          "H100 PCIe 96GB"])
def test_an_unknown_card_is_never_offered_a_different_one(name: str) -> None:
    """T4 once got "closest: RTX 4090": a different model number is a different card."""
    with pytest.raises(BadInput) as caught:
        load_catalog().find(name)
    assert "did you mean" not in str(caught.value) and "fits" not in str(caught.value)
    assert "offers: T4, L4, A10, A10G, RTX 3090" in str(caught.value)


def test_project_then_command_line_catalog_override_by_name(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    _write(project / "catalog.json", {"offers": [
        _offer("H100 SXM", memory_gb=80, architecture="sm_90",
               price_per_lot_usd={"3": 300, "7": 600, "30": None}),
        _offer("My Card"),
    ]})
    extra = _write(tmp_path / "mine.json",
                   {"offers": [_offer("h100-sxm", memory_gb=80, architecture="sm_90",
                                        price_per_lot_usd={"3": 250, "7": None, "30": None})]})
    from_project = load_catalog(project)
    assert from_project.find("H100 SXM").price(3) == Decimal("300")
    assert from_project.find("My Card").origin == str(project / "catalog.json")
    assert from_project.names()[-1] == "My Card"
    both = load_catalog(project, extra)
    assert both.find("H100 SXM").price(3) == Decimal("250")
    assert both.files == [str(data_file("catalog.json")), str(project / "catalog.json"), str(extra)]
    # A replaced offer is replaced whole: the shipped aliases are gone with it.
    with pytest.raises(BadInput):
        both.find("H100 SXM5")


def test_user_catalog_is_checked_by_the_same_schema(tmp_path: Path) -> None:
    bad = _write(tmp_path / "cat.json",
                 {"offers": [_offer("X", price_per_lot_usd={"3": -1, "7": None, "30": None})]})
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


def test_shipped_pairings_carry_every_published_build_2_5_to_2_14() -> None:
    pairings = load_pairings()
    published = {minor: sorted(la for la in pairings.labels(minor) if la != "cpu")
                 for minor in pairings.releases()}
    assert published == {
        "2.5": ["cu118", "cu121", "cu124", "rocm6.1", "rocm6.2"],
        "2.6": ["cu118", "cu124", "cu126", "rocm6.1", "rocm6.2.4"],
        "2.7": ["cu118", "cu126", "cu128", "rocm6.3"],
        "2.8": ["cu126", "cu128", "cu129", "rocm6.3", "rocm6.4"],
        "2.9": ["cu126", "cu128", "cu130", "rocm6.3", "rocm6.4"],
        "2.10": ["cu126", "cu128", "cu130", "rocm7.0", "rocm7.1"],
        "2.11": ["cu126", "cu128", "cu130", "rocm7.1", "rocm7.2"],
        "2.12": ["cu126", "cu130", "cu132", "rocm7.1", "rocm7.2"],
        # rocm7.1: test-infra's 2.13 release matrix
        "2.13": ["cu126", "cu130", "cu132", "rocm7.1", "rocm7.2"],
        # rocm7.2: test-infra's 2.14 matrix
        "2.14": ["cu126", "cu130", "cu132", "rocm7.14", "rocm7.2"],
    }
    experimental = {b.name for b in pairings.builds() if b.experimental}
    assert experimental == {"2.6 cu126 (experimental)", "2.7 cu128 (experimental)",
                            "2.8 cu129 (experimental)",
                            "2.9 cu130 (experimental)", "2.10 cu130 (experimental)",
                            "2.12 cu132 (experimental)",
                            "2.13 cu132 (experimental)"}
    assert pairings.labels("2.13", "aarch64") == ["cpu", "cu126", "cu130", "cu132"]
    assert pairings.labels("2.7", "aarch64") == []


def test_driver_floors_per_cuda_major_and_per_card() -> None:
    pairings = load_pairings()
    assert [pairings.driver_floor(v) for v in ("11.8", "12.4", "12.8", "13.0", "10.2")] == [
        ("450.80.02", "CUDA 11.x builds"), ("525.60.13", "CUDA 12.x builds"),
        ("525.60.13", "CUDA 12.x builds"),
        ("580", "CUDA 13.x builds"), None]
    # Blackwell needs R570 even when the CUDA 12 floor is 525; CUDA 13's own floor is higher still.
    assert pairings.driver_floor("12.8", "sm_120") == ("570", "sm_120 cards")
    assert pairings.driver_floor("12.8", "sm_100") == ("570", "sm_100 cards")
    assert pairings.driver_floor("13.0", "sm_120") == ("580", "CUDA 13.x builds")
    assert pairings.driver_floor("12.8", "sm_90") == ("525.60.13", "CUDA 12.x builds")


def test_blackwell_needs_cuda_12_8_and_torch_2_7() -> None:
    pairings = load_pairings()
    for card in ("sm_100", "sm_120"):
        builds = pairings.builds_for(card, "cuda")
        assert builds and all(b.torch not in ("2.5", "2.6") for b in builds)
        assert {b.label for b in builds} == {"cu128", "cu129", "cu130", "cu132"}
        assert (builds[0].torch, builds[0].label) == ("2.7", "cu128")
    assert {b.label for b in pairings.builds_for("gfx942", "rocm")} == \
        {"rocm6.1", "rocm6.2", "rocm6.2.4", "rocm6.3", "rocm6.4", "rocm7.0", "rocm7.1", "rocm7.2"}
    # 2.9 rocm6.4: uv measured no gfx950 where the 6.4.4 builder lists it, so it is not among the confirmed targets
    assert {b.name for b in pairings.builds_for("gfx950", "rocm")} == {
        "2.10 rocm7.0", "2.10 rocm7.1", "2.11 rocm7.1", "2.11 rocm7.2", "2.12 rocm7.1",
        "2.12 rocm7.2",
        "2.13 rocm7.1", "2.13 rocm7.2", "2.14 rocm7.2"}


def test_cuda_13_builds_drop_volta_and_2_11_drops_it_from_cu128() -> None:
    pairings = load_pairings()
    assert pairings.builds_for("sm_70", "cuda")[-1].name == "2.14 cu126"
    assert not any(b.code_for("sm_70") for b in pairings.builds() if b.label in ("cu130", "cu132"))
    assert pairings.build("2.10.0",
                          "cu128").code_for("sm_70") == "cubin sm_70"  # type: ignore[union-attr]
    assert pairings.build("2.11.0", "cu128").code_for("sm_70") is None  # type: ignore[union-attr]


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
    # The older form {label: arch set} and the current one both extend the shipped builds, label by label.
    _write(tmp_path / "pairings.json",
           {"torch": {"2.15": {"cu130": "cu130-2.13"}, "2.13": {"builds": {"cu128": {
        "arch_set": "cu128-2.11", "experimental": True}}}}})
    pairings = load_pairings(tmp_path)
    build = pairings.build("2.15.0", "cu130")
    assert build is not None and "sm_120" in build.architectures
    assert pairings.labels("2.13") == ["cpu", "cu126", "cu130", "cu132",
                                       "rocm7.1", "rocm7.2", "cu128"]
    assert pairings.build("2.13.1", "cu128").experimental  # type: ignore[union-attr]


def test_dangling_pairing_is_bad_input(tmp_path: Path) -> None:
    extra = _write(tmp_path / "p.json", {"torch": {"2.13": {"cu128": "no-such-set"}}})
    with pytest.raises(BadInput) as caught:
        load_pairings(None, extra)
    assert str(
        caught.value) == (f"{extra}: $.torch.2.13.cu128: arch set 'no-such-set' is not under "
                                 "$.arch_sets; add it there")


def test_schemas_are_strict() -> None:
    for name in ("catalog", "pairings", "order"):
        schema = json.loads(schema_path(name).read_text())
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        assert schema["additionalProperties"] is False


def test_an_offer_that_contradicts_itself_is_refused(tmp_path: Path) -> None:
    bad = _write(tmp_path / "c.json",
                 {"offers": [_offer("Odd", vendor="amd", backend="rocm", architecture="sm_90")]})
    with pytest.raises(BadInput,
                       match=r"\$\.offers\[0\]: amd card 'Odd' has backend rocm and architecture "
                             r"sm_90; an "
                             r"amd card runs rocm with an gfx\.\.\. architecture"):
        load_catalog(None, bad)
    blank = _write(tmp_path / "b.json", {"offers": [_offer("   ")]})
    with pytest.raises(BadInput, match="name is blank"):
        load_catalog(None, blank)


def test_an_alias_that_names_another_card_is_refused(tmp_path: Path) -> None:
    clash = _write(tmp_path / "c.json", {"offers": [_offer("My T4 box", aliases=["T4"])]})
    with pytest.raises(BadInput, match=r"offer 'My T4 box' answers to 't4' like 'T4' of"):
        load_catalog(None, clash)


def test_an_index_whose_facts_contradict_its_label_is_refused(tmp_path: Path) -> None:
    extra = _write(tmp_path / "p.json",
                   {"indexes": {"cu130": {"backend": "rocm", "version": "13.0"}}})
    with pytest.raises(BadInput) as caught:
        load_pairings(None, extra)
    assert str(
        caught.value) == (f"{extra}: $.indexes.cu130: says backend rocm 13.0, but cu130 is cuda "
                                 "13.0; fix the entry")


def test_a_project_file_may_use_an_index_of_the_command_line_file(tmp_path: Path) -> None:
    _write(tmp_path / "pairings.json", {"torch": {"2.15": {"cu134": "cu130-2.13"}}})
    extra = _write(tmp_path / "extra.json",
                   {"indexes": {"cu134": {"backend": "cuda", "version": "13.4"}}})
    assert load_pairings(tmp_path, extra).build("2.15.0", "cu134") is not None
