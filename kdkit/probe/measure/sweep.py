"""Batch-size sweep: each length group of the pilot inputs at each batch size, measured, never averaged.

The pilot's readable inputs are sorted by size and split into groups (short, usual, near the
limit). Each group runs at each batch size, smallest first, through the project's
``predict(items) -> results`` (loaded and fed exactly as the pilot harness does). A cell
records completed inputs, time, items/s, peak memory (``torch.cuda.max_memory_allocated`` on a
GPU, the peak resident set on a CPU) and errors. An out-of-memory error is a limit: it is
caught, memory is freed, the limit is recorded and larger batches of that group are not tried.
Every batch size must give the same outputs, in the same order, as batch size 1.

Standard library only, plus torch where present (lazily): it runs inside the image as
``python -m kdkit.probe.measure.sweep`` and from the bundle's zipapp; ``kdkit sweep`` adds the plot.
"""

from __future__ import annotations

import argparse
import gc
import json
import re
import resource
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kdkit.core.errors import BadInput
from kdkit.core.jsonio import whole_number
from kdkit.core.pilotconfig import PilotConfig, check_device, load_pilot
from kdkit.probe.measure.resume import require_gpu
from kdkit.probe.pilot.harness import Item, Predict, classify_answers, load_entry, read_input, set_device

GROUP_NAMES = {1: ("all",), 2: ("short", "long"), 3: ("short", "usual", "near the limit")}
CLEAR_REFS = Path("/proc/self/clear_refs")
STATUS = Path("/proc/self/status")
Progress = Callable[[str], None]


MAX_BATCH = 1_000_000


def parse_batch_sizes(text: str) -> list[int]:
    """``"1,2,4"`` -> [1, 2, 4]; batch 1 is always added (it is the reference for the order check)."""
    sizes = set()
    for part in text.split(","):
        value = part.strip()
        # ASCII digits ("²".isdigit() is true and int("²") raises), few enough for int() to read.
        if not re.fullmatch(r"[0-9]{1,20}", value) or int(value) < 1:
            raise BadInput(f"--batch-sizes {text[:80]}: {value[:40]!r} is not a positive integer; give e.g. 1,2,4")
        if int(value) > MAX_BATCH:
            raise BadInput(f"--batch-sizes {text[:80]}: {value[:40]} is more than {MAX_BATCH:,}; give batch sizes "
                           "a card can hold, e.g. 1,2,4,8")
        sizes.add(int(value))
    return sorted(sizes | {1})


@dataclass(frozen=True)
class Group:
    name: str
    items: list[Item]

    def describe(self) -> dict[str, Any]:
        sizes = [len(item.text.encode("utf-8")) for item in self.items]
        return {"name": self.name, "ids": [item.doc.id for item in self.items],
                "min_bytes": min(sizes), "max_bytes": max(sizes)}


def split_groups(items: Sequence[Item], count: int) -> list[Group]:
    """Sort by size and cut into ``count`` groups of near-equal length (the larger ones first)."""
    if not 1 <= count <= len(items):
        raise BadInput(f"--groups {count}: must be between 1 and the number of readable inputs ({len(items)})")
    ordered = sorted(items, key=lambda item: (len(item.text.encode("utf-8")), item.doc.id))
    names = GROUP_NAMES.get(count) or tuple(f"group {i + 1}" for i in range(count))
    groups, start = [], 0
    for index in range(count):
        size = len(ordered) // count + (1 if index < len(ordered) % count else 0)
        groups.append(Group(names[index], ordered[start:start + size]))
        start += size
    return groups


# ---------------------------------------------------------------- memory


