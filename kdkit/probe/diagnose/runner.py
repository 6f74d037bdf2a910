"""The steps of `kdkit diagnose`, in order, and running them: today's diagnose (``run_diagnose``)
and the acceptance test's first part (kdkit.probe.diagnose.accept) run the same plan on a Context
that keeps what the steps learn (torch, the devices). Standard library only, plus torch (imported by
its own step).
"""

from __future__ import annotations

import os
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.probe.diagnose import deep as diagdeep
from kdkit.probe.diagnose import host as diaghost
from kdkit.probe.diagnose import steps as diagsteps
from kdkit.probe.diagnose.core import Context, StepFailed, StepFn

if TYPE_CHECKING:
    from typing import TypedDict

    class StepRow(TypedDict):
        """One step's row of the diagnose report: its name, status, detail and seconds."""

        name: str
        status: str
        detail: str
        seconds: float

    class StepFailure(TypedDict):
        """The step a diagnose run stopped at (``first_failure``): where, why, the fix."""

        step: str
        number: int
        of: int
        detail: str
        fix: str | None
        exit_code: int

    class DiagnoseReport(TypedDict):
        """The report of `kdkit diagnose` (run_steps); the acceptance report's ``steps``."""

        command: str
        verdict: str
        expect: str
        expected: str | None
        backend: str | None
        deep: bool
        started: str
        seconds: float
        steps: list[StepRow]
        first_failure: StepFailure | None
        not_reached: list[str]
        facts: dict[str, Any]  # Context.facts: what each step learned, by step


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


def run_diagnose(expect: str = "auto", deep: bool = False,
                 memory_share: float = DEFAULT_MEMORY_SHARE,
                 project: Path | None = None) -> DiagnoseReport:
    """Run the steps in order and return the report; never raises for what it finds."""
    ctx = Context(expect=expect, memory_share=memory_share, project=project)
    return run_steps(ctx, STEPS + (DEEP_STEPS if deep else ()), deep)


def run_steps(ctx: Context, plan: tuple[tuple[str, StepFn], ...],
              deep: bool = False) -> DiagnoseReport:
    """The report of ``plan``'s steps run in order on ``ctx`` (which keeps what they learn: torch,
    the devices), stopping at the first failure; never raises for what it finds."""
    expect = ctx.expect
    started, clock = datetime.now(timezone.utc), time.perf_counter()
    steps: list[StepRow] = []
    failure: StepFailure | None = None
    for number, (name, function) in enumerate(plan, start=1):
        status, detail, fix, seconds, code = _run_step(function, ctx)
        steps.append(
            {"name": name, "status": status, "detail": detail, "seconds": round(seconds, 4)})
        if status == "fail":
            failure = {"step": name, "number": number, "of": len(plan), "detail": detail,
                       "fix": fix,
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
        result: tuple[str, str, str | None] = (outcome.verdict, outcome.why, None)
    except StepFailed as exc:
        result, code = ("fail", exc.detail, exc.fix), exc.exit_code
    except Exception as exc:  # a step's own bug or an odd torch error must still end in a report
        if os.environ.get("KDKIT_DEBUG", "") not in ("", "0"):
            traceback.print_exc()
        result = ("fail", f"unexpected {type(exc).__name__}: {exc}",
                  "rerun with KDKIT_DEBUG=1 for the traceback and report it with this JSON report")
    return (*result, time.perf_counter() - started, code)
