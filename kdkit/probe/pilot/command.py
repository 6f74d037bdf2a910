"""`kdkit pilot`: run the pilot documents through the app with exactly-once accounting.

The run gets its own folder under runs/ (ID = UTC time + a short hash of the
resolved parameters) holding params.json, env.json (the diagnose report),
results.jsonl (appended and fsynced per batch), summary.json, summary.md,
SHA256SUMS, and stop.json when it stopped early. ``--resume ID`` finishes a
stopped or killed run without redoing or duplicating any item; ``--copy-to``
copies the closed folder elsewhere and verifies the copy. Standard library only
(plus torch inside the app): it runs on a bare host and inside the container.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.core import runstrays
from kdkit.core.checksums import SUMS
from kdkit.core.errors import KdkitError
from kdkit.core.git import code_state
from kdkit.core.heartbeat import HEARTBEAT, Heartbeat
from kdkit.core.launchrecord import KEY as LAUNCH
from kdkit.core.launchrecord import launch_field, with_launch_revision
from kdkit.core.outputkinds import answer_bytes
from kdkit.core.pilotconfig import PilotConfig, load_pilot, params_hash
from kdkit.core.pilotmanifest import remaining
from kdkit.core.projectfiles import load_object, project_root
from kdkit.core.report import print_result
from kdkit.core.resultlines import Scan
from kdkit.core.runfolder import (
    ENV,
    LAUNCHER,
    PARAMS,
    PARAMS_HASH,
    PILOT,
    SUMMARY,
    SUMMARY_MD,
    claim,
    new_run_id,
)
from kdkit.core.runid import RunId
from kdkit.core.runresults import RunFolder
from kdkit.core.safetext import printable
from kdkit.core.stalestaging import clean_stale_in, describe_removed
from kdkit.probe.diagnose.host import hardware_hints
from kdkit.probe.pilot import filekind, harness
from kdkit.probe.pilot.accounting import Tally
from kdkit.probe.pilot.closing import Session, close_run, failure_stop, stopped_by_full_disk
from kdkit.probe.pilot.fanout import run_node
from kdkit.probe.pilot.inputs import Reading
from kdkit.probe.pilot.launch import continuing, place
from kdkit.probe.pilot.launchers import Placement
from kdkit.probe.pilot.options import build_parser
from kdkit.probe.pilot.origin import app_record, check_resume, is_finished
from kdkit.probe.pilot.replies import reply_limit
from kdkit.probe.pilot.report import APP_CODE
from kdkit.probe.pilot.shares import (
    Share,
    check_resumed_share,
    folder_name,
    restrict,
    share_fields,
)
from kdkit.probe.pilot.stopguard import StopGuard, StopRequested
from kdkit.probe.pilot.supervisor import AppProcess
from kdkit.probe.results.copyout import copy_run

PROBLEMS_SHOWN = 20
IN_FLIGHT_SHOWN = 100  # IDs of the batch in flight named in stop.json

if TYPE_CHECKING:
    from typing import NotRequired, TypedDict

    class CopyResult(TypedDict):
        """--copy-to's copy: where it lies, whether it verified, and why not."""

        path: str | None
        verified: bool
        error: NotRequired[str]

    class CopyField(TypedDict, total=False):
        """What the printed result adds for --copy-to (nothing without it)."""

        copy: CopyResult


class Progress:
    """One line on stderr per second at most: a long run shows it is alive without flooding the
    log."""

    def __init__(self, total: int, enabled: bool, heartbeat: Heartbeat | None = None) -> None:
        self.total, self.enabled, self.last, self.heartbeat = total, enabled, 0.0, heartbeat

    def __call__(self, done: int, rejected: int, force: bool = False,
                 records: list[dict[str, Any]] | None = None) -> None:
        # <run>/heartbeat.json, at most once a second (kdkit status reads it)
        if self.heartbeat is not None:
            errors = [r.get("reason") for r in records or () if r.get("outcome") == "rejected"]
            self.heartbeat.beat(done, rejected,
                                last_error=str(errors[-1]) if errors else None, force=force)
        now = time.monotonic()
        if self.enabled and (force or now - self.last >= 1.0):
            self.last = now
            print(f"pilot: {done}/{self.total} IDs done, {rejected} rejected",
                  file=sys.stderr, flush=True)


# ---------------------------------------------------------------- opening the run


