"""`kdkit build`: full build, no-op rebuild, source-only rebuild, and the final image's overhead.

On a scaffolded cpu project (torch 2.13.0 CPU from the local wheels, through a wheelhouse,
so no network is used), each build is run as the user runs it (`kdkit build --json`, a fresh
process): a full build with --no-cache, a no-op rebuild, and a rebuild after a one-line
change in src/. Medians of several runs; for each, the steps that ran (not reused from the
builder's cache). The ratios are the full build's median over each rebuild's.

Size: the final image against base + venv + project (lock, kdkit.json, config/, src/); the
venv is measured inside the image (its files' bytes), the base from the engine. Goal: overhead <= 1 %.

    .venv/bin/python bench/bench_build.py [--full-runs 1] [--runs 5]

Needs an engine and the base image (`make engine`). Writes bench/results/build.json.
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
from typing import Any

from _common import BIN, REPO, machine, write_result

from kdkit.core import proc

KDKIT = str(BIN / "kdkit")
BASE = os.environ.get("KDKIT_TEST_BASE", "kdkit-test/debian-python:3.11")
WHEELS = os.environ.get("KDKIT_TEST_TORCH_WHEELS", "/opt/wheels")


def kdkit(*args: str | Path, expect: int = 0) -> proc.Completed:
    done = proc.run([KDKIT, *map(str, args)], timeout=1800)
    if done.returncode != expect:
        raise SystemExit(
            f"kdkit {' '.join(map(str, args))} exited "
            f"{done.returncode}:\n{done.stdout}{done.stderr}")
    return done


def prepare_project(tmp: Path) -> tuple[Path, Path]:
    """A locked cpu project and its wheelhouse; returns (project, wheelhouse)."""
    project = tmp / "bench-image"
    kdkit("init", project, "--backend", "cpu", "--name", "bench-image")
    kdkit("lock", project, "--backend", "cpu", "--torch-find-links", WHEELS)
    wheelhouse = tmp / "wheelhouse"
    kdkit("wheelhouse", project, "--out", wheelhouse)
    return project, wheelhouse


def build(project: Path, wheelhouse: Path, *extra: str) -> tuple[float, dict[str, Any]]:
    start = time.perf_counter()
    done = kdkit("build", project, "--backend", "cpu", "--base-image", BASE, "--wheelhouse",
                 wheelhouse,
                 "--json", *extra)
    elapsed = time.perf_counter() - start
    return elapsed, json.loads(done.stdout)


def ran(result: dict[str, Any]) -> list[str]:
    """The steps that ran: RUN and COPY by their text, the metadata-only steps counted."""
    steps = [" ".join(s["instruction"].split()) for s in result["steps"]
             if s["number"] in result["ran"]]
    work = [s[:48] for s in steps if s.startswith(("RUN", "COPY"))]
    return work + ([f"+{len(steps) - len(work)} metadata steps"] if len(steps) > len(work) else [])


def measure(project: Path, wheelhouse: Path, full_runs: int, runs: int) -> dict[str, Any]:
    cases: dict[str, dict[str, Any]] = {}
    full = [build(project, wheelhouse, "--no-cache") for _ in range(full_runs)]
    cases["full (--no-cache)"] = {"times": [t for t, _ in full], "ran": ran(full[-1][1])}
    noop = [build(project, wheelhouse) for _ in range(runs)]
    cases["no-op rebuild"] = {"times": [t for t, _ in noop], "ran": ran(noop[-1][1])}
    source = project / "src" / "classify.py"
    edits = []
    for i in range(runs):
        source.write_text(source.read_text(encoding="utf-8")
                          + f"\n# bench edit {i}\n", encoding="utf-8")
        edits.append(build(project, wheelhouse))
    cases["source-only rebuild"] = {"times": [t for t, _ in edits], "ran": ran(edits[-1][1])}
    for case in cases.values():
        case["median_s"] = round(statistics.median(case["times"]), 2)
        case["times"] = [round(t, 2) for t in case["times"]]
    full_median = cases["full (--no-cache)"]["median_s"]
    for case in cases.values():
        case["full_over_this"] = round(full_median / case["median_s"], 1)
    return {"cases": cases, "image": edits[-1][1]["tag"], "final_size": edits[-1][1]["size"]}


def sizes(tag: str, final: int, project: Path) -> dict[str, Any]:
    from kdkit.docker_adapter import connect

    base = connect().require_image(BASE).size
    # Bytes of the venv's files and links, counted the way the engine sizes a layer.
    # The venv (torch's part) and deps/ (the rest of the lock, kdkit.image.layers).
    script = (
        "find /opt/kdkit/venv /opt/kdkit/deps ! -type d -printf '%s\\n' 2>/dev/null | awk '{s+=$1} "
        "END {print s}'")
    done = proc.run(
        ["docker", "run", "--rm", "--pull", "never", "--network", "none", tag, "sh", "-c", script])
    venv = int(done.stdout.split()[0])
    files = [project / "kdkit.json", project / "requirements" / "cpu.txt",
             *[p for folder in ("config", "src") for p in (project / folder).rglob("*")
               if p.is_file() and "__pycache__" not in p.parts]]
    project_bytes = sum(p.stat().st_size for p in files)
    overhead = final - base - venv - project_bytes
    return {"final": final, "base": base, "venv": venv, "project": project_bytes,
            "overhead": overhead,
            "overhead_percent": round(100 * overhead / final, 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full-runs", type=int, default=1,
                        help="full builds with --no-cache (default 1: ~70 s each on 2 cores)")
    parser.add_argument("--runs", type=int, default=5, help="runs of each rebuild (default 5)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kdkit-bench-build-") as tmp:
        project, wheelhouse = prepare_project(Path(tmp))
        result = measure(project, wheelhouse, args.full_runs, args.runs)
        result["size"] = sizes(result["image"], result.pop("final_size"), project)
    result["machine"] = machine(base_image=BASE)
    out = write_result("build", result)
    print(f"{'case':<22} {'median s':>9} {'full/this':>10}  steps that ran")
    for name, case in result["cases"].items():
        steps = ("; ".join(case["ran"]) if len(case["ran"]) <= 3
                 else f"{len(case['ran']) - 1} RUN/COPY + metadata")
        print(
            f"{name:<22} {case['median_s']:>9.2f} {case['full_over_this']:>9.1f}x  "
            f"{steps or 'none'}")
    size = result["size"]
    print(f"image {size['final'] / 1e6:.1f} MB = base {size['base'] / 1e6:.1f} + venv "
          f"{size['venv'] / 1e6:.1f} + project {size['project'] / 1e3:.1f} kB + overhead "
          f"{size['overhead'] / 1e3:.1f} kB ({size['overhead_percent']:.3f} %, goal <= 1 %)")
    print(f"written to {out.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
