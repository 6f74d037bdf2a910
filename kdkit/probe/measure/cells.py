"""The sweep's cells (kdkit.probe.measure.sweep): the pilot inputs split by size into length
groups, and one group run at one batch size through the app's ``predict`` as the pilot hands it its
items, timed, its peak memory read, an out-of-memory error kept as the cell's limit, its outputs
compared with batch 1's.

Standard library only, plus torch through kdkit.probe.measure.memory where present.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kdkit.core.errors import BadInput
from kdkit.core.pilotconfig import Output
from kdkit.probe.measure.memory import Memory, is_out_of_memory
from kdkit.probe.pilot.harness import Item, Predict, classify_answers

if TYPE_CHECKING:
    from typing import NotRequired, TypedDict

    class GroupInfo(TypedDict):
        """One length group as the sweep's report names it (``Group.describe``)."""

        name: str
        ids: list[str]
        min_bytes: int
        max_bytes: int

    class SweepCell(TypedDict):
        """One cell of the sweep: a group at a batch size (a row of the report)."""

        group: str
        batch_size: int
        inputs: int
        completed: int
        seconds: float
        items_per_second: float | None
        peak_memory_bytes: int
        errors: int
        first_error: str | None
        limit: str | None
        overhead_seconds: float
        same_as_batch_1: NotRequired[bool | None]  # set by check_order
        difference: NotRequired[str]  # set by check_order where the outputs differ

GROUP_NAMES = {1: ("all",), 2: ("short", "long"), 3: ("short", "usual", "near the limit")}


@dataclass(frozen=True)
class Group:
    name: str
    items: list[Item]

    def describe(self) -> GroupInfo:
        sizes = [len(item.payload) for item in self.items]
        return {"name": self.name, "ids": [item.doc.id for item in self.items],
                "min_bytes": min(sizes), "max_bytes": max(sizes)}


def split_groups(items: Sequence[Item], count: int) -> list[Group]:
    """Sort by size and cut into ``count`` groups of near-equal length (the larger ones first)."""
    if not 1 <= count <= len(items):
        raise BadInput(
            f"--groups {count}: must be between 1 and the number of readable inputs ({len(items)})")
    ordered = sorted(items, key=lambda item: (len(item.payload), item.doc.id))
    names = GROUP_NAMES.get(count) or tuple(f"group {i + 1}" for i in range(count))
    groups, start = [], 0
    for index in range(count):
        size = len(ordered) // count + (1 if index < len(ordered) % count else 0)
        groups.append(Group(names[index], ordered[start:start + size]))
        start += size
    return groups


# ---------------------------------------------------------------- one cell


def _outputs(records: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(r.get("id"), r.get("outcome"), r.get("category"), r.get("reason"), r.get("output"))
            for r in records]


def run_cell(predict: Predict, group: Group, size: int, output: Output,
             memory: Memory) -> tuple[SweepCell, list[tuple[Any, ...]]]:
    """Run one group at one batch size; return the row and the outputs in order."""
    memory.reset()
    records: list[dict[str, Any]] = []
    errors: list[str] = []
    completed, limit, in_predict = 0, None, 0.0
    started = time.perf_counter()
    for number, first in enumerate(range(0, len(group.items), size)):
        batch = group.items[first:first + size]
        called = time.perf_counter()
        try:
            answers = predict([item.app_item() for item in batch])  # as the pilot hands them
            in_predict += time.perf_counter() - called
            got = classify_answers(batch, answers, output, number)
        except Exception as exc:  # the app's failure is data: recorded, shown, never averaged away
            in_predict += time.perf_counter() - called
            message = (
                f"{type(exc).__name__}: "
                f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''}")
            if is_out_of_memory(exc):
                limit = f"out of memory at batch {number} ({message})"
                break
            errors.append(f"batch {number}: {message}")
            continue
        records += got
        completed += sum(1 for r in got if r["outcome"] in ("accepted", "rejected"))
    seconds = time.perf_counter() - started
    peak = memory.peak()
    row: SweepCell = {"group": group.name, "batch_size": size, "inputs": len(group.items),
                      "completed": completed,
                      "seconds": round(seconds, 6),
                      "items_per_second": round(completed / seconds, 3) if seconds else None,
                      "peak_memory_bytes": peak, "errors": len(errors),
                      "first_error": errors[0] if errors else None,
                      "limit": limit, "overhead_seconds": round(seconds - in_predict, 6)}
    if limit:
        memory.reset()  # free what the failed batch held before the next group
    return row, _outputs(records)


def check_order(row: SweepCell, outputs: list[tuple[Any, ...]],
                reference: list[tuple[Any, ...]]) -> None:
    """Mark ``row`` with whether its outputs are batch 1's, in batch 1's order, and where they first
    differ; a cell ended by its limit is not compared."""
    if row["limit"]:
        row["same_as_batch_1"] = None
        return
    row["same_as_batch_1"] = outputs == reference
    if outputs != reference:
        mismatch = next((i for i,
                         (a, b) in enumerate(zip(outputs, reference, strict=False)) if a != b),
                        min(len(outputs), len(reference)))
        got = outputs[mismatch] if mismatch < len(outputs) else ("(nothing)",)
        want = reference[mismatch] if mismatch < len(reference) else ("(nothing)",)
        row["difference"] = (f"output {mismatch + 1}: {got[0]} {got[2] or got[3]} vs batch 1: "
                             f"{want[0]} {want[2] or want[3]}" if len(got) > 1 and len(want) > 1
                             else
                             f"output {mismatch + 1}: {got[0]} vs batch 1: {want[0]}")
