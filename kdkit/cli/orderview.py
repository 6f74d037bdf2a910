"""What the order commands of kdkit/cli/order.py print: `kdkit check`'s table of points, `kdkit
plan`'s order, stages and schedule, `kdkit estimate-memory`'s lower bound, `kdkit close`'s summary.

Each takes the report its domain function returned and renders it as text; none decides anything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kdkit.cli._output import console, plain, say

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from kdkit.order.checkrecords import CheckReport
    from kdkit.order.close import CloseReport
    from kdkit.order.memory import MemoryEstimate
    from kdkit.order.planrecords import StagesSection
    from kdkit.order.reportread import ReportRecord

STATUS_STYLE = {"ok": "green", "fail": "bold red", "unknown": "yellow", "note": "cyan"}


def table(title: str, columns: tuple[str, ...], rows: list[tuple[Any, ...]], *,
          header: bool = True) -> None:
    """A table of plain text: names, paths and sources from the user's files are never read as rich
    markup."""
    from rich.table import Table

    grid = Table(title=plain(title), title_justify="left", show_header=header)
    for column in columns:
        grid.add_column(column, overflow="fold")
    for row in rows:
        grid.add_row(*(plain(value) for value in row))
    console().print(grid)


def print_check(report: CheckReport) -> None:
    """`kdkit check`: one row per point, its verdict coloured, with its reason and its fix."""
    from rich.text import Text

    rows = [(p["name"], Text(p["verdict"], style=STATUS_STYLE[p["verdict"]]), p["why"],
             p["fix"])
            for p in report["points"]]
    subject = (f"image {report['image']}" if report["image"]
               else f"the {report['backend']} lock {report['lock']}")
    table(f"{report['gpu']['name']} with {subject}",
          ("point", "status", "detail", "fix"), rows)


def _print_stages(stages: StagesSection) -> None:
    rows = [(s["name"], s["category"], "-" if s["gpu"] is None else s["gpu"],
             ", ".join(s["after"]) or "-",
             s["human_hours"], s["machine_hours"], s["start"], s["machine_start"], s["end"])
            for s in stages["stages"]]
    table(f"Stages ({stages['file']})",
          ("stage", "category", "gpu", "after", "human h", "machine h", "starts",
           "machine from", "ends"), rows)
    busy = ", ".join(f"GPU {g['gpu']} {g['busy_hours']} h" for g in stages["gpus"]) or "no GPU"
    say(f"Last stage ends at {stages['last_end_hours']} h (chain: "
        f"{' → '.join(stages['critical_chain'])}); machine busy: {busy}; human preparation "
        f"{stages['human_hours']} h.")


def _print_order_fields(order: Mapping[str, Any]) -> None:
    if order.get("order_number") is not None or order.get("order_status") is not None:
        say(f"Provider's order number: {order.get('order_number') or 'not declared'}; status: "
            f"{order.get('order_status') or 'not declared'} (declared by you).")


def _print_from_report(report: ReportRecord) -> None:
    used = ", ".join(f"{r['stage']} {r['planned']} → {r['measured']} h"
                     for r in report["replaced"]) or "none used"
    only = f"; in the report only: {', '.join(report['unmatched'])}" if report["unmatched"] else ""
    say(f"From {report['file']}: observed {report['observed_hours']} h in all; stages measured: "
        f"{used}{only}")


def print_plan(order: Mapping[str, Any]) -> None:
    offer, sched, cost = order["offer"], order["schedule"], order["cost_per_accepted"]
    per_card = (f" ({offer['cards_per_lot']} cards per lot, price covers them)"
                if offer["cards_per_lot"] > 1 else "")
    table("Order", ("", ""), [
        ("offer",
         f"{offer['name']} — {offer['memory_gb']} GB, {offer['architecture']}, {offer['backend']}"),
        ("duration", f"{order['days']} days"),
        ("lots", f"{order['lots']}{per_card}"),
        ("total cards", order["cards"]),
        ("preparation",
         f"{order['preparation']} (a need, not a proof: `kdkit diagnose` checks what arrives)"),
        ("price per lot", f"{order['price_per_lot_usd']} USD ({order['price_source']})"),
        ("total",
         f"{order['total_usd']} USD = {order['price_per_lot_usd']} × {order['lots']} lot(s)"),
    ], header=False)
    if sched.get("stages") is not None:
        _print_stages(sched["stages"])
    if sched.get("from_report") is not None:
        _print_from_report(sched["from_report"])
    if sched["fits"] is True:
        say(f"Schedule: {sched['booked_hours']} h booked in a {sched['window_hours']} h window "
            f"leaves {sched['left_hours']} h.")
    elif sched["fits"] is False:
        say(f"Schedule: {sched['booked_hours']} h booked exceeds the {sched['window_hours']} h "
            f"window by {sched['over_hours']} h.")
    for suggestion in sched["suggestions"]:
        say(f"  - {suggestion}")
    if cost is not None:
        if cost["per_output_usd"] is None:
            say(f"Cost per accepted output: undefined. {cost['reason']}")
        else:
            say(f"Cost per accepted output: {cost['cost_incurred_usd']} USD / {cost['accepted']} = "
                f"{cost['per_output_usd']} USD each")
    _print_order_fields(order)


def show_plan(order: Mapping[str, Any], order_file: Path | None, save: Path | None) -> None:
    """`kdkit plan`: a saved order's declared fields once updated (--order), else the plan, and
    where it was written (--save)."""
    if order_file is not None:
        _print_order_fields(order)
        say(f"Order {order_file} updated (its plan unchanged).")
        return
    print_plan(order)
    if save is not None:
        say(f"Order written to {save}")


def print_memory(report: MemoryEstimate) -> None:
    rows = [(i["item"], f"{i['gib']:.2f} GiB", i["formula"]) for i in report["items"]]
    rows.append(
        ("lower bound", f"{report['lower_bound_gib']:.2f} GiB",
         f"{report['lower_bound_bytes']:,} bytes"))
    table(f"Memory lower bound: {report['parameters']:,} parameters, {report['dtype']}, "
          f"train={report['train']}",
          ("item", "size", "how"), rows)
    say("Not counted (unmeasured):")
    for item in report["unmeasured"]:
        say(f"  - {item}")
    peak = report["pilot_peak"]
    if peak is not None:
        say(f"Pilot {peak['run_id']} measured a peak of {peak['peak_gib']} GiB on "
            f"{peak['device'] or 'an unnamed device'} (estimate: "
            f"{report['lower_bound_gib']} GiB).")
    against = report["against"]
    if against is not None:
        say(f"Against one {against['gpu']} ({against['card_memory_gb']} GB): {against['verdict']}")
        say(f"  ({against['note']})")


def print_close(report: CloseReport, md: Path, js: Path) -> None:
    """`kdkit close`: the report's totals in three lines, then the two files written."""
    cost, work, hours = report["cost"], report["work"], report["hours"]
    per_output = (f"{cost['per_output_usd']} USD" if cost["per_output_usd"] is not None
                  else "undefined")
    say(f"{len(report['runs'])} run(s), {report['accepted_outputs']['count']} accepted output(s), "
        f"{cost['cost_incurred_usd']} USD spent, {per_output} per accepted output, "
        f"{len(report['deviations'])} deviation(s).")
    booked = "no hours booked" if hours["booked"] is None else f"{hours['booked']} h booked"
    say(f"Observed {work['observed_hours']} h of machine time ({booked}); idle "
        f"{work['idle_hours']} h in {len(work['gaps'])} gap(s).")
    if report["campaign"] is not None:
        from kdkit.core.safetext import printable

        say(f"Conclusion: {printable(report['campaign']['conclusion'])}")
    say(f"Wrote {md}")
    say(f"Wrote {js}")
