"""What `kdkit diagnose --accept` judges: one point per reading (a fact the driver or a measurement gave),
its threshold, its verdict, and what to do or to tell the provider; and how points make the machine's
verdict. Standard library only.

The thresholds are data: ``kdkit/data/acceptance.json``, each with the public source it was read in,
overridable per project (kdkit.json ``"acceptance"``). A reading kdkit has no threshold for (an unknown
card, a field the driver does not give) is reported as read, with the verdict ``unknown`` or ``info``:
never an invented threshold.
"""

from __future__ import annotations

from kdkit.core.record import Record

TYPE_CHECKING = False  # typing is not imported at start-up (kdkit.core.commands says why)
if TYPE_CHECKING:
    from typing import Any

ACCEPTANCE = "data/acceptance.json"  # inside the kdkit package; travels (kdkit.core.layout.DATA)

# A point's verdict. ok: within its threshold. info: a fact with no verdict (a MIG slice, the driver
# version). unknown: no threshold applies (an unknown card) or the reading could not be taken ("[N/A]",
# "[Insufficient Permissions]"): reported, never judged. degraded: the card works below what was paid for
# (throttling, a PCIe link trained at x8, a pending row remap). refuse: the machine should go back (an
# uncorrectable ECC error, a failed row remap, silent data corruption, no GPU).
VERDICTS = ("ok", "info", "unknown", "degraded", "refuse")
# The machine's verdict, from its worst point.
MACHINE = {"refuse": "refuse", "degraded": "degraded"}  # anything else: accept


class Point(Record):
    """One judged reading.

    ``section``: "steps" (today's diagnose), "health" (the driver's facts, before and without torch) or
    "load" (under sustained load). ``name``: a stable dotted name (``ecc.volatile_uncorrected``,
    ``pcie.width``, ``load.throughput_drop``). ``gpu``: the card's index, None for the whole machine.
    ``reading``: as read (a number, a string, a bool, None when it could not be read), with ``unit``.
    ``threshold``: the rule in words (``"0"``, ``">= 0.9 of the first 10 %"``), None without one.
    ``verdict``: one of VERDICTS. ``why``: one line a person reads. ``fix``: what the user does, when
    something can be done on this machine. ``provider``: the sentence for the provider, when it is
    theirs to fix. ``source``: where the threshold comes from (a URL or a repository path).
    """

    __slots__ = ("section", "name", "gpu", "reading", "unit", "threshold", "verdict",  # noqa: RUF023 (order)
                 "why", "fix", "provider", "source")

    def __init__(self, section: str, name: str, gpu: int | None, reading: Any, unit: str, threshold: str | None,
                 verdict: str, why: str, fix: str | None = None, provider: str | None = None,
                 source: str | None = None) -> None:
        if verdict not in VERDICTS:
            raise ValueError(f"verdict {verdict!r} is not one of {VERDICTS}")
        self.section, self.name, self.gpu, self.reading, self.unit = section, name, gpu, reading, unit
        self.threshold, self.verdict, self.why = threshold, verdict, why
        self.fix, self.provider, self.source = fix, provider, source


def machine_verdict(points: list[Point]) -> str:
    """accept, degraded or refuse: the worst point decides; no point at all is no evidence (refuse)."""
    if not points:
        return "refuse"
    worst = max(VERDICTS.index(point.verdict) for point in points)
    return MACHINE.get(VERDICTS[worst], "accept")


def reasons(points: list[Point]) -> list[Point]:
    """The points that make the verdict what it is: every refuse point, else every degraded one."""
    for level in ("refuse", "degraded"):
        chosen = [point for point in points if point.verdict == level]
        if chosen:
            return chosen
    return []


def thresholds(overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The shipped thresholds (``kdkit/data/acceptance.json``), each ``{"value": ..., "source": ...}``
    under its section and name, with a project's ``overrides`` (kdkit.json ``"acceptance"``: the same
    shape, ``source`` optional) laid over them; an overridden threshold's source says so."""
    from kdkit.core.builds import shipped_data

    merged: dict[str, Any] = {section: dict(rules) for section, rules in shipped_data(ACCEPTANCE).items()
                              if isinstance(rules, dict)}
    for section, rules in (overrides or {}).items():
        for name, rule in rules.items():
            base = merged.setdefault(section, {}).get(name, {})
            merged[section][name] = {**base, **rule, "source": rule.get("source", "kdkit.json (this project)")}
    return merged
