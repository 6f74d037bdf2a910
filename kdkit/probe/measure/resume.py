"""Prove that a training loop resumes exactly from a checkpoint, in a new process.

Runs the project's train module (its contract: ``python -m MODULE --steps N --checkpoint PATH
[--resume PATH] [--metrics PATH] [--device D]`` from the project root, see the template's
``src/train.py``) four times, each a fresh interpreter:

  full     N steps uninterrupted                     -> the reference losses and final state
  save     K steps, then the checkpoint              -> what a crash at step K leaves behind
  restore  resume from it with --steps K (no step)   -> the state right after a restore
  resume   resume from it to N                       -> must match ``full``

Comparing ``restore`` with the checkpoint names what the loop forgets to put back; the keys of the
checkpoint name what it forgets to save; ``resume`` against ``full`` is the verdict. On a CPU
losses and final weights must be identical; on a GPU floats may differ by the stated tolerance.

Standard library only, plus torch (imported lazily) to read the checkpoints: it runs inside the
image, on a bare host, or from the bundle's zipapp (``python -m kdkit.probe.measure.resume --help``).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kdkit.core.errors import BadInput, CheckFailed, Unavailable
from kdkit.core.jsonio import atomic_write_json, whole_number
from kdkit.core.pilotconfig import check_device
from kdkit.core.proc import Completed, run
from kdkit.core.staging import make_folder, require_writable

# What a checkpoint must hold (a part the loop does not have is stored as None, never left out).
REQUIRED = ("step", "data_position", "model", "optimizer", "scheduler", "scaler", "rng")
RNG_REQUIRED = ("python", "torch", "cuda", "numpy")
# Floats on a GPU may differ this much (|a - b| <= ATOL + RTOL * |b|); a CPU must match exactly.
GPU_RTOL = 1e-5
GPU_ATOL = 1e-7
PHASES = ("full", "save", "restore", "resume")
MAX_PATHS = 3  # differing paths quoted per component

Progress = Callable[[str], None]


def require_gpu(device: str, count: int, where: str = "--device") -> None:
    """A ``cuda``/``cuda:N`` device must exist where the work runs: none at all is Unavailable (exit 3),
    an index beyond the GPUs there is BadInput (exit 2), as `kdkit run --gpus` says."""
    if not device.startswith("cuda"):
        return
    index = int(device.partition(":")[2] or 0)
    if count == 0:
        raise Unavailable(f"{where} {device}: torch sees no GPU here; run where the GPU is (`kdkit diagnose` says "
                          "why not) or use cpu")
    if index >= count:
        raise BadInput(f"{where} {device}: torch sees {count} GPU(s) here (cuda:0..cuda:{count - 1}); choose one of "
                       "them")


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

    def check(self) -> None:
        """Refuse an impossible plan before anything runs or is written."""
        if self.steps < 2:
            raise BadInput(f"--steps {self.steps}: need at least 2 steps so a resume can happen in between")
        if not 1 <= self.save_at < self.steps:
            raise BadInput(f"--save-at {self.save_at}: must be between 1 and --steps - 1 ({self.steps - 1})")
        if not self.root.is_dir():
            raise BadInput(f"{self.root}: project folder not found")
        base = self.root.joinpath(*self.module.split("."))
        if not (base.with_suffix(".py").is_file() or (base / "__main__.py").is_file()):
            raise BadInput(f"{base}.py: train module {self.module!r} not found; write it (see the "
                           "template's src/train.py) or pass --module")
        check_device(self.device)
        if self.python != sys.executable and not _runs_python(self.python):  # this one runs: it exists
            raise BadInput(f"--python {self.python}: not an executable interpreter; give the one that has the "
                           "project's torch (default: this one)")
        if self.device.startswith("cuda"):
            require_gpu(self.device, _gpus_seen_by(self.python))
        require_writable(self.out, "folder for the test")


def _runs_python(python: str) -> bool:
    """Whether ``python`` starts as a Python interpreter (a file that merely exists may not run at all)."""
    if shutil.which(python) is None:
        return False
    try:
        done = run([python, "-c", "import sys; print(sys.hexversion)"], timeout=60)
    except (OSError, Unavailable):  # exec format error, permission denied, no answer
        return False
    return done.ok and done.stdout.strip().isdigit()  # /bin/true runs too, and says nothing


def _gpus_seen_by(python: str) -> int:
    """How many GPUs torch sees in ``python`` (0 without torch or a GPU): the loop's interpreter, not ours."""
    probe = "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"
    done = run([python, "-c", probe], timeout=300)
    lines = done.stdout.strip().splitlines()
    return int(lines[-1]) if done.ok and lines and lines[-1].isdigit() else 0


