"""`kdkit train`: the harness's overhead per step on the template's loop, against the loop alone. Goal: <= 2 %.

On a scaffolded project (`kdkit init`, its src/train.py on CPU torch), the loop runs R times alone
(`python -m src.train --steps N --metrics M`) and R times under `kdkit train -- ...`; each run's median step time
comes from the loop's own --metrics ("step_seconds", measured around the optimizer step, so it shows what the
supervisor's work on other cores costs the loop). The one thing the harness adds inside the loop's step,
trainapi.report(), is timed apart (a pipe drained by a reader thread, as kdkit train does). Overhead per step =
(median harnessed step + report cost) / median step alone - 1.

    .venv/bin/python bench/bench_train.py [--steps 60] [--runs 5] [--threads N]

Both ways the loop's torch gets --threads (default: the cores less one, as on a GPU machine, where the step
runs on the card and a core is free for the supervisor; with every core the loop alone is preempted by any
neighbour, the supervisor included).

Writes bench/results/train.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _common import BIN, machine, write_result


def loop_step(project: Path, harnessed: bool, steps: int, out: Path, threads: int) -> float:
    loop = ["--steps", str(steps), "--metrics", str(out), "--device", "cpu"]
    argv = ([str(BIN / "kdkit"), "train", "--", *loop] if harnessed
            else [sys.executable, "-m", "src.train", *loop])
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    subprocess.run(argv, cwd=project, check=True, capture_output=True, timeout=1800, env=env)
    return float(json.loads(out.read_text())["step_seconds"])


def report_cost(calls: int = 20000) -> float:
    """Seconds per trainapi.report() call, its pipe drained by a thread."""
    read_end, write_end = os.pipe()
    os.environ["KDKIT_TRAIN_RUN"], os.environ["KDKIT_TRAIN_FD"] = "/nonexistent", str(write_end)
    from kdkit.core import trainapi

    drain = threading.Thread(
        target=lambda: [None for _ in iter(lambda: os.read(read_end, 1 << 16), b"")], daemon=True)
    drain.start()
    started = time.perf_counter()
    for step in range(calls):
        trainapi.report(step, loss=0.5, lr=1e-3, samples_per_s=100.0, peak_memory_bytes=1 << 30)
    seconds = (time.perf_counter() - started) / calls
    os.close(write_end)
    drain.join(5)
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 2) - 1),
                        help=(
                            "torch's threads (OMP_NUM_THREADS), both ways; default: one core left "
                            "to the supervisor"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([str(BIN / "kdkit"), "init", "p", "--backend", "cpu"], cwd=tmp, check=True,
                       capture_output=True)
        project = Path(tmp) / "p"
        alone, harnessed = [], []
        for run in range(args.runs):  # interleaved, so a neighbour's load falls on both alike
            alone.append(
                loop_step(project, False, args.steps,
                          Path(tmp) / f"alone-{run}.json", args.threads))
            harnessed.append(
                loop_step(project, True, args.steps,
                          Path(tmp) / f"harnessed-{run}.json", args.threads))
    report = report_cost()
    step_alone, step_harnessed = statistics.median(alone), statistics.median(harnessed)
    overhead = (step_harnessed + report) / step_alone - 1
    result: dict[str, Any] = {
        "machine": machine(load=True), "steps": args.steps, "runs": args.runs,
        "torch_threads": args.threads,
        "step_seconds_alone": alone, "step_seconds_harnessed": harnessed, "report_seconds": report,
        "report_share": round(report / step_alone, 6), "overhead_share": round(overhead, 5),
        "goal": 0.02,
        "met": overhead <= 0.02}
    print(json.dumps(result, indent=2))
    write_result("train", result)
    return 0 if result["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
