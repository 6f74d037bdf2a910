"""After the campaign: what the money bought, compared with the plan — which is never rewritten.

Reads the order (``kdkit plan --save``) and every ``runs/<id>/`` folder the pilot wrote
(params.json, summary.json, stop.json), tolerating runs that crashed half-way, and writes a
Markdown report for a person and a JSON report that reloads (``load_report``), both atomically.

Only a run that proves it counts: a passing run's folder must verify against its SHA256SUMS and hold
every file a closed run holds (kdkit.core.runverify.read_run, the check of ``copy-out --verify``),
name itself, and hold results that add up to its summary; it must have run the project's current
pilot parameters over its whole manifest; a worker's share counts only with all the shares of its
run, proven together as `kdkit gather` proves them (kdkit.order.closeruns). Any other folder with a
summary (forged beside a real run, edited after closing, a link to another run, a copy under another
name) is "unverified": counted neither as a pass nor in the observed hours, and named among the
deviations with the reason. Hours come only from folders that verify; a summary's seconds in a
folder that does not (never closed, or unverified) are shown apart, never added. The runs folder is
the pilot's own (its config's ``runs``, held to the pilot's rule): a bad value is bad input, never a
fallback.

Accepted outputs are counted once per configuration: repeating one corpus five times to time it
is not five corpora, so passing runs that share a config hash count as one output.

Observed hours are the machine's busy time, not a sum of seconds (kdkit.order.worklog,
kdkit.order.closework): the union of the intervals in which recorded work ran (builds, verified
pilot runs and each worker's share, trainings, sweeps, resume tests, each from its own records), so
parallel workers count once and the idle gaps between work are listed. They are compared with the
booked hours in total and per stage (the order's schedule when `kdkit plan --schedule` saved one,
else per kind of work). The report also states the campaign's variants against its threshold and the
conclusion (a negative result is a result), the decisions log, other expenses (``--expense``, kept
apart from the rental and its cost per output) and the provider's order number and status as the
order declares them; ``measured_durations`` holds the hours per kind and per stage that the next
plan can start from. A bad ``--expense`` is bad input before anything is read or written.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.config.campaign import Campaign
from kdkit.config.schemas import schema_problems
from kdkit.core.errors import BadInput
from kdkit.core.jsonio import (
    atomic_write_json,
    atomic_write_text,
    load_json,
    require_replaceable,
    sha256_file,
)
from kdkit.core.pilotconfig import PilotConfig, load_pilot
from kdkit.core.safetext import md_cell
from kdkit.order import closework
from kdkit.order.closeruns import outputs, read_runs, run_row
from kdkit.order.orderfile import load_order
from kdkit.order.plan import cost_per_accepted, runs_folder
from kdkit.order.worklog import Interval, observed_hours

if TYPE_CHECKING:
    from typing import TypedDict

    from kdkit.order.closerecords import Expense, MeasuredDurations, OrderStatus, ReportSections
    from kdkit.order.closeruns import RunRow

    class Hours(TypedDict):
        """The order's window and booked hours against the observed ones, with what is missing."""

        window: int
        booked: float | None
        observed: float | None
        observed_minus_booked: float | None
        runs_without_duration: list[str]
        not_counted: float | None

    class AcceptedOutputs(TypedDict):
        """How many accepted outputs count, from where, and the runs counted."""

        count: int
        source: str
        counted_runs: list[str]

    class CloseReport(ReportSections):
        """The campaign report of ``kdkit close`` (campaign_report), as written to JSON."""

        kdkit_report: int
        created: str
        project: str | None
        order_file: str
        order_sha256: str
        order: dict[str, Any]  # the order file as saved (checked against its schema)
        order_status: OrderStatus
        runs_folder: str
        hours: Hours
        measured_durations: MeasuredDurations
        runs: list[RunRow]
        gathered_runs: list[dict[str, Any]]  # closeruns.gathered_row's
        # plan.CostPerAccepted; Any: never None here (the count is an int), though
        # cost_per_accepted's type allows None
        cost: Any
        accepted_outputs: AcceptedOutputs
        deviations: list[str]

REPORT_MD = "campaign-report.md"
REPORT_JSON = "campaign-report.json"


# ---------------------------------------------------------------- the comparison


def accepted_outputs(runs: list[RunRow | dict[str, Any]]) -> tuple[list[str], list[str]]:
    """Proven outputs (closeruns.outputs) counted once per configuration: (counted run ids,
    deviations for the repeats)."""
    counted: dict[str, str] = {}
    repeats = []
    for run in runs:
        key = run["config_hash"] or f"run:{run['run_id']}"
        if key in counted:
            repeats.append(f"run {run['run_id']} repeats the configuration of run {counted[key]} "
                           f"(hash {run['config_hash']}): not counted as another accepted output")
        else:
            counted[key] = run["run_id"]
    return list(counted.values()), repeats


