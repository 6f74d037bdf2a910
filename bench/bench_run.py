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
import os
import sys
import tempfile
from pathlib import Path

from _common import REPO, interleaved, medians, print_medians, rounded, timed, write_result
from bench_build import BASE, KDKIT, build, kdkit, prepare_project


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="runs of each (default 5)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kdkit-bench-run-") as tmp:
        project, wheelhouse = prepare_project(Path(tmp))
        _seconds, image = build(project, wheelhouse)
        kdkit("run", project)  # first run: runs/ is prepared, caches are warm for both
        lines = kdkit("run", project, "--print").stdout.strip().splitlines()
        plain = ["sh", "-c", " && ".join(lines)]
        times = interleaved({"kdkit run": lambda: timed([KDKIT, "run", str(project)], timeout=600),
                             "docker run (--print)": lambda: timed(plain, timeout=600)}, args.runs)
    median = medians(times)
    ratio = median["kdkit run"] / median["docker run (--print)"]
    result = {"image": image["tag"], "base_image": BASE, "cpus": os.cpu_count(),
              "command": lines[-1],
              "times": {k: rounded(v, 3) for k, v in times.items()},
              "median_s": {k: round(v, 3) for k, v in median.items()},
              "kdkit_over_docker": round(ratio, 3),
              "kdkit_added_s": round(median["kdkit run"] - median["docker run (--print)"], 3)}
    out = write_result("run", result)
    print_medians("how", "median s", median, width=23, value_width=9, digits=2)
    print(
        f"kdkit/docker: {ratio:.2f}x (+{result['kdkit_added_s']:.2f} s)   written to "
        f"{out.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
