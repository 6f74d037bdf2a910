"""`kdkit run` against the plain `docker run` of the same container (what `kdkit run --print` prints).

On a scaffolded cpu project built offline (see bench_build.py), both run the image's default
command (diagnose, verify-env against the baked lock, the 12-document pilot) with network
none; both must pass. Runs alternate between the two, as fresh processes; medians of several
runs. The ratio is kdkit's median over docker's: what kdkit's host checks, engine queries
and Python start-up add around the same container.

    .venv/bin/python bench/bench_run.py [--runs 5]

Needs an engine and the base image (`make engine`). Writes bench/results/run.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_build import BASE, KDKIT, REPO, build, kdkit, prepare_project

from kdkit.core import proc


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    done = proc.run(argv, timeout=600)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{argv[:3]} exited {done.returncode}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="runs of each (default 5)")
    args = parser.parse_args()
    times: dict[str, list[float]] = {"kdkit run": [], "docker run (--print)": []}
    with tempfile.TemporaryDirectory(prefix="kdkit-bench-run-") as tmp:
        project, wheelhouse = prepare_project(Path(tmp))
        _seconds, image = build(project, wheelhouse)
        kdkit("run", project)  # first run: runs/ is prepared, caches are warm for both
        lines = kdkit("run", project, "--print").stdout.strip().splitlines()
        plain = ["sh", "-c", " && ".join(lines)]
        for _ in range(args.runs):
            times["kdkit run"].append(timed([KDKIT, "run", str(project)]))
            times["docker run (--print)"].append(timed(plain))
    medians = {name: statistics.median(values) for name, values in times.items()}
    ratio = medians["kdkit run"] / medians["docker run (--print)"]
    result = {"image": image["tag"], "base_image": BASE, "cpus": os.cpu_count(), "command": lines[-1],
              "times": {k: [round(t, 3) for t in v] for k, v in times.items()},
              "median_s": {k: round(v, 3) for k, v in medians.items()},
              "kdkit_over_docker": round(ratio, 3),
              "kdkit_added_s": round(medians["kdkit run"] - medians["docker run (--print)"], 3)}
    out = REPO / "bench" / "results" / "run.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"{'how':<22} {'median s':>9}")
    for name, value in medians.items():
        print(f"{name:<22} {value:>9.2f}")
    print(f"kdkit/docker: {ratio:.2f}x (+{result['kdkit_added_s']:.2f} s)   written to {out.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