# ---------------------------------------------------------------- running the phases


def _phase_args(plan: Plan, phase: str) -> tuple[list[str], Path]:
    folder = plan.out / phase
    checkpoint = plan.out / "save" / "checkpoint.pt"
    steps = {"full": plan.steps, "save": plan.save_at, "restore": plan.save_at, "resume": plan.steps}[phase]
    target = checkpoint if phase == "save" else folder / "state.pt"
    args = [plan.python, "-m", plan.module, "--steps", str(steps), "--checkpoint", str(target),
            "--metrics", str(folder / "metrics.json"), "--device", plan.device]
    if phase in ("restore", "resume"):
        args += ["--resume", str(checkpoint)]
    return args, target


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
    # cuBLAS needs a fixed workspace to be deterministic; harmless elsewhere.
    done = run(args, cwd=plan.root, timeout=plan.timeout, extra_env={"CUBLAS_WORKSPACE_CONFIG": ":4096:8"})
    log = plan.out / phase / "output.log"
    log.write_text(f"$ {' '.join(args)}\n{done.stdout}{done.stderr}", encoding="utf-8")
    if not done.ok:
        raise CheckFailed(f"{plan.module} ({phase} phase, exit {done.returncode}): {failure_line(done)} "
                          f"(full output: {log})")
    metrics_path = plan.out / phase / "metrics.json"
    if not state.is_file() or not metrics_path.is_file():
        missing = state if not state.is_file() else metrics_path
        raise CheckFailed(f"{missing}: the {phase} phase wrote no such file; the train module must honour "
                          "--checkpoint and --metrics")
    metrics: dict[str, Any] = json.loads(metrics_path.read_text(encoding="utf-8"))
    return state, metrics


# ---------------------------------------------------------------- comparing states


def _close(a: float, b: float, gpu: bool) -> bool:
    if gpu:
        return math.isclose(a, b, rel_tol=GPU_RTOL, abs_tol=GPU_ATOL) or (math.isnan(a) and math.isnan(b))
    return a == b or (math.isnan(a) and math.isnan(b))


def _tensor_differs(a: Any, b: Any, gpu: bool) -> bool:
    import torch

    if a.shape != b.shape or a.dtype != b.dtype:
        return True
    if gpu and a.is_floating_point():
        return not torch.allclose(a.double(), b.double(), rtol=GPU_RTOL, atol=GPU_ATOL, equal_nan=True)
    return not torch.equal(a, b)


def differences(a: Any, b: Any, path: str = "", gpu: bool = False) -> Iterator[str]:
    """Dotted paths where two nested states differ (floats within tolerance on a GPU)."""
    import torch

    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if _tensor_differs(a.cpu(), b.cpu(), gpu):
            yield path
    elif isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            sub = f"{path}.{key}" if path else str(key)
            if key not in a or key not in b:
                yield sub
            else:
                yield from differences(a[key], b[key], sub, gpu)
    elif isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            yield path
        else:
            for index, (x, y) in enumerate(zip(a, b, strict=True)):
                yield from differences(x, y, f"{path}.{index}" if path else str(index), gpu)
    elif isinstance(a, float) and isinstance(b, float):
        if not _close(a, b, gpu):
            yield path
    elif type(a) is not type(b) or a != b:
        yield path


def component(path: str) -> str:
    """The part of the state a path belongs to: ``rng.torch``, ``scheduler``, ``model``…"""
    parts = path.split(".")
    return ".".join(parts[:2]) if parts[0] == "rng" else parts[0]


