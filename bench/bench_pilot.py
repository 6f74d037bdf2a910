"""The pilot harness's cost: its overhead over calling the app directly, and the resume scan.

1. Overhead. Synthetic documents (0.3-3 KB, four categories, one in 1,000 not UTF-8) and
   two apps, both importing torch as any PyTorch app does: a trivial keyword vote (~30 us
   per item, far cheaper than any model), and the same vote plus 1 ms per item of waiting,
   as a small model on a GPU makes the host wait. The peer is the loop any script would
   run, in its own interpreter: import the app, read each file, call predict per batch,
   write the results as JSON lines. kdkit is `python -m kdkit.probe pilot` in its own
   interpreter, as in the image: the app in a supervised child process (its diagnose there
   too), params with the git revision and the app's code hashes, SHA-256 of every input,
   one fsync per batch, accounting, summary, SHA256SUMS.
   Runs alternate; medians. Two figures come out: the whole process as a user waits for it,
   and the loop, each side by its own clock, from the app ready to the last result written
   (the peer: after its import; kdkit: its session less the diagnose, which is where the
   app's process starts and imports torch): the per-item cost of the harness, of the pipe
   to the app's process and of closing the run, without the import times that would drown it.
   ``--baseline DIR`` times another kdkit checkout the same way (e.g. the commit before the
   supervision: ``git worktree add /tmp/kdkit-before <rev>``), beside this one.
   Goal: the loop at most 5 % slower than the direct loop.
2. Resume scan. A results.jsonl of 1,000,000 lines in the harness's own format; the time
   RunFolder.scan() takes to find the finished IDs, in a fresh interpreter each run (as
   `kdkit pilot --resume` does). Goal: at most 2 s.

    .venv/bin/python bench/bench_pilot.py [--runs 5] [--items 10000] [--batch-size 64] [--baseline DIR]

Writes bench/results/pilot.json.

3. The full corpus (issue 25): ``--corpus [--records 1000000] [--runs 3]``: a JSONL corpus against a direct
   loop, peak RSS, and a resume after a SIGKILL at 50 %; ``--vectors [--vector-rows 100000]``: vectors.npy
   written by kdkit against numpy.save. See bench/_pilot_corpus.py; writes bench/results/pilot_corpus.json
   and pilot_vectors.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, machine, medians, rounded, write_result

from kdkit.core.runresults import RunFolder
from kdkit.project.init import init_project

WORDS = {
    "invoice": ["invoice", "payment", "amount", "due", "total", "tax",
                "billing", "remit", "balance"],
    "contract": ["agreement", "party", "parties", "clause", "terminate",
                 "liability", "governed", "confidential"],
    "research": ["dataset", "experiments", "baseline", "accuracy", "ablation",
                 "model", "results", "evaluate"],
    "support": ["ticket", "help", "account", "password", "refund", "order", "crash", "question"],
}
APPS = {"trivial": 0.0, "model_1ms": 1.0}  # module name -> milliseconds of waiting per item
FILLER = ["the", "of", "and", "a", "to", "in", "is", "for", "on", "with", "as",
          "by", "this", "that"]
TRIVIAL_APP = '''"""A trivial app: the category whose keywords occur most often (+ {ms} ms per item of waiting)."""

import time

import torch  # noqa: F401  (as any PyTorch app does; both sides pay its import)

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
DIRECT = """
import importlib, json, sys, time
from pathlib import Path
project, app, manifest, out = Path(sys.argv[1]), sys.argv[2], sys.argv[3], Path(sys.argv[4])
batch_size = int(sys.argv[5])
sys.path.insert(0, str(project))
predict = importlib.import_module(f"src.{app}").predict
started = time.perf_counter()
docs = json.loads((project / manifest).read_text())["documents"]
with out.open("w", encoding="utf-8") as sink:
    for start in range(0, len(docs), batch_size):
        items = []
        for doc in docs[start:start + batch_size]:
            try:
                items.append({"id": doc["id"], "text": (project / "data/bench" / doc["file"]).read_text()})
            except UnicodeDecodeError:
                sink.write(json.dumps({"id": doc["id"], "error": "not UTF-8"}) + "\\n")
        for result in predict(items):
            sink.write(json.dumps(result) + "\\n")
