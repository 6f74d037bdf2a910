"""Before ordering: what does the order cost and does its schedule fit (``plan``)? (Whether the
offer runs the project is ``kdkit check``, kdkit.order.check.)

Money is ``Decimal`` end to end and rounded to cents once, half up: 2 x 47.14 is 94.28, not
94.27999999. A lot's price already covers all of its cards (a B200 lot holds two): the total is
lot price x lots, never x cards.
"""

from __future__ import annotations

import dataclasses
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from pathlib import Path
from typing import TYPE_CHECKING

from kdkit import __version__
from kdkit.config.project import Project
from kdkit.core.errors import BadInput
from kdkit.core.safetext import printable
from kdkit.facts.catalog import DURATIONS, MAX_LOT_PRICE, Catalog, Offer, load_catalog
from kdkit.order import schedule as stagelib
from kdkit.order.orderfile import check_status, parse_orderas_number, save_order, utc_now
from kdkit.order.reportread import MAX_HOURS, read_report
from kdkit.order.schedule import as_number

if TYPE_CHECKING:
    from kdkit.order.planrecords import (
        CostPerAccepted,
        LongerPlan,
        LotsPrice,
        MoreLots,
        OrderPlan,
        ScheduleSection,
        StagesSection,
    )
    from kdkit.order.reportread import ReportRecord
    from kdkit.order.schedule import CutPlan

MAX_LOTS = 10
PREPARATIONS = ("ubuntu", "pytorch", "blender", "custom")
CENT = Decimal("0.01")
# Bounds that refuse typos and keep Decimal's arithmetic exact (1e999 is finite, but no cent of it
# can be computed in 28 digits): a lot costs at least a cent and at most ten million USD; a plan
# books at most a year of machine time (the longest window is 30 days).
MAX_PRICE = MAX_LOT_PRICE  # the catalog's bound (kdkit.facts.catalog) is --price's


def usd(value: Decimal) -> str:
    """Money as the string an order stores: two decimals, rounded half up."""
    return str(value.quantize(CENT, rounding=ROUND_HALF_UP))


# ---------------------------------------------------------------- plan: inputs


def parse_price(text: str) -> Decimal:
    """``--price`` as an exact decimal amount in USD: finite (no NaN, sNaN, Infinity), a cent to
    MAX_PRICE."""
    try:
        value = Decimal(text.strip().removeprefix("$"))
    except InvalidOperation:
        value = Decimal(0)
    if not value.is_finite() or value <= 0:
        raise BadInput(
            f"--price {text!r}: expected a positive amount in USD for one lot, e.g. 47.14")
    if not CENT <= value <= MAX_PRICE:
        raise BadInput(
            f"--price {text!r}: expected {usd(CENT)} to {usd(MAX_PRICE)} USD for one lot, e.g. "
            "47.14")
    return value


def _check_days_lots(days: int, lots: int) -> None:
    if days not in DURATIONS:
        raise BadInput(f"--days {days}: a plan lasts 3, 7 or 30 days; choose one of them")
    if not 1 <= lots <= MAX_LOTS:
        raise BadInput(
            f"--lots {lots}: an order holds 1 to {MAX_LOTS} lots; choose a number in that range")


def _check_counts(hours: Decimal | None, accepted: int | None) -> None:
    if hours is not None and not hours.is_finite():
        raise BadInput(
            f"--hours {hours}: not a finite number; give the machine-busy hours, e.g. 48")
    if hours is not None and hours < 0:
        raise BadInput(f"--hours {as_number(hours)}: booked hours cannot be negative")
    if hours is not None and hours > MAX_HOURS:
        raise BadInput(f"--hours {float(hours):g}: more than a year ({MAX_HOURS} h) of machine "
                       "time; give the machine-busy hours of this plan (3, 7 or 30 days: 72, 168 "
                       "or 720 h)")
    if accepted is not None and accepted < 0:
        raise BadInput(f"--accepted {accepted}: the number of accepted outputs cannot be negative")


