"""What a check found: one type for every check family, with one line form and one JSON form.

A finding says what was checked (``name``, stable within its ``section``: an acceptance rule's
dotted name, a check point, a kind of difference, a config's JSON path), where (``where``: a file,
a distribution; ``gpu``: a card's index, None for the whole machine), its ``verdict``, the
``reading`` (with its ``unit``) and the ``threshold`` it was judged against when there are some,
``why`` in one line a person reads, ``fix`` (what the user does), ``provider`` (the sentence for a
machine's provider, when it is theirs to fix) and ``source`` (where the threshold or the fact comes
from: a URL, a repository path, "facts").

Made by ``kdkit diagnose --accept`` (its points), diagnose's steps, ``kdkit check`` (its points),
``verify-env`` (its findings) and ``kdkit validate`` (a config's problems and warnings). Standard
library only, and imports nothing at start-up: the in-container commands
build findings (kdkit.core.record says why a record is not a NamedTuple).
"""

from __future__ import annotations

from kdkit.core.record import Record

TYPE_CHECKING = False  # typing is not imported at start-up (kdkit.core.commands says why)
if TYPE_CHECKING:
    from typing import Any

# Every verdict a finding can carry, and how the text printer shows it. ok: holds. info: a fact
# with no verdict. note: holds if the user confirms it. skip: not checked here. unknown: cannot be
# shown to hold (no threshold applies, or the reading could not be taken). warn: holds, with a
# caution. degraded: works below what was paid for. fail: does not hold. refuse: the machine should
# go back. Each family uses its own subset (kdkit.probe.diagnose.points.VERDICTS for acceptance,
# checked where the machine's verdict is made).
# The sections whose findings are measurements: there a missing reading is said ("not read").
MEASURED = ("health", "load")
SHOWN = {"ok": "ok", "info": "info", "note": "note", "skip": "skip", "unknown": "?", "warn": "WARN",
         "degraded": "DEGRADED", "fail": "FAIL", "refuse": "REFUSE"}
VERDICTS = tuple(SHOWN)


class Finding(Record):
    """One finding (the module says what each field holds). ``verdict`` must be one of
    VERDICTS."""

    __slots__ = ("section", "name", "gpu", "reading", "unit", "threshold",  # noqa: RUF023 (order)
                 "verdict", "why", "fix", "provider", "source", "where")

    def __init__(self, section: str, name: str, gpu: int | None, reading: Any, unit: str,
                 threshold: str | None, verdict: str, why: str, fix: str | None = None,
                 provider: str | None = None, source: str | None = None,
                 where: str | None = None) -> None:
        if verdict not in SHOWN:
            raise ValueError(f"verdict {verdict!r} is not one of {VERDICTS}")
        self.section, self.name, self.gpu = section, name, gpu
        self.reading, self.unit, self.threshold = reading, unit, threshold
        self.verdict, self.why, self.fix = verdict, why, fix
        self.provider, self.source, self.where = provider, source, where


def shown(reading: Any, unit: str) -> str:
    """A reading for a person: a figure to 4 digits, a series by its length (kept whole in the JSON
    form)."""
    if reading is None:
        return "not read"
    if isinstance(reading, list):
        return f"{len(reading)} values (in acceptance.json)"  # only acceptance reads series
    if isinstance(reading, dict):
        text = ", ".join(f"{key} {shown(value, '')}" for key, value in reading.items())
    elif isinstance(reading, float):
        text = f"{reading:.4g}"
    else:
        text = str(reading)
    return f"{text} {unit}".strip()


def place(finding: Finding) -> str:
    """Where a finding is, in a word: its ``where``, else its card (``gpu0``), else ``machine`` for
    a measurement of the whole machine, else ``-`` (a check point of the order, a diagnose step)."""
    if finding.where is not None:
        return finding.where
    if finding.gpu is not None:
        return f"gpu{finding.gpu}"
    return "machine" if finding.section in MEASURED else "-"


def finding_line(finding: Finding) -> str:
    """The one text form: ``VERDICT  place  name = reading (threshold T): why``; the reading where
    there is one or a MEASURED section misses it, the threshold where there is one."""
    measured = finding.reading is not None or finding.section in MEASURED
    reading = f" = {shown(finding.reading, finding.unit)}" if measured else ""
    rule = f" (threshold {finding.threshold})" if finding.threshold else ""
    head = f"{SHOWN[finding.verdict]:<8} {place(finding):<7} {finding.name}"
    return f"{head}{reading}{rule}: {finding.why}"


def finding_json(finding: Finding) -> dict[str, Any]:
    """The one JSON form: every field by name, with a reading's NaN or infinity as null (JSON has
    neither)."""
    return {name: finite(value) for name, value in finding._asdict().items()}


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinity replaced by None: a JSON document stays valid
    JSON."""
    import math

    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    return value
