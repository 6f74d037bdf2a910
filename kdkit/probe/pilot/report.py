"""What a finished (or stopped) pilot run says: summary.json for tools, summary.md for a person.

summary.md puts every ID's outcome in one table and shows a few outputs beside
their inputs: a syntactically valid output can still be wrong, and only reading
a few next to what produced them shows it. Whatever the app or an input says is
data there: each cell and line goes through kdkit.core.safetext.md_cell, so no
control character, `|` or leading `#` changes what the file shows.
"""

from __future__ import annotations

import json
import os
from itertools import islice
from typing import Any

from kdkit.core.outputkinds import ROW, SCORE, describe
from kdkit.core.pilotconfig import PilotConfig
from kdkit.core.pilotmanifest import Document
from kdkit.core.runfolder import (
    ACCEPTED,
    KIND,
    PILOT,
    REASON,
    REJECTED,
    RUN_ID,
    STOPPED,
    TOTAL,
    VERDICT,
    WORKER_FOLDER,
)
from kdkit.core.safetext import md_cell, printable
from kdkit.probe.pilot.accounting import KEPT_WHOLE, NOT_ANSWERED, Accounting
from kdkit.probe.pilot.harness import read_input

# at most KEPT_WHOLE: an accepted record past those is kept slim (accounting.Tally)
TABLE_ROWS = 500
SAID = 60  # characters of an accepted text or JSON answer shown in the table
# the first documents, among which the largest accepted input is looked for
NEAR_LIMIT_LOOKED = KEPT_WHOLE
SHOWN_BESIDE = 3
EXCERPT = 300


def resume_options(run_id: str) -> str:
    """The pilot options that finish ``run_id``: a worker's folder needs its share named too."""
    share = WORKER_FOLDER.match(run_id)
    if share is None:
        return f"--resume {run_id}"
    return (
        f"--resume {share.group('base')} --worker {share.group('worker')} --workers "
        f"{share.group('workers')}")


APP_CODE = "app-code"  # stop.json rule: the app's entry did not import or is not callable


def next_step(run_id: str, stop: dict[str, Any]) -> str:
    """What to do after a stop, as a command that works: a resume, except when the app's own code
    must change first (a resumed run keeps the code it started with, and refuses a changed one)."""
    if stop.get("rule") == APP_CODE:
        return (
            "fix the app, then start a new run (kdkit pilot, without --resume: the code is part of "
            "a run)")
    return f"resume with {resume_options(run_id)}"


def summary_data(run_id: str, cfg: PilotConfig, acc: Accounting, stop: dict[str, Any] | None,
                 extra: dict[str, Any]) -> dict[str, Any]:
    problems = list(acc.problems)
    if stop is not None:
        problems.insert(0, f"stopped early: {stop[REASON]}; {next_step(run_id, stop)}")
    return {
        RUN_ID: run_id,
        KIND: PILOT,
        VERDICT: "fail" if problems else "pass",
        TOTAL: acc.total,
        ACCEPTED: acc.accepted,
        REJECTED: acc.rejected,
        "quality": acc.quality,
        "min_quality": cfg.min_quality,
        "expected_rejections": [d.id for d in cfg.documents if d.expect == "reject"],
        "problems": problems,
        STOPPED: stop,
        **({NOT_ANSWERED: acc.not_answered} if acc.not_answered else {}),
        **({} if cfg.output.kind == "category" else {"output": {"kind": cfg.output.kind,
                                                                 "described": describe(
                                                                     cfg.output)}}),
        **extra,
    }


def _outcome_row(doc_id: str, expect: str, label: str | None, acc: Accounting) -> str:
    record = acc.first.get(doc_id)
    if record is None:
        return f"| {md_cell(doc_id)} | {expect} | {md_cell(label or '-')} | not reached | |"
    outcome = record["outcome"]
    said = _said(record) if outcome == "accepted" else record.get("reason") or record.get("problem")
    if outcome == "rejected":
        said = f"{record.get('by')}: {said}"
    times = acc.counts.get(doc_id, 1)  # only the IDs that got more than one record are counted
    flag = f" (x{times})" if times > 1 else ""
    return (
        f"| {md_cell(doc_id)} | {expect} | {md_cell(label or '-')} | {outcome}{flag} | "
        f"{md_cell(said or '')} |")


def _said(record: dict[str, Any]) -> str:
    """What an accepted answer said, in a few characters: its category, its text or JSON cut short,
    its row."""
    if "category" in record:
        return str(record["category"])
    score = f" (score {record[SCORE]:.3f})" if isinstance(record.get(SCORE), (int, float)) else ""
    if ROW in record:
        return f"vectors.npy row {record[ROW]}{score}"
    value = record.get("output")
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return (text if len(text) <= SAID else text[:SAID] + "...") + score