def _hours(order: dict[str, Any], runs: list[RunRow],
           intervals: list[Interval]) -> Hours:
    # a folder that does
    apart = [r["seconds"] for r in runs if r["problems"] and r["seconds"] is not None]
    # not verify proves no hour: its summary's seconds are shown apart (not_counted), never added
    # the union, not a sum
    observed = round(Decimal(str(observed_hours(intervals))), 2) if intervals else None
    booked = order["schedule"]["booked_hours"]
    difference = None if observed is None or booked is None else float(
        observed - Decimal(str(booked)))
    return {"window": order["schedule"]["window_hours"], "booked": booked,
            "observed": None if observed is None else float(observed),
            "observed_minus_booked": difference,
            "runs_without_duration": [r["run_id"] for r in runs if r["seconds"] is None],
            "not_counted": float(round(Decimal(str(sum(apart))) / 3600, 2)) if apart else None}


def _hour_deviations(hours: Hours) -> list[str]:
    out = []
    if hours["booked"] is None:
        out.append(
            "the order has no booked hours (`kdkit plan --hours`): observed time cannot be "
            "compared")
    elif hours["observed_minus_booked"] is not None and hours["observed_minus_booked"] > 0:
        out.append(f"observed {hours['observed']} h exceeds the {hours['booked']} h booked by "
                   f"{round(hours['observed_minus_booked'], 2)} h")
    if hours["runs_without_duration"]:
        out.append(f"no duration recorded for {', '.join(hours['runs_without_duration'])}: "
                   "observed hours undercount")
    if hours["not_counted"] is not None:
        out.append(
            f"{hours['not_counted']} h in folders that do not verify (their summaries' timings), "
            "not counted")
    return out


def _run_deviations(runs: list[RunRow]) -> list[str]:
    out = []
    if not runs:
        out.append("no run folders: nothing was executed through kdkit")
    return out + [line for line in map(_run_deviation, runs) if line is not None]


def _run_deviation(run: RunRow) -> str | None:
    """What one run that does not pass says: failed, stopped, unfinished, or unverified (no pass, no
    hours)."""
    if run["verdict"] == "fail":
        return f"run {run['run_id']} failed" + (f": {run['stop_reason']}" if run["stop_reason"]
                                                else "")
    if run["verdict"] == "stopped":
        return f"run {run['run_id']} stopped: {run['stop_reason'] or 'no reason recorded'}"
    if run["verdict"] == "incomplete":
        said = "was never closed (its summary.json has no verdict)" if run["has_summary"] else \
            "has no readable summary.json"
        return f"run {run['run_id']} {said}: unfinished or crashed; resume it or explain"
    if run["verdict"] == "unverified":
        more = f" (+{len(run['problems']) - 1} more)" if len(run["problems"]) > 1 else ""
        return (f"run {run['run_id']} is unverified: {run['problems'][0]}{more}; counted neither "
                "as a pass nor in the observed hours")
    return None


def _planned_deviation(order: dict[str, Any], accepted: int) -> list[str]:
    planned = order.get("cost_per_accepted")
    if planned is None or planned["accepted"] == accepted:
        return []
    return [f"planned {planned['accepted']} accepted output(s), got {accepted}"]


def campaign_report(order_path: Path, runs: Path, cfg: PilotConfig, *, project: str | None = None,
                    accepted: int | None = None, expenses: list[Expense] | None = None,
                    campaign: Campaign | None = None) -> CloseReport:
    """The comparison of the order with what the runs show (``accepted`` overrides the count;
    ``expenses`` are closework.parse_expense's, after the ones ``campaign`` declares)."""
    order = load_order(order_path)
    run_list = [run_row(run) for run in read_runs(runs)]
    candidates, gathered, proofs = outputs(run_list, runs, cfg)
    counted, repeats = accepted_outputs(candidates)
    count = len(counted) if accepted is None else accepted
    if count < 0:
        raise BadInput(f"--accepted {count}: the number of accepted outputs cannot be negative")
    intervals, unread = closework.counted_intervals(cfg.root, runs, run_list)
    hours, work = _hours(order, run_list, intervals), closework.work_section(intervals, unread)
    stages, trainings = closework.stage_rows(order, intervals), closework.training_rows(intervals)
    cost = cost_per_accepted(Decimal(order["total_usd"]), count)
    deviations = (_hour_deviations(hours) + closework.stage_deviations(stages) + unread
                  + _run_deviations(run_list)
                  + closework.training_deviations(trainings) + proofs + repeats
                  + _planned_deviation(order, count)
                  + ([cost["reason"]] if cost and cost["reason"] else []))
    return {
        "kdkit_report": 1,
        "created": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "project": project, "order_file": str(order_path), "order_sha256": sha256_file(order_path),
        "order": order, "order_status": closework.order_status(order), "runs_folder": str(runs),
        "hours": hours,
        "work": work, "stages": stages,
        "measured_durations": closework.measured_durations(work, stages),
        "runs": run_list, "gathered_runs": gathered, "trainings": trainings,
        "accepted_outputs": {"count": count, "source": "runs" if accepted is None else "--accepted",
          "counted_runs": counted},
        "cost": cost,
        "expenses": closework.expenses_section(closework.declared_expenses(campaign)
                                               + (expenses or [])),
        "campaign": closework.campaign_section(cfg.root, campaign, intervals),
        "deviations": deviations,
    }