def by_component(paths: Iterator[str]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for path in paths:
        grouped.setdefault(component(path), []).append(path)
    return grouped


def missing_parts(state: Any) -> list[str]:
    """Required parts a checkpoint leaves out (None counts as present: the loop has no such part)."""
    if not isinstance(state, dict):
        return list(REQUIRED)
    missing = [key for key in REQUIRED if key not in state]
    rng = state.get("rng")
    if isinstance(rng, dict):
        missing += [f"rng.{key}" for key in RNG_REQUIRED if key not in rng]
    return missing


def load_state(path: Path) -> Any:
    try:
        import torch
    except ImportError:
        raise Unavailable(f"{sys.executable}: torch is not importable here; run resume-test with the "
                          "project's interpreter (--python) or inside the image") from None
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types (pickle, zip, unsupported global)
        raise CheckFailed(f"{path}: cannot be loaded with torch.load(weights_only=True) "
                          f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None


def first_divergence(reference: list[float], resumed: list[float], offset: int, gpu: bool) -> int | None:
    """The first step whose loss differs (or is missing), counted from step 0."""
    for index, expected in enumerate(reference):
        if index >= len(resumed) or not _close(float(expected), float(resumed[index]), gpu):
            return offset + index
    return None if len(resumed) == len(reference) else offset + len(reference)


# ---------------------------------------------------------------- the test


def _summarize(grouped: dict[str, list[str]]) -> dict[str, list[str]]:
    return {name: paths[:MAX_PATHS] for name, paths in grouped.items()}


def verdict_line(report: dict[str, Any]) -> str:
    """One line naming what breaks the resume, or saying it is exact."""
    if report["ok"]:
        how = "identical" if report["tolerance"] is None else f"within {report['tolerance']}"
        return (f"resume from step {report['save_at']} reproduces steps {report['save_at']}..{report['steps']} "
                f"in a new process ({how})")
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


def run_resume_test(plan: Plan, progress: Progress | None = None) -> dict[str, Any]:
    """Run the four phases and compare them; return the report (also written to OUT/report.json)."""
    plan.check()
    make_folder(plan.out, "folder for the test")
    say = progress or (lambda _message: None)
    states: dict[str, Path] = {}
    metrics: dict[str, dict[str, Any]] = {}
    for phase in PHASES:
        say(f"{phase}: python -m {plan.module} ({PHASES.index(phase) + 1}/{len(PHASES)})")
        states[phase], metrics[phase] = _run_phase(plan, phase)
    report = compare(plan, states, metrics)
    atomic_write_json(plan.out / "report.json", report)
    return report


def compare(plan: Plan, states: dict[str, Path], metrics: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The verdict from the phases' states and metrics."""
    gpu = str(metrics["full"].get("device", "cpu")).startswith("cuda")
    checkpoint = load_state(states["save"])
    restored = by_component(differences(checkpoint, load_state(states["restore"]), gpu=gpu))
    final = by_component(differences(load_state(states["full"]), load_state(states["resume"]), gpu=gpu))
    reference = [float(x) for x in metrics["full"]["losses"]]
    first = first_divergence(reference[:plan.save_at], metrics["save"]["losses"], 0, gpu)
    if first is None:
        first = first_divergence(reference[plan.save_at:], metrics["resume"]["losses"], plan.save_at, gpu)
    missing = missing_parts(checkpoint)
    report = {
        "module": plan.module, "steps": plan.steps, "save_at": plan.save_at,
        "device": metrics["full"].get("device"),
        "tolerance": f"rtol {GPU_RTOL:g}, atol {GPU_ATOL:g}" if gpu else None,
        "checkpoint": str(states["save"]), "checkpoint_bytes": states["save"].stat().st_size,
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


# ---------------------------------------------------------------- python -m kdkit.probe.measure.resume


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m kdkit.probe.measure.resume",
        description="Run a train module N steps, then K steps + checkpoint + resume to N in new "
                    "processes; compare losses and states and name what the checkpoint misses.",
    )
    parser.add_argument("--project", type=Path, default=Path.cwd(), help="project root (default: cwd)")
    parser.add_argument("--module", default="src.train", help="train module (default: src.train)")
    parser.add_argument("--steps", type=whole_number("--steps"), default=8,
                        help="steps of the reference run (default: 8)")
    parser.add_argument("--save-at", type=whole_number("--save-at"), default=3,
                        help="step of the checkpoint (default: 3)")
    parser.add_argument("--device", default="auto", help="passed to the train module (default: auto)")
    parser.add_argument("--python", default=sys.executable, help="interpreter that runs the train module")
    parser.add_argument("--out", type=Path, required=True, help="new folder for the phases and report.json")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.out.exists():
        raise BadInput(f"{args.out}: already exists; choose a new folder for this test")
    plan = Plan(args.project.resolve(), args.module, args.steps, args.save_at, args.out.resolve(),
                args.python, args.device)
    report = run_resume_test(plan, progress=lambda m: print(m, file=sys.stderr))
    print(json.dumps(report, indent=2) if args.json else report["verdict"])
    return 0 if report["ok"] else CheckFailed.exit_code


if __name__ == "__main__":
    from kdkit.core.commands import call

    sys.exit(call(main, sys.argv[1:]))
