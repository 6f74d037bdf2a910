"""`kdkit diagnose --accept`: accept or refuse the machine received, in its first hour, with
evidence.

In order: the driver's facts (smi.read: before and without torch, so a broken torch still gets "the
driver sees 1 H200, torch sees none"), today's diagnose steps, the health points (health.py, judged
with the CUDA of the torch that imported), then the sustained load (load.py) with the driver sampled
about once a second. The verdict and the evidence are evidence.py's. Standard library only, plus
torch.

What is expected: ``--expect`` (auto: from the device nodes and torch build). A GPU machine with no
GPU is refused; ``--expect cpu`` judges a CPU machine by the load alone (no GPU points). The order
(``--order``, written by `kdkit plan --save`) names the card and the count to hold the machine to;
without it they are reported, not judged. Thresholds: kdkit/data/acceptance.json, overridden by the
project's kdkit.json ``"acceptance"``.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from kdkit.core.errors import BadInput
from kdkit.core.finding import Finding
from kdkit.core.jsonio import load_json
from kdkit.probe.diagnose import evidence, health, smi
from kdkit.probe.diagnose.core import Context
from kdkit.probe.diagnose.points import check_overrides, thresholds

if TYPE_CHECKING:
    from kdkit.probe.diagnose.evidence import AcceptExtra, AcceptReport
    from kdkit.probe.diagnose.points import Rule
    from kdkit.probe.diagnose.runner import DiagnoseReport
    from kdkit.probe.diagnose.smi_values import SmiFacts

DEFAULT_SECONDS = 60.0
# an acceptance test fits in the provider's first hour, where a refund is still asked
MAX_SECONDS = 3600.0


def order_expectation(order: Path | None) -> tuple[str | None, int | None]:
    """(card name, card count) of the order `kdkit plan --save` wrote; (None, None) without one."""
    if order is None:
        return None, None
    data = load_json(order, what="order (kdkit plan --save)")
    offer = data.get("offer") if isinstance(data, dict) else None
    cards = data.get("cards") if isinstance(data, dict) else None
    if not isinstance(offer, dict) or not isinstance(offer.get("name"), str) \
            or not isinstance(cards, int):
        raise BadInput(f"{order}: not an order written by `kdkit plan --save` (no offer.name or "
                       "cards); give that file, or leave --order out")
    return offer["name"], cards


def project_overrides(project: Path | None) -> dict[str, dict[str, Rule]] | None:
    """kdkit.json's ``"acceptance"`` of the project, checked against the shipped rules before any
    load (points.check_overrides); None without one."""
    if project is None or not (project / "kdkit.json").is_file():
        return None
    where = project / "kdkit.json"
    config = load_json(where, what="kdkit.json")
    overrides = config.get("acceptance") if isinstance(config, dict) else None
    if overrides is not None:
        check_overrides(overrides, f"{where}: $.acceptance")
    return overrides


# What a complete load has judged: without these the machine is not accepted (the run is
# incomplete).
# load.gemm: the loop
ESSENTIAL = ("load.gemm", "load.gemm.sustained", "load.gemm.bitwise", "load.memory.fill")
# could not allocate (loadio.failure_point); it then leaves no sustained point to be found unknown
# Held to a card's reference when it has one: unknown with a threshold is a reading that could not
# be made on a card with a reference (incomplete); unknown without one is "no reference" (reported,
# not judged).
REFERENCED = ("load.gemm.reference", "load.memory.bandwidth")


def _incomplete(ctx: Context, facts: SmiFacts,
                steps: DiagnoseReport, cpu_only: bool) -> str | None:
    """Why the evidence cannot be gathered for a reason that is not the machine's, before the load:
    torch sees none or only some of the GPUs the driver lists (the environment is at fault, not the
    card), a step failed, the driver's answer for a GPU could not be read. None when the load can
    run."""
    failure = steps.get("first_failure")
    seen = [] if cpu_only else facts.get("gpus") or []
    if seen and len(ctx.device_ids) < len(seen):
        names = sorted({str(g.get("name") or "GPU") for g in seen})
        torch = f"only {len(ctx.device_ids)}" if ctx.device_ids else "none"
        why = f"; {failure['step']}: {failure['detail']}" if failure else ""
        return (f"the driver sees {len(seen)} x {', '.join(names)} and torch sees {torch}: the "
                "environment is at fault, not the card (CUDA_VISIBLE_DEVICES, "
                f"HIP_VISIBLE_DEVICES, the container's --gpus){why}")
    if failure:
        return f"diagnose stopped at {failure['step']}: {failure['detail']} (fix: {failure['fix']})"
    unread = [f"GPU {g.get('index')}: {g['unreadable']}" for g in seen if g.get("unreadable")]
    if unread:
        return (f"the driver's answer could not be read ({'; '.join(unread[:3])}); rerun, or read "
                f"it with {facts.get('tool') or 'the driver tool'} yourself")
    return None


def _unmeasured(points: list[Finding]) -> str | None:
    """Why the load, though it ran, is no evidence: an essential check judged nothing (too few
    seconds, too little memory to fill)."""
    missing = [p for p in points if p.section == "load" and p.verdict == "unknown"
               and (p.name in ESSENTIAL or (p.name in REFERENCED and p.threshold is not None))]
    if not missing:
        return None
    return "the load measured too little to judge: " + "; ".join(
        f"{p.name}: {p.why}" for p in missing[:3]) + \
        " (give more --seconds, or more --memory-share)"


def _cuda(ctx: Context) -> str | None:
    build = ctx.facts.get("build") or {}
    return build.get("cuda") if isinstance(build, dict) else None


def run_acceptance(expect: str, seconds: float, memory_share: float, project: Path | None,
                   order: Path | None, argv: list[str]) -> AcceptReport:
    """The acceptance report (evidence.report_of); never raises for what it finds. BadInput for an
    order or a project override that cannot be used, before anything runs."""
    from kdkit.probe.diagnose import load
    from kdkit.probe.diagnose.runner import STEPS, run_steps

    name, count = order_expectation(order)
    if expect == "cpu" and name is not None and count:
        from kdkit.core.safetext import printable

        raise BadInput(f"--expect cpu judges a CPU machine; {order} orders {count} x "
                       f"{printable(name)}: drop --expect cpu or the order")
    overrides = project_overrides(project)
    rules = thresholds(overrides)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    facts = smi.read()  # the driver first: whatever torch does after
    ctx = Context(expect=expect, memory_share=memory_share, project=project)
    steps = run_steps(ctx, STEPS)
    cpu_only = expect == "cpu"  # a CPU machine on purpose: judged by its load alone
    points: list[Finding] = [] if cpu_only else health.health_points(
        facts, _cuda(ctx), name, count, overrides)
    incomplete = _incomplete(ctx, facts, steps, cpu_only)
    gpu_missing = any(p.name == "gpu.present" and p.verdict == "refuse" for p in points)
    clock = time.perf_counter()
    if incomplete is None and not gpu_missing and (ctx.gpu_expected or cpu_only):
        sampler = (lambda: smi.sample()) if facts.get("tool") else None
        points += load.load_points(ctx, seconds, sampler, rules)
        incomplete = _unmeasured(points)
    under_load = round(time.perf_counter()
                       - clock, 1) if any(p.section == "load" for p in points) else 0.0
    extra: AcceptExtra = {"expect": expect, "expected": ctx.expected, "driver": facts,
                          "order": {"card": name, "count": count},
                          "commands": smi.commands(facts)}
    return evidence.report_of(points, steps, started=started, seconds=under_load,
                              incomplete=incomplete,
                              argv=argv, extra=extra)
