"""Before ordering: what does the order cost and does its schedule fit (``plan``)? (Whether the
offer runs the project is ``kdkit check``, kdkit.order.check.)

Money is ``Decimal`` end to end and rounded to cents once, half up: 2 x 47.14 is 94.28, not
94.27999999. A lot's price already covers all of its cards (a B200 lot holds two): the total is
lot price x lots, never x cards.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from kdkit import __version__
from kdkit.config.project import Project
from kdkit.config.schemas import load_valid
from kdkit.core.errors import BadInput
from kdkit.core.jsonio import atomic_write_json
from kdkit.facts.catalog import DURATIONS, MAX_LOT_PRICE, Catalog, Offer, load_catalog

MAX_LOTS = 10
PREPARATIONS = ("ubuntu", "pytorch", "blender", "custom")
CENT = Decimal("0.01")
# Bounds that refuse typos and keep Decimal's arithmetic exact (1e999 is finite, but no cent of it
# can be computed in 28 digits): a lot costs at least a cent and at most ten million USD; a plan
# books at most a year of machine time (the longest window is 30 days).
MAX_PRICE = MAX_LOT_PRICE  # the catalog's bound (kdkit.facts.catalog) is --price's
MAX_HOURS = 365 * 24


def usd(value: Decimal) -> str:
    """Money as the string an order stores: two decimals, rounded half up."""
    return str(value.quantize(CENT, rounding=ROUND_HALF_UP))


def _number(value: Decimal) -> int | float:
    """Hours for JSON: 78 stays 78, 1.5 stays 1.5."""
    return int(value) if value == value.to_integral_value() else float(value)


# ---------------------------------------------------------------- plan: inputs


def parse_price(text: str) -> Decimal:
    """``--price`` as an exact decimal amount in USD: finite (no NaN, sNaN, Infinity), a cent to MAX_PRICE."""
    try:
        value = Decimal(text.strip().removeprefix("$"))
    except InvalidOperation:
        value = Decimal(0)
    if not value.is_finite() or value <= 0:
        raise BadInput(f"--price {text!r}: expected a positive amount in USD for one lot, e.g. 47.14")
    if not CENT <= value <= MAX_PRICE:
        raise BadInput(f"--price {text!r}: expected {usd(CENT)} to {usd(MAX_PRICE)} USD for one lot, e.g. 47.14")
    return value


def _check_days_lots(days: int, lots: int) -> None:
    if days not in DURATIONS:
        raise BadInput(f"--days {days}: a plan lasts 3, 7 or 30 days; choose one of them")
    if not 1 <= lots <= MAX_LOTS:
        raise BadInput(f"--lots {lots}: an order holds 1 to {MAX_LOTS} lots; choose a number in that range")


def _check_counts(hours: Decimal | None, accepted: int | None) -> None:
    if hours is not None and not hours.is_finite():
        raise BadInput(f"--hours {hours}: not a finite number; give the machine-busy hours, e.g. 48")
    if hours is not None and hours < 0:
        raise BadInput(f"--hours {_number(hours)}: booked hours cannot be negative")
    if hours is not None and hours > MAX_HOURS:
        raise BadInput(f"--hours {float(hours):g}: more than a year ({MAX_HOURS} h) of machine time; give the "
                       "machine-busy hours of this plan (3, 7 or 30 days: 72, 168 or 720 h)")
    if accepted is not None and accepted < 0:
        raise BadInput(f"--accepted {accepted}: the number of accepted outputs cannot be negative")


def lot_price(offer: Offer, days: int, price: Decimal | None) -> tuple[Decimal, str]:
    """The price of one lot for ``days``: ``--price`` when given, else the catalog's; never a guess."""
    if price is not None:
        return price, "--price"
    known = offer.price(days)
    if known is None:
        raise BadInput(f"--gpu {offer.name!r}: the catalog has no {days}-day price; pass --price USD "
                       f"(the provider's price of one lot for {days} days) — kdkit never invents one")
    return known, "catalog"


# ---------------------------------------------------------------- plan: schedule and cost


def _longer_plan(offer: Offer, days: int, lots: int, total: Decimal) -> dict[str, Any] | None:
    longer = next((d for d in DURATIONS if d > days), None)
    if longer is None:
        return None
    price = offer.price(longer)
    if price is None:
        return {"days": longer, "total_usd": None, "difference_usd": None}
    return {"days": longer, "total_usd": usd(price * lots), "difference_usd": usd(price * lots - total)}


def _over_suggestions(over: Decimal, window: int, longer: dict[str, Any] | None) -> list[str]:
    reduce = (f"or reduce the protocol by {_number(over)} h to fit {window} h: keep the essential work, "
              "move useful and exploratory runs out")
    if longer is None:
        return ["no longer plan exists: reduce the protocol by "
                f"{_number(over)} h, or split independent inputs across lots as workers"]
    if longer["difference_usd"] is None:
        first = f"take the {longer['days']}-day plan (its price is unknown: ask the provider)"
    else:
        first = (f"take the {longer['days']}-day plan: {longer['total_usd']} USD in total, "
                 f"{longer['difference_usd']} USD more")
    return [first, reduce]


