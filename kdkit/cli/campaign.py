"""The campaign command (help section "Order and campaign"): `kdkit campaign` and `kdkit campaign
decide`.

Beside kdkit/cli/order.py, which holds the section's other commands, so that neither module outgrows
the rule on a module's length.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from kdkit.cli._options import json_option
from kdkit.cli._output import console, emit_json, plain, say

if TYPE_CHECKING:
    from kdkit.order.campaignview import CampaignStatus


def _table(title: str, columns: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
    """A table of plain text: names from the user's files are never read as rich markup."""
    from rich.table import Table

    table = Table(title=plain(title), title_justify="left")
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(plain(value) for value in row))
    console().print(table)




def _campaign_words(words: tuple[str, ...], why: str | None) -> tuple[Path | None, str | None]:
    """(PROJECT_DIR, the decision or None) from ``[PROJECT_DIR]`` or ``decide DECISION
    [PROJECT_DIR]``."""
    from kdkit.core.errors import BadInput

    decide = bool(words) and words[0] == "decide"
    rest = words[2:] if decide else words
    if decide and len(words) < 2:
        raise BadInput("kdkit campaign decide: give the decision: \"continue\", \"cut VARIANT\" or "
                       "\"change the question\", with --why")
    if decide and words[1] in ("cut", "change") and len(words) > 2:
        raise BadInput(f"kdkit campaign decide {words[1]} ...: quote the decision as one word, "
                       "e.g. kdkit campaign decide \"cut VARIANT\" --why \"...\"")
    if len(rest) > 1:
        raise BadInput(
            f"kdkit campaign: one PROJECT_DIR at most, got {len(rest)} words after the decision")
    if why is not None and not decide:
        raise BadInput("--why: goes with `kdkit campaign decide DECISION --why \"...\"`")
    return (Path(rest[0]) if rest else None), (words[1] if decide else None)


def _print_campaign(status: CampaignStatus) -> None:
    from kdkit.core.safetext import printable

    def shown(value: float | None, plus: bool = False) -> str:
        return "-" if value is None else f"{value:+.4g}" if plus else f"{value:.4g}"

    rows = [(v["name"] + (" (control)" if v["control"] else ""), v["category"],
             "cut" if v["cut"] else "done" if v["done"] else "to run", shown(v["value"]),
             "-" if v["passed"] is None else "yes" if v["passed"] else "no",
             shown(v["vs_control"], True),
             f"{v['machine_hours']:g} h"
             + ("" if v["updated_hours"] is None else f" → {v['updated_hours']:g} h"),
             len(v["runs"])) for v in status["variants"]]
    _table(f"{status['question']} ({status['metric']}, threshold {status['threshold']:g})",
           ("variant", "category", "state", status["metric"], "passes",
            "vs control", "estimate", "runs"), rows)
    rest, time, est = status["remaining_hours"], status["window"], status["estimate"]
    say("Remaining: "
        + ", ".join(f"{k} {rest[k]:g} h" for k in ("essential", "useful", "exploratory"))
        + f" (total {rest['total']:g} h); observed {time['observed_hours']:g} h"
        + ("" if time["window_hours"] is None
           else f" of a {time['window_hours']} h window, {time['left_hours']:g} h "
           f"left (booked {time['booked_hours']} h)"))
    if est is not None:
        per_pass = ("" if est["hours_per_pass"] is None
                    else f", {est['hours_per_pass']:g} h per pass over "
                    f"{est['corpus_items']} items")
        scaled = "" if est["factor"] is None else f"; estimates × {est['factor']:g} (assumed " \
            f"{est['assumed_items_per_second']:g} items/s)"
        source = f"{est['source']} {printable(est['run'])}"
        say(f"Measured: {est['items_per_second']:g} items/s ({source}){per_pass}{scaled}")
    say(f"Cut first: {printable(', '.join(status['cut_first'])) or 'nothing optional is left'}")
    say(f"Advice: {printable(status['advice'])}")
    for decision in status["decisions"][-5:]:
        said = decision["decision"] + (f" {decision['variant']}" if decision.get("variant") else "")
        say(f"Decision {printable(decision.get('at'))}: {printable(said)}: "
            f"{printable(decision.get('why'))}")
    say(f"Conclusion: {printable(status['conclusion'])}")
    corpus = status["corpus"]
    if corpus["frozen"] is None and corpus["sha256"] is not None:
        say(f"Corpus not frozen yet: once {printable(corpus['manifest'])} is final, write "
            f"\"sha256\": \"{corpus['sha256']}\" under \"corpus\" in campaign.json; a later change "
            "is then refused")


@click.command("campaign")
@click.argument("words", nargs=-1, metavar="[PROJECT_DIR] | decide DECISION [PROJECT_DIR]")
@click.option("--order", "order_file", type=click.Path(dir_okay=False, path_type=Path),
              help=(
                  "The order written by `kdkit plan --save` (default: campaign.json's \"order\"): "
                  "its window."))
@click.option("--why", metavar="TEXT", help="With decide: why (kept with the decision).")
@json_option
def campaign(words: tuple[str, ...], order_file: Path | None,
             why: str | None, as_json: bool) -> None:
    """The campaign: what is done and passed, what remains, what to cut first.

    \b
    campaign.json (kdkit init writes one; schemas/campaign.schema.json) holds
    the question, the metric and its threshold, the frozen corpus, the control
    and the variants (essential / useful / exploratory, estimated hours).
    Shown: each variant against the threshold and the control; the hours
    left per category against the time left in the order's window (observed
    machine time: the union of recorded work); what to cut first (exploratory,
    then useful); after a pilot or sweep, the estimates scaled by the measured
    rate; the decisions taken; the conclusion (a negative result is a result).

    \b
    kdkit campaign decide "continue" | "cut VARIANT" | "change the question" --why "..."
    appends a timestamped decision to campaign-decisions.jsonl (never rewritten).

    \b
    Examples:
      kdkit campaign --order order.json
      kdkit campaign decide "cut high-lr" --why "the pilot is 2x slower than assumed"
    """
    from kdkit.core.projectfiles import project_root
    from kdkit.core.safetext import printable

    project_dir, decision = _campaign_words(words, why)
    root = project_root(project_dir)
    if decision is not None:
        from kdkit.order.campaign import DECISIONS, append_decision

        record = append_decision(root, decision, why or "")
        if as_json:
            emit_json(record)
        else:
            said = record["decision"] + (f" {record['variant']}" if record["variant"] else "")
            say(f"Decision recorded in {printable(root / DECISIONS)}: {printable(said)} "
                f"({record['at']})")
        return
    from kdkit.order.campaignview import campaign_status

    status = campaign_status(root, order_file)
    if as_json:
        emit_json(status)
    else:
        _print_campaign(status)