def lot_price(offer: Offer, days: int, price: Decimal | None) -> tuple[Decimal, str]:
    """The price of one lot for ``days``: ``--price`` when given, else the catalog's; never a
    guess."""
    if price is not None:
        return price, "--price"
    known = offer.price(days)
    if known is None:
        raise BadInput(f"--gpu {offer.name!r}: the catalog has no {days}-day price; pass --price "
                       f"USD (the provider's price of one lot for {days} days) — kdkit never "
                       "invents one")
    return known, "catalog"


# ---------------------------------------------------------------- plan: schedule and cost


def _longer_plan(offer: Offer, days: int, lots: int, total: Decimal) -> LongerPlan | None:
    longer = next((d for d in DURATIONS if d > days), None)
    if longer is None:
        return None
    price = offer.price(longer)
    if price is None:
        return {"days": longer, "total_usd": None, "difference_usd": None}
    return {"days": longer, "total_usd": usd(price * lots),
            "difference_usd": usd(price * lots - total)}


def _over_suggestions(over: Decimal, window: int, longer: LongerPlan | None) -> list[str]:
    reduce = (f"or reduce the protocol by {as_number(over)} h to fit {window} h: keep the "
              "essential work, move useful and exploratory runs out")
    if longer is None:
        return ["no longer plan exists: reduce the protocol by "
                f"{as_number(over)} h, or split independent inputs across lots as workers"]
    if longer["difference_usd"] is None:
        first = f"take the {longer['days']}-day plan (its price is unknown: ask the provider)"
    else:
        first = (f"take the {longer['days']}-day plan: {longer['total_usd']} USD in total, "
                 f"{longer['difference_usd']} USD more")
    return [first, reduce]


def schedule(offer: Offer, days: int, lots: int, total: Decimal,
             hours: Decimal | None) -> ScheduleSection:
    """Booked machine-busy hours against the window (stages on one GPU run one after another)."""
    window = days * 24
    base: ScheduleSection = {"window_hours": window, "booked_hours": None, "left_hours": None,
                            "over_hours": None, "fits": None, "longer_plan": None,
                            "suggestions": []}
    if hours is None:
        base["suggestions"] = ["pass --hours H: the machine-busy hours of installation, checks, "
                               "compute and export, end to end"]
        return base
    base["booked_hours"] = as_number(hours)
    if hours <= window:
        return {**base, "left_hours": as_number(window - hours), "fits": True}
    over = hours - window
    longer = _longer_plan(offer, days, lots, total)
    return {**base, "over_hours": as_number(over), "fits": False, "longer_plan": longer,
            "suggestions": _over_suggestions(over, window, longer)}


# ---------------------------------------------------------------- plan: a schedule of stages


@dataclasses.dataclass(frozen=True)
class Stages:
    """A schedule file read at the edge (kdkit.order.schedule.load_schedule), measured hours already
    applied."""

    file: Path
    stages: tuple[stagelib.Stage, ...]


def stage_schedule(offer: Offer, days: int, lots: int,
                   per_lot: Decimal, stages: Stages) -> ScheduleSection:
    """The stages placed (kdkit.order.schedule): the end of the last one is the booked time, against
    the window; when it does not fit, the longer plan, the stages to cut and the lots that would let
    them spread."""
    stagelib.check_gpus(stages.file, stages.stages, lots * offer.cards_per_lot)
    slots = stagelib.timeline(stages.stages)
    end = stagelib.last_end(slots)
    if end > MAX_HOURS:
        raise BadInput(f"{stages.file}: $.stages: the last stage ends after {float(end):g} h, more "
                       f"than a year ({MAX_HOURS} h); check the hours")
    out = schedule(offer, days, lots, per_lot * lots, end)
    window = Decimal(days * 24)
    section: StagesSection = {
        "file": str(stages.file), "rule": stagelib.RULE, "last_end_hours": as_number(end),
        "critical_chain": stagelib.critical_chain(slots), "gpus": stagelib.gpu_busy(slots),
        "human_hours": as_number(sum((s.human_hours for s in stages.stages), Decimal(0))),
        "stages": stagelib.stage_rows(slots), "cut": None, "more_lots": None}
    if end > window:
        section["cut"] = stagelib.cut_plan(stages.stages, window)
        more = stagelib.spread_plan(stages.stages, window, lots, offer.cards_per_lot, MAX_LOTS)
        section["more_lots"] = None if more is None else {
            **more, **_lots_price(more["lots"], lots, per_lot)}
        out["suggestions"] += _stage_suggestions(section["cut"], section["more_lots"], window, lots)
    return {**out, "stages": section}


