"""Closing a pilot session's run folder: stop.json first (the smallest, written into the room set
aside for it), then summary.json, summary.md and, last, SHA256SUMS; and what a full disk does to
that.

A full disk (ENOSPC, a quota) while the run goes on is the stop rule ``disk-full``: the batch being
written is taken back from results.jsonl and redone on resume. A full disk while the folder closes
takes back the closing files already written (no summary of an open folder), leaves stop.json saying
where the run stopped, and ends the pilot with one line, exit 2, as every full disk does; once space
is freed, ``--resume`` finishes the run exactly once.
"""

from __future__ import annotations

import contextlib
import os
import resource
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kdkit.core import outputfiles
from kdkit.core.checksums import SUMS
from kdkit.core.errors import BadInput, KdkitError
from kdkit.core.pilotconfig import PilotConfig
from kdkit.core.runfolder import (
    BYTES,
    DEVICE,
    ENV,
    FILES,
    PEAK,
    SECONDS,
    SUMMARY,
    SUMMARY_MD,
    TIMINGS,
)
from kdkit.core.runresults import RESERVED, RunFolder, disk_full
from kdkit.core.runstrays import Snapshot, strays
from kdkit.core.stalestaging import staged_name
from kdkit.core.vectorfile import model_reference
from kdkit.probe.pilot.accounting import Accounting, Tally, account
from kdkit.probe.pilot.report import resume_options, summary_data, summary_markdown

DISK_FULL = "disk-full"  # the stop rule of a write refused for want of space
DISK_FULL_EXIT = 2  # as every full disk is (README, "What kdkit guarantees")


@dataclass
class Session:
    """This invocation's share of the run: timings and the stop, if any."""

    resumed: bool
    started: float = field(default_factory=time.perf_counter)
    diagnose_seconds: float = 0.0
    app_seconds: float = 0.0
    batches: int = 0
    items: int = 0
    dropped_lines: int = 0
    stop: dict[str, Any] | None = None
    exit_code: int = 0
    tally: Tally | None = None  # the records this session appended, counted as they were written
    peak: dict[str, Any] | None = None  # the app process's own memory report
    runs_before: Snapshot | None = None  # the runs folder's top-level entries before the run opened
    # file kind: out_dir folders of the batch not yet judged
    staged: set[str] = field(default_factory=set)

    def timings(self) -> dict[str, int | float | None]:
        total = time.perf_counter() - self.started
        return {
            SECONDS: round(total, 4),
            "diagnose_seconds": round(self.diagnose_seconds, 4),
            "app_seconds": round(self.app_seconds, 4),
            "harness_seconds": round(total - self.diagnose_seconds - self.app_seconds, 4),
            "batches": self.batches,
            "items": self.items,
            "items_per_second": round(self.items / total, 2) if total > 0 else None,
        }


# ---------------------------------------------------------------- a full disk


def _written(exc: OSError) -> str:
    """The run folder's file a refused write was for (a staging copy named as its final name)."""
    if exc.filename is None:
        return "a file of the run folder"
    name = Path(os.fsdecode(exc.filename)).name
    if name.endswith(RESERVED):
        return "the room set aside for stop.json, before the app started"
    return staged_name(name) or name


def failure_stop(exc: Exception) -> tuple[dict[str, str], int]:
    """stop.json's record and the exit code of the harness's own failure: a full disk, or an
    error."""
    if isinstance(exc, OSError) and disk_full(exc):
        return {"reason": f"the disk is full ({exc.strerror or exc} writing {_written(exc)}); free "
                          "space there",
                "rule": DISK_FULL}, DISK_FULL_EXIT
    return {"reason": f"error: {type(exc).__name__}: {exc}", "rule": "error"}, 1


def stopped_by_full_disk(run: RunFolder, session: Session) -> BadInput | None:
    """The one line a run stopped by a full disk ends with (its summary written), or None."""
    if session.stop is None or session.stop.get("rule") != DISK_FULL:
        return None
    return BadInput(f"{run.path}: stopped: {session.stop['reason']}; then finish the run with "
                    f"kdkit pilot {resume_options(run.run_id)}")


