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
from pathlib import Path
from typing import TYPE_CHECKING

from kdkit.core.builds import BACKENDS
from kdkit.core.errors import BadInput
from kdkit.core.jsonio import atomic_write_json, finite_number, require_replaceable
from kdkit.core.parsers import add_json, command_parser
from kdkit.core.projectfiles import find_root, project_root
from kdkit.core.report import print_result
from kdkit.core.staging import require_writable
from kdkit.probe.diagnose.accept import DEFAULT_SECONDS, MAX_SECONDS
from kdkit.probe.diagnose.runner import DEFAULT_MEMORY_SHARE, run_diagnose

if TYPE_CHECKING:
    from kdkit.probe.diagnose.runner import DiagnoseReport

# ---------------------------------------------------------------- presentation


def render_text(report: DiagnoseReport) -> str:
    """The report for a person: one line per step, then the verdict and the fix."""
    lines = [f"kdkit diagnose (expect {report['expect']}"
             + (f" -> {report['expected']}" if report["expected"] and report["expect"] == "auto"
                else "") + ")"]
    width = max(len(s["name"]) for s in report["steps"])
    for number, step in enumerate(report["steps"], start=1):
        lines.append(f"{number:>3}  {step['name']:<{width}}  {step['status']:<4}  "
                     f"{step['seconds']:6.2f} s  {step['detail']}")
    failure = report["first_failure"]
    if failure:
        lines.append(
            f"FAIL at step {failure['number']} of {failure['of']} ({failure['step']}): "
            f"{failure['detail']}")
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
        raise BadInput(
            f"--memory-share {text!r}: outside (0, 0.95]; leave room for the CUDA context")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser(
        "diagnose",
        "Prove this machine's GPU really computes: ordered, timed steps from the interpreter to "
        "real kernels, stopping at the first failure with the step reached and the fix.",
        "Exit 0 pass (warnings allowed), 1 a step failed, 2 bad usage. Example on the rented "
        "machine: kdkit diagnose --expect cuda --deep --out diagnose.json", preformatted=False)
    parser.add_argument("--expect", choices=("auto", *BACKENDS), default="auto",
                        help=(
                            "backend this machine must provide (auto: from its device nodes and "
                            "torch build)"))
    parser.add_argument("--deep", action="store_true",
                        help="also torch.compile, a pinned non-blocking copy, and bf16 TFLOP/s and "
                             "copy GB/s against the card's nominal figures (takes longer)")
    add_json(parser, "the JSON report")
    parser.add_argument("--out", type=_named_path, metavar="FILE",
                        help=(
                            "also write the JSON report to FILE (atomically, even when the verdict "
                            "is fail)"))
    parser.add_argument("--memory-share", type=_share, default=DEFAULT_MEMORY_SHARE,
                        metavar="SHARE",
                        help=(
                            "share of each card's memory to allocate and write (default "
                            f"{DEFAULT_MEMORY_SHARE})"))
    parser.add_argument("--project", type=Path, metavar="DIR",
                        help=(
                            "project whose kdkit.json extensions to import (default: found upward "
                            "from cwd)"))
    accept = parser.add_argument_group(
        "acceptance (--accept)",
        "Accept or refuse the machine received: the steps above, then the driver's health "
        "facts (ECC, retired and remapped memory, PCIe link, throttling, power cap, compute and "
        "MIG mode, pending recovery, NVLink/XGMI) and a sustained load (a GEMM loop: throughput "
        "over time, clocks, temperature, power, the same GEMM compared bit for bit, pinned copies "
        "against the PCIe link, a memory fill-and-check, peer copies and all-reduce across GPUs). "
        "Verdict accept, degraded, refuse or incomplete, each point with its reading, threshold "
        "and source; --out DIR gets acceptance.json and acceptance.md, with a paragraph for the "
        "provider. Exit 0 accept, 1 otherwise. Example: kdkit diagnose --accept --order order.json "
        "--out accept/")
    accept.add_argument("--accept", action="store_true", help="run the acceptance test (see above)")
    accept.add_argument("--seconds", type=_seconds, default=None, metavar="N",
                        help=(
                            f"seconds of sustained load (default {DEFAULT_SECONDS:g}, at most "
                            f"{MAX_SECONDS:g})"))
    accept.add_argument("--order", type=Path, metavar="FILE",
                        help=(
                            "the order `kdkit plan --save` wrote: the card and count the machine "
                            "is held to"))
    return parser


def _named_path(text: str) -> Path:
    """A path the user gave: an empty one names nothing (Path("") would quietly be the current
    folder)."""
    if not text.strip():
        raise BadInput("--out '': give the folder for acceptance.json and acceptance.md (with "
                       "--accept) or the report's file")
    return Path(text)


def _seconds(text: str) -> float:
    value = finite_number(text, "--seconds")
    if not 0 < value <= MAX_SECONDS:
        raise BadInput(f"--seconds {text!r}: outside (0, {MAX_SECONDS:g}]; the acceptance test "
                       "runs in the provider's first hour")
    return value


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    project = project_root(args.project) if args.project is not None else find_root()
    if args.accept or args.seconds is not None or args.order is not None:
        return accept_main(args, project, argv)
    if args.out is not None:  # refused before a minute of kernels, not after
        try:
            require_replaceable(args.out)
            require_writable(args.out.parent, "folder for --out")
        except BadInput as exc:
            raise BadInput(
                f"{args.out}: cannot write the report there "
                f"({str(exc).split(': ', 1)[-1]})") from None
    report = run_diagnose(args.expect, args.deep, args.memory_share, project)
    if args.out is not None:
        try:
            atomic_write_json(args.out, report)
        except OSError as exc:
            raise BadInput(
                f"{args.out}: cannot write the report ({exc.strerror}); choose a writable "
                "path") from None
    print_result(args.json, report, lambda: render_text(report), ascii_only=False, default=str)
    return exit_code(report)


def exit_code(report: DiagnoseReport) -> int:
    """0 on a pass; else the failed step's code: 1, or 3 when what it needs is unavailable
    (/dev/kfd's group)."""
    failure = report.get("first_failure")
    return 0 if failure is None else int(failure.get("exit_code") or 1)


def accept_main(args: argparse.Namespace, project: Path | None, argv: list[str]) -> int:
    """`kdkit diagnose --accept`: the acceptance report, its evidence in --out DIR, the verdict as
    exit code."""
    from kdkit.probe.diagnose import accept, evidence

    if not args.accept:
        raise BadInput("--seconds and --order belong to the acceptance test; add --accept")
    if args.deep:
        raise BadInput(
            "--deep and --accept: the acceptance test measures under load already; drop --deep")
    if args.out is not None:  # refused before a minute of load, not after
        evidence.check_folder(args.out)
    report = accept.run_acceptance(args.expect, args.seconds or DEFAULT_SECONDS, args.memory_share,
                                   project,
                                   args.order, ["diagnose", *argv])
    if args.out is not None:
        try:
            evidence.write_evidence(args.out, report)
        except OSError as exc:
            raise BadInput(f"{args.out}: cannot write the evidence ({exc.strerror}); choose a "
                           "writable folder") from None
    print_result(args.json, evidence.as_json(report), lambda: evidence.render_text(report),
                 ascii_only=False,
                 default=str)
    return evidence.exit_code(report)
