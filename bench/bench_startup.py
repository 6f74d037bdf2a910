"""Start-up cost of the CLI against the interpreter's own: `kdkit --help` and the in-container
entry point must start in little more than `python -c pass` (heavy imports live in commands).

    .venv/bin/python bench/bench_startup.py [--runs 21] [--before REV]

With ``--before REV`` the same commands also run from the tree of git revision REV (its kdkit on
PYTHONPATH), interleaved run by run with this tree's, so that both meet the same load: the
figures to compare a change with. Writes bench/results/startup.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from _common import machine, write_result

REPO = Path(__file__).resolve().parent.parent
CASES = {
    "python -c pass": ["-c", "pass"],
    "kdkit --help": ["-m", "kdkit", "--help"],
    "python -m kdkit.probe --help": ["-m", "kdkit.probe", "--help"],
}


def export(rev: str, into: Path) -> Path:
    """The tree of ``rev`` (its kdkit package) unpacked under ``into``."""
    archive = into / "tree.tar"
    subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", "-o", str(archive), rev, "kdkit"],
        check=(True))
    with tarfile.open(archive) as tar:
        tar.extractall(into / "tree", filter="data")
    return into / "tree"


def once(args: list[str], source: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(source)}
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=True,
                   env=env, cwd=source)
    return time.perf_counter() - start


def measure(trees: dict[str, Path], runs: int) -> dict[str, dict[str, float]]:
    """Median seconds per tree and command, the trees taking turns within each run."""
    times: dict[str, dict[str, list[float]]] = {tree: {name: [] for name in CASES}
                                                for tree in trees}
    for _ in range(runs):
        for name, args in CASES.items():
            for tree, source in trees.items():
                times[tree][name].append(once(args, source))
    return {tree: {name: statistics.median(values) for name, values in cases.items()}
            for tree, cases in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--before",
                        metavar="REV", help="also time the tree of this git revision, interleaved")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"this tree": REPO}
        if options.before:
            trees[f"before ({options.before})"] = export(options.before, Path(tmp))
        medians = measure(trees, options.runs)
    print(f"{'tree':<24}{'command':<32}{'median ms':>10}{'over python':>13}")
    for tree, cases in medians.items():
        base = cases["python -c pass"]
        for name, seconds in cases.items():
            print(
                f"{tree:<24}{name:<32}{seconds * 1000:>10.1f}{(seconds - base) * 1000:>+11.1f} ms")
    out = write_result("startup",
                       {"runs": options.runs, "before": options.before, "median_seconds": medians,
                        "machine": machine(load=True)})
    print(f"written to {out.relative_to(REPO)}")


if __name__ == "__main__":
    main()
