"""The sweep's own overhead over the work it times.

Runs `kdkit.probe.measure.sweep.run_sweep` on a freshly scaffolded project (the template's real
classifier, CPU), batch sizes 1,2,4,8, three groups, several times. In every cell the sweep
times the calls to predict() and, separately, the whole cell (reading answers, checking
them, memory resets, bookkeeping); overhead = cell time - time inside predict(). Medians over
runs of the total overhead, the total timed work, and their ratio.

    .venv/bin/python bench/bench_sweep.py [--runs 5]

Writes bench/results/sweep.json and prints a short table.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from _common import machine, medians, print_medians, write_result

from kdkit.probe.measure.sweep import run_sweep
from kdkit.project.init import init_project


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-sweep.") as tmp:
        root = init_project(Path(tmp) / "proj", name="proj", backend="cpu")
        for _ in range(args.runs):
            started = time.perf_counter()
            report = run_sweep(root, [1, 2, 4, 8], 3, device="cpu")
            wall = time.perf_counter() - started
            cells = sum(r["seconds"] for r in report["rows"])
            overhead = sum(r["overhead_seconds"] for r in report["rows"])
            rows.append({"wall_seconds": wall, "cell_seconds": cells, "overhead_seconds": overhead,
                         "timed_work_seconds": cells - overhead,
                         "warmup_seconds": report["warmup_seconds"]})
    median = medians({key: [r[key] for r in rows] for key in rows[0]})
    ratio = median["overhead_seconds"] / median["timed_work_seconds"]
    write_result("sweep",
                 {"runs": args.runs, "cells": 12,
                  "median": {k: round(v, 6) for k, v in median.items()},
                  "overhead_over_timed_work": round(ratio, 4), "all_runs": rows,
                  "machine": machine()})
    print_medians(f"median over {args.runs} runs", "seconds", median, width=28, digits=4)
    print(
        f"\nsweep overhead = {ratio:.1%} of the timed predict() work (12 cells, 11 inputs each "
        "size)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