class Memory:
    """Peak memory per cell: the GPU allocator's peak, or the resident set's high-water mark."""

    def __init__(self, device: str) -> None:
        self.torch: Any = None
        if device.startswith("cuda"):
            import torch

            self.torch = torch
            self.kind = "torch.cuda.max_memory_allocated"
        elif _clear_refs_works():
            self.kind = "peak RSS (VmHWM, reset per cell)"
        else:
            self.kind = "peak RSS of the process (ru_maxrss, not resettable here)"

    def reset(self) -> None:
        gc.collect()
        if self.torch is not None:
            self.torch.cuda.empty_cache()
            self.torch.cuda.reset_peak_memory_stats()
        elif self.kind.startswith("peak RSS (VmHWM"):
            CLEAR_REFS.write_text("5", encoding="ascii")

    def peak(self) -> int:
        if self.torch is not None:
            return int(self.torch.cuda.max_memory_allocated())
        if self.kind.startswith("peak RSS (VmHWM"):
            return _vm_hwm()
        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _vm_hwm() -> int:
    for line in STATUS.read_text(encoding="ascii").splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def _clear_refs_works() -> bool:
    """Linux resets the peak RSS when "5" is written to /proc/self/clear_refs (not in every sandbox)."""
    try:
        CLEAR_REFS.write_text("5", encoding="ascii")
        return _vm_hwm() > 0
    except OSError:
        return False


def is_out_of_memory(exc: BaseException) -> bool:
    """torch.OutOfMemoryError (CUDA and ROCm), or an allocator error that says so."""
    return type(exc).__name__ == "OutOfMemoryError" or isinstance(exc, MemoryError) or (
        "out of memory" in str(exc).lower())


# ---------------------------------------------------------------- one cell


def _outputs(records: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(r.get("id"), r.get("outcome"), r.get("category"), r.get("reason")) for r in records]


def run_cell(predict: Predict, group: Group, size: int, categories: Sequence[str],
             memory: Memory) -> tuple[dict[str, Any], list[tuple[Any, ...]]]:
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
            answers = predict([{"id": item.doc.id, "text": item.text} for item in batch])
            in_predict += time.perf_counter() - called
            got = classify_answers(batch, answers, categories, number)
        except Exception as exc:  # the app's failure is data: recorded, shown, never averaged away
            in_predict += time.perf_counter() - called
            message = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
            if is_out_of_memory(exc):
                limit = f"out of memory at batch {number} ({message})"
                break
            errors.append(f"batch {number}: {message}")
            continue
        records += got
        completed += sum(1 for r in got if r["outcome"] in ("accepted", "rejected"))
    seconds = time.perf_counter() - started
    peak = memory.peak()
    row = {"group": group.name, "batch_size": size, "inputs": len(group.items), "completed": completed,
           "seconds": round(seconds, 6), "items_per_second": round(completed / seconds, 3) if seconds else None,
           "peak_memory_bytes": peak, "errors": len(errors), "first_error": errors[0] if errors else None,
           "limit": limit, "overhead_seconds": round(seconds - in_predict, 6)}
    if limit:
        memory.reset()  # free what the failed batch held before the next group
    return row, _outputs(records)


def _order_check(row: dict[str, Any], outputs: list[tuple[Any, ...]], reference: list[tuple[Any, ...]]) -> None:
    if row["limit"]:
        row["same_as_batch_1"] = None
        return
    row["same_as_batch_1"] = outputs == reference
    if outputs != reference:
        mismatch = next((i for i, (a, b) in enumerate(zip(outputs, reference, strict=False)) if a != b),
                        min(len(outputs), len(reference)))
        got = outputs[mismatch] if mismatch < len(outputs) else ("(nothing)",)
        want = reference[mismatch] if mismatch < len(reference) else ("(nothing)",)
        row["difference"] = f"output {mismatch + 1}: {got[0]} {got[2] or got[3]} vs batch 1: {want[0]} " \
                            f"{want[2] or want[3]}" if len(got) > 1 and len(want) > 1 else \
                            f"output {mismatch + 1}: {got[0]} vs batch 1: {want[0]}"


# ---------------------------------------------------------------- the sweep


def _readable(config: Any) -> tuple[list[Item], list[dict[str, str]]]:
    items, skipped = [], []
    for doc in config.documents:
        got = read_input(doc, config.max_input_bytes)
        if isinstance(got, str):
            skipped.append({"id": doc.id, "reason": got})
        else:
            items.append(got)
    return items, skipped


