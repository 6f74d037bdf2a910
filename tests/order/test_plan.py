"""`kdkit plan`: order totals, schedule, cost per accepted output, --save, and every bad input."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest

from kdkit.facts.catalog import load_catalog
from kdkit.order.orderfile import load_order
from kdkit.order.plan import cost_per_accepted, make_plan
from tests.conftest import invoke, tree_snapshot


def _plan(gpu: str = "RTX 4090", days: int = 3, lots: int = 1, **kw: object) -> dict[str, object]:
    return make_plan(load_catalog(), gpu, days, lots, **kw)  # type: ignore[arg-type]


def _json(*args: str) -> dict[str, object]:
    result = invoke("plan", *args, "--json")
    assert result.exit_code == 0, result.output
    data: dict[str, object] = json.loads(result.output)
    return data


# ---------------------------------------------------------------- arithmetic


def test_two_rtx_4090_three_day_lots_cost_94_28() -> None:
    order = _json("--gpu", "RTX 4090", "--days", "3", "--lots", "2")
    assert order["total_usd"] == "94.28"
    assert order["price_per_lot_usd"] == "47.14" and order["price_source"] == "catalog"
    assert order["cards"] == 2


def test_money_is_decimal_not_float() -> None:
    # 3 x 47.14 in binary floating point is 141.42000000000002.
    assert _plan(lots=3)["total_usd"] == "141.42"
    assert _plan(days=7, lots=10)["total_usd"] == "1100.00"
    assert _plan(days=30, lots=7)["total_usd"] == "2730.00"


def test_cost_per_accepted_output_47_14_over_2_is_23_57() -> None:
    order = _json("--gpu", "RTX 4090", "--days", "3", "--lots", "1", "--accepted", "2")
    assert order["cost_per_accepted"] == {"accepted": 2, "per_output_usd": "23.57",
                                          "cost_incurred_usd": "47.14",
                                          "reason": None}
    text = invoke("plan", "--gpu", "RTX 4090", "--days", "3", "--lots",
                  "1", "--accepted", "2").output
    assert "Cost per accepted output: 47.14 USD / 2 = 23.57 USD each" in text


def test_zero_accepted_is_undefined_never_zero() -> None:
    assert cost_per_accepted(Decimal("47.14"), 0) == {
        "accepted": 0, "per_output_usd": None, "cost_incurred_usd": "47.14",
        "reason": "0 accepted outputs: 47.14 USD was spent and nothing was accepted, so the cost "
                  "per output is undefined (not zero)"}
    result = invoke("plan", "--gpu", "RTX 4090", "--days", "3", "--lots", "1", "--accepted", "0")
    assert result.exit_code == 0
    assert "Cost per accepted output: undefined. 0 accepted outputs: 47.14 USD was spent" in result.output
    assert "0.00" not in result.output


def test_b200_lot_price_is_never_multiplied_by_its_cards() -> None:
    order = _json("--gpu", "B200", "--days", "7", "--lots", "3", "--price", "1000")
    assert order["total_usd"] == "3000.00"
    assert order["cards"] == 6
    assert order["offer"]["cards_per_lot"] == 2  # type: ignore[index]
    assert order["price_source"] == "--price"


def test_48_hours_in_72_leave_24() -> None:
    schedule = _plan(hours=Decimal(48))["schedule"]
    assert schedule == {"window_hours": 72, "booked_hours": 48, "left_hours": 24,
                        "over_hours": None,
                        "fits": True, "longer_plan": None, "suggestions": []}
    text = invoke("plan", "--gpu", "RTX 4090", "--days", "3", "--lots", "1", "--hours", "48").output
    assert "Schedule: 48 h booked in a 72 h window leaves 24 h." in text


def test_78_hours_exceed_3_days_by_6_and_suggest_the_7_day_plan_or_less_work() -> None:
    schedule = _plan(hours=Decimal(78))["schedule"]
    assert schedule["fits"] is False and schedule["over_hours"] == 6  # type: ignore[index]
    assert schedule["longer_plan"] == {"days": 7,
                                       "total_usd": "110.00",
                                       "difference_usd": "62.86"}  # type: ignore[index]
    result = invoke("plan", "--gpu", "RTX 4090", "--days", "3", "--lots", "2", "--hours", "78")
    assert "Schedule: 78 h booked exceeds the 72 h window by 6 h." in result.output
    assert "take the 7-day plan: 220.00 USD in total, 125.72 USD more" in result.output
    assert "or reduce the protocol by 6 h to fit 72 h" in result.output


def test_over_with_unknown_longer_price_asks_the_provider() -> None:
    schedule = _plan("H100 SXM", price=Decimal(300), hours=Decimal("80.5"))["schedule"]
    assert schedule["over_hours"] == 8.5  # type: ignore[index]
    assert schedule["longer_plan"] == {"days": 7,
                                       "total_usd": None,
                                       "difference_usd": None}  # type: ignore[index]
    assert schedule["suggestions"][0] == "take the 7-day plan (its price is unknown: ask the provider)"  # type: ignore[index]


def test_over_30_days_has_no_longer_plan() -> None:
    schedule = _plan(days=30, hours=Decimal(800))["schedule"]
    assert schedule["longer_plan"] is None  # type: ignore[index]
    assert schedule["suggestions"] == [  # type: ignore[index]
        "no longer plan exists: reduce the protocol by 80 h, or split independent inputs across "
        "lots as workers"]


def test_preparation_is_recorded_as_a_need() -> None:
    result = invoke("plan", "--gpu", "RTX 4090", "--days", "3", "--lots",
                    "1", "--preparation", "pytorch")
    assert "pytorch (a need, not a proof: `kdkit diagnose` checks what arrives)" in result.output


# ---------------------------------------------------------------- --save


def test_save_writes_an_order_that_reloads(tmp_path: Path) -> None:
    path = tmp_path / "order.json"
    result = invoke("plan", "--gpu", "RTX 4090", "--days", "3", "--lots", "2", "--hours", "48",
                    "--accepted", "2", "--save", path, "--json")
    assert result.exit_code == 0
    assert load_order(path) == json.loads(result.output)
    assert [p.name for p in tmp_path.iterdir()] == ["order.json"]  # no temporary file left


def test_save_refuses_to_replace_an_order(tmp_path: Path) -> None:
    path = tmp_path / "order.json"
    path.write_text("{}")
    result = invoke("plan", "--gpu", "RTX 4090", "--days", "3", "--lots", "1", "--save", path)
    assert result.exit_code == 2
    assert result.output.strip() == (f"Error: {path}: already exists; an order is a record — "
                                     "choose another name or pass --force")
    assert path.read_text() == "{}"
    assert invoke("plan", "--gpu", "RTX 4090", "--days", "3", "--lots", "1", "--save", path,
                  "--force").exit_code == 0
    assert load_order(path)["total_usd"] == "47.14"


def test_plan_inside_a_project_uses_its_catalog(project: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    (project / "catalog.json").write_text(json.dumps({"offers": [{
        "name": "H100 80GB", "vendor": "nvidia", "backend": "cuda", "memory_gb": 80,
        "architecture": "sm_90",
        "cards_per_lot": 1, "price_per_lot_usd": {"3": 300.5, "7": None, "30": None}}]}))
    monkeypatch.chdir(project)
    order = _json("--gpu", "H100 80GB", "--days", "3", "--lots", "2")
    assert order["total_usd"] == "601.00" and order["project"] == "proj"


# ---------------------------------------------------------------- bad input: exit 2, nothing written


BAD = [
    (["--days", "5", "--lots", "1"], "--days 5: a plan lasts 3, 7 or 30 days; choose one of them"),
    (["--days", "3", "--lots", "0"],
     "--lots 0: an order holds 1 to 10 lots; choose a number in that range"),
    (["--days", "3", "--lots", "11"],
     "--lots 11: an order holds 1 to 10 lots; choose a number in that range"),
    (["--days", "3", "--lots", "1", "--price", "abc"],
     "--price 'abc': expected a positive amount in USD for one lot, e.g. 47.14"),
    (["--days", "3", "--lots", "1", "--price", "-3"],
     "--price '-3': expected a positive amount in USD for one lot, e.g. 47.14"),
    (["--days", "3", "--lots", "1", "--hours", "-1"],
     "--hours -1: booked hours cannot be negative"),
    (["--days", "3", "--lots", "1", "--accepted", "-2"],
     "--accepted -2: the number of accepted outputs cannot be negative"),
]


@pytest.mark.parametrize(("args", "message"), BAD)
def test_bad_input_exits_2_and_writes_nothing(tmp_path: Path,
                                              args: list[str], message: str) -> None:
    before = tree_snapshot(tmp_path)
    result = invoke("plan", "--gpu", "RTX 4090", *args, "--save", tmp_path / "order.json")
    assert result.exit_code == 2
    assert result.output.strip() == f"Error: {message}"
    assert tree_snapshot(tmp_path) == before


def test_unknown_gpu_exits_2_with_the_closest_names(tmp_path: Path) -> None:
    result = invoke("plan", "--gpu", "H100 PCIe 80GB HBM2e", "--days", "3", "--lots", "1",
                    "--save", tmp_path / "o.json")
    assert result.exit_code == 2
    assert result.output.startswith("Error: --gpu 'H100 PCIe 80GB HBM2e': no such offer in the "
                                    "catalog; did you mean 'H100 PCIe'?")
    assert tree_snapshot(tmp_path) == {}


def test_null_price_without_price_exits_2(tmp_path: Path) -> None:
    result = invoke("plan", "--gpu", "MI300X", "--days", "7", "--lots", "1",
                    "--save", tmp_path / "o.json")
    assert result.exit_code == 2
    assert result.output.strip() == ("Error: --gpu 'MI300X': the catalog has no 7-day price; pass "
                                     "--price USD (the provider's price of one lot for 7 days) — "
                                     "kdkit never invents one")
    assert tree_snapshot(tmp_path) == {}


def test_save_into_a_missing_folder_exits_2(tmp_path: Path) -> None:
    result = invoke("plan", "--gpu", "RTX 4090", "--days", "3", "--lots", "1", "--save",
                    tmp_path / "no" / "o.json")
    assert result.exit_code == 2
    assert result.output.strip() == f"Error: {tmp_path / 'no'}: folder does not exist; create it first"
    assert tree_snapshot(tmp_path) == {}
