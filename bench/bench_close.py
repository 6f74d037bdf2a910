"""`kdkit close PROJECT --order FILE --json` over 1,000 closed run folders (half pilot runs with their results.jsonl,
half train runs with their metrics series and a checkpoint; the folders of bench_campaign.py), timed as a whole
process (the median of N). close verifies each folder against its SHA256SUMS (every listed file hashed, re-read
from the disk), so the figure grows with the bytes the runs hold: ``--items`` sets a pilot run's results.jsonl.
Goal (issue 28): at most 1 s. The package and its dependencies are compiled to bytecode first, as `pip install`
leaves them (a shell with PYTHONDONTWRITEBYTECODE=1 would otherwise compile each module anew in every run).

    .venv/bin/python bench/bench_close.py [--runs 5] [--folders 1000] [--items 1000]

Writes bench/results/close.json.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from _common import BIN, REPO, interleaved, machine, medians, timed, write_result
from bench_campaign import make_project

GOAL_S = 1.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--folders", type=int, default=1000)
    parser.add_argument("--items", type=int, default=1000)
    options = parser.parse_args()
    subprocess.run([str(BIN / "python"), "-m", "compileall", "-q", str(REPO / "kdkit"),
                    sysconfig.get_paths()["purelib"]], check=False, capture_output=True)
    with tempfile.TemporaryDirectory() as tmp:
        project, order = make_project(Path(tmp), options.folders, options.items)
        reports = project / "reports"

        def close() -> float:
            shutil.rmtree(reports, ignore_errors=True)  # each run writes the report anew
            return timed(
                [str(BIN / "kdkit"), "close", str(project), "--order", str(order), "--json"])

        cases = {"kdkit close --json": close,
                 "kdkit --help": lambda: timed([str(BIN / "kdkit"), "--help"])}
        times = interleaved(cases, options.runs, warm=True)
        data_bytes = sum(p.stat().st_size for p in (project / "runs").rglob("*") if p.is_file())
    median = medians(times)
    figure = median["kdkit close --json"]
    print(f"kdkit close over {options.folders} run folders ({data_bytes / 1e6:.0f} MB): median "
          f"{figure:.3f} s of {options.runs} runs (goal <= {GOAL_S:g} s); kdkit --help "
          f"{median['kdkit --help']:.3f} s")
    out = write_result("close", {
        "command": "kdkit close PROJECT --order FILE --json", "folders": options.folders,
        "pilot_items": options.items, "run_bytes": data_bytes, "runs": options.runs,
        "median_seconds": {name: round(value, 4) for name, value in median.items()},
        "goal_seconds": GOAL_S,
        "met": figure <= GOAL_S, "machine": machine(load=True)})
    print(f"written to {out.relative_to(REPO)}")
    sys.exit(0 if figure <= GOAL_S else 1)


if __name__ == "__main__":
    main()
