"""Batch-size sweep: each length group of the pilot inputs at each batch size, measured, never
averaged.

The pilot's readable inputs are sorted by size and split into groups (short, usual, near the
limit). Each group runs at each batch size, smallest first, through the project's
``predict(items) -> results`` (loaded and fed exactly as the pilot harness does). A cell
records completed inputs, time, items/s, peak memory (``torch.cuda.max_memory_allocated`` on a
GPU, the peak resident set on a CPU) and errors. An out-of-memory error is a limit: it is
caught, memory is freed, the limit is recorded and larger batches of that group are not tried.
Every batch size must give the same outputs, in the same order, as batch size 1.

Standard library only, plus torch where present and matplotlib for --plot (both lazily): the same
command is ``kdkit sweep`` on the host, ``python -m kdkit.probe sweep`` inside the image and
``python3 kdkit.pyz sweep`` from the bundle's zipapp.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.core.errors import BadInput
from kdkit.core.jsonio import atomic_write_json
from kdkit.core.parsers import add_json, command_parser
from kdkit.core.pilotconfig import PilotConfig, check_device, load_pilot
from kdkit.core.projectfiles import project_root
from kdkit.core.runfolder import new_run_folder, new_run_id
from kdkit.core.runstrays import SWEEP_SCRATCH
from kdkit.core.staging import require_writable
from kdkit.probe.measure.cells import Group, check_order, run_cell, split_groups
from kdkit.probe.measure.memory import Memory
from kdkit.probe.measure.options import (
    Count,
    add_project,
    parse,
    require_gpu,
    say,
    seconds_text,
    show,
    text_table,
)
from kdkit.probe.measure.plot import check_plot_path, sweep_plot, written
from kdkit.probe.measure.torchimport import import_torch
from kdkit.probe.pilot.harness import Item, Predict, load_entry, set_device, with_params
from kdkit.probe.pilot.inputs import Reader, Reading

if TYPE_CHECKING:
    from kdkit.core.report import Progress
    from kdkit.probe.measure.cells import SweepCell
    from kdkit.probe.measure.records import SweepReport

MAX_BATCH = 1_000_000


def parse_batch_sizes(text: str) -> list[int]:
    """``"1,2,4"`` -> [1, 2, 4]; batch 1 is always added (it is the reference for the order
    check)."""
    sizes = set()
    for part in text.split(","):
        value = part.strip()
        # ASCII digits ("²".isdigit() is true and int("²") raises), few enough for int() to read.
        if not re.fullmatch(r"[0-9]{1,20}", value) or int(value) < 1:
            raise BadInput(
                f"--batch-sizes {text[:80]}: {value[:40]!r} is not a positive integer; give e.g. "
                "1,2,4")
        if int(value) > MAX_BATCH:
            raise BadInput(f"--batch-sizes {text[:80]}: {value[:40]} is more than {MAX_BATCH:,}; "
                           "give batch sizes a card can hold, e.g. 1,2,4,8")
        sizes.add(int(value))
    return sorted(sizes | {1})


# ---------------------------------------------------------------- the sweep


def readable_items(config: Any) -> tuple[list[Item], list[dict[str, str]]]:
    """The pilot's inputs this harness can read (as the pilot reads them), and the others with their
    reason."""
    items, skipped = [], []
    with Reader(Reading.of(config, follow_links=False)) as reader:
        for doc in config.documents:
            got = reader.read(doc)
            if isinstance(got, str):
                skipped.append({"id": doc.id, "reason": got})
            else:
                items.append(got)
    return items, skipped


def pick_device(wanted: str, where: str) -> str:
    """``auto`` resolved; a ``cuda`` device checked against the GPUs torch sees here."""
    try:
        # its numpy warning said once, in words (kdkit.probe.measure.torchimport)
        torch = import_torch("sweep")
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
    """A sweep whose every input is checked (config, inputs, groups, device); nothing has run
    yet."""

    config: PilotConfig
    batch_sizes: list[int]
    groups: list[Group]
    skipped: list[dict[str, str]]
    device: str


def prepare_sweep(root: Path, batch_sizes: Sequence[int], groups: int = 3, *,
                  device: str | None = None) -> SweepPlan:
    """Read the pilot config and its inputs and split them; BadInput before anything runs or is
    written."""
    if device is not None:
        check_device(device)
    config = load_pilot(root)
    items, skipped = readable_items(config)
    split = split_groups(items, groups)
    where = "--device" if device is not None else f"{config.config_path}: $.device"
    return SweepPlan(config, sorted(batch_sizes), split, skipped,
                     pick_device(device or config.device, where))


def run_sweep(root: Path, batch_sizes: Sequence[int], groups: int = 3, *, device: str | None = None,
              progress: Progress | None = None) -> SweepReport:
    """The whole sweep for the project at ``root``; ``ok`` is False on a scrambled order or an
    error."""
    return measure(prepare_sweep(root, batch_sizes, groups, device=device), progress)


def measure(plan: SweepPlan, progress: Progress | None = None) -> SweepReport:
    """Run a prepared sweep: every group at every batch size, smallest first, until a limit."""
    say = progress or (lambda _m: None)
    config, chosen = plan.config, plan.device
    set_device(chosen)
    # the pilot's params, if it takes them
    predict = with_params(load_entry(config.root, config.entry), config.params)
    if config.output.kind != "file":
        return _measure(plan, predict, say)
    config.runs_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=config.runs_dir, prefix=SWEEP_SCRATCH) as scratch:
        return _measure(plan, with_out_dirs(predict, Path(scratch)), say)


def with_out_dirs(predict: Predict, scratch: Path) -> Predict:
    """A file-kind app as the sweep calls it: each item handed an empty out_dir of its own under
    ``scratch`` (the sweep times the app; its files are not kept)."""

    def call(items: list[dict[str, Any]]) -> Any:
        for number, item in enumerate(items):
            folder = scratch / str(number)
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            item["out_dir"] = str(folder)
        return predict(items)

    return call


def _measure(plan: SweepPlan, predict: Predict, say: Progress) -> SweepReport:
    config, chosen, split, batch_sizes = plan.config, plan.device, plan.groups, plan.batch_sizes
    memory = Memory(chosen)
    first = split[0].items[0]
    started = time.perf_counter()
    predict([first.app_item()])  # load the model once, outside the timings
    warmup = time.perf_counter() - started
    rows: list[SweepCell] = []
    for group in split:
        reference: list[tuple[Any, ...]] = []
        for size in batch_sizes:
            say(f"{group.name}: {len(group.items)} inputs at batch size {size}")
            row, outputs = run_cell(predict, group, size, config.output, memory)
            if size == 1:
                reference = outputs
            check_order(row, outputs, reference)
            rows.append(row)
            if row["limit"]:
                break
    ok = all(r["errors"] == 0 and r["same_as_batch_1"] is not False for r in rows)
    return {"device": chosen, "memory_kind": memory.kind, "entry": config.entry,
            "batch_sizes": batch_sizes, "groups": [g.describe() for g in split],
            "skipped": plan.skipped,
            "warmup_seconds": round(warmup, 6), "rows": rows, "ok": ok}


# ---------------------------------------------------------------- kdkit sweep


DESCRIPTION = """\
Find the batch size from measurements: each length group at each batch size.