def _lots_price(count: int | None, lots: int, per_lot: Decimal) -> LotsPrice:
    if count is None:
        return {"total_usd": None, "difference_usd": None}
    return {"total_usd": usd(per_lot * count), "difference_usd": usd(per_lot * (count - lots))}


def _stage_suggestions(cut: CutPlan | None, more: MoreLots | None, window: Decimal,
                       lots: int) -> list[str]:
    out = []
    if cut is not None:
        names = ", ".join(f"{c['name']} ({c['category']}, {c['machine_hours']} h)"
                          for c in cut["stages"])
        verdict = (f"within the {as_number(window)} h window" if cut["fits"]
                   else f"still {as_number(Decimal(str(cut['last_end_hours'])) - window)} h over "
                        "the window")
        out.append(f"or cut, exploratory first, then useful: {printable(names)}: the last stage "
                   f"then ends at {cut['last_end_hours']} h, {verdict}")
    if more is not None and more["lots"] is None:
        out.append(
            f"more lots do not help: the chain of waits alone ends at {more['last_end_hours']} h")
    elif more is not None:
        how = (f"spread the stages over the {more['gpus']} GPU(s) already ordered"
               if more["lots"] == lots else
               f"or order {more['lots']} lots ({more['gpus']} GPUs, {more['total_usd']} USD in "
               f"total, {more['difference_usd']} USD more) and spread the stages over them")
        out.append(f"{how}: the last stage ends at {more['last_end_hours']} h — only if your "
                   "environment runs independent stages apart; more lots never shorten one stage "
                   "nor pool memory")
    return out


def read_stages(path: Path, measured: dict[str, Decimal] | None = None) -> Stages:
    """``--schedule FILE``, each stage's machine hours replaced by the measured ones of the same
    name."""
    stages = stagelib.load_schedule(path)
    if measured:
        stages = tuple(dataclasses.replace(s, machine_hours=measured[s.name]) if s.name in measured
                       else s
                       for s in stages)
    return Stages(path, stages)


def cost_per_accepted(total: Decimal, accepted: int | None) -> CostPerAccepted | None:
    """What each accepted output cost; with none accepted the ratio is undefined, never zero."""
    if accepted is None:
        return None
    if accepted == 0:
        return {"accepted": 0, "per_output_usd": None, "cost_incurred_usd": usd(total),
                "reason": f"0 accepted outputs: {usd(total)} USD was spent and nothing was "
                          "accepted, so the cost per output is undefined (not zero)"}
    return {"accepted": accepted, "per_output_usd": usd(total / accepted),
            "cost_incurred_usd": usd(total),
            "reason": None}


def make_plan(catalog: Catalog, gpu: str, days: int, lots: int, *, price: Decimal | None = None,
              hours: Decimal | None = None, accepted: int | None = None,
              preparation: str = "ubuntu",
              project: str | None = None, stages: Stages | None = None,
              from_report: ReportRecord | None = None,
              order_number: str | None = None, order_status: str | None = None) -> OrderPlan:
    """The order summary, its schedule (from ``hours``, or from ``stages`` placed by
    kdkit.order.schedule) and its cost per accepted output (the order file's content)."""
    _check_days_lots(days, lots)
    _check_counts(hours, accepted)
    if preparation not in PREPARATIONS:
        raise BadInput(f"--preparation {preparation}: choose one of {', '.join(PREPARATIONS)}")
    if stages is not None and hours is not None:
        raise BadInput(f"--hours {as_number(hours)} and --schedule {stages.file}: the schedule "
                       "gives the hours; pass one of them")
    offer = catalog.find(gpu)
    per_lot, source = lot_price(offer, days, price)
    total = per_lot * lots
    sched = (schedule(offer, days, lots, total, hours) if stages is None
             else stage_schedule(offer, days, lots, per_lot, stages))
    if from_report is not None:
        sched["from_report"] = from_report
    return {
        "kdkit_order": 1, "created": utc_now(), "kdkit_version": __version__, "project": project,
        "offer": offer.summary(), "days": days, "lots": lots, "cards": lots * offer.cards_per_lot,
        "preparation": preparation, "price_per_lot_usd": usd(per_lot), "price_source": source,
        "total_usd": usd(total), "schedule": sched,
        "cost_per_accepted": cost_per_accepted(total, accepted),
        "order_number": order_number, "order_status": order_status,
    }


