"""The campaign (campaign.json, kdkit.config.campaign): each variant's runs and result against the
threshold and the control, the conclusion, and the decisions log (``kdkit campaign decide``). Its
status over time and the window is kdkit.order.campaignview.

A run belongs to a variant when its params.json says ``"variant": NAME`` (``kdkit train --variant
NAME``), or names the variant's config (params.json's ``config_file``, or a pilot's
``params.config_file``). A run is read lightly, so a thousand folders take well under a second:
params.json, summary.json and stop.json, and SHA256SUMS, against which the summary and the params
read are checked (a summary edited after closing is "unverified"); results.jsonl and the other files
are never read (``kdkit close`` verifies them whole). A variant's value is its newest passing run's:
a train run's last value of the metric (summary.json ``metrics``), a pilot run's summary key of that
name, else its ``quality`` (the pilot's score against the manifest). Never the best of several runs:
picking the best of N is not a measurement.

Decisions are appended to campaign-decisions.jsonl, one JSON line each, written in one write and
fsynced; the file is never rewritten. A line a kill cut short is skipped when read, and named.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.config.campaign import Campaign, load_campaign, require_variant
from kdkit.core.checksums import SUMS
from kdkit.core.errors import BadInput
from kdkit.core.runfolder import PARAMS, STOP, SUMMARY, WORKER_FOLDER, run_folders
from kdkit.core.safetext import printable

if TYPE_CHECKING:
    from typing import TypedDict

    class Decision(TypedDict):
        """The line a decision appends to campaign-decisions.jsonl (decision_record)."""

        at: str
        decision: str
        variant: str | None
        why: str

__all__ = ["Campaign", "RunView", "VariantResult", "append_decision", "conclusion", "load_campaign",
           "read_decisions", "read_run_view", "variant_results"]

DECISIONS = "campaign-decisions.jsonl"
VERBS = ("continue", "cut", "change the question")
MAX_WHY = 2000


# ---------------------------------------------------------------- runs, read lightly


@dataclass(frozen=True)
class RunView:
    """What the campaign needs of one run folder (params, summary, stop and SHA256SUMS only)."""

    run_id: str
    kind: str  # "train", "pilot", or "other" (a folder without params.json: a sweep's, a gathering)
    variant: str | None
    config_files: tuple[str, ...]
    # the summary's (pass, fail, stopped), "unverified", "stopped" (stop.json only) or "open"
    verdict: str
    value: float | None  # the campaign's metric in this run (see the module's docstring)
    seconds: float | None
    items_per_second: float | None  # a pilot's per-item rate: items / (app + harness seconds)
    created: str | None


def _read(path: Path) -> tuple[bytes, dict[str, Any]]:
    try:
        raw = path.read_bytes()
        data = json.loads(raw)
    except (OSError, ValueError):
        return b"", {}
    return raw, data if isinstance(data, dict) else {}


def _sums(folder: Path) -> dict[str, str] | None:
    try:
        text = (folder / SUMS).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return {name: digest for digest, _sep,
            name in (line.partition("  ") for line in text.splitlines())}


def _number(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _verdict(folder: Path, files: dict[str, bytes], summary: dict[str, Any], stopped: bool) -> str:
    said = summary.get("verdict")
    if said not in ("pass", "fail", "stopped"):
        return "stopped" if stopped else "open"
    sums = _sums(folder)
    for name, raw in files.items():
        if raw and (sums is None or sums.get(name) != hashlib.sha256(raw).hexdigest()):
            return "unverified"  # never closed, or edited after closing
    return str(said)


def _value(kind: str, summary: dict[str, Any], metric: str) -> float | None:
    if kind == "train":
        metrics = summary.get("metrics")
        return _number(metrics.get(metric)) if isinstance(metrics, dict) else None
    found = _number(summary.get(metric))
    return found if found is not None else _number(summary.get("quality"))


def _rate(summary: dict[str, Any]) -> float | None:
    timings = summary.get("timings")
    if not isinstance(timings, dict):
        return None
    items, app, harness = (_number(timings.get(k))
                           for k in ("items", "app_seconds", "harness_seconds"))
    if items is None or app is None or items <= 0:
        return None
    busy = app + (harness or 0.0)
    return items / busy if busy > 0 else None


def read_run_view(folder: Path, metric: str) -> RunView:
    """One run folder as the campaign reads it (see the module's docstring); tolerant of torn
    files."""
    params_raw, params = _read(folder / PARAMS)
    summary_raw, summary = _read(folder / SUMMARY)
    stopped = (folder / STOP).is_file()
    kind = "train" if "train" in (params.get("kind"),
                                  summary.get("kind")) else "pilot" if params else "other"
    inner = params.get("params")
    configs = [params.get("config_file"),
               inner.get("config_file") if isinstance(inner, dict) else None]
    timings = summary.get("timings")
    variant = params.get("variant")
    return RunView(
        run_id=folder.name, kind=kind, variant=variant if isinstance(variant, str) else None,
        config_files=tuple(c for c in configs if isinstance(c, str)),
        verdict=_verdict(folder, {PARAMS: params_raw, SUMMARY: summary_raw}, summary, stopped),
        value=_value(kind, summary, metric),
        seconds=_number(timings.get("seconds")) if isinstance(timings, dict) else None,
        items_per_second=_rate(summary) if kind == "pilot" else None,
        created=params.get("created") if isinstance(params.get("created"), str) else None)


def read_runs(runs: Path, metric: str) -> list[RunView]:
    """Every run folder under ``runs`` in ID order, a worker's share excepted (its run is the
    whole)."""
    return [read_run_view(folder, metric) for folder in run_folders(runs)
            if not WORKER_FOLDER.match(folder.name)]


# ---------------------------------------------------------------- variants against the threshold


@dataclass(frozen=True)
class VariantResult:
    """One variant: its runs, its value (its newest passing run's), and whether that passes the
    threshold (None: not measured yet)."""

    name: str
    category: str
    runs: tuple[str, ...]
    value: float | None
    passed: bool | None
    machine_hours: float
    done: bool = False  # a passing run of it is closed
    run: str | None = None  # the run the value is from
    seconds: float = 0.0  # the closed runs' wall seconds, summed
    cut: bool = False  # a decision cut it (`kdkit campaign decide "cut NAME"`)


def _belongs(run: RunView, name: str, config: str | None) -> bool:
    return run.variant == name or (run.variant is None and config is not None
                                   and config in run.config_files)


def variant_results(root: Path, campaign: Campaign,
                    runs: list[RunView] | None = None) -> list[VariantResult]:
    """Each variant of ``campaign`` with its runs (under the pilot config's runs folder unless
    ``runs``)."""
    if runs is None:
        runs = read_runs(runs_path(root), campaign.metric)
    cut = {d.get("variant") for d in read_decisions(root) if d.get("decision") == "cut"}
    results = []
    for variant in campaign.variants:
        mine = [run for run in runs if _belongs(run, variant.name, variant.config)]
        passing = [run for run in mine if run.verdict == "pass"]
        measured = next((run for run in reversed(passing) if run.value is not None), None)
        value = None if measured is None else measured.value
        results.append(VariantResult(
            name=variant.name, category=variant.category, runs=tuple(r.run_id for r in mine),
            value=value,
            passed=None if value is None else campaign.passes(value),
            machine_hours=variant.machine_hours,
            done=bool(passing), run=None if measured is None else measured.run_id,
            seconds=sum(r.seconds or 0.0 for r in mine if r.verdict in ("pass", "fail", "stopped")),
            cut=variant.name in cut))
    return results


def runs_path(root: Path) -> Path:
    """The project's runs folder by the pilot's own rule (kdkit.order.plan.runs_folder)."""
    from kdkit.config.project import load_project
    from kdkit.order.plan import runs_folder

    return runs_folder(load_project(root))


def against_control(campaign: Campaign, results: list[VariantResult]) -> dict[str, float | None]:
    """Each variant's value minus the control's (None where either is not measured)."""
    control = next((r.value for r in results if r.name == campaign.control), None)
    return {r.name: None if r.value is None or control is None else r.value - control
            for r in results}


def conclusion(campaign: Campaign, results: list[VariantResult]) -> str:
    """What the results say of the question: a variant that reaches the threshold, none (a negative
    result is a result, once every variant not cut is measured), or what is still open."""
    goal = f"{campaign.threshold:g}"
    reached = [r for r in results if r.passed]
    if reached:
        best = max(reached,
                   key=lambda r: (r.value or 0.0) * (1 if campaign.higher_is_better else -1))
        names = ", ".join(r.name for r in reached)
        return (f"{names} reach{'es' if len(reached) == 1 else ''} {goal} (best: {best.name}, "
                f"{campaign.metric} {best.value:.4g}): the question is answered")
    waiting = [r.name for r in results if r.value is None and not r.cut]
    if not waiting:
        return f"no variant reaches {goal}: the question is answered"
    return (f"no variant reaches {goal} yet; {len(waiting)} not measured ({', '.join(waiting)}): "
            "the question is open")


# ---------------------------------------------------------------- decisions


def parse_decision(campaign: Campaign, said: str) -> tuple[str, str | None]:
    """("continue" | "cut" | "change the question", the variant cut or None); BadInput for anything
    else."""
    words = said.split()
    if words == ["continue"]:
        return "continue", None
    if words == ["change", "the", "question"]:
        return "change the question", None
    if len(words) == 2 and words[0] == "cut":
        return "cut", require_variant(campaign, words[1], "cut").name
    shown = printable(said[:60])
    raise BadInput(f"decision {shown!r}: not a decision; decide \"continue\", \"cut VARIANT\" or "
                   "\"change the question\"")


def decision_record(campaign: Campaign, said: str, why: str) -> Decision:
    """The line a decision appends, checked first: a known verb, a variant the campaign has, a
    reason."""
    verb, variant = parse_decision(campaign, said)
    reason = why.strip()
    if not reason:
        raise BadInput("--why: empty; say why (the record keeps the reason with the decision)")
    if len(reason) > MAX_WHY:
        raise BadInput(f"--why: {len(reason)} characters; keep the reason under {MAX_WHY}")
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {"at": now, "decision": verb, "variant": variant, "why": reason}


def append_decision(root: Path, said: str, why: str) -> Decision:
    """``kdkit campaign decide``: one timestamped line appended to campaign-decisions.jsonl and
    fsynced (the file is never rewritten); BadInput with nothing written for a bad decision or no
    campaign."""
    campaign = load_campaign(root)
    if campaign is None:
        raise BadInput(
            f"{root / 'campaign.json'}: not found; a decision needs a campaign (kdkit init writes "
            "one)")
    record = decision_record(campaign, said, why)
    line = (json.dumps(record, ensure_ascii=True, allow_nan=False) + "\n").encode("ascii")
    path = root / DECISIONS
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise BadInput(
            f"{path}: not a regular file; move it away (decisions are appended to a file of their "
            "own)")
    created = not path.exists()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        size = os.fstat(fd).st_size
        if size and _last_byte(path, size) != b"\n":
            line = b"\n" + line  # a line a kill cut short stays alone on its own line
        _write_all(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)
    if created:
        _fsync_folder(root)
    return record


def _last_byte(path: Path, size: int) -> bytes:
    with path.open("rb") as handle:
        handle.seek(size - 1)
        return handle.read(1)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _fsync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def decision_log(root: Path) -> tuple[list[dict[str, Any]], list[int]]:
    """(every decision in order, the line numbers that are not one: cut short by a kill, or
    edited)."""
    try:
        text = (root / DECISIONS).read_bytes().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return [], []
    except OSError as exc:
        raise BadInput(f"{root / DECISIONS}: cannot read ({exc.strerror or exc})") from None
    decisions, torn = [], []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if isinstance(record, dict) and record.get("decision") in VERBS:
            decisions.append(record)
        else:
            torn.append(number)
    return decisions, torn


def read_decisions(root: Path) -> list[dict[str, Any]]:
    """Every decision of campaign-decisions.jsonl, in the order taken (unreadable lines left
    out)."""
    return decision_log(root)[0]