The pilot inputs are split by size into groups (short, usual, near the limit); each
group runs at each batch size through the project's predict(items), recording
completed inputs, time, items/s, peak memory (max_memory_allocated on a GPU, peak RSS
on a CPU) and errors. An out-of-memory error is the limit: it is caught, memory is
freed, and larger batches of that group are not tried. Failures are shown row by row,
never averaged; every batch size must give batch 1's outputs in batch 1's order.
Saved to runs/sweep-<time>/sweep.json. Exit 1 on an error or a changed order."""
RUNS = "runs folder (pilot config's runs)"
EPILOG = "example:\n  kdkit sweep --batch-sizes 1,2,4,8,16 --plot sweep.png"


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser("sweep", DESCRIPTION, EPILOG)
    add_project(parser)
    parser.add_argument("--batch-sizes", default="1,2,4", metavar="N,N,...",
                        help="comma-separated positive integers; 1 is always run, the reference "
                             "for the order check (default: 1,2,4)")
    parser.add_argument("--groups", type=Count("--groups", "3"), default=3, metavar="N",
                        help="length groups the inputs are split into (default: 3)")
    parser.add_argument("--device", default=None,
                        help="auto, cpu, cuda or cuda:N (default: the pilot config's device)")
    parser.add_argument("--plot", type=Path, default=None, metavar="PNG",
                        help=(
                            "write a PNG: throughput and peak memory against batch size, one line "
                            "per group"))
    parser.add_argument("--force",
                        action="store_true", help="with --plot: replace an existing file")
    add_json(parser)
    return parser


def sweep(args: argparse.Namespace, progress: Progress | None = None) -> SweepReport:
    """Check every option and input before anything runs or is written, run the sweep, keep it in
    runs/sweep-<time>/sweep.json and draw the plot when asked; return the report."""
    sizes = parse_batch_sizes(args.batch_sizes)
    if args.groups < 1:
        raise BadInput(f"--groups {args.groups}: must be a positive integer")
    if args.device is not None:
        check_device(args.device)
    plot = check_plot_path(args.plot, args.force)
    prepared = prepare_sweep(project_root(args.project_dir), sizes, args.groups, device=args.device)
    runs = prepared.config.runs_dir
    require_writable(runs / new_run_id("sweep"), RUNS)  # refused before the work, made after it
    report = measure(prepared, progress)
    started = time.perf_counter()
    out = new_run_folder(runs, "sweep", RUNS) / "sweep.json"
    report["out"] = str(out)
    written(out, lambda: atomic_write_json(out, report))
    if plot is not None:
        written(plot, lambda: sweep_plot(report, plot))
        report["plot"] = str(plot)
    report["report_seconds"] = round(time.perf_counter() - started, 3)
    return report


def _failed_batches(row: SweepCell) -> int:
    """The batches that failed in a cell: its errors, and the out-of-memory batch that set its limit
    (a limit ends the cell without failing the sweep, but the batch did fail)."""
    return int(row["errors"]) + (1 if row["limit"] else 0)


def render(report: SweepReport) -> str:
    """The report as a person reads it: one row per cell, failures in their own row."""
    rows = [
        ["group", "batch", "done", "time", "items/s", "peak memory", "errors", "same as batch 1"]]
    for row in report["rows"]:
        problem = row["limit"] or row["first_error"] or ""
        same = {True: "yes",
                False: f"NO: {row.get('difference', '')}", None: "-"}[row["same_as_batch_1"]]
        rows.append([row["group"], str(row["batch_size"]), f"{row['completed']}/{row['inputs']}",
                     seconds_text(row["seconds"]), f"{row['items_per_second'] or 0:.1f}",
                     f"{row['peak_memory_bytes'] / 1e6:.1f} MB",
                     f"{_failed_batches(row)} {problem}".strip(), same])
    groups = "; ".join(f"{g['name']} {g['min_bytes']}-{g['max_bytes']} B ({len(g['ids'])})"
                       for g in report["groups"])
    lines = [f"Batch-size sweep of {report['entry']} on {report['device']}",
             text_table(rows, right=frozenset(range(1, 6))),
             f"Peak memory: {report['memory_kind']}. Groups: {groups}"]
    lines += [f"Not swept: {skipped['id']}: {skipped['reason']}" for skipped in report["skipped"]]
    lines.append(f"Saved {report['out']}"
                 + (f"; plot {report['plot']}" if report.get("plot") else ""))
    return "\n".join(lines)


def failure(report: SweepReport) -> str:
    """The first row that failed: an error, or outputs that differ from batch 1's."""
    bad = next(r for r in report["rows"] if r["errors"] or r["same_as_batch_1"] is False)
    what = bad["first_error"] or f"outputs differ from batch 1 ({bad.get('difference')})"
    return f"sweep: group {bad['group']!r} at batch size {bad['batch_size']}: {what}"


def main(argv: list[str]) -> int:
    args = parse(build_parser(), argv)
    report = sweep(args, progress=say)
    return show(report, args.json, render, "" if report["ok"] else failure(report))


if __name__ == "__main__":
    from kdkit.core.commands import call

    sys.exit(call(main, sys.argv[1:]))