def summary_markdown(summary: dict[str, Any], cfg: PilotConfig, acc: Accounting) -> str:
    quality = "undefined" if summary["quality"] is None else f"{summary['quality']:.3f}"
    lines = [
        f"# Pilot run {summary['run_id']}: {summary['verdict'].upper()}",
        "",
        f"- IDs in the manifest: {summary['total']}; accepted {summary['accepted']} + rejected "
        f"{summary['rejected']} = {summary['accepted'] + summary['rejected']}",
        _quality_line(cfg, quality),
        f"- Expected rejections: {', '.join(summary['expected_rejections']) or 'none'}",
        f"- Entry: `{cfg.entry}`, batch size {cfg.batch_size}, device {cfg.device}",
    ]
    if summary.get("stopped"):
        lines.append(f"- Stopped early: {md_cell(summary['stopped']['reason'], None)}")
    lines += ["", "## Problems", ""]
    lines += [f"- {md_cell(p)}"
              for p in summary["problems"]] or ["None: every rule of the accounting holds."]
    said = "category" if cfg.output.kind == "category" else "output"
    lines += ["", "## Every ID", "", f"| ID | expected | label | outcome | {said} or reason |",
              "|---|---|---|---|---|"]
    for doc in cfg.documents[:TABLE_ROWS]:
        lines.append(_outcome_row(doc.id, doc.expect, doc.label, acc))
    if len(cfg.documents) > TABLE_ROWS:
        lines.append(f"\n({len(cfg.documents) - TABLE_ROWS} more IDs: see results.jsonl)")
    beside = _beside(cfg, acc) if cfg.output.kind == "category" else _beside_any(cfg, acc)
    lines += ["", "## A few outputs beside their inputs", "", *beside]
    lines += ["",
              "Files: params.json (parameters, code revision), env.json (diagnose report), "
              "results.jsonl (one line per item), summary.json, SHA256SUMS (verify a copy with "
              "`kdkit copy-out`)."]
    if cfg.output.kind == "vector":
        lines.append("Vectors: vectors.npy (`numpy.load`, one float32 row per accepted item) and "
                     "vectors.ids.jsonl (each row's ID and input sha256, in row order).")
    return "\n".join(lines) + "\n"


def _quality_line(cfg: PilotConfig, quality: str) -> str:
    if cfg.output.kind == "category":
        return f"- Quality against the manifest's labels: {quality} (minimum {cfg.min_quality:g})"
    if quality == "undefined":
        return (f"- Output: {md_cell(describe(cfg.output))}; quality not scored (no accepted "
                "answer has an expected output in the manifest): the verdict rests on the "
                "accounting and each answer's check")
    return (f"- Output: {md_cell(describe(cfg.output))}; quality against the manifest's expected "
            f"outputs: {quality} (minimum {cfg.min_quality:g})")


def _beside_any(cfg: PilotConfig, acc: Accounting, skip: frozenset[str] = frozenset()) -> list[str]:
    """The first accepted answer, the first rejected one and the accepted one of the largest input
    (near the limit), each input's excerpt next to what became of it (``skip``: IDs already shown).
    The accepted ones are looked for among the first NEAR_LIMIT_LOOKED documents: their records are
    kept whole (accounting.Tally)."""
    # no list of a whole corpus's documents
    accepted = [d for d in islice(cfg.documents, NEAR_LIMIT_LOOKED)
                if (acc.first.get(d.id) or {}).get("outcome") == "accepted"]
    rejected = list(islice((d for d in cfg.documents
                            if (acc.first.get(d.id)
                                or {}).get("outcome") in ("rejected", "invalid")), 1))
    largest = max(accepted, key=_size, default=None)
    first = [] if skip else accepted[:1]
    picked = [d
              for d in {d.id: d
                        for d in (first + rejected + ([largest] if largest else []))}.values()
              if d.id not in skip]
    shown: list[str] = []
    for doc in picked:
        record = acc.first[doc.id] or {}
        said = (_said(record) if record["outcome"] == "accepted" else record.get("reason")
                or record.get("problem"))
        item = read_input(doc, cfg.max_input_bytes, decode=cfg.decode, id_field=cfg.id_field)
        if isinstance(item, str):
            excerpt, more = ("(the input was refused before the app saw it)" if item == said else
                             "(input not readable: " + item + ")"), False
        else:
            excerpt, more = item.excerpt(EXCERPT)
        near = (" (the largest input looked at)" if largest is not None and doc.id == largest.id
                else "")
        shown += [f"**{md_cell(doc.id)}** ({record['outcome']}{near}) -> `{printable(str(said))}`",
                  "",
                  f"> {md_cell(excerpt, None)}{'...' if more else ''}", ""]
    return shown or ([] if skip else ["No output to show."])


def _size(doc: Document) -> int:
    if doc.offset >= 0:
        return doc.length
    try:
        return os.stat(doc.location).st_size
    except OSError:
        return -1


def _beside(cfg: PilotConfig, acc: Accounting) -> list[str]:
    """Up to three accepted documents of different categories, input excerpt next to the output,
    then a rejected one and the near-limit one (:func:`_beside_any`) where they are not among
    them."""
    shown, seen_categories, ids = [], set(), set()
    for doc in cfg.documents:
        record = acc.first.get(doc.id)
        if not record or record["outcome"] != "accepted" \
                or record.get("category") in seen_categories:
            continue
        item = read_input(doc, cfg.max_input_bytes, decode=cfg.decode, id_field=cfg.id_field)
        if isinstance(item, str):
            continue
        seen_categories.add(record.get("category"))
        ids.add(doc.id)
        # decoded from the file's start only, never the whole input
        excerpt, more = item.excerpt(EXCERPT)
        shown += [f"**{md_cell(doc.id)}** -> `{printable(record.get('category'))}` (label: "
                  f"{md_cell(doc.label)})", "",
                  f"> {md_cell(excerpt, None)}{'...' if more else ''}", ""]
        if len(seen_categories) == SHOWN_BESIDE:
            break
    if not shown:
        return _beside_any(cfg, acc)
    return shown + _beside_any(cfg, acc, frozenset(ids))
