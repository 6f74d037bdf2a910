"""Prove that a training loop resumes exactly from a checkpoint, in a new process.

Runs the project's train module (its contract: ``python -m MODULE --steps N --checkpoint PATH
[--resume PATH] [--metrics PATH] [--device D]`` from the project root, see the template's
``src/train.py``) four times, each a fresh interpreter. PATH is the checkpoint the loop writes: a
folder in the Hugging Face Trainer layout (the template's) or a single file (an older loop's);
states.py reads both:

  full     N steps uninterrupted                     -> the reference losses and final state
  save     K steps, then the checkpoint              -> what a crash at step K leaves behind
  restore  resume from it with --steps K (no step)   -> the state right after a restore
  resume   resume from it to N                       -> must match ``full``

With ``--nproc-per-node N`` each phase runs under torchrun instead: N processes of the loop in DDP
(see launch.py), rank 0 writing the checkpoint and the metrics; the verdict is the same.

Comparing ``restore`` with the checkpoint names what the loop forgets to put back; the keys of the
checkpoint name what it forgets to save; ``resume`` against ``full`` is the verdict. On a CPU
losses and final weights must be identical; on a GPU floats may differ by the stated tolerance.

Standard library only, plus torch (imported lazily) to read the checkpoints: the same command is
``kdkit resume-test`` on the host, ``python -m kdkit.probe resume-test`` inside the image or on a
bare host, and ``python3 kdkit.pyz resume-test`` from the bundle's zipapp.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.core.errors import BadInput, CheckFailed, Unavailable
from kdkit.core.jsonio import atomic_write_json
from kdkit.core.parsers import add_json, command_parser
from kdkit.core.pilotconfig import check_device
from kdkit.core.proc import Completed, run
from kdkit.core.projectfiles import project_root
from kdkit.core.runfolder import new_run_folder, new_run_id
from kdkit.core.staging import make_folder, require_writable
from kdkit.probe.measure.launch import check_launch, launcher, worker_output
from kdkit.probe.measure.options import (
    Count,
    add_project,
    parse,
    require_gpu,
    runs_dir,
    say,
    seconds_text,
    show,
    text_table,
    train_module,
)
from kdkit.probe.measure.states import (
    GPU_ATOL,
    GPU_RTOL,
    by_component,
    differences,
    first_divergence,
    load_state,
    missing_parts,
    state_bytes,
)
from kdkit.probe.measure.torchimport import quiet_env

if TYPE_CHECKING:
    from kdkit.core.report import Progress
    from kdkit.probe.measure.records import ResumeReport

PHASES = ("full", "save", "restore", "resume")
WHAT = "folder for the test"
MAX_PATHS = 3  # differing paths quoted per component



@dataclass(frozen=True)
class Plan:
    """What one resume test runs: where, which module, with which interpreter."""

    root: Path
    module: str
    steps: int
    save_at: int
    out: Path
    python: str = sys.executable
    device: str = "auto"
    timeout: float | None = None
    # set: ``out`` is the default folder, made in ``runs`` by the one rule once checked
    runs: Path | None = None
    nproc: int | None = None  # set: each phase runs under torchrun with this many processes

    def check(self) -> None:
        """Refuse an impossible plan before anything runs or is written."""
        if self.steps < 2:
            raise BadInput(
                f"--steps {self.steps}: need at least 2 steps so a resume can happen in between")
        if not 1 <= self.save_at < self.steps:
            raise BadInput(
                f"--save-at {self.save_at}: must be between 1 and --steps - 1 ({self.steps - 1})")
        if not self.root.is_dir():
            raise BadInput(f"{self.root}: project folder not found")
        base = self.root.joinpath(*self.module.split("."))
        if not (base.with_suffix(".py").is_file() or (base / "__main__.py").is_file()):
            raise BadInput(f"{base}.py: train module {self.module!r} not found; write it (see the "
                           "template's src/train.py) or pass --module")
        check_device(self.device)
        # this one runs: it exists
        if self.python != sys.executable and not _runs_python(self.python):
            raise BadInput(f"--python {self.python}: not an executable interpreter; give the one "
                           "that has the project's torch (default: this one)")
        if self.nproc is not None:
            check_launch(self.python, self.nproc, self.device)
        elif self.device.startswith("cuda"):
            require_gpu(self.device, _gpus_seen_by(self.python))
        require_writable(self.out, WHAT)


def _runs_python(python: str) -> bool:
    """Whether ``python`` starts as a Python interpreter (a file that merely exists may not run at
    all)."""
    if shutil.which(python) is None:
        return False
    try:
        done = run([python, "-c", "import sys; print(sys.hexversion)"], timeout=60)
    except (OSError, Unavailable):  # exec format error, permission denied, no answer
        return False
    return done.ok and done.stdout.strip().isdigit()  # /bin/true runs too, and says nothing


def _gpus_seen_by(python: str) -> int:
    """How many GPUs torch sees in ``python`` (0 without torch or a GPU): the loop's interpreter,
    not ours."""
    probe = "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"
    done = run([python, "-c", probe], timeout=300, extra_env=quiet_env())
    lines = done.stdout.strip().splitlines()
    return int(lines[-1]) if done.ok and lines and lines[-1].isdigit() else 0


# ---------------------------------------------------------------- running the phases


def _phase_args(plan: Plan, phase: str) -> tuple[list[str], Path]:
    folder = plan.out / phase
    # a folder (the template's) or a file (an older loop's)
    checkpoint = plan.out / "save" / "checkpoint"
    steps = {"full": plan.steps, "save": plan.save_at, "restore": plan.save_at,
             "resume": plan.steps}[phase]
    target = checkpoint if phase == "save" else folder / "state"
    args = [*launcher(plan.python, plan.nproc, plan.module, folder / "workers"), "--steps",
            str(steps),
            "--checkpoint", str(target), "--metrics", str(folder / "metrics.json"),
            "--device", plan.device]
    if phase in ("restore", "resume"):
        args += ["--resume", str(checkpoint)]
    return args, target


def phase_env(given: Mapping[str, str] | None = None) -> dict[str, str]:
    """What each phase's interpreter is given toward two runs of the same steps agreeing bit for
    bit. cuBLAS needs a fixed workspace to be deterministic (harmless elsewhere). On a CPU, MKL and
    OpenMP may use fewer threads than asked when they see fit, and a GEMM split over another number
    of threads rounds differently; oneMKL's reproducibility conditions ask for MKL_DYNAMIC and
    OMP_DYNAMIC set to FALSE (a condition, not a proof: a loaded 2-core machine still saw, rarely,
    a CPU run's last step differ after it was set; docs/evidence/cpu-threaded-math.md shows that
    machine's threaded MKL math differing between processes):
    https://www.intel.com/content/www/us/en/docs/onemkl/developer-reference-c/2026-0/reproducibility-conditions.html
    A value the user set for either in ``given`` (the environment) is theirs and kept."""
    env = os.environ if given is None else given
    fixed = {name: env.get(name, "FALSE") for name in ("MKL_DYNAMIC", "OMP_DYNAMIC")}
    return {"CUBLAS_WORKSPACE_CONFIG": ":4096:8", **fixed, **quiet_env()}


def failure_line(done: Completed) -> str:
    """A Python traceback's last line is its cause; otherwise the first line mentioning an error."""
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    if lines and any(line.startswith("Traceback (most recent call last)") for line in lines):
        return lines[-1]
    return done.first_error_line()


def _run_phase(plan: Plan, phase: str) -> tuple[Path, dict[str, Any]]:
    """Run one phase in a new interpreter; a failure names the phase and its first error line."""
    args, state = _phase_args(plan, phase)
    (plan.out / phase).mkdir(parents=True, exist_ok=True)
    done = run(args, cwd=plan.root, timeout=plan.timeout, extra_env=phase_env())
    log = plan.out / phase / "output.log"
    log.write_text(f"$ {' '.join(args)}\n{done.stdout}{done.stderr}", encoding="utf-8")
    if not done.ok:
        cause = failure_line(done if plan.nproc is None else worker_output(done))
        raise CheckFailed(f"{plan.module} ({phase} phase, exit {done.returncode}): {cause} "
                          f"(full output: {log})")
    metrics_path = plan.out / phase / "metrics.json"
    if not state.exists() or not metrics_path.is_file():
        missing = state if not state.exists() else metrics_path
        raise CheckFailed(f"{missing}: the {phase} phase wrote no such file; the train module must "
                          "honour --checkpoint and --metrics")
    metrics: dict[str, Any] = json.loads(metrics_path.read_text(encoding="utf-8"))
    if plan.nproc is not None and metrics.get("processes") != plan.nproc:
        # A loop that ignores torchrun runs N identical copies: they agree, and prove nothing about
        # DDP.
        raise CheckFailed(f"{metrics_path}: \"processes\" is {metrics.get('processes')!r}, not "
                          f"{plan.nproc}: the loop did not run as one job of {plan.nproc} "
                          "processes; it must join torchrun's group and write \"processes\" in its "
                          "metrics (see the template's src/train.py)")
    return state, metrics


# ---------------------------------------------------------------- the test


def _summarize(grouped: dict[str, list[str]]) -> dict[str, list[str]]:
    return {name: paths[:MAX_PATHS] for name, paths in grouped.items()}


def verdict_line(report: ResumeReport) -> str:
    """One line naming what breaks the resume, or saying it is exact."""
    where: str | int | None  # how it ran (text), then the first divergent step
    if report["ok"]:
        how = "identical" if report["tolerance"] is None else f"within {report['tolerance']}"
        nproc = report.get("nproc_per_node")
        where = "a new process" if nproc is None else f"{nproc} new processes under torchrun"
        return (f"resume from step {report['save_at']} reproduces steps "
                f"{report['save_at']}..{report['steps']} in {where} ({how})")
    causes = []
    if report["missing"]:
        causes.append("the checkpoint lacks " + ", ".join(report["missing"]))
    if report["not_restored"]:
        causes.append("not restored after loading: " + ", ".join(report["not_restored"]))
    if not causes and report["final_differences"]:
        causes.append("final state differs in " + ", ".join(report["final_differences"]))
    where = report["first_divergent_step"]
    start = f"losses differ from step {where}" if where is not None else "losses match"
    return f"resume is not exact: {start}; " + "; ".join(causes or ["no state difference found"])


def run_resume_test(plan: Plan, progress: Progress | None = None) -> ResumeReport:
    """Run the four phases and compare them; return the report (also written to OUT/report.json)."""
    plan.check()
    if plan.runs is not None:
        plan = replace(plan, out=new_run_folder(plan.runs, "resume-test", WHAT))
    else:
        make_folder(plan.out, WHAT)
    say = progress or (lambda _message: None)
    states: dict[str, Path] = {}
    metrics: dict[str, dict[str, Any]] = {}
    for phase in PHASES:
        how = "python -m" if plan.nproc is None else f"torchrun --nproc-per-node {plan.nproc} -m"
        say(f"{phase}: {how} {plan.module} ({PHASES.index(phase) + 1}/{len(PHASES)})")
        states[phase], metrics[phase] = _run_phase(plan, phase)
    report = compare(plan, states, metrics)
    atomic_write_json(plan.out / "report.json", report)
    return report


def compare(plan: Plan, states: dict[str, Path],
            metrics: dict[str, dict[str, Any]]) -> ResumeReport:
    """The verdict from the phases' states and metrics."""
    gpu = str(metrics["full"].get("device", "cpu")).startswith("cuda")
    checkpoint = load_state(states["save"])
    restored = by_component(differences(checkpoint, load_state(states["restore"]), gpu=gpu))
    final = by_component(
        differences(load_state(states["full"]), load_state(states["resume"]), gpu=gpu))
    reference = [float(x) for x in metrics["full"]["losses"]]
    first = first_divergence(reference[:plan.save_at], metrics["save"]["losses"], 0, gpu)
    if first is None:
        first = first_divergence(reference[plan.save_at:], metrics["resume"]["losses"],
                                 plan.save_at, gpu)
    missing = missing_parts(checkpoint)
    report: ResumeReport = {
        "module": plan.module, "steps": plan.steps, "save_at": plan.save_at,
        "device": metrics["full"].get("device"), "nproc_per_node": plan.nproc,
        "tolerance": f"rtol {GPU_RTOL:g}, atol {GPU_ATOL:g}" if gpu else None,
        "checkpoint": str(states["save"]), "checkpoint_bytes": state_bytes(states["save"]),
        "save_seconds": metrics["save"].get("save_seconds"),
        "restore_seconds": metrics["resume"].get("restore_seconds"),
        "step_seconds": metrics["full"].get("step_seconds"),
        "losses": {"full": reference, "resumed": metrics["resume"]["losses"]},
        "first_divergent_step": first,
        "missing": missing,
        "not_restored": sorted(restored),
        "not_restored_paths": _summarize(restored),
        "final_differences": sorted(final),
        "final_difference_paths": _summarize(final),
        "out": str(plan.out),
    }
    report["ok"] = first is None and not missing and not restored and not final
    report["verdict"] = verdict_line(report)
    return report


# ---------------------------------------------------------------- kdkit resume-test


DESCRIPTION = """\
Prove the training loop resumes exactly from a checkpoint in a NEW process.

Runs the loop (its contract: `python -m src.train --steps N --checkpoint PATH
[--resume PATH] [--metrics PATH] [--device D]`) four times, each a fresh interpreter:
  full     N steps uninterrupted
  save     K steps, then the checkpoint
  restore  resume from it without a step: what comes back must equal what was saved
  resume   resume from it to N: losses and final state must equal the full run
On a CPU they must be identical; on a GPU within a stated tolerance. The report gives
the checkpoint size, save and restore time, and names what the checkpoint lacks
(e.g. scheduler, rng.torch) or what the loop does not put back. The checkpoint is a
folder in the Hugging Face Trainer layout (model.pt, optimizer.pt, scheduler.pt,
scaler.pt, rng_state.pth, trainer_state.json) or a single file of those parts. Written to
runs/resume-test-<time>/report.json (or --out). Exit 1 when the resume is not exact.

With --nproc-per-node N each phase is `python -m torch.distributed.run --standalone
--nproc-per-node N -m MODULE ...` (the interpreter's own torchrun): N processes in
DDP, gloo on a CPU (at most one per CPU), NCCL on a GPU (one per GPU)."""
EPILOG = (
    "examples:\n  kdkit resume-test --steps 20 --save-at 7\n  kdkit resume-test --nproc-per-node 2 "
    "--device cpu")


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser("resume-test", DESCRIPTION, EPILOG)
    add_project(parser)
    parser.add_argument("--project", type=Path, default=None, dest="project_option", metavar="DIR",
                        help="the project, as PROJECT_DIR")
    parser.add_argument("--steps", type=Count("--steps", "20"), default=8, metavar="N",
                        help="steps of the uninterrupted run (default: 8)")
    parser.add_argument("--save-at", type=Count("--save-at", "7"), default=3, metavar="K",
                        help="step at which the checkpoint is taken (default: 3)")
    parser.add_argument("--module",
                        default=None,
                        help=('train module (default: "train" in kdkit.json, else src.train)'))
    parser.add_argument("--device",
                        default="auto", help="auto, cpu, cuda or cuda:N, passed on (default: auto)")
    parser.add_argument("--python", default=None, metavar="PATH",
                        help="interpreter that runs the loop (default: this one)")
    parser.add_argument("--nproc-per-node", type=Count("--nproc-per-node", "2"), default=None,
                        metavar="N",
                        help="run each phase under torchrun with N processes in DDP (default: one "
                             "process, no torchrun)")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="new folder for the phases and report.json (default: "
                             "resume-test-<time> in the pilot config's runs folder)")
    add_json(parser)
    return parser


