"""What `kdkit close` adds to the runs' verdicts: the machine time observed from every record of
work (kdkit.order.worklog: the union of the intervals, idle gaps shown), booked against observed per
stage, the campaign's variants against its threshold with the conclusion and the decisions log
(kdkit.order.campaign), other expenses kept apart from the rental, and the provider's order number
and status as the order declares them.

Which intervals count: a pilot run's or a worker's only when its folder verifies
(kdkit.order.closeruns, the rule of the whole report: a folder that does not verify proves no hour);
builds, trainings, sweeps and resume tests as their records say (an open or killed training counts
to its last record: the machine was busy). A training belongs to the stage (and variant) its
params.json names (``kdkit train
--variant``), every other interval to the stage named like its kind (build, pilot, worker, train,
sweep, resume-test).
"""

from __future__ import annotations

import re
from dataclasses import asdict, is_dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.config.campaign import Campaign
from kdkit.core.errors import BadInput
from kdkit.core.projectfiles import CONTROL_CHARACTER, shown
from kdkit.core.safetext import md_cell, printable
from kdkit.order.worklog import Interval, gaps, hours_by, observed_hours, work_log

if TYPE_CHECKING:
    from kdkit.order.closerecords import (
        CampaignSection,
        Expense,
        ExpensesSection,
        IntervalRow,
        MeasuredDurations,
        OrderStatus,
        ReportSections,
        StageHours,
        TrainingRow,
        WorkSection,
    )
    from kdkit.order.closeruns import RunRow

CURRENCY = re.compile(r"^[A-Z]{3}$")
# an expense of a campaign, not a number written to overflow a report
MAX_AMOUNT = Decimal(10) ** 12
UNSCHEDULED = "(not in the schedule)"


def _h(hours: float) -> float:
    return round(hours, 2)