def _closing_failed(run: RunFolder, session: Session, exc: OSError, stop_written: bool) -> BadInput:
    """Take back the closing files written so far, make sure stop.json says where the run
    stopped."""
    for name in (SUMS, SUMMARY_MD, SUMMARY):
        with contextlib.suppress(OSError):
            (run.path / name).unlink(missing_ok=True)
    if not stop_written:
        stop = session.stop or {**failure_stop(exc)[0],
                                "at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        try:
            run.write_stop(stop)
            stop_written = True
        except OSError:
            pass
    said = ("stop.json says where the run stopped" if stop_written
            else "not even stop.json could be written")
    return BadInput(f"{run.path}: the disk is full ({exc.strerror or exc} writing "
                    f"{_written(exc)}); {said}: free space, then finish the run with kdkit pilot "
                    f"{resume_options(run.run_id)}")


# ---------------------------------------------------------------- closing


def peak_memory(session: Session, device: str) -> dict[str, Any]:
    """What the app's process measured (torch's peak GPU allocation, or its peak RSS); when it
    could no longer say (it was stopped or died), the peak RSS of the processes this one waited
    for."""
    if session.peak is not None:
        return session.peak
    return {DEVICE: device, "kind": "peak RSS of the app process (ru_maxrss of waited children)",
            BYTES: resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024}


def beside(cfg: PilotConfig, run: RunFolder, session: Session) -> list[str]:
    """What was written where no run keeps it during this session, each a problem of the run: a file
    kind's entry in outputs.staging/ that is no item in flight's folder (written outside its
    out_dir, removed at close with the folder), and a top-level entry of the runs folder that no
    kdkit command made (kdkit.core.runstrays)."""
    problems = outputfiles.staging_strays(run.path, session.staged)
    if session.runs_before is not None:
        problems += strays(cfg.runs_dir, session.runs_before, run.path.name, cfg.root)
    return problems


def judged(cfg: PilotConfig, run: RunFolder, session: Session,
           stray: list[str] | None = None) -> Accounting:
    """The run's accounting, never of anything but what the harness wrote.

    When results.jsonl is byte for byte what it must be (SHA-256 of the file against the running
    hash of the kept prefix and every append), a fresh run is judged from the records counted as
    they were written, a resumed one from the file. When it is not (something else wrote into the
    run folder while it was open), the file is judged as it is, so whatever was changed is named,
    and the run folder's integrity problems (RunFolder.integrity_problems) fail the run whatever
    the file says: a results file the harness did not write can never pass.
    """
    intact = run.holds_only_appended()
    if intact and session.tally is not None and not session.resumed:
        accounting = session.tally.judge(cfg.min_quality, cfg.output)
    else:
        try:
            accounting = account(cfg.documents, run.records(), cfg.min_quality, cfg.output)
        # unreadable: judge what this session appended, the run fails anyway
        except (KdkitError, OSError):
            accounting = (session.tally or Tally(cfg.documents)).judge(cfg.min_quality, cfg.output)
    accounting.problems.extend(run.integrity_problems(intact))
    accounting.problems.extend(stray or [])
    return accounting


def close_run(cfg: PilotConfig, run: RunFolder, session: Session) -> dict[str, Any]:
    """Write stop.json (if stopped), summary.json, summary.md and, last, SHA256SUMS; on a full disk,
    the one-line BadInput of _closing_failed once stop.json says where the run stopped."""
    stop_written = False
    try:
        if session.stop is not None:
            run.write_stop(session.stop)  # first: the smallest, into its own room
            stop_written = True
        if not (run.path / ENV).exists():  # the diagnose itself did not come back: say so there
            run.write_json(ENV,
                           {"command": "diagnose", "verdict": "fail", "steps": [],
                            "first_failure": {
                "step": "(the app's process)",
                "detail": (session.stop or {}).get("reason", "no report"),
                "fix": "see stop.json"}})
        stray = beside(cfg, run, session)  # before the staging folder goes
        # the file kind: outputs/ as the complete lines name it, the staging folder gone
        run.finish_outputs()
        # vectors.npy's final
        run.finish_vectors(model_reference(cfg.model.record if cfg.model else None))
        # header, its ID list with the model's reference; what does not add up fails the run
        accounting = judged(cfg, run, session, stray)
        summary = summary_data(run.run_id, cfg, accounting, session.stop, {
            "resumed": session.resumed,
            "lines_dropped_on_resume": session.dropped_lines,
            TIMINGS: session.timings(),
            PEAK: peak_memory(session, cfg.device),
        })
        summary[FILES] = sorted({*run.files_listed(), SUMMARY, SUMMARY_MD, SUMS})
        run.write_json(SUMMARY, summary)
        run.write_text(SUMMARY_MD, summary_markdown(summary, cfg, accounting))
        run.write_sums()
    except OSError as exc:
        if not disk_full(exc):
            raise
        raise _closing_failed(run, session, exc, stop_written) from None
    return summary
