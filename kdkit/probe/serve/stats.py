"""What one measured configuration (a rate and a batching policy) amounts to, and which
configuration to choose.

Every request has a record (engine.py in process, http.py against an endpoint) with times in seconds
from the configuration's start: ``arrival`` (scheduled), ``start`` (service began), ``end`` and an
``outcome``. Latency is ``end - arrival`` and queue time ``start - arrival``, both from the
scheduled arrival. A latency objective is judged over every request the service was asked to take
(all but those refused as too large, which the declared limit refuses by design): one refused at
capacity, failed or cut counts as late, so a configuration that sheds load to look fast does not
meet it. A configuration meets its objectives when every percentile is within its bound, the
answers' quality reaches the pilot's min_quality, no request failed in the app and none was cut (a
stopped rate was not measured whole). Standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from kdkit.core.serviceconfig import Objective

if TYPE_CHECKING:
    from typing import TypedDict

    class Judged(TypedDict):
        """One objective judged over a configuration's requests (:func:`judged`)."""

        percentile: float
        objective_ms: float
        measured_ms: float | None
        met: bool

    class PolicyShown(TypedDict):
        """A batching policy as results show it (session.policy_dict; None: the service's own)."""

        name: str
        max_batch: int | None
        max_wait_ms: float | None

    class Result(TypedDict):
        """One measured configuration as session.py builds it and :func:`choose` reads it."""

        rate: float
        policy: PolicyShown
        stopped: str | None  # why the rate was stopped early, else None
        peak_memory_bytes: int | None
        summary: dict[str, Any]  # summarize's (its ttft_ms/itl_ms keys are made, not literal)

    class Knee(TypedDict):
        """One policy's capacity knee (:func:`knees`)."""

        highest_met: float | None
        first_missed: float | None

ANSWERED, AT_CAPACITY, TOO_LARGE, APP_ERROR, CUT = ("answered", "rejected_at_capacity",
                                                    "rejected_too_large",
                                                    "error", "cut")
OUTCOMES = (ANSWERED, AT_CAPACITY, TOO_LARGE, APP_ERROR, CUT)
SHOWN = (50.0, 90.0, 95.0, 99.0)  # the percentiles every configuration reports, plus max


def rank(p: float, count: int) -> int:
    """The nearest rank of the ``p``-th percentile among ``count`` values (1-based; rounded first,
    so 99.9 % of 1000 is the 999th, not the 1000th by a float's last bit)."""
    return min(count, max(1, math.ceil(round(p * count / 100, 9))))


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """The nearest-rank ``p``-th percentile of values sorted ascending (inf among them allowed); nan
    when empty."""
    if not sorted_values:
        return math.nan
    return sorted_values[rank(p, len(sorted_values)) - 1]


def _ms(value: float) -> float | None:
    return None if not math.isfinite(value) else round(value * 1000, 3)


def distribution(values: Iterable[float]) -> dict[str, float | None]:
    """p50/p90/p95/p99/max and the mean of seconds, in milliseconds (None where there is
    nothing)."""
    ordered = sorted(values)
    out = {f"p{p:g}": _ms(percentile(ordered, p)) for p in SHOWN}
    out["max"] = _ms(ordered[-1]) if ordered else None
    out["mean"] = _ms(math.fsum(ordered) / len(ordered)) if ordered else None
    return out


class Judge:
    """Whether an objective is already lost: more requests late (answered past it, refused at
    capacity, failed, or still in flight past it) than the whole run may have and still meet it."""

    def __init__(self, objectives: Sequence[Objective], planned: int) -> None:
        self.objectives = tuple(objectives)
        self.planned = planned
        # refused as too large: not judged (the declared limit refuses them by design)
        self.too_large = 0
        self.late = [0] * len(self.objectives)

    def note(self, record: dict[str, Any]) -> None:
        if record["outcome"] == TOO_LARGE:
            self.too_large += 1
            return
        waited = record["end"] - record["arrival"] if record["outcome"] == ANSWERED else math.inf
        for k, objective in enumerate(self.objectives):
            if waited * 1000 > objective.ms:
                self.late[k] += 1

    def lost(self, overdue: Sequence[int]) -> Objective | None:
        """The first objective no outcome of the rest can meet any more (stats.percentile's nearest
        rank over the most requests that may be judged), or None."""
        judged = self.planned - self.too_large
        if judged <= 0:
            return None
        for k, objective in enumerate(self.objectives):
            allowed = judged - rank(objective.percentile, judged)
            if self.late[k] + (overdue[k] if overdue else 0) > allowed:
                return objective
        return None