def _when(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


# ---------------------------------------------------------------- other expenses


def parse_expense(text: str) -> Expense:
    """``"storage 12.50 USD"`` -> {"what", "amount", "currency"}: a label, a finite positive amount,
    a 3-letter currency; anything else is bad input naming the option and what to write."""
    words = text.split()
    fix = 'write it as "WHAT AMOUNT CUR", e.g. --expense "storage 12.50 USD"'
    if len(words) < 3:
        raise BadInput(
            f"--expense {printable(text)!r}: expected a label, an amount and a currency; {fix}")
    *what, amount, currency = words
    if CONTROL_CHARACTER.search(text):
        raise BadInput(f"--expense {shown(text)}: holds a control character; {fix}")
    try:
        value = Decimal(amount)
    except InvalidOperation:
        value = Decimal("NaN")
    if not value.is_finite() or value <= 0:
        raise BadInput(
            f"--expense {printable(text)!r}: {printable(amount)!r} is not a finite positive "
            f"amount; {fix}")
    if value >= MAX_AMOUNT:
        raise BadInput(
            f"--expense {printable(text)!r}: {printable(amount)!r} is {MAX_AMOUNT:,} or more; "
            f"{fix}")
    if not CURRENCY.match(currency):
        raise BadInput(f"--expense {printable(text)!r}: {printable(currency)!r} is not a 3-letter "
                       f"currency code (USD, EUR...); {fix}")
    return {"what": " ".join(what), "amount": format(value, "f"), "currency": currency}


def declared_expenses(campaign: Campaign | None) -> list[Expense]:
    """campaign.json's "expenses" (schemas/campaign.schema.json: what, a finite amount, a currency)
    in the form of
    --expense's, marked as declared there."""
    return [{"what": str(item["what"]), "amount": format(Decimal(str(item["amount"])), "f"),
             "currency": str(item["currency"]), "source": "campaign.json"}
            for item in (campaign.expenses if campaign is not None else ())]


def expenses_section(expenses: list[Expense]) -> ExpensesSection:
    """The other expenses and their totals per currency (never added to the rental's USD)."""
    totals: dict[str, Decimal] = {}
    for item in expenses:
        totals[item["currency"]] = totals.get(item["currency"],
                                              Decimal(0)) + Decimal(item["amount"])
    return {"items": expenses, "totals": {cur: str(total) for cur, total in sorted(totals.items())}}


# ---------------------------------------------------------------- machine time


def counted_intervals(root: Path, runs: Path,
                      rows: list[RunRow]) -> tuple[list[Interval], list[str]]:
    """The work intervals that count (see the module's docstring) and the records with no time,
    named."""
    log = work_log(root, runs)
    proven = {row["run_id"] for row in rows if not row["problems"]}
    kept = [i for i in log.intervals if i.kind not in ("pilot", "worker") or i.name in proven]
    return kept, log.unread


def training_rows(intervals: list[Interval]) -> list[TrainingRow]:
    """Each `kdkit train` run: its variant, verdict (its summary's, else "stopped" with a stop.json,
    else "open"), stop reason and observed hours. A training proves no accepted output here: its
    hours count, its value is the campaign's to judge (kdkit.order.campaign)."""
    runs: dict[str, list[Interval]] = {}
    for interval in intervals:
        if interval.kind == "train":
            runs.setdefault(interval.name, []).append(interval)
    return [{"run_id": name, "variant": found[0].variant, "verdict": found[0].verdict,
             "stop_reason": found[0].stop_reason, "hours": _h(observed_hours(found))}
            for name, found in sorted(runs.items())]


def training_deviations(rows: list[TrainingRow]) -> list[str]:
    said = {"fail": "failed",
            "stopped": "stopped", "open": "was never closed (killed, or still running)"}
    return [f"training {printable(r['run_id'])} {said[r['verdict']]}"
            + (f": {printable(r['stop_reason'])}" if r["stop_reason"] else "") for r in rows
            if r["verdict"] in said]


def _row(interval: Interval) -> IntervalRow:
    return {"kind": interval.kind, "name": interval.name, "start": _when(interval.start),
            "end": _when(interval.end),
            "hours": _h(interval.hours), "open": interval.open, "variant": interval.variant,
            "source": interval.source}


def work_section(intervals: list[Interval], unread: list[str]) -> WorkSection:
    """Observed machine time: each interval, the union per kind, the idle gaps, the span."""
    idle = gaps(intervals)
    first, last = (min(i.start for i in intervals),
                   max(i.end for i in intervals)) if intervals else (None, None)
    return {
        "observed_hours": _h(observed_hours(intervals)),
        "summed_hours": _h(sum(i.hours for i in intervals)),
        "span": None if first is None or last is None
        else {"start": _when(first), "end": _when(last),
           "hours": _h((last - first).total_seconds() / 3600)},
        "by_kind": {kind: _h(h) for kind, h in sorted(hours_by(intervals).items())},
        "gaps": [{"start": _when(g.start), "end": _when(g.end), "hours": _h(g.hours)}
                 for g in idle],
        "idle_hours": _h(sum(g.hours for g in idle)),
        "intervals": [_row(i) for i in intervals], "unread": unread,
    }


def scheduled_stages(order: dict[str, Any]) -> list[dict[str, Any]]:
    """The order's stages as `kdkit plan --schedule` saved them (name and machine_hours), else
    []."""
    stages = order.get("schedule", {}).get("stages")
    # the placed stages of the schedule
    stages = stages.get("stages") if isinstance(stages, dict) else stages
    if not isinstance(stages, list):
        return []
    return [s for s in stages if isinstance(s, dict) and isinstance(s.get("name"), str)]


def stage_rows(order: dict[str, Any], intervals: list[Interval]) -> list[StageHours]:
    """Booked against observed per stage: the order's schedule when it has one, else per kind."""
    stages = scheduled_stages(order)
    names = [s["name"] for s in stages]
    groups: dict[str, list[Interval]] = {name: [] for name in names}
    for interval in intervals:
        stage = next((n for n in (interval.variant, interval.kind) if n in groups), None)
        key = stage if stage is not None else (UNSCHEDULED if stages else interval.kind)
        groups.setdefault(key, []).append(interval)
    booked = {s["name"]: s.get("machine_hours") for s in stages}
    rows: list[StageHours] = []
    for name, members in groups.items():
        planned = booked.get(name)
        seen = _h(observed_hours(members))
        rows.append({"stage": name, "booked_hours": planned, "observed_hours": seen,
                     "observed_minus_booked": None if not isinstance(planned, (int, float))
                     else _h(seen - planned),
                     "intervals": len(members)})
    return rows


def stage_deviations(rows: list[StageHours]) -> list[str]:
    out = []
    for row in rows:
        diff, name = row["observed_minus_booked"], printable(row["stage"])
        if diff is not None and diff > 0:
            out.append(f"stage {name}: observed {row['observed_hours']} h exceeds the "
                       f"{row['booked_hours']} h booked by {diff} h")
        elif row["stage"] == UNSCHEDULED and row["intervals"]:
            out.append(f"{row['intervals']} piece(s) of work ({row['observed_hours']} h) match no "
                       "stage of the schedule")
    return out


def measured_durations(work: WorkSection, stages: list[StageHours]) -> MeasuredDurations:
    """What the next `kdkit plan --from-report` starts from: measured machine hours per kind and per
    stage."""
    return {"unit": "hours", "observed_hours": work["observed_hours"], "by_kind": work["by_kind"],
            "by_stage": {row["stage"]: row["observed_hours"] for row in stages}}


# ---------------------------------------------------------------- the order's status, the campaign


def order_status(order: dict[str, Any]) -> OrderStatus:
    """The provider's order number and the order's declared status (`kdkit plan --save` records
    them; each later `plan --order FILE` update is appended to ``order_updates``: the latest said
    wins), with the updates."""
    number, status = order.get("order_number"), order.get("order_status")
    updates = [u for u in order.get("order_updates") or [] if isinstance(u, dict)]
    for update in updates:
        number, status = update.get("order_number", number), update.get("order_status", status)
    return {"order_number": number, "status": status, "updates": updates}


def _plain(value: Any) -> Any:
    return asdict(value) if is_dataclass(value) and not isinstance(value, type) else value


def campaign_section(root: Path, campaign: Campaign | None,
                     intervals: list[Interval]) -> CampaignSection | None:
    """The campaign's variants against its threshold, the conclusion and the decisions (None without
    campaign.json)."""
    from kdkit.order.campaign import conclusion, read_decisions, variant_results

    if campaign is None:
        return None
    results = variant_results(root, campaign)
    spent = hours_by([i for i in intervals if i.variant], key="stage")
    variants = [{**_plain(r), "observed_hours": _h(spent.get(r.name, 0.0))} for r in results]
    return {"question": campaign.question, "metric": campaign.metric,
            "threshold": campaign.threshold,
            "higher_is_better": campaign.higher_is_better, "control": campaign.control,
            "variants": variants,
            "conclusion": conclusion(campaign, results), "decisions": list(read_decisions(root))}


# ---------------------------------------------------------------- Markdown


GAPS_SHOWN = 20


def _cell(value: Any) -> str:
    return md_cell(value)


def work_markdown(report: ReportSections) -> list[str]:
    """The report's sections on machine time, stages, the campaign and other expenses."""
    work = report["work"]
    lines = ["## Machine time observed", "",
             f"Observed {work['observed_hours']} h: the union of {len(work['intervals'])} recorded "
             "piece(s) of work (their sum, counting parallel work twice, is "
             f"{work['summed_hours']} h); idle between them: {work['idle_hours']} h in "
             f"{len(work['gaps'])} gap(s).", "",
             "| kind | observed (union) |", "|---|---|",
             *(f"| {kind} | {hours} h |" for kind, hours in work["by_kind"].items()), ""]
    if work["gaps"]:
        lines += ["| idle from | to | hours |", "|---|---|---|",
                  *(f"| {g['start']} | {g['end']} | {g['hours']} |"
                    for g in work["gaps"][:GAPS_SHOWN])]
        lines += ([f"| +{len(work['gaps']) - GAPS_SHOWN} more | | |"]
                  if len(work["gaps"]) > GAPS_SHOWN else [])
        lines.append("")
    lines += ["## Stages: booked against observed", "",
              "| stage | booked | observed | observed − booked |",
              "|---|---|---|---|",
              *(f"| {_cell(s['stage'])} | {_cell(s['booked_hours'])} h | {s['observed_hours']} h | "
                f"{_cell(s['observed_minus_booked'])} h |" for s in report["stages"]), ""]
    if report["trainings"]:
        lines += ["## Trainings", "", "| run | variant | verdict | stop reason | observed |",
                  "|---|---|---|---|---|",
                  *(f"| {_cell(t['run_id'])} | {_cell(t['variant'])} | {t['verdict']} | "
                    f"{_cell(t['stop_reason'])} | {t['hours']} h |" for t in report["trainings"]),
                  ""]
    return lines + _campaign_markdown(report["campaign"]) + _expenses_markdown(report["expenses"])


def _campaign_markdown(campaign: CampaignSection | None) -> list[str]:
    if campaign is None:
        return []
    side = "≥" if campaign["higher_is_better"] else "≤"
    lines = ["## Variants against the threshold", "", f"Question: {_cell(campaign['question'])}",
             "",
             f"Threshold: {_cell(campaign['metric'])} {side} {campaign['threshold']} (control: "
             f"{_cell(campaign['control'])}).", "",
             "| variant | category | value | passed | observed |",
             "|---|---|---|---|---|",
             *(f"| {_cell(v.get('name'))} | {_cell(v.get('category'))} | {_cell(v.get('value'))} | "
               f"{_cell(v.get('passed'))} | {v['observed_hours']} h |"
               for v in campaign["variants"]),
             "", f"**Conclusion:** {_cell(campaign['conclusion'])}", "", "## Decisions", ""]
    said = [f"- {_cell(d.get('at'))}: {_cell(d.get('decision'))} — {_cell(d.get('why'))}"
            for d in campaign["decisions"] if isinstance(d, dict)]
    return lines + (said or ["- none recorded (`kdkit campaign decide`)"]) + [""]


def _expenses_markdown(expenses: ExpensesSection) -> list[str]:
    lines = ["## Other expenses (apart from the rental)", ""]
    lines += [f"- {_cell(e['what'])}: {e['amount']} {e['currency']}"
              for e in expenses["items"]] or ["- none"]
    totals = ", ".join(f"{amount} {cur}" for cur, amount in expenses["totals"].items())
    return lines + ([f"- total: {totals}"] if totals else []) + [""]
