"""Card names, a hostile round: the driver's name against the order (gpu.name), tier words (Ti, SUPER, D),
rocm-smi's one name for two cards (MI250X/MI250), and what a project catalog.json may carry."""

from __future__ import annotations

import json
import shutil
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from kdkit.core.errors import BadInput
from kdkit.facts.catalog import load_catalog
from kdkit.order.plan import make_plan
from kdkit.probe.diagnose import health
from kdkit.probe.diagnose.nominal import lookup, named
from tests import smi_standin


def _gpu(name: str) -> dict[str, Any]:
    return {"index": 0, "name": name, "bus_id": "0000:C1:00.0"}


def _name(order: str, driver: str) -> tuple[str, str]:
    (point,) = health.name_points(_gpu(driver), order)
    return point.verdict, point.why


@pytest.mark.parametrize("driver", ["AMD Instinct MI250X/MI250", "AMD Instinct MI250X / MI250"])
@pytest.mark.parametrize("order", ["MI250", "MI250X"])
def test_the_name_rocm_smi_gives_both_mi250s_matches_an_order_of_either(
    order: str, driver: str) -> None:
    """Both spellings (ROCm 7.2 spaces the slash), both orders: ok, saying the driver names them alike."""
    verdict, why = _name(order, driver)
    assert verdict == "ok" and "names MI250X and MI250 alike" in why
    assert named(driver) == ("MI250X", "MI250")
    # the figures and memory are still read as the MI250X's, for either spelling
    figures = lookup(driver)
    assert figures is not None and figures.name == "MI250X"


