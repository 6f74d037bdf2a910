"""Start-up cost of the CLI against the interpreter's own: `kdkit --help` and the in-container
entry point must start in little more than `python -c pass` (heavy imports live in commands).

    .venv/bin/python bench/bench_startup.py [--runs 11]

Writes bench/results/startup.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
CASES = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "kdkit --help": [str(BIN / "kdkit"), "--help"],
    "python -m kdkit.probe --help": [sys.executable, "-m", "kdkit.probe", "--help"],
}


def median_seconds(argv: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=11)
    runs = parser.parse_args().runs
    medians = {name: median_seconds(argv, runs) for name, argv in CASES.items()}
    base = medians["python -c pass"]
    print(f"{'command':<32}{'median ms':>10}{'over python':>13}")
    for name, seconds in medians.items():
        print(f"{name:<32}{seconds * 1000:>10.1f}{(seconds - base) * 1000:>+11.1f} ms")
    out = REPO / "bench" / "results" / "startup.json"
    out.write_text(json.dumps({"runs": runs, "median_seconds": medians,
                               "machine": {"python": sys.version.split()[0]}}, indent=2) + "\n")
    print(f"written to {out.relative_to(REPO)}")


if __name__ == "__main__":
    main()
