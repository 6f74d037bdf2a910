"""`kdkit diagnose`: walk from the interpreter to real kernels and stop at the first failure.

A successful ``import torch`` proves nothing about GPU compute. This command runs
ordered, timed steps (interpreter, environment, torch import, build, driver,
devices, arch, compute, memory, libraries, extensions; with --deep also
torch.compile, a pinned copy and measured throughput), names the step where it
stopped and the fix, and writes a JSON report even when the verdict is fail.
Standard library only, plus torch, imported by its own step: it must run where
the environment is broken.
"""

from __future__ import annotations

import argparse
import os
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kdkit.core.builds import BACKENDS
from kdkit.core.errors import BadInput
from kdkit.core.jsonio import atomic_write_json, finite_number, require_replaceable
from kdkit.core.parsers import add_json, command_parser
from kdkit.core.projectfiles import find_root, project_root
from kdkit.core.report import print_result
from kdkit.core.staging import require_writable
from kdkit.probe.diagnose import deep as diagdeep
from kdkit.probe.diagnose import host as diaghost
from kdkit.probe.diagnose import steps as diagsteps
from kdkit.probe.diagnose.core import Context, StepFailed, StepFn

STEPS: tuple[tuple[str, StepFn], ...] = (
    ("interpreter", diaghost.interpreter),
    ("environment", diaghost.environment),
    ("torch import", diagsteps.torch_import),
    ("build", diagsteps.build),
    ("driver", diaghost.driver),
    ("devices", diagsteps.devices),
    ("arch", diagsteps.arch),
    ("compute", diagsteps.compute),
    ("memory", diagsteps.memory),
    ("libraries", diagsteps.libraries),
    ("extensions", diagsteps.extensions_step),
)
DEEP_STEPS: tuple[tuple[str, StepFn], ...] = (
    ("compile", diagdeep.compile_step),
    ("pinned copy", diagdeep.pinned_step),
    ("throughput", diagdeep.throughput_step),
)
DEFAULT_MEMORY_SHARE = 0.8


def run_diagnose(expect: str = "auto", deep: bool = False, memory_share: float = DEFAULT_MEMORY_SHARE,
                 project: Path | None = None) -> dict[str, Any]:
    """Run the steps in order and return the report; never raises for what it finds."""
    ctx = Context(expect=expect, memory_share=memory_share, project=project)
    plan = STEPS + (DEEP_STEPS if deep else ())
    started, clock = datetime.now(timezone.utc), time.perf_counter()
    steps: list[dict[str, Any]] = []
    failure: dict[str, Any] | None = None
    for number, (name, function) in enumerate(plan, start=1):
        status, detail, fix, seconds, code = _run_step(function, ctx)
        steps.append({"name": name, "status": status, "detail": detail, "seconds": round(seconds, 4)})
        if status == "fail":
            failure = {"step": name, "number": number, "of": len(plan), "detail": detail, "fix": fix,
                       "exit_code": code}
            break
    reached = len(steps)
    return {
        "command": "diagnose",
        "verdict": "fail" if failure else "pass",
        "expect": expect,
        "expected": ctx.expected,
        "backend": ctx.facts.get("build", {}).get("backend"),
        "deep": deep,
        "started": started.isoformat(timespec="seconds"),
        "seconds": round(time.perf_counter() - clock, 4),
        "steps": steps,
        "first_failure": failure,
        "not_reached": [name for name, _ in plan[reached:]],
        "facts": ctx.facts,
    }


def _run_step(function: StepFn, ctx: Context) -> tuple[str, str, str | None, float, int]:
    """(status, detail, fix, seconds, exit code of a failure)."""
    started = time.perf_counter()
    code = 1
    try:
        outcome = function(ctx)
        result: tuple[str, str, str | None] = (outcome.status, outcome.detail, None)
    except StepFailed as exc:
        result, code = ("fail", exc.detail, exc.fix), exc.exit_code
    except Exception as exc:  # a step's own bug or an odd torch error must still end in a report
        if os.environ.get("KDKIT_DEBUG", "") not in ("", "0"):
            traceback.print_exc()
        result = ("fail", f"unexpected {type(exc).__name__}: {exc}",
                  "rerun with KDKIT_DEBUG=1 for the traceback and report it with this JSON report")
    return (*result, time.perf_counter() - started, code)