def test_the_mi250_name_is_still_another_cards(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _name("MI210", "AMD Instinct MI250X / MI250")[0] == "refuse"
    assert _name("MI250", "AMD Instinct MI210")[0] == "refuse"
    assert _name("MI250", "AMD Instinct MI250")[0] == "ok"


@pytest.mark.parametrize("series", ["AMD Instinct MI250X/MI250", "AMD Instinct MI250X / MI250"])
@pytest.mark.parametrize("order", ["MI250", "MI250X"])
def test_a_recorded_mi250_is_accepted_as_the_ordered_card(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          series: str, order: str) -> None:
    """`kdkit plan --gpu MI250`, then the rocm-smi recording with the name rocm-smi gives an MI250 (and an
    MI250X): no 'is not the ordered MI250', and the memory is judged (64 GB per GCD either way)."""
    scenarios = tmp_path / "scenarios"
    shutil.copytree(smi_standin.SCENARIOS / "mi250x-rocm-smi", scenarios / "mi250")
    recording = scenarios / "mi250" / "rocm-smi" / "rocm-smi.json"
    recording.write_text(recording.read_text(encoding="utf-8").replace(
        '"AMD Instinct MI250X"', json.dumps(series)),
                         encoding="utf-8")
    monkeypatch.setattr(smi_standin, "SCENARIOS", scenarios)
    monkeypatch.setenv("PATH", str(smi_standin.install(tmp_path / "bin", "mi250")))
    monkeypatch.setenv(smi_standin.LOG, str(tmp_path / "calls.log"))
    monkeypatch.delenv(smi_standin.PHASE, raising=False)
    facts, points = health.check(expected_name=order, expected_count=4)
    assert [gpu["name"] for gpu in facts["gpus"]] == [series] * 4
    for kind in ("gpu.name", "gpu.memory"):
        assert [point.verdict for point in points if point.name == kind] == ["ok"] * 4, kind


@pytest.mark.parametrize(("order", "driver"), [
    ("RTX 4090", "NVIDIA GeForce RTX 4090 D"), ("RTX 4080 SUPER", "NVIDIA GeForce RTX 4080"),
    ("RTX 3090 Ti", "NVIDIA GeForce RTX 3090"), ("RTX 3090", "NVIDIA GeForce RTX 3090 Ti")])
def test_another_tier_of_the_ordered_model_is_refused(order: str, driver: str) -> None:
    verdict, why = _name(order, driver)
    assert verdict == "refuse" and driver in why and order in why


def test_an_unlisted_tier_says_which_card_the_driver_names() -> None:
    assert _name("RTX 4090", "NVIDIA GeForce RTX 4090 D")[1].startswith(
        "the driver names a NVIDIA GeForce RTX 4090 D; the order is RTX 4090")


@pytest.mark.parametrize(("order", "driver"), [
    ("RTX 4090", "NVIDIA GeForce RTX 4090"), ("rtx4090", "NVIDIA GeForce RTX 4090"),
    ("RTX 4080 SUPER", "NVIDIA GeForce RTX 4080 SUPER"),
    ("4080 SUPER", "NVIDIA GeForce RTX 4080 SUPER")])
def test_the_same_card_in_another_spelling_stays_ok(order: str, driver: str) -> None:
    assert _name(order, driver)[0] == "ok"


def test_a_tier_word_is_no_near_name_to_suggest() -> None:
    """`--gpu "RTX 4090 D"` does not answer "did you mean 'RTX 4090'?" (another card)."""
    with pytest.raises(BadInput) as caught:
        load_catalog().find("RTX 4090 D")
    assert "did you mean" not in str(caught.value)
    assert [offer.name for offer in load_catalog().candidates("RTX 4090D")] == []


def _catalog(tmp_path: Path, sources: dict[str, str] | None = None, **extra: object) -> Path:
    offer = {"name": "Foo 9000", "vendor": "nvidia", "backend": "cuda", "memory_gb": 24,
             "architecture": "sm_89",
             "cards_per_lot": 1, "price_per_lot_usd": {"3": 10, "7": 20, "30": 50}, **extra}
    path = tmp_path / "catalog.json"
    path.write_text(
        json.dumps({"sources": sources or {"mine": "my sheet"}, "offers": [offer]}),
        encoding=("utf-8"))
    return path


@pytest.mark.parametrize(("sources", "extra", "where"), [
    ({"mine": "ghp_abcdefghijklmnopqrstuvwxyz0123456789"}, {}, "$.sources.mine"),
    ({"mine": "https://user:hunter2pass@example.com/sheet"}, {}, "$.sources.mine"),
    (None, {"note": "token=hunter2hunter2"}, "$.offers[0].note")])
def test_a_catalog_carrying_a_credential_is_refused(tmp_path: Path, sources: dict[str, str] | None,
                                                    extra: dict[str, object], where: str) -> None:
    path = _catalog(tmp_path, sources, **extra)
    with pytest.raises(BadInput) as caught:
        load_catalog(None, path)
    message = str(caught.value)
    assert f"{path}: {where}: " in message and "hunter2" not in message and "ghp_" not in message
    assert len(message.splitlines()) == 1


def test_a_device_pattern_that_is_no_regex_is_refused_at_load(tmp_path: Path) -> None:
    path = _catalog(tmp_path, device_pattern="([unclosed")
    with pytest.raises(
        BadInput, match=r"\$\.offers\[0\]\.device_pattern: not a regular expression"):
        load_catalog(None, path)


@pytest.mark.parametrize("price", [1e26, 10_000_000.01])
def test_a_price_past_the_bound_is_refused_at_load_not_a_traceback(
    tmp_path: Path, price: float) -> None:
    path = _catalog(tmp_path, price_per_lot_usd={"3": price, "7": None, "30": None})
    with pytest.raises(
        BadInput, match=r"\$\.offers\[0\]\.price_per_lot_usd\.3: .* more than 10000000 USD"):
        load_catalog(None, path)


def test_a_price_at_the_bound_still_plans(tmp_path: Path) -> None:
    catalog = load_catalog(None,
                           _catalog(tmp_path,
                                    price_per_lot_usd={"3": 10_000_000, "7": None, "30": None}))
    order = make_plan(catalog, "Foo 9000", 3, 10)
    assert Decimal(order["total_usd"]) == Decimal(100_000_000)