def open_run(cfg: PilotConfig, run_id: RunId | None, resume: RunId | None, argv: list[str],
             share: Share | None = None,
             placed: Placement | None = None) -> tuple[RunFolder, bool | None]:
    """A new run folder with its params.json (naming the launcher, if any), or the one to resume
    (same parameters and share only); (run, None): a restarted worker's folder was finished
    meanwhile, to be only reported."""
    params = cfg.resolved()
    digest = params_hash(params)
    if resume is not None:
        return _resumed(cfg, resume, digest, share, placed)
    # what `kdkit run` started (KDKIT_LAUNCH), outside the hashed params
    launch = launch_field(os.environ)
    # before the run folder exists, so
    code = with_launch_revision(code_state(cfg.root), launch.get(LAUNCH))
    # it cannot make the tree look dirty
    app = app_record(cfg.root, cfg.entry)
    # a killed pilot's run folder
    for line in describe_removed(clean_stale_in(cfg.runs_dir, folders_only=True)):
        print(f"pilot: {line}", file=sys.stderr)
    record = {
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "project_root": str(cfg.root),
        "params": params,
        PARAMS_HASH: digest,
        "code": code,
        "app": app,
        **launch,
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "command": ["kdkit", "pilot", *argv],
        **share_fields(share),
        **({LAUNCHER: placed.record()} if placed is not None and (placed.launched or placed.read)
           else {}),
    }
    if run_id:
        return RunFolder.create(cfg.runs_dir, folder_name(run_id, share), record), False
    return claim(new_run_id(PILOT, digest),
                 lambda free: RunFolder.make(cfg.runs_dir / folder_name(free, share),
                                               record)), False


def _resumed(cfg: PilotConfig, resume: RunId, digest: str, share: Share | None,
             placed: Placement | None) -> tuple[RunFolder, bool | None]:
    """The run folder ``resume`` names, taken over once its parameters and share are checked;
    (run, None): a restarted worker's folder was finished meanwhile, to be only reported."""
    run = RunFolder.existing(cfg.runs_dir, folder_name(resume, share))
    run.own()  # a folder another pilot writes right now is never resumed under it
    try:
        recorded_params = load_object(run.path / PARAMS, "run parameters")
        check_resumed_share(recorded_params, share, run.path / PARAMS)
        restarted = placed is not None and placed.launched
        check_resume(cfg, run, recorded_params, digest, restarted=restarted, finished_ok=restarted)
        if restarted and is_finished(run):
            run.disown()
            return run, None
        for line in describe_removed(clean_stale_in(run.path)):
            print(f"pilot: {line}", file=sys.stderr)
        _reopen(run)
        run.take_over()
    except BaseException:
        run.disown()
        raise
    return run, True


def _reopen(run: RunFolder) -> None:
    """A resumed run is open again: its closing files go, earlier stop and env reports are kept by
    number."""
    # a killed session's heartbeat: this one writes its own
    for name in (SUMS, SUMMARY, SUMMARY_MD, HEARTBEAT):
        (run.path / name).unlink(missing_ok=True)
    for stem in ("stop", "env"):  # STOP and ENV, kept as stop-1.json, env-1.json...
        if (run.path / f"{stem}.json").exists():
            os.replace(run.path / f"{stem}.json", run.path / run.numbered(stem, ".json"))


# ---------------------------------------------------------------- running


def expect_for(device: str) -> str:
    """What diagnose must prove for the configured device."""
    if device == "cpu" or device == "auto":
        return device
    return "rocm" if hardware_hints() == ["amd"] else "cuda"


def diagnose_blocks(report: dict[str, Any]) -> str | None:
    """Why the app must not run after this diagnose report, or None.

    A CPU pilot goes on without torch: the app may not need it (and one that does
    fails on its own, item by item, with the reason recorded).
    """
    failure = report.get("first_failure")
    if not failure or (failure["step"] == "torch import" and report.get("expected") == "cpu"):
        return None
    return f"diagnose failed at step {failure['step']}: {failure['detail']} (fix: {failure['fix']})"


