"""`kdkit status RUN_ID --json` on a run of 1,000,000 items, timed as a whole process (the median of N): it reads
the run's heartbeat, summary and stop files and asks the engine for the run's containers; it never reads
results.jsonl, which is here at its real size. Goal: at most 150 ms.

    .venv/bin/python bench/bench_status.py [--runs 21] [--items 1000000]

Writes bench/results/status.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from _common import BIN, REPO, interleaved, machine, medians, timed, write_result

GOAL_S = 0.150


def make_run(root: Path, items: int) -> str:
    """A scaffolded project whose runs/ holds one open run of ``items`` items: results.jsonl written at its real
    size (one accepted record a line, as the pilot writes them) and a heartbeat of this process, so it runs."""
    from kdkit.core.heartbeat import Heartbeat
    from kdkit.project.init import init_project

    project = init_project(root / "proj", name="proj", backend="cpu")
    run_id = "20261204T000000Z-0123abcd"
    folder = project / "runs" / run_id
    folder.mkdir(parents=True)
    (folder / "params.json").write_text(json.dumps({"params": {"stop": {"max_rejected": 100}}}))
    with (folder / "results.jsonl").open("w", encoding="utf-8") as out:
        for start in range(0, items, 10000):
            out.write("".join(json.dumps({"id": f"doc-{n:07d}", "outcome": "accepted",
                                          "category": "invoice",
                                          "batch": n // 32, "sha256": f"{n:064x}"}) + "\n"
                              for n in range(start, min(items, start + 10000))))
    beat = Heartbeat(folder, run_id, items, 100, 86400.0)
    beat.beat(items - 1000, 3, force=True)
    return str(project), run_id  # type: ignore[return-value]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--items", type=int, default=1_000_000)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        project, run_id = make_run(Path(tmp), options.items)  # type: ignore[misc]
        results = Path(project) / "runs" / run_id / "results.jsonl"
        argv = [str(BIN / "kdkit"), "status", run_id, "--project", project, "--json"]
        cases = {"kdkit status ID --json": lambda: timed(argv), "kdkit --help": lambda: timed(
            [str(BIN / "kdkit"), "--help"]),
                 "python -c pass": lambda: timed([sys.executable, "-c", "pass"])}
        # the cases take turns: the same load for each
        times = interleaved(cases, options.runs, warm=True)
        size = results.stat().st_size
    median = medians(times)
    status = median["kdkit status ID --json"]
    print(f"kdkit status {run_id} --json over {options.items} items ({size / 1e6:.0f} MB "
          f"results.jsonl): median {status * 1000:.1f} ms of {options.runs} runs (goal <= "
          f"{GOAL_S * 1000:.0f} ms); kdkit --help {median['kdkit --help'] * 1000:.1f} ms, python "
          f"-c pass {median['python -c pass'] * 1000:.1f} ms")
    out = write_result("status", {
        "command": "kdkit status RUN_ID --project DIR --json", "items": options.items,
        "results_bytes": size,
        "runs": options.runs,
        "median_seconds": {name: round(value, 4) for name, value in median.items()},
        "goal_seconds": GOAL_S, "met": status <= GOAL_S, "machine": machine(load=True)})
    print(f"written to {out.relative_to(REPO)}")
    sys.exit(0 if status <= GOAL_S else 1)


if __name__ == "__main__":
    main()
