"""When recorded work ran: the intervals of builds, pilot runs and their workers, trainings, sweeps,
serve tests and resume tests, each read from its own records, and their union (the machine's
observed busy time).

Parallel work is never summed: two workers of one run, or a training beside a sweep, that ran in the
same hour count one hour (:func:`observed_hours` is the length of the union), and the hours between
recorded work are idle gaps (:func:`gaps`). Each interval says where its times come from
(``source``) and whether its record was never closed (``open``: killed, or still running).

What each kind records, and what is read (small JSON files and file times only; results.jsonl and
metrics.jsonl are never read whole, a metrics series only by its last line):

- a build: ``.kdkit-logs/builds.jsonl`` (kdkit.image.buildlog), one line per image,
  ``started``/``ended``;
- a pilot run or a worker's share (``<run>-wIofN``, each folder its own interval): params.json's
  ``created`` (else the time in its ID) for how long summary.json's ``timings.seconds`` says; a
  resumed run's last session ends when its summary was written, each earlier one runs from its
  ``env-k.json``'s ``started`` (the first: ``created``) to its ``stop-k.json``'s ``at``; an open one
  until its heartbeat's ``updated``, its stop.json's ``at``, else its newest file's time;
- a training (``params.json`` ``"kind": "train"``): summary.json's ``started``/``ended``; an open or
  killed one from params.json's ``created`` to the latest of its heartbeat, stop.json's ``at``,
  metrics.jsonl's last ``t`` after the start and its newest file's time;
- a sweep (``sweep-<time>``): sweep.json, written when the measurements end, less their seconds
  (warm-up and every cell);
- a resume test (``resume-test-<time>``) or a serve test (``serve-test-<time>``): the time in its ID
  to its report.json or serve-test.json (else its newest file).

A gathering (``-gathered``) did no work of its own. A folder with no time to read is left out and
named (:attr:`WorkLog.unread`).
"""

from __future__ import annotations

import itertools
import json
import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, NamedTuple

from kdkit.core.jsonio import object_or_empty
from kdkit.core.runfolder import ID_SHAPES, WORKER_FOLDER, run_folders, session_seconds
from kdkit.image.buildlog import BUILDS

KINDS = ("build", "pilot", "worker", "train", "sweep", "resume-test", "serve-test")
# folders named by kind
MEASURED = tuple(ID_SHAPES[kind][0] for kind in ("sweep", "resume-test", "serve-test"))
MAX_SESSIONS = 1000  # a resumed run's sessions read at most (stop-1.json ... stop-1000.json)
TAIL_BYTES = 8192  # a metrics series is read by its last line only
PILOT_ID = re.compile(r"^(\d{8}T\d{6}Z)")


@dataclass(frozen=True)
class Interval:
    """One piece of recorded work: ``kind`` (KINDS), ``name`` (a run ID or an image tag), UTC
    times."""

    kind: str
    name: str
    start: datetime
    end: datetime
    source: str = ""
    open: bool = False
    variant: str | None = None  # a training's params.json "variant" (kdkit train --variant)
    # a training's: its summary's (pass, fail, stopped), else "stopped" or "open"
    verdict: str | None = None
    stop_reason: str | None = None  # a training's stop.json "reason", when it stopped

    @property
    def hours(self) -> float:
        return max(0.0, (self.end - self.start).total_seconds()) / 3600


class Gap(NamedTuple):
    """Idle time between recorded work."""

    start: datetime
    end: datetime

    @property
    def hours(self) -> float:
        return (self.end - self.start).total_seconds() / 3600


@dataclass
class WorkLog:
    intervals: list[Interval] = field(default_factory=list)
    # records with no time kdkit can read, each with why
    unread: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- the arithmetic


def merged(intervals: list[Interval]) -> list[tuple[datetime, datetime]]:
    """The union of the intervals as disjoint (start, end) pairs in time order."""
    spans: list[tuple[datetime, datetime]] = []
    for start, end in sorted((i.start, i.end) for i in intervals if i.end >= i.start):
        if spans and start <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], end))
        else:
            spans.append((start, end))
    return spans


def observed_hours(intervals: list[Interval]) -> float:
    """Hours in which some recorded work ran: overlapping intervals count once."""
    return sum((end - start).total_seconds() for start, end in merged(intervals)) / 3600


def gaps(intervals: list[Interval]) -> list[Gap]:
    """The idle gaps between recorded work, in time order (none before the first or after the
    last)."""
    spans = merged(intervals)
    return [Gap(a[1], b[0]) for a, b in itertools.pairwise(spans)]


def hours_by(intervals: list[Interval], key: str = "kind") -> dict[str, float]:
    """Observed hours per kind (per ``variant``, else kind, with ``key="stage"``; per run or tag
    with ``key="name"``), each a union of its own."""
    groups: dict[str, list[Interval]] = {}
    for interval in intervals:
        name = interval.kind if key == "kind" else interval.name if key == "name" else (
            interval.variant or interval.kind)
        groups.setdefault(name, []).append(interval)
    return {name: observed_hours(group) for name, group in groups.items()}