def execute(cfg: PilotConfig, run: RunFolder, session: Session, progress: Progress) -> None:
    """Diagnose, then the batches, both in the app's own process; any stop is recorded in
    ``session``, never raised."""
    try:
        run.reserve_stop()  # stop.json's room, so that a full disk can still be told
        with AppProcess(cfg.max_batch_seconds, cfg.batch_size) as app:
            started = time.perf_counter()
            try:
                report = app.diagnose(expect_for(cfg.device), cfg.root)
            finally:
                session.diagnose_seconds = time.perf_counter() - started
            run.write_json(ENV, report)
            if (blocked := diagnose_blocks(report)) is not None:
                raise StopRequested(blocked, "diagnose")
            app.load(cfg.root, cfg.entry, cfg.device, cfg.params)
            scan = run.scan()
            session.dropped_lines = scan.dropped_lines
            with StopGuard(cfg.max_seconds).installed() as guard:
                _loop(cfg, run, session, scan, app, guard, progress)
            run.close()  # the last batch's fsync: its failure is an error of this run
            session.peak = app.peak_memory()
    except StopRequested as stop:
        session.stop = {"reason": stop.reason, "rule": stop.rule, **stop.details}
        session.exit_code = stop.exit_code
    except KeyboardInterrupt:
        session.stop, session.exit_code = {
            "reason": "interrupted (Ctrl-C)", "rule": "interrupt"}, 130
    # the app's code must change: a resume would refuse it (the code is the run's)
    except harness.EntryError as exc:
        session.stop, session.exit_code = {"reason": f"error: {exc}", "rule": APP_CODE}, 1
    except KdkitError as exc:
        session.stop, session.exit_code = {"reason": f"error: {exc}", "rule": "error"}, 1
    # the harness's own failure (a full disk: disk-full) still closes the run folder
    except Exception as exc:
        session.stop, session.exit_code = failure_stop(exc)
    finally:
        with contextlib.suppress(OSError):
            run.close()
    if session.stop is not None:
        session.stop["at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")


def _loop(cfg: PilotConfig, run: RunFolder, session: Session, scan: Scan, app: AppProcess,
          guard: StopGuard, progress: Progress) -> None:
    # a JSONL corpus's stay compact (pilotmanifest)
    pending = remaining(cfg.documents, scan.finished)
    done, rejected = len(cfg.documents) - len(pending), scan.rejected
    source = harness.batches(pending, cfg.batch_size, Reading.of(cfg), scan.next_batch)
    session.tally = tally = Tally(cfg.documents)
    if progress.heartbeat is not None:
        progress.heartbeat.rebase(done, rejected)
    with harness.prefetching(source) as ahead:
        for number, items, rejections in ahead:
            guard.check()
            records = rejections + _app_records(cfg, session, app, guard, number, items, run.path)
            run.append(records)
            # right after the write: the tally and the file's bytes hold the same batches
            tally.add(records)
            session.batches += 1
            session.items += len(items) + len(rejections)
            done += len(items) + len(rejections)
            rejected += sum(r["outcome"] == "rejected" for r in records)
            progress(done, rejected, records=records)
            if cfg.max_rejected is not None and rejected > cfg.max_rejected:
                raise StopRequested(f"stop rule: {rejected} inputs rejected, more than "
                                    f"max_rejected {cfg.max_rejected}", "max_rejected")
    progress(done, rejected, force=True)


def _app_records(cfg: PilotConfig, session: Session, app: AppProcess, guard: StopGuard, number: int,
                 items: list[harness.Item], run: Path) -> list[dict[str, Any]]:
    """The app's records for one batch, timed; a stop arriving meanwhile interrupts the app, and
    stop.json names the batch and the IDs the app held."""
    if not items:
        return []
    started = time.perf_counter()
    # room for a long text or vector
    app.reply_limit = reply_limit(cfg.batch_size, answer_bytes(cfg.output))
    try:
        with guard.app_running():
            if cfg.output.kind != "file":
                return harness.run_batch(app, items, cfg.output, number)
            records = harness.run_batch(filekind.staged_call(app, run, session.staged), items,
                                        cfg.output, number)
            # out_dirs checked, hashed: to be kept
            kept = filekind.judged(run, records, cfg.output.max_bytes)
            session.staged.clear()  # judged: none of the batch's folders is in flight any more
            return kept
    except StopRequested as stop:
        held = app.in_flight if app.in_flight is not None else [item.doc.id for item in items]
        stop.details.setdefault("in_flight", {"batch": number, "ids": held[:IN_FLIGHT_SHOWN],
                                              "count": len(held)})
        raise
    finally:
        session.app_seconds += time.perf_counter() - started