print(time.perf_counter() - started)
"""


def make_project(root: Path, items: int, batch_size: int) -> Path:
    """A scaffolded project with ``items`` synthetic documents, the two apps, and one pilot config per
    app and size (config/<app>-<n>.json over data/bench/manifest-<n>.json, n the first n documents)."""
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
        words = [rng.choice(WORDS[label] if rng.random() < 0.3 else FILLER)
                 for _ in range(rng.randint(50, 500))]
        (data / f"{ident}.txt").write_text(" ".join(words), encoding="utf-8")
        docs.append({"id": ident, "file": f"{ident}.txt", "label": label, "expect": "accept"})
    (data / "all.json").write_text(json.dumps({"documents": docs}))
    for name, ms in APPS.items():
        (project / "src" / f"{name}.py").write_text(TRIVIAL_APP.format(words=WORDS, ms=ms))
    return project


def configure(project: Path, app: str, count: int, batch_size: int) -> str:
    """The config (relative path) of ``app`` over the first ``count`` documents."""
    docs = json.loads((project / "data/bench/all.json").read_text())["documents"][:count]
    (project / "data" / "bench"
     / f"manifest-{count}.json").write_text(json.dumps({"documents": docs}))
    config = {"inputs": "data/bench", "manifest": f"data/bench/manifest-{count}.json",
              "categories": sorted(WORDS),
              "entry": f"src.{app}:predict", "batch_size": batch_size, "device": "cpu",
              "max_input_bytes": 65536, "min_quality": 0.5, "runs": "runs",
              "stop": {"max_rejected": None, "max_seconds": None}}
    rel = f"config/{app}-{count}.json"
    (project / rel).write_text(json.dumps(config, indent=2))
    return rel


def direct(project: Path, app: str, config: str, out: Path) -> tuple[float, float]:
    """The peer, in its own interpreter: (whole seconds, loop seconds by its own clock)."""
    cfg = json.loads((project / config).read_text())
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", DIRECT, str(project), app, cfg["manifest"],
                           str(out),
                           str(cfg["batch_size"])], check=True, cwd=project,
                          capture_output=True, text=True)
    return time.perf_counter() - started, float(done.stdout.split()[-1])


def kdkit(source: Path, project: Path, config: str, run_id: str) -> tuple[float, float]:
    """``python -m kdkit.probe pilot`` of the kdkit at ``source``: (whole seconds, loop seconds by its own
    clock: the session's seconds less its diagnose)."""
    env = {**os.environ, "PYTHONPATH": str(source)}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "kdkit.probe", "pilot", str(project), "--config",
                           config,
                           "--run-id", run_id, "--json", "--quiet"], capture_output=True, text=True,
                          env=env,
                          cwd=project)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(
            f"the pilot of {source} failed ({done.returncode}): {done.stdout[-400:]} "
            f"{done.stderr[-400:]}")
    timings = json.loads(done.stdout)["timings"]
    return seconds, timings["seconds"] - timings["diagnose_seconds"]


def overhead(project: Path, work: Path, app: str, items: int, batch_size: int, runs: int,
             sources: dict[str, Path]) -> dict[str, object]:
    """Alternating runs of the direct loop and each kdkit; medians of the whole process and of the loop."""
    config = configure(project, app, items, batch_size)
    for name, source in sources.items():
        kdkit(source, project, config, f"{name}-{app}-warm-up")
    whole: dict[str, list[float]] = {side: [] for side in ("direct", *sources)}
    loop: dict[str, list[float]] = {side: [] for side in ("direct", *sources)}
    for run in range(runs):
        for side in whole:
            seconds, inner = (direct(project, app, config, work / f"direct-{app}-{run}.jsonl")
                              if side == "direct"
                              else kdkit(sources[side], project, config, f"{side}-{app}-{run}"))
            whole[side].append(seconds)
            loop[side].append(inner)
    med_whole, med_loop = medians(whole), medians(loop)
    result: dict[str, object] = {"app": app, "app_wait_ms_per_item": APPS[app], "items": items,
                                 "batch_size": batch_size,
                                 "runs": runs, "goal": "loop overhead <= 0.05"}
    for side in whole:
        result[side] = {"median_seconds": round(med_whole[side], 4),
                        "seconds": rounded(whole[side], 4),
                        "median_loop_seconds": round(med_loop[side], 4),
                        "loop_seconds": rounded(loop[side], 4)}
        if side != "direct":
            result[side].update({  # type: ignore[attr-defined]
                "loop_overhead": round(med_loop[side] / med_loop["direct"] - 1, 4),
                "loop_overhead_us_per_item": round((med_loop[side] - med_loop["direct"]) / items
                                                   * 1e6, 1),
                "whole_overhead": round(med_whole[side] / med_whole["direct"] - 1, 4),
                "whole_extra_seconds": round(med_whole[side] - med_whole["direct"], 3)})
    return result


def resume_scan(work: Path, lines: int, runs: int) -> dict[str, object]:
    run = RunFolder(work / "scan-run")
    run.path.mkdir()
    batch = 100
    # the harness's line format, written in bulk
    with run.results.open("w", encoding="utf-8") as sink:
        for start in range(0, lines, batch):
            for n in range(start, min(start + batch, lines)):
                record = {"id": f"d{n:07d}", "outcome": "accepted", "category": "invoice",
                          "batch": start // batch,
                          "sha256": f"{n:064x}", "lines": batch}
                sink.write(json.dumps(record, separators=(",", ":")) + "\n")
    measured = [_scan_in_fresh_process(run.path, lines) for _ in range(runs)]
    walls, cpus = [m[0] for m in measured], [m[1] for m in measured]
    return {"lines": lines, "bytes": run.results.stat().st_size, "runs": runs,
            "median_seconds": round(statistics.median(walls), 4), "seconds": rounded(walls, 4),
            "median_cpu_seconds": round(statistics.median(cpus), 4), "goal_seconds": 2.0}


