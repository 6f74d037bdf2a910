"""After the campaign: what the money bought, compared with the plan — which is never rewritten.

Reads the order (``kdkit plan --save``) and every ``runs/<id>/`` folder the pilot wrote
(params.json, summary.json, stop.json), tolerating runs that crashed half-way, and writes a
Markdown report for a person and a JSON report that reloads (``load_report``), both atomically.

Accepted outputs are counted once per configuration: repeating one corpus five times to time it
is not five corpora, so passing runs that share a config hash count as one output.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

from kdkit.config.schemas import schema_problems
from kdkit.core.errors import BadInput
from kdkit.core.jsonio import atomic_write_json, atomic_write_text, load_json, sha256_file
from kdkit.core.runfolder import Run, md_cell, read_run, run_folders
from kdkit.order.plan import cost_per_accepted, load_order, runs_folder

REPORT_MD = "campaign-report.md"
REPORT_JSON = "campaign-report.json"


# ---------------------------------------------------------------- reading runs


def run_row(run: Run) -> dict[str, Any]:
    """One run as the report lists it (its keys are the report's, read from kdkit.core.runfolder's model)."""
    return {"run_id": run.run_id, "config_hash": run.params_hash, "verdict": run.verdict,
            "stop_reason": run.stop_reason, "total": run.total, "accepted": run.accepted, "rejected": run.rejected,
            "seconds": run.seconds, "has_summary": run.has_summary}


def read_runs(runs: Path) -> list[dict[str, Any]]:
    """Every pilot run under ``runs``, in id order (ids start with the UTC time, so this is time order).

    A pilot run writes params.json before its first item; folders without one (a sweep's or a
    resume test's measurements) are not runs of the campaign's protocol.
    """
    return [run_row(run) for run in map(read_run, run_folders(runs)) if run.has_params]


# ---------------------------------------------------------------- the comparison


def accepted_outputs(runs: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """Passing runs counted once per configuration: (counted run ids, deviations for the repeats)."""
    counted: dict[str, str] = {}
    repeats = []
    for run in runs:
        if run["verdict"] != "pass":
            continue
        key = run["config_hash"] or f"run:{run['run_id']}"
        if key in counted:
            repeats.append(f"run {run['run_id']} repeats the configuration of run {counted[key]} "
                           f"(hash {run['config_hash']}): not counted as another accepted output")
        else:
            counted[key] = run["run_id"]
    return list(counted.values()), repeats


def _hours(order: dict[str, Any], runs: list[dict[str, Any]]) -> dict[str, Any]:
    timed = [r["seconds"] for r in runs if r["seconds"] is not None]
    observed = round(Decimal(str(sum(timed))) / 3600, 2) if timed else None
    booked = order["schedule"]["booked_hours"]
    difference = None if observed is None or booked is None else float(observed - Decimal(str(booked)))
    return {"window": order["schedule"]["window_hours"], "booked": booked,
            "observed": None if observed is None else float(observed), "observed_minus_booked": difference,
            "runs_without_duration": [r["run_id"] for r in runs if r["seconds"] is None]}


def _hour_deviations(hours: dict[str, Any]) -> list[str]:
    out = []
    if hours["booked"] is None:
        out.append("the order has no booked hours (`kdkit plan --hours`): observed time cannot be compared")
    elif hours["observed_minus_booked"] is not None and hours["observed_minus_booked"] > 0:
        out.append(f"observed {hours['observed']} h exceeds the {hours['booked']} h booked by "
                   f"{round(hours['observed_minus_booked'], 2)} h")
    if hours["runs_without_duration"]:
        out.append(f"no duration recorded for {', '.join(hours['runs_without_duration'])}: observed hours "
                   "undercount")
    return out


def _run_deviations(runs: list[dict[str, Any]]) -> list[str]:
    out = []
    if not runs:
        out.append("no run folders: nothing was executed through kdkit")
    for run in runs:
        if run["verdict"] == "fail":
            out.append(f"run {run['run_id']} failed" + (f": {run['stop_reason']}" if run["stop_reason"] else ""))
        elif run["verdict"] == "stopped":
            out.append(f"run {run['run_id']} stopped: {run['stop_reason'] or 'no reason recorded'}")
        elif run["verdict"] == "incomplete":
            out.append(f"run {run['run_id']} has no summary.json: unfinished or crashed; resume it or explain")
    return out


def _planned_deviation(order: dict[str, Any], accepted: int) -> list[str]:
    planned = order.get("cost_per_accepted")
    if planned is None or planned["accepted"] == accepted:
        return []
    return [f"planned {planned['accepted']} accepted output(s), got {accepted}"]


def campaign_report(order_path: Path, runs: Path, *, project: str | None = None,
                    accepted: int | None = None) -> dict[str, Any]:
    """The comparison of the order with what the runs show (``accepted`` overrides the count)."""
    order = load_order(order_path)
    run_list = read_runs(runs)
    counted, repeats = accepted_outputs(run_list)
    count = len(counted) if accepted is None else accepted
    if count < 0:
        raise BadInput(f"--accepted {count}: the number of accepted outputs cannot be negative")
    hours = _hours(order, run_list)
    cost = cost_per_accepted(Decimal(order["total_usd"]), count)
    deviations = (_hour_deviations(hours) + _run_deviations(run_list) + repeats
                  + _planned_deviation(order, count) + ([cost["reason"]] if cost and cost["reason"] else []))
    return {
        "kdkit_report": 1, "created": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "project": project, "order_file": str(order_path), "order_sha256": sha256_file(order_path),
        "order": order, "runs_folder": str(runs), "hours": hours, "runs": run_list,
        "accepted_outputs": {"count": count, "source": "runs" if accepted is None else "--accepted",
                             "counted_runs": counted},
        "cost": cost, "deviations": deviations,
    }


# ---------------------------------------------------------------- writing and reloading


def render_markdown(report: dict[str, Any]) -> str:
    """The report for a person: order, hours, runs, outputs and cost, deviations."""
    order, hours, cost = report["order"], report["hours"], report["cost"]
    per_output = cost["per_output_usd"] if cost["per_output_usd"] is not None else "undefined"
    lines = [
        f"# Campaign report{' — ' + report['project'] if report['project'] else ''}", "",
        f"Order: {order['lots']} × {order['offer']['name']} lot(s) ({order['cards']} card(s)) for "
        f"{order['days']} days, {order['total_usd']} USD ({order['price_per_lot_usd']} USD per lot, "
        f"{order['price_source']}). Saved {order['created']}; the plan is quoted, never rewritten "
        f"(sha256 {report['order_sha256'][:12]}).", "",
        "## Hours", "", "| window | booked | observed | observed − booked |", "|---|---|---|---|",
        f"| {hours['window']} h | {md_cell(hours['booked'])} h | {md_cell(hours['observed'])} h | "
        f"{md_cell(hours['observed_minus_booked'])} h |", "",
        "## Runs", "", "| run | config hash | verdict | stop reason | accepted | rejected | seconds |",
        "|---|---|---|---|---|---|---|",
        *(f"| {r['run_id']} | {md_cell(r['config_hash'])} | {r['verdict']} | {md_cell(r['stop_reason'])} | "
          f"{md_cell(r['accepted'])} | {md_cell(r['rejected'])} | {md_cell(r['seconds'])} |" for r in report["runs"]),
        "", "## Outputs and cost", "",
        f"- accepted outputs: {report['accepted_outputs']['count']} (from {report['accepted_outputs']['source']}; "
        "one per configuration)",
        f"- cost incurred: {cost['cost_incurred_usd']} USD", f"- cost per accepted output: {per_output}"
        + (" USD" if cost["per_output_usd"] is not None else f" — {cost['reason']}"),
        "", "## Deviations", "", *([f"- {d}" for d in report["deviations"]] or ["- none"]), "",
    ]
    return "\n".join(lines)


def write_report(report: dict[str, Any], out: Path, order_path: Path) -> tuple[Path, Path]:
    """Write JSON then Markdown atomically into ``out``; the order file itself is never a target."""
    md, js = out / REPORT_MD, out / REPORT_JSON
    if order_path.resolve() in (md.resolve(), js.resolve()):
        raise BadInput(f"--out {out}: the report would overwrite the order {order_path}; choose another folder")
    if out.exists() and not out.is_dir():
        raise BadInput(f"--out {out}: not a folder")
    atomic_write_json(js, report)
    atomic_write_text(md, render_markdown(report))
    return md, js


def load_report(path: Path) -> dict[str, Any]:
    """Reload a JSON report written by ``kdkit close``; its embedded order is checked again."""
    data = load_json(path, what="campaign report")
    if not isinstance(data, dict) or data.get("kdkit_report") != 1:
        raise BadInput(f"{path}: $.kdkit_report: not a kdkit campaign report; write one with `kdkit close`")
    problems = schema_problems(data.get("order"), "order", path)
    if problems:
        raise BadInput(f"{path}: $.order: {problems[0].where}: {problems[0].message}")
    return data


def close_campaign(project_dir: Path | None, order_path: Path, *, out: Path | None = None,
                   accepted: int | None = None) -> tuple[dict[str, Any], Path, Path]:
    """``kdkit close``: build the report from the project's runs and the order, and write it."""
    from kdkit.config.project import load_project

    project = load_project(project_dir)
    report = campaign_report(order_path, project.root / runs_folder(project), project=project.name,
                             accepted=accepted)
    md, js = write_report(report, out or project.root / "reports", order_path)
    return report, md, js