# ---------------------------------------------------------------- command line


def render_text(summary: dict[str, Any], run: RunFolder) -> str:
    quality = "undefined" if summary["quality"] is None else f"{summary['quality']:.3f}"
    lines = [f"Run {run.path}" + (" (resumed)" if summary["resumed"] else ""),
             f"  {summary['total']} IDs: accepted {summary['accepted']}, rejected "
             f"{summary['rejected']}; quality {quality} (min {summary['min_quality']:g})"]
    problems = summary["problems"]
    # one line each, whatever the app said
    lines += [f"  - {printable(p)}" for p in problems[:PROBLEMS_SHOWN]]
    if len(problems) > PROBLEMS_SHOWN:
        lines.append(f"  ... {len(problems) - PROBLEMS_SHOWN} more in summary.json")
    lines.append("PASS: every ID exactly once, expectations met" if summary["verdict"] == "pass"
                 else f"FAIL: {len(problems)} problem(s); details in {run.path / 'summary.md'}")
    return "\n".join(lines)


def _copy(run: RunFolder, dest: str | None) -> tuple[CopyField, KdkitError | None]:
    """--copy-to: the copy verified where it lies (local, SSH or rclone:
    kdkit.probe.results.copyout), or the error to raise once the summary is printed."""
    if dest is None:
        return {}, None
    try:
        return {"copy": {"path": str(copy_run(run.path, dest)), "verified": True}}, None
    except KdkitError as exc:
        return {"copy": {"path": None, "verified": False, "error": str(exc)}}, exc


def _finished(run: RunFolder, as_json: bool) -> int:
    """A worker its launcher started again after it had finished: its summary as it is, its
    verdict's exit code."""
    summary = load_object(run.path / SUMMARY, "run summary")
    print_result(as_json, {"run_dir": str(run.path), **summary},
                 lambda: render_text(summary, run), ascii_only=False)
    return 0 if summary.get("verdict") == "pass" else 1


def main(argv: list[str]) -> int:
    # IDs are data, checked by the parser before they name any path (kdkit.core.runid.run_id_type)
    args = build_parser().parse_args(argv)
    # quality.scorer: exit 2 here
    cfg = harness.with_scorer(load_pilot(project_root(args.project_dir), args.config))
    placed = place(cfg, args.worker, args.workers, named=bool(args.run_id or args.resume))
    if placed.node_shares:  # a node's one process: one worker per GPU (kdkit.probe.pilot.fanout)
        return run_node(argv, placed, args.json)
    share, resume = placed.share, args.resume
    cfg = restrict(cfg, share)
    run_id = None if resume is not None else (args.run_id or placed.run_id)
    if placed.launched and run_id is not None:
        resume, done = continuing(cfg, run_id, share, placed)
        if done is not None:
            return _finished(done, args.json)
    # what is beside the run before it opens (closing.strays)
    runs_before = runstrays.snapshot(cfg.runs_dir)
    run, resumed = open_run(cfg, None if resume else run_id, resume, argv, share, placed)
    if resumed is None:
        return _finished(run, args.json)
    session = Session(resumed=resumed, runs_before=runs_before)
    beat = Heartbeat(run.path, run.run_id, len(cfg.documents), cfg.max_rejected, cfg.max_seconds)
    try:  # the run folder is this session's until its summary and SHA256SUMS are written and copied
        beat.beat(0, 0, force=True)
        execute(cfg, run, session,
                Progress(len(cfg.documents), enabled=not (args.quiet or args.json), heartbeat=beat))
        # open runs only: the closed folder's truth is its summary (kdkit.core.heartbeat)
        beat.remove()
        summary = close_run(cfg, run, session)
        copy, copy_error = _copy(run, args.copy_to)
    finally:
        run.disown()
    copied = (f"\nCopied to {copy['copy']['path']}, verified against SHA256SUMS"
              if copy.get("copy", {}).get("verified") else "")
    print_result(args.json, {"run_dir": str(run.path), **summary, **copy},
                 lambda: render_text(summary, run) + copied,
                 ascii_only=False)
    if copy_error is not None:
        raise copy_error
    if (full := stopped_by_full_disk(run, session)) is not None:
        raise full
    if session.exit_code:
        return session.exit_code
    return 0 if summary["verdict"] == "pass" else 1