# ---------------------------------------------------------------- presentation


def render_text(report: dict[str, Any]) -> str:
    """The report for a person: one line per step, then the verdict and the fix."""
    lines = [f"kdkit diagnose (expect {report['expect']}"
             + (f" -> {report['expected']}" if report["expected"] and report["expect"] == "auto" else "") + ")"]
    width = max(len(s["name"]) for s in report["steps"])
    for number, step in enumerate(report["steps"], start=1):
        lines.append(f"{number:>3}  {step['name']:<{width}}  {step['status']:<4}  {step['seconds']:6.2f} s  "
                     f"{step['detail']}")
    failure = report["first_failure"]
    if failure:
        lines.append(f"FAIL at step {failure['number']} of {failure['of']} ({failure['step']}): {failure['detail']}")
        lines.append(f"Fix: {failure['fix']}")
        if report["not_reached"]:
            lines.append(f"Not reached: {', '.join(report['not_reached'])}")
    else:
        counts = {k: sum(s["status"] == k for s in report["steps"]) for k in ("warn", "skip")}
        lines.append(f"PASS: torch computes on {report['expected']} ({counts['warn']} warning(s), "
                     f"{counts['skip']} skipped) in {report['seconds']:.1f} s")
    return "\n".join(lines)


def _share(text: str) -> float:
    value = finite_number(text, "--memory-share")
    if not 0 < value <= 0.95:
        raise BadInput(f"--memory-share {text!r}: outside (0, 0.95]; leave room for the CUDA context")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser(
        "diagnose", "Prove this machine's GPU really computes: ordered, timed steps from the interpreter to "
                    "real kernels, stopping at the first failure with the step reached and the fix.",
        "Exit 0 pass (warnings allowed), 1 a step failed, 2 bad usage. Example on the rented machine: "
        "kdkit diagnose --expect cuda --deep --out diagnose.json", preformatted=False)
    parser.add_argument("--expect", choices=("auto", *BACKENDS), default="auto",
                        help="backend this machine must provide (auto: from its device nodes and torch build)")
    parser.add_argument("--deep", action="store_true",
                        help="also torch.compile, a pinned non-blocking copy, and bf16 TFLOP/s and copy GB/s "
                             "against the card's nominal figures (takes longer)")
    add_json(parser, "the JSON report")
    parser.add_argument("--out", type=Path, metavar="FILE",
                        help="also write the JSON report to FILE (atomically, even when the verdict is fail)")
    parser.add_argument("--memory-share", type=_share, default=DEFAULT_MEMORY_SHARE, metavar="SHARE",
                        help=f"share of each card's memory to allocate and write (default {DEFAULT_MEMORY_SHARE})")
    parser.add_argument("--project", type=Path, metavar="DIR",
                        help="project whose kdkit.json extensions to import (default: found upward from cwd)")
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    project = project_root(args.project) if args.project is not None else find_root()
    if args.out is not None:  # refused before a minute of kernels, not after
        try:
            require_replaceable(args.out)
            require_writable(args.out.parent, "folder for --out")
        except BadInput as exc:
            raise BadInput(f"{args.out}: cannot write the report there ({str(exc).split(': ', 1)[-1]})") from None
    report = run_diagnose(args.expect, args.deep, args.memory_share, project)
    if args.out is not None:
        try:
            atomic_write_json(args.out, report)
        except OSError as exc:
            raise BadInput(f"{args.out}: cannot write the report ({exc.strerror}); choose a writable path") from None
    print_result(args.json, report, lambda: render_text(report), ascii_only=False, default=str)
    return exit_code(report)


def exit_code(report: dict[str, Any]) -> int:
    """0 on a pass; else the failed step's code: 1, or 3 when what it needs is unavailable (/dev/kfd's group)."""
    failure = report.get("first_failure")
    return 0 if failure is None else int(failure.get("exit_code") or 1)