# ---------------------------------------------------------------- reading the records


def utc(value: Any) -> datetime | None:
    """An ISO-8601 time as an aware UTC datetime (a naive one is taken as UTC), or None."""
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment.replace(
        tzinfo=timezone.utc) if moment.tzinfo is None else moment.astimezone(timezone.utc)


def _mtime(path: Path) -> datetime | None:
    try:
        return datetime.fromtimestamp(path.stat().st_mtime, timezone.utc)
    except OSError:
        return None


def _newest(folder: Path) -> datetime | None:
    """The newest modification time of a file in ``folder`` or its subfolders (one level), never
    followed."""
    times = []
    for base in (folder, *(p for p in folder.iterdir() if p.is_dir() and not p.is_symlink())):
        times += [t for entry in os.scandir(base) if entry.is_file(follow_symlinks=False)
                  and (t := _mtime(Path(entry.path))) is not None]
    return max(times, default=None)


def _number(value: Any) -> float | None:
    ok = isinstance(value,
                    (int, float)) and not isinstance(value, bool) and value == value and value >= 0
    return float(value) if ok and value != float("inf") else None


def id_time(name: str) -> datetime | None:
    """The UTC time a run ID starts with (a pilot's, or a sweep's, resume test's or training's)."""
    match = PILOT_ID.match(name)
    shapes = [(prefix, stamp) for prefix,
              stamp in ID_SHAPES.values() if prefix and name.startswith(prefix)]
    text, stamp = (match.group(1), "%Y%m%dT%H%M%SZ") if match else (
        (name[len(shapes[0][0]):][:15], shapes[0][1]) if shapes else ("", ""))
    try:
        return datetime.strptime(text, stamp).replace(tzinfo=timezone.utc) if text else None
    except ValueError:
        return None


def last_metric_time(path: Path) -> float | None:
    """metrics.jsonl's last complete line's ``t`` (seconds since the start), reading only the file's
    tail."""
    try:
        with path.open("rb") as handle:
            start = max(0, handle.seek(0, os.SEEK_END) - TAIL_BYTES)
            handle.seek(start)
            lines = handle.read().split(b"\n")
    except OSError:
        return None
    for line in reversed(lines[1:] if start else lines):  # a tail's first piece may be a line's end
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and _number(record.get("t")) is not None:
            return float(record["t"])
    return None


def read_builds(root: Path) -> WorkLog:
    """The builds recorded in ``root``'s builds.jsonl (a torn or foreign line is named, never
    fatal)."""
    log = WorkLog()
    try:
        text = (root / BUILDS).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return log
    for number, line in enumerate(text.splitlines(), 1):
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        record = record if isinstance(record, dict) else {}
        start, end = utc(record.get("started")), utc(record.get("ended"))
        if start is None or end is None or end < start:
            log.unread.append(
                f"{root / BUILDS}: line {number}: no started/ended times; not counted")
            continue
        name = str(record["tag"]) if isinstance(record.get("tag"), str) else "?"
        log.intervals.append(
            Interval("build", name, start, end, f"{BUILDS.as_posix()} line {number}"))
    return log


def _pilot(folder: Path, params: dict[str, Any]) -> list[Interval]:
    """A pilot run's (or a worker share's) sessions (see the module's docstring)."""
    kind = "worker" if WORKER_FOLDER.match(folder.name) else "pilot"
    created = utc(params.get("created")) or id_time(folder.name)
    summary = object_or_empty(folder / "summary.json")
    seconds = session_seconds(summary) if summary.get("verdict") else None
    if seconds is not None and created is not None and not summary.get("resumed"):
        return [Interval(kind, folder.name, created,
                         created + timedelta(seconds=seconds), "params.json created + "
                         "summary.json timings.seconds")]
    if seconds is not None:
        end = _mtime(folder / "summary.json")
        return _earlier_sessions(kind, folder, created) + (
            [Interval(kind, folder.name, end - timedelta(seconds=seconds),
                      end, "summary.json written, less its "
                      "timings.seconds (a resumed run's last session)")] if end else [])
    return _open(kind, folder, created, None)


def _earlier_sessions(kind: str, folder: Path, created: datetime | None) -> list[Interval]:
    """A resumed run's sessions before its last: session k from its env-k.json's ``started`` (the
    first: params.json's ``created``) to its stop-k.json's ``at`` (the pilot keeps both by number
    when it resumes)."""
    found: list[Interval] = []
    for k in range(1, MAX_SESSIONS + 1):
        stop = object_or_empty(folder / f"stop-{k}.json")
        if not stop:
            break
        start = (created if k == 1
                 else None) or utc(object_or_empty(folder / f"env-{k}.json").get("started"))
        end = utc(stop.get("at"))
        if start is not None and end is not None and end >= start:
            said = ("params.json created" if k == 1 and created is not None
                    else f"env-{k}.json started")
            found.append(Interval(kind, folder.name, start, end, f"{said} to stop-{k}.json at"))
    return found


