"""``kdkit campaign``: where the campaign stands, at any time.

What is done and passed per variant, each against the threshold and the control
(kdkit.order.campaign); what remains per category (variants not done and not cut) against the time
left in the window; what to cut first; the decisions taken; the conclusion.

- **Time left** = the order's window (``kdkit plan --save``: ``--order FILE``, else campaign.json's
  ``order``) less the observed machine hours: the union of the intervals of recorded work
  (kdkit.order.worklog), so parallel workers count once. The booked hours are shown beside it; the
  plan is never an obligation to fill every hour.
- **What to cut first**: the exploratory variants still to run, then the useful ones, the longest
  first in each category; the essential work is never proposed. ``to_cut`` is the shortest prefix of
  that order after which the remaining work fits the time left.
- **The updated duration estimate**, once a pilot or a sweep has measured a rate. The measured rate
  is the newest passing pilot run's items / (app + harness seconds): the per-item work, without the
  run's one-time start (diagnose, model load); with no such pilot, the newest sweep's best rate
  (over its batch sizes, the items completed over the seconds taken across every length group, a
  batch size with an error left out). One pass over the corpus then takes ``corpus items / measured
  rate`` (the corpus items: campaign.json's ``corpus.items``, else the manifest's documents). When
  campaign.json says what rate the estimates assumed (``assumed_items_per_second``), each variant's
  estimated machine_hours is scaled by assumed / measured (the measured hours per pass over the
  assumed ones); without it the hours per pass are shown and the estimates stand as written.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.config.campaign import CATEGORIES, Campaign, load_campaign
from kdkit.core.errors import BadInput
from kdkit.core.jsonio import sha256_file
from kdkit.core.projectfiles import real_inside
from kdkit.core.runfolder import run_folders
from kdkit.order.campaign import (
    RunView,
    VariantResult,
    against_control,
    conclusion,
    decision_log,
    read_runs,
    runs_path,
    variant_results,
)

SWEEP_FILE = "sweep.json"

if TYPE_CHECKING:
    from typing import TypedDict

    class RateEstimate(TypedDict):
        """The updated duration estimate from the measured rate (estimate)."""

        source: str
        run: str
        items_per_second: float
        corpus_items: int | None
        hours_per_pass: float | None
        assumed_items_per_second: float | None
        factor: float | None

    class VariantRow(TypedDict):
        """One variant's status: done, passed, against the control, its hours (variant_rows)."""

        name: str
        category: str
        control: bool
        runs: list[str]
        run: str | None
        done: bool
        cut: bool
        value: float | None
        passed: bool | None
        vs_control: float | None
        machine_hours: float
        updated_hours: float | None
        observed_hours: float

    class CorpusState(TypedDict):
        """The corpus's manifest: its SHA-256 now and the one campaign.json froze."""

        manifest: str
        sha256: str | None
        frozen: str | None

    class CampaignStatus(TypedDict):
        """``kdkit campaign``'s status (campaign_status)."""

        campaign: str
        question: str
        metric: str
        threshold: float
        higher_is_better: bool
        control: str
        variants: list[VariantRow]
        conclusion: str
        remaining_hours: dict[str, float]  # per category, and "total"
        window: dict[str, Any]  # window's: order, window_hours, booked/observed/left_hours
        cut_first: list[str]
        to_cut: list[str]
        advice: str
        estimate: RateEstimate | None
        decision_point: str | None
        decisions: list[dict[str, Any]]  # campaign.decision_log's: lines as read
        unreadable_decision_lines: list[int]
        corpus: CorpusState


def sig(value: float) -> float:
    """``value`` to 4 significant digits: a rate, an hour count or a factor as it is shown
    (0.0000469, not 0)."""
    return float(f"{value:.4g}")


# ---------------------------------------------------------------- the measured rate