def plan_of(args: argparse.Namespace) -> Plan:
    """The test the command line asks for; what is wrong with it is refused before anything is
    written."""
    given = [folder for folder in (args.project_dir, args.project_option) if folder is not None]
    if len(given) == 2 and given[0].resolve() != given[1].resolve():
        raise BadInput(f"PROJECT_DIR {given[0]} and --project {given[1]}: give the project once")
    root = project_root(given[0] if given else None)
    module = train_module(root, args.module)
    if args.out is not None and args.out.exists():
        raise BadInput(f"{args.out}: already exists; choose a new folder for this test")
    runs = runs_dir(root) if args.out is None else None
    out = args.out.resolve() if runs is None else runs / new_run_id("resume-test")
    return Plan(root, module, args.steps, args.save_at, out, args.python or sys.executable,
                args.device, runs=runs,
                nproc=args.nproc_per_node)


def render(report: ResumeReport) -> str:
    rows = [["steps",
             f"{report['steps']} uninterrupted vs {report['save_at']} + checkpoint + resume"],
            ["checkpoint", f"{report['checkpoint_bytes'] / 1e6:.2f} MB  {report['checkpoint']}"],
            ["save / restore",
             f"{seconds_text(report['save_seconds'])} / {seconds_text(report['restore_seconds'])}"],
            ["one step", seconds_text(report["step_seconds"])]]
    if report["save_seconds"] and report["step_seconds"]:
        # What a save costs in steps of lost work: the figure that sets the save interval.
        rows.append(
            ["one save costs", f"{report['save_seconds'] / report['step_seconds']:.2f} steps"])
    rows.append(["tolerance", report["tolerance"] or "none: identical on CPU"])
    rows += [[name.replace("_", " "), ", ".join(report[name]) or "none"]
             for name in ("missing", "not_restored", "final_differences")]
    processes = ("" if report.get("nproc_per_node") is None
                 else f" x {report['nproc_per_node']} (torchrun)")
    return "\n".join([f"Resume test of {report['module']} on {report['device']}{processes}",
                      text_table(rows),
                      ("OK: " if report["ok"] else "FAILED: ") + report["verdict"]])


def main(argv: list[str]) -> int:
    args = parse(build_parser(), argv)
    report = run_resume_test(plan_of(args), progress=say)
    return show(report, args.json, render, report["verdict"])


if __name__ == "__main__":
    from kdkit.core.commands import call

    sys.exit(call(main, sys.argv[1:]))
