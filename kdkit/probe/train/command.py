"""Run the project's training loop as a run: supervised, stopped by declared rules, resumable, its
reload verified.

    kdkit train [--run-id ID] [--variant NAME] [--config config/train.json] [--copy-to DEST]
                [--json] [-- ARGS]
    kdkit train --resume RUN_ID [--copy-to DEST] [--json]
    kdkit train --verify-reload RUN_ID [--json]

Exit code: 0 the loop ended with code 0 and no stop rule fired; 1 it failed or a stop rule stopped
it; 2 bad input (config/train.json, an ID); 128+N a signal N stopped kdkit (the loop was stopped
first).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.core import checkpoints, trainapi
from kdkit.core.errors import BadInput
from kdkit.core.heartbeat import utc_now
from kdkit.core.jsonio import load_json, require_replaceable
from kdkit.core.parsers import add_json, command_parser
from kdkit.core.projectfiles import require_root
from kdkit.core.report import print_result
from kdkit.core.runfolder import PARAMS, STOP, SUMMARY
from kdkit.core.runid import RunId, run_id_type
from kdkit.core.stalestaging import clean_stale_in, describe_removed
from kdkit.core.trainconfig import TRAIN_CONFIG, load_train_config
from kdkit.probe.train import runfiles
from kdkit.probe.train.closing import close, verdict
from kdkit.probe.train.params import open_new, runs_dir
from kdkit.probe.train.reload import reload_argv, verify_reload
from kdkit.probe.train.runfiles import lock_run
from kdkit.probe.train.saving import save_policy, transfer
from kdkit.probe.train.supervise import Outcome, Supervisor, python_argv

if TYPE_CHECKING:
    from kdkit.probe.train.closing import TrainSummary
    from kdkit.probe.train.saving import SavePolicy

# a killed session's loop gets SIGKILL from the kernel (PR_SET_PDEATHSIG): moments
WAIT_FOR_DYING_S = 10.0

EPILOG = """\
Everything after `--` is handed to the loop (ARGS).
The loop (kdkit.json "train", default src.train; or config/train.json "module") runs as
`python -m MODULE ARGS` in its own process group, cwd the project root, with kdkit.core.trainapi importable:
trainapi.report(step, loss=..., ...) appends to metrics.jsonl (fsynced per line), trainapi.checkpoint(step)
writes checkpoints/step-NNNNNNNN atomically with its SHA256SUMS, trainapi.latest_checkpoint() is the
checkpoint a --resume continues from. A loop that uses none of it is still supervised: its output is kept in
output.log, its exit recorded in stop.json. Stop rules come from config/train.json "stop"; every stop writes
stop.json with the run ID and the reason. reload.json holds the command that reloads the final checkpoint
(`python -m MODULE --reload DIR`, exit 0 when it loads); --verify-reload runs it in a new process.
"""  # noqa: E501 (verbatim text, as printed)


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser("train", " ".join(__doc__.split("\n\n")[0].split()), EPILOG)
    parser.add_argument("--run-id", type=run_id_type("--run-id", new=True),
                        help="the new run's ID (default: train-<UTC time>-<hash>)")
    parser.add_argument("--resume", metavar="RUN_ID", type=run_id_type("--resume"),
                        help="continue that run from its newest complete checkpoint")
    parser.add_argument(
        "--variant", help="the campaign variant this run belongs to (params.json \"variant\")")
    parser.add_argument("--config",
                        default=TRAIN_CONFIG, help=f"the training config (default: {TRAIN_CONFIG})")
    parser.add_argument("--copy-to",
                        metavar="DEST", help="measure a checkpoint's transfer time to DEST")
    parser.add_argument("--verify-reload", metavar="RUN_ID", type=run_id_type("--verify-reload"),
                        help="run that run's reload command in a new process")
    add_json(parser)
    return parser


def child_env(folder: Path, resume: Path | None, log_every: int = 1) -> dict[str, str]:
    """The loop's environment: the run folder, its ID, the checkpoint to resume from, kdkit on
    PYTHONPATH."""
    # the folder (or kdkit.pyz) that holds the kdkit package
    home = str(Path(__file__).resolve().parents[3])
    env = {k: v for k, v in os.environ.items() if k != trainapi.RESUME_ENV}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (home, env.get("PYTHONPATH", "")) if p)
    env.update({trainapi.RUN_ENV: str(folder), trainapi.RUN_ID_ENV: folder.name,
                trainapi.LOG_EVERY_ENV: str(log_every)})
    if resume is not None:
        env[trainapi.RESUME_ENV] = str(resume)
    return env


def resume_point(folder: Path, read_to_end: bool) -> tuple[int, Path] | None:
    """The newest complete checkpoint no report was lost before; every checkpoint folder newer than
    it is removed (its steps run again), with a line on stderr.

    A session that closed (``read_to_end``: it wrote stop.json) read the loop's channel to its end.
    One that was killed may not have: the loop goes on saving while its reports wait unread in the
    pipe, and one may come at any step (a loss that is not finite is sent off ``log_every``'s
    schedule). A checkpoint is then kept when the session recorded it in checkpoints.jsonl (the
    loop reports a step before it saves it, on the one channel read in order) or when metrics.jsonl
    holds a report at its step or later."""
    parent = folder / runfiles.CHECKPOINTS
    reported = max((r["step"] for r in runfiles.read_lines(folder / runfiles.METRICS)
                    if isinstance(r.get("step"), int)), default=-1)
    listed = runfiles.listed_checkpoints(folder)
    passed: list[tuple[Path, str]] = []
    for step, path in reversed(checkpoints.checkpoint_folders(parent)):
        if not read_to_end and step > reported and path.name not in listed:
            passed.append((path, f"saved after step {reported}, the last report kdkit train read; "
                                 "its steps run again" if reported >= 0 else
                                 "saved while kdkit train had read no report; its steps run "
                                 "again"))
        elif checkpoints.problem(path) is not None:
            passed.append((path, "not a complete checkpoint"))
        else:
            break
    else:
        step, path = -1, parent
    for gone, why in passed:
        shutil.rmtree(gone)
        print(f"kdkit train: removed {gone.name} ({why})", file=sys.stderr)
    return (step, path) if step >= 0 else None


def reopen(runs: Path, run_id: RunId) -> tuple[Path, dict[str, Any], Path | None, int]:
    """Open a killed or stopped run again; returns with the run folder's lock held (its fd, for
    the session), so that a second ``--resume`` started at the same moment waits and is refused
    rather than cutting the same files beside this one."""
    folder = runs / run_id
    params = load_json(folder
                       / PARAMS, what="run parameters") if (folder / PARAMS).is_file() else None
    if not isinstance(params, dict) or params.get("kind") != runfiles.TRAIN:
        raise BadInput(f"{folder}: not a training run folder (no params.json of kind \"train\"); "
                       "give a run ID from `kdkit train`")
    if not isinstance(params.get("module"), str) or not isinstance(params.get("args"), list):
        raise BadInput(f"{folder / PARAMS}: not as kdkit train writes it (\"module\" a string, "
                       "\"args\" a list); start a new run with `kdkit train`")
    lock = lock_run(folder, WAIT_FOR_DYING_S)
    try:
        point = _reopen_locked(folder)
    except BaseException:
        os.close(lock)
        raise
    return folder, params, point, lock


def _reopen_locked(folder: Path) -> Path | None:
    """Under the run's lock: refuse a finished run, remove what a killed session left half-done,
    cut metrics.jsonl and checkpoints.jsonl back to the checkpoint resumed from (its path)."""
    summary = load_json(folder
                        / SUMMARY, what="run summary") if (folder / SUMMARY).is_file() else None
    if isinstance(summary, dict) and summary.get("verdict") == "pass":
        raise BadInput(f"{folder}: the run finished (summary.json: pass at step "
                       f"{summary.get('steps')}); nothing to resume: start a new run with `kdkit "
                       "train`")
    for name in (runfiles.METRICS, runfiles.CHECKPOINT_LOG):
        require_replaceable(folder / name)  # refused before anything in the folder changes
    for line in describe_removed(clean_stale_in(folder)):
        print(f"kdkit train: {line}", file=sys.stderr)
    read_to_end = (folder / STOP).is_file()
    for removed in runfiles.reopen(folder):
        print(f"kdkit train: removed {removed.name} (a checkpoint half-written when the run was "
              "killed)",
              file=sys.stderr)
    point = resume_point(folder, read_to_end)
    runfiles.cut_after(folder / runfiles.METRICS, point[0] if point else -1)
    with_log = runfiles.Appender(folder / runfiles.CHECKPOINT_LOG)
    try:
        runfiles.reconcile(folder, with_log)
    finally:
        with_log.close()
    runfiles.keep_listed(folder)
    return point[1] if point else None


def summarize(folder: Path, params: dict[str, Any], outcome: Outcome,
              started: str, cfg: Any) -> TrainSummary:
    final = checkpoints.newest_complete(folder / runfiles.CHECKPOINTS)
    stop = runfiles.write_stop(folder, folder.name, outcome.reason, outcome.detail, outcome.step,
                               returncode=outcome.returncode)
    steps = max([r["step"] for r in runfiles.read_lines(folder / runfiles.METRICS)
                 if isinstance(r.get("step"), int)],
                default=0)
    return {"run_id": folder.name, "kind": runfiles.TRAIN,
            "verdict": verdict(outcome.reason, outcome.returncode),
            "started": params.get("created"), "session_started": started, "ended": utc_now(),
            "timings": {"seconds": round(outcome.seconds, 3)}, "steps": steps,
            "exit_code": outcome.returncode,
            "stop": {k: stop[k] for k in ("reason", "detail", "step")},
            "metrics": {k: runfiles.finite_json(v) for k, v in outcome.metrics.items()},
            "final_checkpoint": final[1].name if final else None,
            "save": save_policy(cfg, outcome.saves, outcome.reports, outcome.seconds),
            "reload": None,
            "variant": params.get("variant")}


def train(args: argparse.Namespace) -> tuple[TrainSummary, int]:
    root = require_root()
    cfg = load_train_config(root / args.config)
    runs = runs_dir(root)
    if args.resume is not None and args.run_id is not None:
        raise BadInput("--run-id with --resume: a resumed run keeps its ID; give one of them")
    if args.resume is not None:
        folder, params, point, lock = reopen(runs, args.resume)
    else:
        folder, params, lock = open_new(root, runs, cfg, args.config, args.run_id,
                                        args.variant, args.loop_args)
        point = None
    try:  # the run is this command's from its opening to its last file: a --resume is refused
        return _session(args, root, cfg, (folder, params, point), lock)
    finally:
        os.close(lock)


def _session(args: argparse.Namespace, root: Path, cfg: Any,
             run: tuple[Path, dict[str, Any], Path | None], lock: int) -> tuple[TrainSummary, int]:
    """Run the loop under the run's lock (``lock``, which the loop inherits), then close the folder:
    stop.json, the final checkpoint's transfer, reload.json, the summary and SHA256SUMS."""
    folder, params, point = run
    module, started = str(params["module"]), utc_now()
    env = child_env(folder, point, cfg.log_every)
    sup = Supervisor(cfg, folder, python_argv(module, list(params["args"])), env, root,
                     time.time(), (lock,))
    outcome = sup.run()
    summary = summarize(folder, params, outcome, started, cfg)
    summary["resumed_from"] = point.name if point else None
    if args.copy_to and summary["final_checkpoint"]:
        summary["save"]["transfer"] = transfer(folder / runfiles.CHECKPOINTS
                                               / summary["final_checkpoint"],
                                               args.copy_to)
    reload = reload_argv(module, root, folder,
                         summary["final_checkpoint"]) if summary["final_checkpoint"] else None
    close(folder, summary, reload)
    code = 0 if summary["verdict"] == "pass" else 1
    return summary, 128 + outcome.signal if outcome.signal else code