def sweep_rate(folder: Path) -> float | None:
    """A sweep's best whole rate: per batch size, items completed / seconds over every group (no
    errors)."""
    try:
        rows = json.loads((folder / SWEEP_FILE).read_text(encoding="utf-8")).get("rows")
    except (OSError, ValueError, AttributeError):
        return None
    done: dict[Any, list[float]] = {}
    for row in rows if isinstance(rows, list) else []:
        if not isinstance(row, dict):
            continue
        items, seconds, errors = (_finite(row.get(key))
                                  for key in ("completed", "seconds", "errors"))
        if items is None or seconds is None:
            continue
        tally = done.setdefault(row.get("batch_size"), [0.0, 0.0, 0.0])
        tally[0], tally[1], tally[2] = (tally[0] + items, tally[1] + seconds,
                                        tally[2] + (errors or 0.0))
    rates = [items / seconds for items, seconds,
             errors in done.values() if seconds > 0 and items > 0 and not errors]
    return max(rates) if rates else None


def _finite(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def measured_rate(runs: Path, views: list[RunView]) -> tuple[float, str, str] | None:
    """(items per second, "pilot" or "sweep", the run it is from), by the rule of the module's
    docstring."""
    pilot = next((v for v in reversed(views) if v.kind == "pilot" and v.verdict == "pass"
                  and v.items_per_second),
                 None)
    if pilot is not None and pilot.items_per_second is not None:
        return pilot.items_per_second, "pilot", pilot.run_id
    for folder in reversed([f for f in run_folders(runs) if f.name.startswith("sweep-")]):
        rate = sweep_rate(folder)
        if rate is not None:
            return rate, "sweep", folder.name
    return None


def corpus_items(root: Path, campaign: Campaign) -> int | None:
    if campaign.corpus_items is not None:
        return campaign.corpus_items
    try:
        documents = json.loads(
            (root / campaign.manifest).read_text(encoding="utf-8")).get("documents")
    except (OSError, ValueError, AttributeError):
        return None
    return len(documents) if isinstance(documents, list) else None


def estimate(root: Path, campaign: Campaign, runs: Path,
             views: list[RunView]) -> RateEstimate | None:
    """The updated duration estimate (see the module's docstring), or None before any
    measurement."""
    found = measured_rate(runs, views)
    if found is None:
        return None
    rate, source, run = found
    items = corpus_items(root, campaign)
    assumed = campaign.assumed_items_per_second
    return {"source": source, "run": run, "items_per_second": sig(rate), "corpus_items": items,
            "hours_per_pass": None if items is None else sig(items / rate / 3600),
            "assumed_items_per_second": assumed,
            "factor": None if assumed is None else sig(assumed / rate)}


# ---------------------------------------------------------------- the window


def window(root: Path, campaign: Campaign, order: Path | None, runs: Path) -> dict[str, Any]:
    """The order's window and booked hours, the observed hours (union of recorded work) and the time
    left."""
    from kdkit.order.orderfile import load_order
    from kdkit.order.worklog import observed_hours, work_intervals

    path = order if order is not None else None if campaign.order is None else root / campaign.order
    observed = round(observed_hours(work_intervals(root, runs)), 4)
    out: dict[str, Any] = {"order": None if path is None else str(path), "window_hours": None,
                           "booked_hours": None, "observed_hours": observed, "left_hours": None}
    if path is None:
        return out
    if not path.is_file():
        raise BadInput(
            f"{path}: the order file is not there; write it with `kdkit plan --save` or fix the "
            "path")
    schedule = load_order(path)["schedule"]
    out.update(window_hours=schedule["window_hours"], booked_hours=schedule["booked_hours"],
               left_hours=round(schedule["window_hours"] - observed, 4))
    return out


# ---------------------------------------------------------------- what remains and what to cut


def hours_left_to_run(result: VariantResult, factor: float | None) -> float:
    return result.machine_hours * (factor if factor is not None else 1.0)


def remaining(results: list[VariantResult], factor: float | None) -> dict[str, float]:
    """Hours still to run per category (variants neither done nor cut), and their total."""
    out = {category: 0.0 for category in CATEGORIES}
    for result in results:
        if not result.done and not result.cut:
            out[result.category] += hours_left_to_run(result, factor)
    return {**{k: round(v, 4) for k, v in out.items()}, "total": round(sum(out.values()), 4)}


def cuts(results: list[VariantResult], factor: float | None,
         left: float | None) -> tuple[list[str], list[str]]:
    """(what to cut first: exploratory, then useful, longest first; the shortest prefix of it that
    fits ``left``)."""
    pending = [r for r in results if not r.done and not r.cut]
    order = [r for category in ("exploratory", "useful") for r in sorted(
        (p for p in pending if p.category == category), key=lambda p: -p.machine_hours)]
    total = sum(hours_left_to_run(r, factor) for r in pending)
    to_cut: list[str] = []
    for result in order:
        if left is None or total <= left:
            break
        to_cut.append(result.name)
        total -= hours_left_to_run(result, factor)
    return [r.name for r in order], to_cut


def advice(rest: dict[str, float], left: float | None, to_cut: list[str]) -> str:
    if left is None:
        return "no order window to compare with: pass --order FILE (written by `kdkit plan --save`)"
    if rest["total"] <= left:
        return (f"{rest['total']:g} h of work remain in {left:g} h left: it fits (the hours left "
                "are not an obligation)")
    if rest["essential"] > left:
        return (f"the essential work alone ({rest['essential']:g} h) exceeds the {left:g} h left: "
                "change the question, reduce the protocol or take a longer plan")
    return f"{rest['total']:g} h of work remain in {left:g} h left: cut {', '.join(to_cut)} first"


# ---------------------------------------------------------------- the status


def variant_rows(campaign: Campaign, results: list[VariantResult],
                 factor: float | None) -> list[VariantRow]:
    deltas = against_control(campaign, results)
    return [{"name": r.name, "category": r.category, "control": r.name == campaign.control,
             "runs": list(r.runs),
             "run": r.run, "done": r.done, "cut": r.cut, "value": r.value, "passed": r.passed,
             "vs_control": deltas[r.name], "machine_hours": r.machine_hours,
             "updated_hours": None if factor is None else sig(r.machine_hours * factor),
             "observed_hours": sig(r.seconds / 3600)} for r in results]


def campaign_status(root: Path, order: Path | None = None) -> CampaignStatus:
    """``kdkit campaign``: the status of the project's campaign (see the module's docstring)."""
    campaign = load_campaign(root)
    if campaign is None:
        raise BadInput(f"{root / 'campaign.json'}: not found; write one (`kdkit init` scaffolds "
                       "it, schemas/campaign.schema.json says what it holds)")
    runs = runs_path(root)
    views = read_runs(runs, campaign.metric)
    results = variant_results(root, campaign, views)
    est = estimate(root, campaign, runs, views)
    factor = None if est is None else est["factor"]
    time = window(root, campaign, order, runs)
    rest = remaining(results, factor)
    first, to_cut = cuts(results, factor, time["left_hours"])
    decisions, unreadable = decision_log(root)
    return {"campaign": str(campaign.path), "question": campaign.question,
            "metric": campaign.metric,
            "threshold": campaign.threshold, "higher_is_better": campaign.higher_is_better,
            "control": campaign.control, "variants": variant_rows(campaign, results, factor),
            "conclusion": conclusion(campaign, results), "remaining_hours": rest, "window": time,
            "cut_first": first, "to_cut": to_cut,
            "advice": advice(rest, time["left_hours"], to_cut),
            "estimate": est, "decision_point": campaign.decision_point, "decisions": decisions,
            "unreadable_decision_lines": unreadable, "corpus": corpus_state(root, campaign)}


def corpus_state(root: Path, campaign: Campaign) -> CorpusState:
    """The corpus's manifest: its SHA-256 now, the one campaign.json froze (None: not frozen yet; a
    frozen one that differs is refused when campaign.json is read, kdkit.config.campaign)."""
    path = real_inside(root, root / campaign.manifest)
    now = sha256_file(path) if path is not None and path.is_file() else None
    return {"manifest": campaign.manifest, "sha256": now, "frozen": campaign.manifest_sha256}