SCAN = """
import sys, time
from pathlib import Path
from kdkit.core.runresults import RunFolder
started, cpu = time.perf_counter(), time.process_time()
scan = RunFolder(Path(sys.argv[1])).scan()
print(time.perf_counter() - started, time.process_time() - cpu, len(scan.finished))
"""


def _scan_in_fresh_process(run_dir: Path, lines: int) -> tuple[float, float]:
    """(wall, CPU) seconds of RunFolder.scan() in a new interpreter, as `kdkit pilot --resume` runs it.

    CPU time is given beside wall time: on a shared machine it is the figure load does not inflate.
    """
    done = subprocess.run([sys.executable, "-c", SCAN, str(run_dir)], capture_output=True,
                          text=True, check=True,
                          cwd=REPO)
    wall, cpu, found = done.stdout.split()
    assert int(found) == lines, done.stdout
    return float(wall), float(cpu)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=None,
                        help=(
                            "runs of each side and size with the trivial app (default 5; --corpus, "
                            "--vectors: 3)"))
    parser.add_argument("--model-runs", type=int,
                        default=3, help="runs of each side and size with the 1 ms/item app")
    parser.add_argument("--items", type=int, default=10_000, help="documents for the trivial app")
    parser.add_argument("--model-items", type=int,
                        default=2_000, help="documents for the 1 ms/item app")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--scan-lines", type=int, default=1_000_000)
    parser.add_argument("--baseline", type=Path, default=None,
                        help="another kdkit checkout to time the same way (reported as 'baseline')")
    parser.add_argument("--corpus", action="store_true",
                        help=(
                            "the full-corpus figures instead (bench/_pilot_corpus.py): "
                            "results/pilot_corpus.json"))
    parser.add_argument("--records", type=int,
                        default=1_000_000, help="--corpus: records of the JSONL corpus")
    parser.add_argument("--vectors", action="store_true",
                        help=(
                            "the vectors figure instead (bench/_pilot_corpus.py): "
                            "bench/results/pilot_vectors.json"))
    parser.add_argument("--vector-rows", type=int,
                        default=100_000, help="--vectors: rows of 768 float32")
    args = parser.parse_args()
    if args.corpus or args.vectors:
        import _pilot_corpus

        args.runs = 3 if args.runs is None else args.runs
        return _pilot_corpus.main(args)
    args.runs = 5 if args.runs is None else args.runs
    sources = {"kdkit": REPO, **({"baseline": args.baseline.resolve()} if args.baseline else {})}

    with tempfile.TemporaryDirectory(prefix="bench-pilot.", dir=os.environ.get("TMPDIR")) as tmp:
        work = Path(tmp)
        project = make_project(work, max(args.items, args.model_items), args.batch_size)
        over = [overhead(project, work, "trivial", args.items, args.batch_size, args.runs, sources),
                overhead(project, work, "model_1ms", args.model_items, args.batch_size,
                         args.model_runs, sources)]
        scan = resume_scan(work, args.scan_lines, 5)
    write_result("pilot", {"overhead": over, "resume_scan": scan,
                           "baseline": str(args.baseline) if args.baseline else None,
                           "machine": machine(load=True)})
    print(f"batch {args.batch_size}; medians of alternating runs, each side in its own interpreter")
    print(f"{'app':<11}{'side':<10}{'items':>7}{'direct s':>10}{'side s':>9}{'whole':>8}{'loop d':>8}"
          f"{'loop s':>8}{'loop':>8}{'us/item':>9}")
    for row in over:
        d = row["direct"]
        for name in sources:
            k = row[name]
            print(f"{row['app']:<11}{name:<10}{row['items']:>7}{d['median_seconds']:>10.3f}"  # type: ignore[index]
                  f"{k['median_seconds']:>9.3f}{k['whole_overhead']:>+8.1%}{d['median_loop_seconds']:>8.3f}"  # type: ignore[index]
                  f"{k['median_loop_seconds']:>8.3f}{k['loop_overhead']:>+8.1%}"  # type: ignore[index]
                  f"{k['loop_overhead_us_per_item']:>9}")  # type: ignore[index]
    print("goal: loop overhead <= +5%")
    print(f"resume scan of {scan['lines']:,} lines: {scan['median_seconds']:.3f} s wall, "
          f"{scan['median_cpu_seconds']:.3f} s CPU (goal <= 2 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