def _late_seconds(record: dict[str, Any]) -> float:
    return record["end"] - record["arrival"] if record["outcome"] == ANSWERED else math.inf


def judged(records: Sequence[dict[str, Any]],
           objectives: Sequence[Objective]) -> list[Judged]:
    """Each objective against the requests the service was asked to take, refused, failed and cut
    ones late."""
    latencies = sorted(_late_seconds(r) for r in records if r["outcome"] != TOO_LARGE)
    out: list[Judged] = []
    for objective in objectives:
        value = percentile(latencies, objective.percentile)
        out.append({"percentile": objective.percentile, "objective_ms": objective.ms,
                    "measured_ms": _ms(value),
                    "met": bool(latencies) and value * 1000 <= objective.ms})
    return out


def _quality(records: Sequence[dict[str, Any]]) -> float | None:
    scores = [r["quality"] for r in records if r["outcome"] == ANSWERED
              and r.get("quality") is not None]
    return math.fsum(scores) / len(scores) if scores else None


def summarize(records: Sequence[dict[str, Any]], objectives: Sequence[Objective],
              min_quality: float | None) -> dict[str, Any]:
    """One configuration's figures: outcomes, throughput, latency and queue time apart, quality, and
    whether it meets every objective and the quality criterion (with the reasons it does not)."""
    answered = [r for r in records if r["outcome"] == ANSWERED]
    counts = {outcome: sum(1 for r in records if r["outcome"] == outcome) for outcome in OUTCOMES}
    span = max((r["end"] for r in answered), default=0.0)
    summary: dict[str, Any] = {
        "requests": len(records), "outcomes": counts,
        "throughput_per_second": round(len(answered) / span, 3) if span > 0 else None,
        "latency_ms": distribution(r["end"] - r["arrival"] for r in answered),
        "queue_ms": distribution(r["start"] - r["arrival"] for r in answered),
        "mean_batch": round(math.fsum(r["batch"] for r in answered) / len(answered), 3) if answered
        else None,
        "objectives": judged(records, objectives), "quality": _quality(records)}
    for key in ("ttft", "itl"):
        values = [v for r in answered for v in _listed(r.get(key)) if isinstance(v, (int, float))]
        if values:
            summary[f"{key}_ms"] = distribution(values)
    summary["reasons"] = _reasons(summary, min_quality)
    summary["meets"] = not summary["reasons"]
    # the declared behaviour at capacity: counted late, a reason only through an objective
    if counts[AT_CAPACITY]:
        summary["notes"] = [f"{counts[AT_CAPACITY]} of {len(records)} refused at capacity"]
    return summary


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _reasons(summary: dict[str, Any], min_quality: float | None) -> list[str]:
    reasons = [f"p{o['percentile']:g} "
               + (f"beyond reach: more than {100 - o['percentile']:g} % refused, failed or "
                 "cut" if o["measured_ms"] is None else
                 f"{o['measured_ms']:g} ms > {o['objective_ms']:g} ms")
               for o in summary["objectives"] if not o["met"]]
    quality = summary["quality"]
    if min_quality is not None and quality is not None and quality < min_quality:
        reasons.append(f"quality {quality:.3f} < {min_quality:g}")
    counts, total = summary["outcomes"], summary["requests"]
    for outcome, said in ((APP_ERROR, "failed in the app"), (CUT, "cut (the rate was stopped)")):
        if counts[outcome]:
            reasons.append(f"{counts[outcome]} of {total} {said}")
    return reasons


def choose(results: Sequence[Result]) -> Result | None:
    """The configuration meeting quality and latency with the highest rate; among equals, the lowest
    latency at the strictest objective, then the smaller batch. None when none meets them."""
    meeting = [r for r in results if r["summary"]["meets"]]
    if not meeting:
        return None

    def key(result: Result) -> tuple[float, float, int | None]:
        worst = max((o["measured_ms"] or math.inf) for o in result["summary"]["objectives"])
        return (-result["rate"], worst, result["policy"]["max_batch"])

    return min(meeting, key=key)


def knees(results: Sequence[Result]) -> dict[str, Knee]:
    """Per policy: the highest rate meeting the objectives and the first rate past it that does not
    (the capacity knee: where latency leaves the objective)."""
    out: dict[str, Knee] = {}
    for result in sorted(results, key=lambda r: r["rate"]):
        knee = out.setdefault(result["policy"]["name"], {"highest_met": None, "first_missed": None})
        if result["summary"]["meets"] and knee["first_missed"] is None:
            knee["highest_met"] = result["rate"]
        elif not result["summary"]["meets"] and knee["first_missed"] is None:
            knee["first_missed"] = result["rate"]
    return out