def _save_line(save: SavePolicy) -> str:
    if not save.get("saves"):
        return (
            "save: no checkpoint was written (trainapi.checkpoint); a killed run restarts from "
            "step 0")
    every = save.get("recommended_every_steps")
    share = save.get("share")
    return (f"save: {save['saves']} checkpoint(s), median {save['seconds_median']:.3g} s each"
            + (f", {share:.1%} of the time" if isinstance(share, (int, float)) else "")
            + (f"; save every {every} steps to lose at most max_lost_minutes" if every is not None
               else
               "; set max_lost_minutes in config/train.json for a recommended save interval"))


def render(summary: TrainSummary) -> str:
    save = summary["save"]
    stop = summary["stop"]
    lines = [f"run {summary['run_id']}: {summary['verdict']} ({stop['reason']}: {stop['detail']})",
             f"steps {summary['steps']}, {summary['timings']['seconds']} s, final checkpoint "
             f"{summary['final_checkpoint'] or 'none'}",
             _save_line(save)]
    if save.get("warning"):
        lines.append(f"warning: {save['warning']}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    cut = argv.index("--") if "--" in argv else len(argv)  # what follows `--` is the loop's: ARGS
    args = build_parser().parse_args(argv[:cut])
    args.loop_args = argv[cut + 1:]
    if args.loop_args and args.resume:
        raise BadInput("--resume with -- ARGS: a resumed run keeps the arguments it was started "
                       "with (params.json \"args\"); start a new run to change them")
    if args.verify_reload:
        root = require_root()
        folder = runs_dir(root) / args.verify_reload
        record = verify_reload(root, folder, child_env(folder, None))
        print_result(
            args.json, record,
            f"reload {'OK' if record['ok'] else 'FAILED'}: {' '.join(record['argv'])}")
        return 0 if record["ok"] else 1
    summary, code = train(args)
    print_result(args.json, summary, lambda: render(summary))
    return code
