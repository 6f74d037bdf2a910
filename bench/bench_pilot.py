"""The pilot harness's cost: its overhead over calling the app directly, and the resume scan.

1. Overhead. 10,000 synthetic documents (0.3-3 KB, four categories, one in 1,000 not
   UTF-8) and two apps: a trivial keyword vote (~30 us per item, far cheaper than any
   model), and the same vote plus 1 ms per item of waiting, as a small model on a GPU
   makes the host wait. The peer is the loop any script would run: read each file, call
   predict per batch, write the results as JSON lines. kdkit is `kdkit pilot` in-process
   (its diagnose, params with the git revision, SHA-256 of every input, one fsync per
   batch, accounting, summary, SHA256SUMS), torch already imported as the app would have.
   Runs alternate; medians; the overhead is also given per item, in microseconds, and in
   CPU seconds of the process (helper threads included), the figure other load on a shared
   machine inflates least. The diagnose (a fixed cost per run, not per item) is shown apart;
   the headline stays the whole `kdkit pilot` against the whole direct loop.
   Goal: at most 5 % slower than the direct loop.
2. Resume scan. A results.jsonl of 1,000,000 lines in the harness's own format; the time
   RunFolder.scan() takes to find the finished IDs, in a fresh interpreter each run (as
   `kdkit pilot --resume` does). Goal: at most 2 s.

    .venv/bin/python bench/bench_pilot.py [--runs 5] [--items 10000] [--batch-size 64]

Writes bench/results/pilot.json.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from kdkit.probe import pilot  # noqa: E402
from kdkit.probe.runfolder import RunFolder  # noqa: E402
from kdkit.scaffold import init_project  # noqa: E402

WORDS = {
    "invoice": ["invoice", "payment", "amount", "due", "total", "tax", "billing", "remit", "balance"],
    "contract": ["agreement", "party", "parties", "clause", "terminate", "liability", "governed", "confidential"],
    "research": ["dataset", "experiments", "baseline", "accuracy", "ablation", "model", "results", "evaluate"],
    "support": ["ticket", "help", "account", "password", "refund", "order", "crash", "question"],
}
APPS = {"trivial": 0.0, "model_1ms": 1.0}  # module name -> milliseconds of waiting per item
FILLER = ["the", "of", "and", "a", "to", "in", "is", "for", "on", "with", "as", "by", "this", "that"]
TRIVIAL_APP = '''"""A trivial app: the category whose keywords occur most often (+ {ms} ms per item of waiting)."""

import time

WORDS = {words!r}


def predict(items):
    time.sleep({ms} / 1000 * len(items))
    out = []
    for item in items:
        text = item["text"]
        scores = {{cat: sum(text.count(w) for w in words) for cat, words in WORDS.items()}}
        out.append({{"id": item["id"], "category": max(scores, key=scores.get)}})
    return out
'''


def make_project(root: Path, items: int, batch_size: int) -> Path:
    """A scaffolded project whose pilot is ``items`` synthetic documents and the trivial app."""
    project = init_project(root / "proj", name="bench", backend="cpu")
    data = project / "data" / "bench"
    data.mkdir()
    rng = random.Random(0)
    docs = []
    for n in range(items):
        ident = f"d{n:06d}"
        if n % 1000 == 999:
            (data / f"{ident}.txt").write_bytes("Faktura nr 1. Kwota do zapłaty.".encode("cp1250"))
            docs.append({"id": ident, "file": f"{ident}.txt", "label": None, "expect": "reject"})
            continue
        label = rng.choice(sorted(WORDS))
        words = [rng.choice(WORDS[label] if rng.random() < 0.3 else FILLER) for _ in range(rng.randint(50, 500))]
        (data / f"{ident}.txt").write_text(" ".join(words), encoding="utf-8")
        docs.append({"id": ident, "file": f"{ident}.txt", "label": label, "expect": "accept"})
    (data / "manifest.json").write_text(json.dumps({"documents": docs}))
    for name, ms in APPS.items():
        (project / "src" / f"{name}.py").write_text(TRIVIAL_APP.format(words=WORDS, ms=ms))
    config = {"inputs": "data/bench", "manifest": "data/bench/manifest.json", "categories": sorted(WORDS),
              "entry": "src.trivial:predict", "batch_size": batch_size, "device": "cpu",
              "max_input_bytes": 65536, "min_quality": 0.5, "runs": "runs",
              "stop": {"max_rejected": None, "max_seconds": None}}
    (project / "config" / "pilot.json").write_text(json.dumps(config, indent=2))
    return project


def direct(project: Path, app: str, out: Path, batch_size: int) -> float:
    """The peer: read, call predict per batch, write JSON lines; no checks, no fsync."""
    import importlib

    started = time.perf_counter()
    sys.path.insert(0, str(project))
    predict = importlib.import_module(f"src.{app}").predict

    manifest = json.loads((project / "data/bench/manifest.json").read_text())["documents"]
    with out.open("w", encoding="utf-8") as sink:
        for start in range(0, len(manifest), batch_size):
            items = []
            for doc in manifest[start:start + batch_size]:
                try:
                    items.append({"id": doc["id"], "text": (project / "data/bench" / doc["file"]).read_text()})
                except UnicodeDecodeError:
                    sink.write(json.dumps({"id": doc["id"], "error": "not UTF-8"}) + "\n")
            for result in predict(items):
                sink.write(json.dumps(result) + "\n")
    sys.path.remove(str(project))
    return time.perf_counter() - started


def harness(project: Path, run_id: str) -> tuple[float, dict[str, float]]:
    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()) as captured:
        code = pilot.main([str(project), "--json", "--run-id", run_id])
    seconds = time.perf_counter() - started
    summary = json.loads(captured.getvalue())
    if code != 0:
        raise SystemExit(f"the pilot failed: {summary['problems'][:3]}")
    return seconds, summary["timings"]


def set_app(project: Path, app: str) -> None:
    path = project / "config" / "pilot.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "entry": f"src.{app}:predict"}, indent=2))


def overhead(project: Path, work: Path, app: str, runs: int) -> dict[str, object]:
    """Alternating runs of the direct loop and the pilot with one app; medians and the overhead."""
    set_app(project, app)
    config = json.loads((project / "config" / "pilot.json").read_text())
    harness(project, f"{app}-warm-up")
    times: dict[str, list[float]] = {"direct": [], "kdkit": []}
    cpu: dict[str, list[float]] = {"direct": [], "kdkit": []}
    breakdown = []
    for n in range(runs):
        started = time.process_time()
        times["direct"].append(direct(project, app, work / f"direct-{app}-{n}.jsonl", config["batch_size"]))
        cpu["direct"].append(time.process_time() - started)
        started = time.process_time()
        seconds, timings = harness(project, f"{app}-{n}")
        cpu["kdkit"].append(time.process_time() - started)
        times["kdkit"].append(seconds)
        breakdown.append(timings)
    medians = {k: statistics.median(v) for k, v in times.items()}
    cpu_medians = {k: statistics.median(v) for k, v in cpu.items()}
    diagnose = statistics.median(b["diagnose_seconds"] for b in breakdown)
    items = len(json.loads((project / "data/bench/manifest.json").read_text())["documents"])
    return {
        "app": app, "app_wait_ms_per_item": APPS[app], "items": items, "batch_size": config["batch_size"],
        "runs": runs,
        "direct": {"median_seconds": round(medians["direct"], 4), "seconds": [round(t, 4) for t in times["direct"]],
                   "median_cpu_seconds": round(cpu_medians["direct"], 4)},
        "kdkit": {"median_seconds": round(medians["kdkit"], 4), "seconds": [round(t, 4) for t in times["kdkit"]],
                  "median_cpu_seconds": round(cpu_medians["kdkit"], 4),
                  "median_diagnose_seconds": round(diagnose, 4),
                  "median_app_seconds": round(statistics.median(b["app_seconds"] for b in breakdown), 4)},
        "overhead": round(medians["kdkit"] / medians["direct"] - 1, 4),
        "overhead_us_per_item": round((medians["kdkit"] - medians["direct"]) / items * 1e6, 1),
        "overhead_cpu": round(cpu_medians["kdkit"] / cpu_medians["direct"] - 1, 4),
        "overhead_without_diagnose": round((medians["kdkit"] - diagnose) / medians["direct"] - 1, 4),
        "goal": "<= 0.05",
    }


def resume_scan(work: Path, lines: int, runs: int) -> dict[str, object]:
    run = RunFolder(work / "scan-run")
    run.path.mkdir()
    batch = 100
    with run.results.open("w", encoding="utf-8") as sink:  # the harness's line format, written in bulk
        for start in range(0, lines, batch):
            for n in range(start, min(start + batch, lines)):
                record = {"id": f"d{n:07d}", "outcome": "accepted", "category": "invoice", "batch": start // batch,
                          "sha256": f"{n:064x}", "lines": batch}
                sink.write(json.dumps(record, separators=(",", ":")) + "\n")
    measured = [_scan_in_fresh_process(run.path, lines) for _ in range(runs)]
    walls, cpus = [m[0] for m in measured], [m[1] for m in measured]
    return {"lines": lines, "bytes": run.results.stat().st_size, "runs": runs,
            "median_seconds": round(statistics.median(walls), 4), "seconds": [round(t, 4) for t in walls],
            "median_cpu_seconds": round(statistics.median(cpus), 4), "goal_seconds": 2.0}


SCAN = """
import sys, time
from pathlib import Path
from kdkit.probe.runfolder import RunFolder
started, cpu = time.perf_counter(), time.process_time()
scan = RunFolder(Path(sys.argv[1])).scan()
print(time.perf_counter() - started, time.process_time() - cpu, len(scan.finished))
"""


def _scan_in_fresh_process(run_dir: Path, lines: int) -> tuple[float, float]:
    """(wall, CPU) seconds of RunFolder.scan() in a new interpreter, as `kdkit pilot --resume` runs it.

    CPU time is given beside wall time: on a shared machine it is the figure load does not inflate.
    """
    done = subprocess.run([sys.executable, "-c", SCAN, str(run_dir)], capture_output=True, text=True, check=True,
                          cwd=REPO)
    wall, cpu, found = done.stdout.split()
    assert int(found) == lines, done.stdout
    return float(wall), float(cpu)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs of each side with the trivial app")
    parser.add_argument("--model-runs", type=int, default=3, help="runs of each side with the 1 ms/item app")
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--scan-lines", type=int, default=1_000_000)
    args = parser.parse_args()
    import torch  # noqa: F401  (imported once, as the app of a real pilot would; diagnose then costs ms)

    with tempfile.TemporaryDirectory(prefix="bench-pilot.", dir=os.environ.get("TMPDIR")) as tmp:
        work = Path(tmp)
        project = make_project(work, args.items, args.batch_size)
        over = [overhead(project, work, "trivial", args.runs), overhead(project, work, "model_1ms", args.model_runs)]
        scan = resume_scan(work, args.scan_lines, 5)
    result = {"overhead": over, "resume_scan": scan,
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                           "load_average_1m_at_end": round(os.getloadavg()[0], 2)}}
    (REPO / "bench" / "results").mkdir(parents=True, exist_ok=True)
    (REPO / "bench" / "results" / "pilot.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"{args.items} items, batch {args.batch_size}; medians of alternating runs")
    print(f"{'app':<12}{'direct s':>10}{'kdkit s':>10}{'overhead':>10}{'us/item':>9}{'CPU ovh':>9}"
          f"{'diag s':>8}{'ovh-diag':>10}")
    for row in over:
        d, k = row["direct"]["median_seconds"], row["kdkit"]["median_seconds"]  # type: ignore[index]
        diag = row["kdkit"]["median_diagnose_seconds"]  # type: ignore[index]
        print(f"{row['app']:<12}{d:>10.3f}{k:>10.3f}{row['overhead']:>+10.1%}{row['overhead_us_per_item']:>9}"
              f"{row['overhead_cpu']:>+9.1%}{diag:>8.3f}{row['overhead_without_diagnose']:>+10.1%}")
    print("goal: overhead <= +5% (whole kdkit pilot against the whole direct loop)")
    print(f"resume scan of {scan['lines']:,} lines: {scan['median_seconds']:.3f} s wall, "
          f"{scan['median_cpu_seconds']:.3f} s CPU (goal <= 2 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