def runs_folder(project: Project) -> Path:
    """The pilot config's runs folder by the pilot's own rule (Project.pilot_config: the model and
    the runs rule; then inside the project with every link resolved); BadInput naming ``$.runs``
    otherwise, never a fallback to another folder."""
    from kdkit.core.projectfiles import config_path, require_real_inside

    data, where = project.pilot_config(), project.pilot_config_path
    runs = config_path(project.root, str(data["runs"]), where, "$.runs")
    require_real_inside(project.root, runs, where, "$.runs")
    return runs


# ---------------------------------------------------------------- plan: from a closed campaign's
# report


def from_report(path: Path,
                schedule_file: Path | None) -> tuple[Decimal | None, Stages | None, ReportRecord]:
    """The next plan's start: with ``--schedule``, its stages' machine hours replaced by the
    measured ones of the same name; without, the observed hours in all as the booked hours."""
    total, measured, record = read_report(path)
    if schedule_file is None:
        if total is None:
            raise BadInput(f"{path}: $.measured_durations.observed_hours: the report holds no "
                           "observed hours (nor $.hours.observed); plan with --hours or --schedule")
        return total, None, record
    stages = read_stages(schedule_file, measured)
    planned = {s.name: s.machine_hours for s in stagelib.load_schedule(schedule_file)}
    record["replaced"] = [{"stage": n, "planned": as_number(planned[n]), "measured": as_number(h)}
                          for n, h in measured.items() if n in planned]
    record["unmatched"] = sorted(n for n in measured if n not in planned)
    return None, stages, record


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


def plan_order(project_dir: Path | None, gpu: str | None, days: int | None, lots: int | None, *,
               price: str | None = None, hours: float | None = None, accepted: int | None = None,
               preparation: str = "ubuntu", catalog_file: Path | None = None,
               save: Path | None = None,
               force: bool = False, schedule_file: Path | None = None,
               report_file: Path | None = None,
               order_number: str | None = None, order_status: str | None = None) -> OrderPlan:
    """``kdkit plan``: the plan for ``gpu`` (with the project's catalog.json when inside a project),
    from ``hours``, a schedule of stages, or a closed campaign's report, saved atomically to
    ``save`` when given."""
    if gpu is None or days is None or lots is None:
        raise BadInput("kdkit plan: --gpu, --days and --lots make a plan (or --order FILE with "
                       "--order-number / --order-status records those in a saved order)")
    if (order_number is not None or order_status is not None) and save is None:
        raise BadInput("--order-number/--order-status are recorded in the order: pass --save FILE "
                       "(or update a saved order with --order FILE)")
    number = parse_orderas_number(order_number)
    check_status(order_status)
    booked = None if hours is None else Decimal(str(hours))
    stages = None if schedule_file is None else read_stages(schedule_file)
    record: ReportRecord | None = None
    if report_file is not None:
        if hours is not None:
            raise BadInput(f"--hours {hours:g} and --from-report {report_file}: the report gives "
                           "the hours; pass one of them")
        booked, stages, record = from_report(report_file, schedule_file)
    project = optional_project(project_dir)
    catalog = load_catalog(None if project is None else project.root, catalog_file)
    order = make_plan(catalog, gpu, days, lots, price=None if price is None else parse_price(price),
                      hours=booked,
                      accepted=accepted, preparation=preparation,
                      project=None if project is None else project.name,
                      stages=stages, from_report=record,
                      order_number=number, order_status=order_status)
    if save is not None:
        save_order(order, save, force=force)
    return order
