"""`kdkit campaign --json --order FILE` over 1,000 closed run folders (half pilot runs of 10,000 items with their
results.jsonl at its real size, half train runs with their metrics series and a checkpoint), timed as a whole
process (the median of N). It reads params.json, summary.json, stop.json and SHA256SUMS of each folder, the
work log's records, never results.jsonl or metrics.jsonl whole. Goal: at most 1 s.

    .venv/bin/python bench/bench_campaign.py [--runs 5] [--folders 1000]

Writes bench/results/campaign.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

from _common import BIN, REPO, interleaved, machine, medians, timed, write_result

GOAL_S = 1.0
VARIANTS = ("control", "fine-tuned", "high-lr")


def _write(path: Path, data: object) -> None:
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")


def pilot_folder(runs: Path, at: datetime, n: int, items: int) -> None:
    """A sealed pilot run folder that verifies as `kdkit close` verifies one (its own ID, its params' hash)."""
    from kdkit.core.checksums import write_sums
    from kdkit.core.pilotconfig import params_hash

    run_id = at.strftime("%Y%m%dT%H%M%SZ") + f"-{n:08x}"
    folder = runs / run_id
    folder.mkdir()
    params = {"config_file": "config/pilot.json"}
    _write(folder / "params.json", {"run_id": run_id, "created": at.isoformat(), "params": params,
                                    "params_hash": params_hash(params)})
    _write(folder / "env.json", {"python": "3.11", "torch": "2.13.0+cpu"})
    with (folder / "results.jsonl").open("w", encoding="utf-8") as out:
        out.write("".join(json.dumps({"id": f"doc-{i:07d}", "outcome": "accepted",
                                      "category": "invoice",
                                      "batch": i // 32}) + "\n" for i in range(items)))
    _write(folder / "summary.json",
           {"run_id": run_id, "kind": "pilot", "verdict": "pass", "total": items,
            "accepted": items, "rejected": 0, "quality": 0.8,
            "timings": {"seconds": 600.0, "app_seconds": 500.0, "harness_seconds": 20.0,
                        "items": items}})
    write_sums(folder, [(p.name, p) for p in folder.iterdir() if p.is_file()])


def train_folder(runs: Path, at: datetime, n: int) -> None:
    from kdkit.core.checksums import write_sums

    run_id = "train-" + at.strftime("%Y%m%d-%H%M%S") + f"-{n}"
    folder = runs / run_id
    (folder / "checkpoints" / "step-00001000").mkdir(parents=True)
    (folder / "checkpoints" / "step-00001000" / "model.pt").write_bytes(b"\0" * 4096)
    ended = at + timedelta(minutes=30)
    _write(folder / "params.json", {"run_id": run_id, "kind": "train", "created": at.isoformat(),
                                    "variant": VARIANTS[1 + n % 2], "config_file": None})
    (folder
     / "metrics.jsonl").write_text("".join(json.dumps(
         {"step": s, "t": s * 1.8, "loss": 1 / s, "lr": 1e-3})
                                                  + "\n" for s in range(1, 1001)), encoding="utf-8")
    _write(folder / "stop.json",
           {"reason": "exit", "detail": "", "step": 1000, "at": ended.isoformat()})
    _write(folder / "summary.json", {"run_id": run_id, "kind": "train", "verdict": "pass",
                                     "started": at.isoformat(), "ended": ended.isoformat(),
                                     "timings": {"seconds": 1800.0}, "steps": 1000,
                                     "metrics": {"loss": 0.01, "quality": 0.8 + (n % 20) / 100}})
    write_sums(folder, [(p.name, p) for p in folder.iterdir() if p.is_file()])


def make_project(tmp: Path, folders: int, items: int = 10_000) -> tuple[Path, Path]:
    from kdkit.project.init import init_project

    project = init_project(tmp / "proj", name="proj", backend="cpu")
    runs, start = project / "runs", datetime(2026, 12, 1, tzinfo=timezone.utc)
    for n in range(folders):
        at = start + timedelta(minutes=7 * n)
        pilot_folder(runs, at, n, items) if n % 2 == 0 else train_folder(runs, at, n)
    order = tmp / "order.json"
    timed([str(BIN / "kdkit"), "plan", "--gpu", "RTX 4090", "--days", "30", "--lots", "1",
           "--hours", "400",
           "--save", str(order)])
    return project, order


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--folders", type=int, default=1000)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        project, order = make_project(Path(tmp), options.folders)
        argv = [str(BIN / "kdkit"), "campaign", str(project), "--order", str(order), "--json"]
        cases = {"kdkit campaign --json": lambda: timed(argv),
                 "kdkit --help": lambda: timed([str(BIN / "kdkit"), "--help"])}
        times = interleaved(cases, options.runs, warm=True)
    median = medians(times)
    campaign = median["kdkit campaign --json"]
    print(f"kdkit campaign over {options.folders} run folders: median {campaign:.3f} s of "
          f"{options.runs} runs (goal <= {GOAL_S:g} s); kdkit --help {median['kdkit --help']:.3f} "
          "s")
    out = write_result("campaign", {
        "command": "kdkit campaign PROJECT --order FILE --json", "folders": options.folders,
        "runs": options.runs,
        "median_seconds": {name: round(value, 4) for name, value in median.items()},
        "goal_seconds": GOAL_S,
        "met": campaign <= GOAL_S, "machine": machine(load=True)})
    print(f"written to {out.relative_to(REPO)}")
    sys.exit(0 if campaign <= GOAL_S else 1)


if __name__ == "__main__":
    main()