def _open(kind: str, folder: Path, start: datetime | None, last_t: float | None) -> list[Interval]:
    """A run never closed: from ``start`` to the latest time its records show."""
    beat, stop = object_or_empty(folder / "heartbeat.json"), object_or_empty(folder / "stop.json")
    candidates = [utc(beat.get("updated")), utc(stop.get("at")), _newest(folder)]
    if start is not None and last_t is not None:
        candidates.append(start + timedelta(seconds=last_t))
    ends = [t for t in candidates if t is not None]
    start = start or utc(beat.get("started"))
    if start is None or not ends or max(ends) < start:
        return []
    return [
        Interval(kind, folder.name, start, max(ends),
                 "never closed: its start to its latest record", open=True)]


def _train(folder: Path, params: dict[str, Any]) -> list[Interval]:
    """A training run (H1's run folder: summary.json started/ended; else open, see the module's
    docstring)."""
    variant = params.get("variant") if isinstance(params.get("variant"), str) else None
    summary = object_or_empty(folder / "summary.json")
    start = utc(summary.get("started")) or utc(params.get("created")) or id_time(folder.name)
    end = utc(summary.get("ended"))
    seconds = session_seconds(summary)
    if end is None and start is not None and seconds is not None and summary.get("verdict"):
        end = start + timedelta(seconds=seconds)
    said = summary.get("verdict") if summary.get("verdict") in ("pass", "fail", "stopped") else None
    stop = object_or_empty(folder / "stop.json") if said != "pass" else {}
    reason = stop.get("reason") if isinstance(stop.get("reason"), str) else None
    verdict = said or ("stopped" if stop else "open")
    if start is not None and end is not None and end >= start:
        return [Interval("train", folder.name, start, end, "summary.json started/ended", False,
                         variant, verdict,
                         reason)]
    found = _open("train", folder, start, last_metric_time(folder / "metrics.jsonl"))
    return [Interval(i.kind, i.name, i.start, i.end, i.source, True, variant, verdict, reason)
            for i in found]


def _sweep(folder: Path) -> list[Interval]:
    report = object_or_empty(folder / "sweep.json")
    end = _mtime(folder / "sweep.json")
    rows: list[Any] = report["rows"] if isinstance(report.get("rows"), list) else []
    spent = [_number(report.get("warmup_seconds"))] + [_number(r.get("seconds")) for r in rows
                                                       if isinstance(r, dict)]
    if end is None or not report:
        return []
    seconds = sum(s for s in spent if s is not None)
    return [Interval("sweep", folder.name, end - timedelta(seconds=seconds), end,
                     "sweep.json written, less its warm-up and cells' seconds")]


def _id_to_report(kind: str, folder: Path, report: str) -> list[Interval]:
    """A resume test or a serve test: the time in its ID to its report (else, open, to its newest
    file)."""
    start, end = id_time(folder.name), _mtime(folder / report)
    if start is not None and end is not None and end >= start:
        return [Interval(kind, folder.name, start, end, f"its ID's time to {report}")]
    return _open(kind, folder, start, None)


def read_folder(folder: Path) -> list[Interval]:
    """The intervals one runs/ folder records (none for a gathering or a folder of no kind)."""
    name = folder.name
    if name.startswith(ID_SHAPES["sweep"][0]):
        return _sweep(folder)
    if name.startswith(ID_SHAPES["resume-test"][0]):
        return _id_to_report("resume-test", folder, "report.json")
    if name.startswith(ID_SHAPES["serve-test"][0]):
        return _id_to_report("serve-test", folder, "serve-test.json")
    if name.endswith("-gathered") or not (folder / "params.json").is_file():
        return []
    params = object_or_empty(folder / "params.json")
    return _train(folder, params) if params.get("kind") == "train" else _pilot(folder, params)


def work_log(root: Path, runs: Path | None = None) -> WorkLog:
    """Every recorded piece of work of the project at ``root`` (runs under ``runs``, default
    ``root/runs``)."""
    log = read_builds(root)
    for folder in run_folders(runs if runs is not None else root / "runs"):
        if folder.is_symlink():
            continue  # a link is another folder's record: counted where it is, if under runs/
        found = read_folder(folder)
        log.intervals += found
        if not found and not folder.name.endswith("-gathered") and (
                (folder / "params.json").is_file() or folder.name.startswith(MEASURED)):
            log.unread.append(f"{folder}: no start or end time recorded; not counted")
    log.intervals.sort(key=lambda i: (i.start, i.end, i.name))
    return log


def work_intervals(root: Path, runs: Path | None = None) -> list[Interval]:
    """The intervals of :func:`work_log`, in time order."""
    return work_log(root, runs).intervals
