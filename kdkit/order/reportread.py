"""``kdkit plan --from-report``: the measured hours a closed campaign's report holds, read
tolerantly.

Where a campaign report (`kdkit close`, kdkit.order.close) may hold its measured hours, read in this
order: the total, then per stage (the schedule's stage names, else the kind of work: build, pilot,
train, ...). A report of an older or newer kdkit may hold some and not others; what was read, and
where, is recorded with the plan. A stage measured at 0 h did not run: its planned hours are kept.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.core.errors import BadInput
from kdkit.core.jsonio import load_json, sha256_file
from kdkit.order.schedule import as_number

if TYPE_CHECKING:
    from typing import TypedDict

    class ReplacedStage(TypedDict):
        """A stage of the schedule whose planned machine hours the measured ones replace."""

        stage: str
        planned: float
        measured: float

    class ReportRecord(TypedDict):
        """What ``--from-report`` read and where, recorded with the plan."""

        file: str
        sha256: str
        observed_hours: float | None
        observed_from: str | None
        stages_from: str | None
        stages: dict[str, float]
        replaced: list[ReplacedStage]
        unmatched: list[str]

MAX_HOURS = 365 * 24  # a year of machine time: the most any plan books (kdkit plan --hours too)

REPORT_TOTALS = (("measured_durations", "observed_hours"), ("work", "observed_hours"),
                 ("hours", "observed"),
                 ("observed", "hours"), ("observed",))
REPORT_STAGES = (("measured_durations", "by_stage"), ("stages",), ("hours", "stages"),
                 ("hours", "by_stage"),
                 ("measured_durations", "by_kind"), ("work", "by_kind"))
_HOUR_KEYS = ("observed", "observed_hours", "hours")
_NAME_KEYS = ("stage", "name", "variant")


def _at(data: Any, keys: tuple[str, ...]) -> Any:
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None
    return data


def _measured(value: Any) -> Decimal | None:
    """A measured figure in hours: a finite number, at least 0 (a dict holding one under an hours
    key)."""
    if isinstance(value, dict):
        value = next((value[k] for k in _HOUR_KEYS if k in value), None)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    hours = Decimal(str(value))
    return hours if hours.is_finite() and 0 <= hours <= MAX_HOURS else None


def _measured_stage(value: Any) -> Decimal | None:
    hours = _measured(value)
    return hours if hours is not None and hours > 0 else None


def _stage_pairs(found: Any) -> list[tuple[Any, Any]]:
    if isinstance(found, dict):
        return list(found.items())
    if isinstance(found, list):
        return [(next((item[k] for k in _NAME_KEYS if k in item), None), item)
                for item in found if isinstance(item, dict)]
    return []


def read_report(path: Path) -> tuple[Decimal | None, dict[str, Decimal], ReportRecord]:
    """``--from-report FILE``: (observed hours in all, measured hours per stage, what was read and
    where)."""
    data = load_json(path, what="campaign report")
    if not isinstance(data, dict) or data.get("kdkit_report") != 1:
        raise BadInput(
            f"{path}: $.kdkit_report: not a kdkit campaign report; write one with `kdkit close`")
    total, total_at = None, None
    for keys in REPORT_TOTALS:
        if (total := _measured(_at(data, keys))) is not None:
            total_at = "$." + ".".join(keys)
            break
    stages: dict[str, Decimal] = {}
    stages_at = None
    for keys in REPORT_STAGES:
        pairs = [(n, h) for n, raw in _stage_pairs(_at(data, keys)) if isinstance(n, str)
                 and (h := _measured_stage(raw)) is not None]
        if pairs:
            stages, stages_at = dict(pairs), "$." + ".".join(keys)
            break
    record: ReportRecord = {
        "file": str(path), "sha256": sha256_file(path),
        "observed_hours": None if total is None else as_number(total),
        "observed_from": total_at, "stages_from": stages_at,
        "stages": {n: as_number(h) for n, h in stages.items()},
        "replaced": [], "unmatched": []}
    return total, stages, record