def schedule(offer: Offer, days: int, lots: int, total: Decimal, hours: Decimal | None) -> dict[str, Any]:
    """Booked machine-busy hours against the window (stages on one GPU run one after another)."""
    window = days * 24
    base: dict[str, Any] = {"window_hours": window, "booked_hours": None, "left_hours": None,
                            "over_hours": None, "fits": None, "longer_plan": None, "suggestions": []}
    if hours is None:
        base["suggestions"] = ["pass --hours H: the machine-busy hours of installation, checks, compute "
                               "and export, end to end"]
        return base
    base["booked_hours"] = _number(hours)
    if hours <= window:
        return {**base, "left_hours": _number(window - hours), "fits": True}
    over = hours - window
    longer = _longer_plan(offer, days, lots, total)
    return {**base, "over_hours": _number(over), "fits": False, "longer_plan": longer,
            "suggestions": _over_suggestions(over, window, longer)}


def cost_per_accepted(total: Decimal, accepted: int | None) -> dict[str, Any] | None:
    """What each accepted output cost; with none accepted the ratio is undefined, never zero."""
    if accepted is None:
        return None
    if accepted == 0:
        return {"accepted": 0, "per_output_usd": None, "cost_incurred_usd": usd(total),
                "reason": f"0 accepted outputs: {usd(total)} USD was spent and nothing was accepted, so the "
                          "cost per output is undefined (not zero)"}
    return {"accepted": accepted, "per_output_usd": usd(total / accepted), "cost_incurred_usd": usd(total),
            "reason": None}


def make_plan(catalog: Catalog, gpu: str, days: int, lots: int, *, price: Decimal | None = None,
              hours: Decimal | None = None, accepted: int | None = None, preparation: str = "ubuntu",
              project: str | None = None) -> dict[str, Any]:
    """The order summary, its schedule and its cost per accepted output (the order file's content)."""
    _check_days_lots(days, lots)
    _check_counts(hours, accepted)
    if preparation not in PREPARATIONS:
        raise BadInput(f"--preparation {preparation}: choose one of {', '.join(PREPARATIONS)}")
    offer = catalog.find(gpu)
    per_lot, source = lot_price(offer, days, price)
    total = per_lot * lots
    return {
        "kdkit_order": 1, "created": _utc_now(), "kdkit_version": __version__, "project": project,
        "offer": offer.summary(), "days": days, "lots": lots, "cards": lots * offer.cards_per_lot,
        "preparation": preparation, "price_per_lot_usd": usd(per_lot), "price_source": source,
        "total_usd": usd(total), "schedule": schedule(offer, days, lots, total, hours),
        "cost_per_accepted": cost_per_accepted(total, accepted),
    }


def _utc_now() -> str:
    import datetime as dt

    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def save_order(order: dict[str, Any], path: Path, *, force: bool = False) -> None:
    """Write the order atomically; an existing order is a record and is kept unless ``force``."""
    if path.exists() and not force:
        raise BadInput(f"{path}: already exists; an order is a record — choose another name or pass --force")
    if not path.parent.is_dir():
        raise BadInput(f"{path.parent}: folder does not exist; create it first")
    atomic_write_json(path, order)


def load_order(path: Path) -> dict[str, Any]:
    """An order file written by ``kdkit plan --save``, checked against schemas/order.schema.json."""
    return load_valid(path, "order", what="order file", hint="; write it with `kdkit plan --save`")


def runs_folder(project: Project) -> Path:
    """The pilot config's runs folder by the pilot's own rule (Project.pilot_config: the model and the runs rule;
    then inside the project with every link resolved); BadInput naming ``$.runs`` otherwise, never a fallback
    to another folder."""
    from kdkit.core.projectfiles import config_path, require_real_inside

    data, where = project.pilot_config(), project.pilot_config_path
    runs = config_path(project.root, str(data.get("runs", "runs")), where, "$.runs")
    require_real_inside(project.root, runs, where, "$.runs")
    return runs


# ---------------------------------------------------------------- entry points for the commands


def optional_project(project_dir: Path | None) -> Project | None:
    """The project named, or the one around the current folder, or None outside any project."""
    from kdkit.config.project import load_project
    from kdkit.core.projectfiles import require_root

    if project_dir is None:
        try:
            project_dir = require_root()
        except BadInput:
            return None
    return load_project(project_dir)


def plan_order(project_dir: Path | None, gpu: str, days: int, lots: int, *, price: str | None = None,
               hours: float | None = None, accepted: int | None = None, preparation: str = "ubuntu",
               catalog_file: Path | None = None, save: Path | None = None,
               force: bool = False) -> dict[str, Any]:
    """``kdkit plan``: the plan for ``gpu`` (with the project's catalog.json when inside a project),
    saved atomically to ``save`` when given."""
    project = optional_project(project_dir)
    catalog = load_catalog(None if project is None else project.root, catalog_file)
    order = make_plan(catalog, gpu, days, lots, price=None if price is None else parse_price(price),
                      hours=None if hours is None else Decimal(str(hours)), accepted=accepted,
                      preparation=preparation, project=None if project is None else project.name)
    if save is not None:
        save_order(order, save, force=force)
    return order
