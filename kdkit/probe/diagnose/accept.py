"""`kdkit diagnose --accept`: accept or refuse the machine received, in its first hour, with evidence.

In order: the driver's facts (smi.read: before and without torch, so a broken torch still gets "the
driver sees 1 H200, torch sees none"), today's diagnose steps, the health points (health.py, judged with
the CUDA of the torch that imported), then the sustained load (load.py) with the driver sampled about
once a second. The verdict and the evidence are evidence.py's. Standard library only, plus torch.

What is expected: ``--expect`` (auto: from the device nodes and torch build). A GPU machine with no GPU
is refused; ``--expect cpu`` judges a CPU machine by the load alone (no GPU points). The order
(``--order``, written by `kdkit plan --save`) names the card and the count to hold the machine to;
without it they are reported, not judged. Thresholds: kdkit/data/acceptance.json, overridden by the
project's kdkit.json ``"acceptance"``.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kdkit.core.errors import BadInput
from kdkit.core.jsonio import load_json
from kdkit.probe.diagnose import evidence, health, smi
from kdkit.probe.diagnose.core import Context
from kdkit.probe.diagnose.points import Point, thresholds

DEFAULT_SECONDS = 60.0
MAX_SECONDS = 3600.0  # an acceptance test fits in the provider's first hour, where a refund is still asked


def order_expectation(order: Path | None) -> tuple[str | None, int | None]:
    """(card name, card count) of the order `kdkit plan --save` wrote; (None, None) without one."""
    if order is None:
        return None, None
    data = load_json(order, what="order (kdkit plan --save)")
    offer = data.get("offer") if isinstance(data, dict) else None
    cards = data.get("cards") if isinstance(data, dict) else None
    if not isinstance(offer, dict) or not isinstance(offer.get("name"), str) or not isinstance(cards, int):
        raise BadInput(f"{order}: not an order written by `kdkit plan --save` (no offer.name or cards); give that "
                       "file, or leave --order out")
    return offer["name"], cards


def project_overrides(project: Path | None) -> dict[str, Any] | None:
    """kdkit.json's ``"acceptance"`` of the project, when there is one: sections of rules, as the shipped file."""
    if project is None or not (project / "kdkit.json").is_file():
        return None
    config = load_json(project / "kdkit.json", what="kdkit.json")
    overrides = config.get("acceptance") if isinstance(config, dict) else None
    if overrides is None:
        return None
    if not isinstance(overrides, dict) or not all(isinstance(rules, dict) and all(isinstance(rule, dict)
                                                  for rule in rules.values()) for rules in overrides.values()):
        raise BadInput(f"{project / 'kdkit.json'}: $.acceptance: expected sections of rules, e.g. "
                       '{"load": {"load.gemm.sustained": {"value": 0.9}}}; fix it or remove the key')
    return overrides


def _torch_sees(ctx: Context, facts: dict[str, Any], steps: dict[str, Any]) -> str | None:
    """Why the evidence cannot be gathered although the driver sees cards: torch does not (the environment
    is at fault, not the card), or a step before the load failed. None when the load can run."""
    seen = len(facts.get("gpus") or [])
    failure = steps.get("first_failure")
    if seen and not ctx.device_ids:
        names = sorted({str(g.get("name") or "GPU") for g in facts["gpus"]})
        why = f"; {failure['step']}: {failure['detail']}" if failure else ""
        return (f"the driver sees {seen} x {', '.join(names)} and torch sees none: the environment is at fault, not "
                f"the card{why}")
    if failure:
        return f"diagnose stopped at {failure['step']}: {failure['detail']} (fix: {failure['fix']})"
    return None


def _cuda(ctx: Context) -> str | None:
    build = ctx.facts.get("build") or {}
    return build.get("cuda") if isinstance(build, dict) else None


def run_acceptance(expect: str, seconds: float, memory_share: float, project: Path | None,
                   order: Path | None, argv: list[str]) -> dict[str, Any]:
    """The acceptance report (evidence.report_of); never raises for what it finds."""
    from kdkit.probe.diagnose import load
    from kdkit.probe.diagnose.runner import STEPS, run_steps

    name, count = order_expectation(order)
    overrides = project_overrides(project)
    rules = thresholds(overrides)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    facts = smi.read()  # the driver first: whatever torch does after
    ctx = Context(expect=expect, memory_share=memory_share, project=project)
    steps = run_steps(ctx, STEPS)
    points: list[Point] = [] if ctx.expected == "cpu" and expect == "cpu" else \
        health.health_points(facts, _cuda(ctx), name, count, overrides)
    incomplete = _torch_sees(ctx, facts, steps)
    gpu_missing = any(p.name == "gpu.present" and p.verdict == "refuse" for p in points)
    clock = time.perf_counter()
    if incomplete is None and not gpu_missing and (ctx.gpu_expected or expect == "cpu"):
        sampler = (lambda: smi.sample()) if facts.get("tool") else None
        points += load.load_points(ctx, seconds, sampler, rules)
    under_load = round(time.perf_counter() - clock, 1) if any(p.section == "load" for p in points) else 0.0
    extra = {"expect": expect, "expected": ctx.expected, "driver": facts, "order": {"card": name, "count": count},
             "commands": smi.commands(facts)}
    return evidence.report_of(points, steps, started=started, seconds=under_load, incomplete=incomplete,
                              argv=argv, extra=extra)