# ---------------------------------------------------------------- writing and reloading


def render_markdown(report: CloseReport) -> str:
    """The report for a person: order, hours, runs, outputs and cost, deviations."""
    order, hours, cost, status = (report["order"], report["hours"], report["cost"],
                                  report.get("order_status") or {})
    per_output = cost["per_output_usd"] if cost["per_output_usd"] is not None else "undefined"
    lines = [
        f"# Campaign report{' — ' + md_cell(report['project'], None) if report['project'] else ''}",
        "",
        f"Order: {order['lots']} × {order['offer']['name']} lot(s) ({order['cards']} card(s)) for "
        f"{order['days']} days, {order['total_usd']} USD ({order['price_per_lot_usd']} USD per "
        f"lot, {order['price_source']}). Saved {order['created']}; the plan is quoted, never "
        f"rewritten (sha256 {report['order_sha256'][:12]}).", "",
        f"Provider's order number: {md_cell(status.get('order_number'))}; status: "
        f"{md_cell(status.get('status'))} (as declared).", "",
        "## Hours", "", "| window | booked | observed | observed − booked |", "|---|---|---|---|",
        f"| {hours['window']} h | {md_cell(hours['booked'])} h | {md_cell(hours['observed'])} h | "
        f"{md_cell(hours['observed_minus_booked'])} h |", "", *closework.work_markdown(report),
        "## Runs", "",
        "| run | config hash | verdict | stop reason | accepted | rejected | seconds |",
        "|---|---|---|---|---|---|---|",
        *(f"| {md_cell(r['run_id'])} | {md_cell(r['config_hash'])} | {r['verdict']} | "
          f"{md_cell(r['stop_reason'])} | {md_cell(r['accepted'])} | {md_cell(r['rejected'])} | "
          f"{md_cell(r['seconds'])} |" for r in report["runs"]),
        "", "## Outputs and cost", "",
        f"- accepted outputs: {report['accepted_outputs']['count']} (from "
        f"{report['accepted_outputs']['source']}; one per configuration)",
        f"- cost incurred: {cost['cost_incurred_usd']} USD",
        f"- cost per accepted output: {per_output}"
        + (" USD" if cost["per_output_usd"] is not None else f" — {cost['reason']}"),
        "", "## Deviations", "",
        *([f"- {md_cell(d, None)}" for d in report["deviations"]] or ["- none"]), "",
    ]
    return "\n".join(lines)


def write_report(report: CloseReport, out: Path, order_path: Path) -> tuple[Path, Path]:
    """Write JSON then Markdown atomically into ``out``; the order file itself is never a target."""
    md, js = out / REPORT_MD, out / REPORT_JSON
    if order_path.resolve() in (md.resolve(), js.resolve()):
        raise BadInput(
            f"--out {out}: the report would overwrite the order {order_path}; choose another "
            "folder")
    if out.exists() and not out.is_dir():
        raise BadInput(f"--out {out}: not a folder")
    for target in (js, md):  # both checked before either is written
        require_replaceable(target)
    atomic_write_json(js, report)
    atomic_write_text(md, render_markdown(report))
    return md, js


def load_report(path: Path) -> dict[str, Any]:
    """Reload a JSON report written by ``kdkit close``; its embedded order is checked again."""
    data = load_json(path, what="campaign report")
    if not isinstance(data, dict) or data.get("kdkit_report") != 1:
        raise BadInput(
            f"{path}: $.kdkit_report: not a kdkit campaign report; write one with `kdkit close`")
    problems = schema_problems(data.get("order"), "order", path)
    if problems:
        raise BadInput(f"{path}: $.order: {problems[0].name}: {problems[0].why}")
    return data


def close_campaign(project_dir: Path | None, order_path: Path, *, out: Path | None = None,
                   accepted: int | None = None,
                   expenses: tuple[str, ...] = ()) -> tuple[CloseReport, Path, Path]:
    """``kdkit close``: build the report from the project's runs and the order, and write it."""
    from kdkit.config.campaign import load_campaign
    from kdkit.config.project import load_project

    # bad input before anything is read
    spent = [closework.parse_expense(text) for text in expenses]
    project = load_project(project_dir)
    runs = runs_folder(project)  # bad input naming $.runs before anything else is read
    campaign = load_campaign(project.root)  # a bad campaign.json too
    report = campaign_report(order_path, runs, load_pilot(project.root), project=project.name,
                             accepted=accepted,
                             expenses=spent, campaign=campaign)
    md, js = write_report(report, out or project.root / "reports", order_path)
    return report, md, js