def _device(wanted: str, where: str) -> str:
    """``auto`` resolved; a ``cuda`` device checked against the GPUs torch sees here."""
    try:
        import torch
    except ImportError:
        require_gpu(wanted, 0, where)
        return "cpu"
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if wanted == "auto":
        return "cuda" if count else "cpu"
    require_gpu(wanted, count, where)
    return wanted


@dataclass(frozen=True)
class SweepPlan:
    """A sweep whose every input is checked (config, inputs, groups, device); nothing has run yet."""

    config: PilotConfig
    batch_sizes: list[int]
    groups: list[Group]
    skipped: list[dict[str, str]]
    device: str


def prepare_sweep(root: Path, batch_sizes: Sequence[int], groups: int = 3, *,
                  device: str | None = None) -> SweepPlan:
    """Read the pilot config and its inputs and split them; BadInput before anything runs or is written."""
    if device is not None:
        check_device(device)
    config = load_pilot(root)
    items, skipped = _readable(config)
    split = split_groups(items, groups)
    where = "--device" if device is not None else f"{config.config_path}: $.device"
    return SweepPlan(config, sorted(batch_sizes), split, skipped, _device(device or config.device, where))


def run_sweep(root: Path, batch_sizes: Sequence[int], groups: int = 3, *, device: str | None = None,
              progress: Progress | None = None) -> dict[str, Any]:
    """The whole sweep for the project at ``root``; ``ok`` is False on a scrambled order or an error."""
    return measure(prepare_sweep(root, batch_sizes, groups, device=device), progress)


def measure(plan: SweepPlan, progress: Progress | None = None) -> dict[str, Any]:
    """Run a prepared sweep: every group at every batch size, smallest first, until a limit."""
    say = progress or (lambda _m: None)
    config, chosen, split, batch_sizes = plan.config, plan.device, plan.groups, plan.batch_sizes
    set_device(chosen)
    predict = load_entry(config.root, config.entry)
    memory = Memory(chosen)
    first = split[0].items[0]
    started = time.perf_counter()
    predict([{"id": first.doc.id, "text": first.text}])  # load the model once, outside the timings
    warmup = time.perf_counter() - started
    rows = []
    for group in split:
        reference: list[tuple[Any, ...]] = []
        for size in batch_sizes:
            say(f"{group.name}: {len(group.items)} inputs at batch size {size}")
            row, outputs = run_cell(predict, group, size, config.categories, memory)
            if size == 1:
                reference = outputs
            _order_check(row, outputs, reference)
            rows.append(row)
            if row["limit"]:
                break
    ok = all(r["errors"] == 0 and r["same_as_batch_1"] is not False for r in rows)
    return {"device": chosen, "memory_kind": memory.kind, "entry": config.entry,
            "batch_sizes": batch_sizes, "groups": [g.describe() for g in split], "skipped": plan.skipped,
            "warmup_seconds": round(warmup, 6), "rows": rows, "ok": ok}


# ---------------------------------------------------------------- python -m kdkit.probe.measure.sweep


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m kdkit.probe.measure.sweep",
                                     description="Batch-size sweep of the pilot inputs by length group.")
    parser.add_argument("project", nargs="?", type=Path, default=Path.cwd(), help="project root (default: cwd)")
    parser.add_argument("--batch-sizes", default="1,2,4", help="comma-separated (default: 1,2,4)")
    parser.add_argument("--groups", type=whole_number("--groups"), default=3, help="length groups (default: 3)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    report = run_sweep(args.project.resolve(), parse_batch_sizes(args.batch_sizes), args.groups,
                       progress=lambda m: print(m, file=sys.stderr))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for row in report["rows"]:
            print(f"{row['group']:<15} batch {row['batch_size']:>4}  {row['completed']}/{row['inputs']} done  "
                  f"{row['items_per_second']} items/s  peak {row['peak_memory_bytes'] / 1e6:.1f} MB  "
                  f"errors {row['errors']}  {row['limit'] or ''}  same order: {row['same_as_batch_1']}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    from kdkit.core.commands import call

    sys.exit(call(main, sys.argv[1:]))
