"""bench_pilot.py --corpus and --vectors: the full-corpus figures of issue 25's "Speed".

Corpus. A JSONL corpus of ``--records`` records (default 1,000,000; ~120 bytes each: an ID and a short text),
output kind ``text`` (no manifest: a full corpus has no expectations), a trivial app that does not import
torch (it answers each record's first 16 characters). Three figures, medians over ``--runs`` rounds:

1. Overhead per item. ``python -m kdkit.probe pilot`` against a direct loop in its own interpreter over the
   same records (read the lines, json.loads, call predict per batch, write the answers as JSON lines); both
   whole processes, (kdkit - direct) / records. kdkit's own clock (its session less the diagnose: from the
   app's process ready to the last record written, the corpus's load not included) is given beside.
   Goal: <= 3 us per item.
2. Peak RSS of the pilot's own process (its RUSAGE_SELF ru_maxrss, written as it exits) and of the direct
   loop; beside it, ru_maxrss from os.wait4 of the pilot, which Linux takes over its waited children too (the
   diagnose's and the app's processes: the diagnose imports torch where it is installed, whatever the corpus).
   Goal: <= 300 MB whatever the corpus size.
3. Resume. The pilot killed (SIGKILL) once results.jsonl holds about half the run's lines, then
   ``--resume``: seconds from its start until results.jsonl grows past its size at the kill (its first
   new batch written). Goal: <= 5 s.

Vectors. 100,000 x 768 float32 (``--vector-rows``) stored through kdkit.core.vectorfile's VectorWriter (rows
appended a batch at a time, ``--batch-size`` rows, each batch fsynced as the harness does, then finish(): the
final header and the file's SHA-256 read back) against numpy.save of the same array (and numpy.save plus one
fsync); speed ratio numpy/kdkit (goal >= 0.9: kdkit at least 0.9x numpy's speed) and the size against the
raw array (goal within 1 %). Beside it, kdkit_one_append: every row in one append (one fsync), then finish():
the format's own cost without the per-batch durability.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import REPO, machine, medians, rounded, write_result

APP = '''"""A trivial app (no torch): each record's first 16 characters of text."""


def predict(items):
    return [{"id": item["id"], "output": item["record"]["text"][:16]} for item in items]
'''
DIRECT = """
import importlib, json, resource, sys, time
from pathlib import Path
project, corpus, out, batch_size = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
sys.path.insert(0, str(project))
predict = importlib.import_module("src.trivial").predict
started = time.perf_counter()
with open(corpus, "rb") as source, out.open("w", encoding="utf-8") as sink:
    batch = []
    for line in source:
        record = json.loads(line)
        batch.append({"id": record["id"], "record": record})
        if len(batch) == batch_size:
            for result in predict(batch):
                sink.write(json.dumps(result) + "\\n")
            batch = []
    for result in predict(batch):
        sink.write(json.dumps(result) + "\\n")
print(time.perf_counter() - started)
"""
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota",
         "kappa", "lambda", "mu"]


def make_corpus(root: Path, records: int, batch_size: int) -> Path:
    from kdkit.project.init import init_project

    project = init_project(root / "proj", name="benchcorpus", backend="cpu")
    (project / "src" / "trivial.py").write_text(APP)
    with (project / "data" / "corpus.jsonl").open("w", encoding="utf-8") as sink:
        for n in range(records):
            text = " ".join(WORDS[(n + k) % len(WORDS)] for k in range(n % 7 + 10))
            sink.write(json.dumps({"id": f"r{n:07d}", "text": text, "n": n}) + "\n")
    config = {"inputs": {"jsonl": "data/corpus.jsonl", "id": "id"},
              "output": {"kind": "text", "max_chars": 64},
              "entry": "src.trivial:predict", "batch_size": batch_size, "device": "cpu",
              "max_input_bytes": 4096,
              "min_quality": 0.5, "runs": "runs",
              "stop": {"max_rejected": None, "max_seconds": None}}
    (project / "config" / "corpus.json").write_text(json.dumps(config, indent=2))
    return project


def _waited(process: subprocess.Popen[str]) -> tuple[int, int]:
    """(exit status, peak RSS in bytes) of ``process``, reaped with os.wait4."""
    _pid, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return process.returncode, usage.ru_maxrss * 1024


# `python -m kdkit.probe`, writing its own peak RSS (RUSAGE_SELF: the pilot's process alone) to argv[1] as it exits.
SELF_RSS = """
import resource, runpy, sys
out = sys.argv.pop(1)
try:
    runpy.run_module("kdkit.probe", run_name="__main__", alter_sys=True)
finally:
    with open(out, "w") as sink:
        sink.write(str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024))
"""


def _pilot(project: Path, *args: str, out: Any = subprocess.DEVNULL,
           rss: Path | None = None) -> subprocess.Popen[str]:
    head = ["-c", SELF_RSS, str(rss)] if rss is not None else ["-m", "kdkit.probe"]
    return subprocess.Popen([sys.executable, *head, "pilot", str(project), "--config",
                             "config/corpus.json", "--json",
                             "--quiet", *args], stdout=out, stderr=out, text=True, cwd=project,
                            env={**os.environ, "PYTHONPATH": str(REPO)})


def kdkit_run(project: Path, run_id: str) -> dict[str, float]:
    own = project.parent / f"rss-{run_id}.txt"
    with tempfile.TemporaryFile("w+") as sink:
        started = time.perf_counter()
        process = _pilot(project, "--run-id", run_id, out=sink, rss=own)
        code, tree_rss = _waited(process)
        seconds = time.perf_counter() - started
        sink.seek(0)
        out = sink.read()
    if code != 0:
        raise SystemExit(f"the pilot failed ({code}): {out[-1200:]}")
    timings = json.loads(out[out.index("{"):])["timings"]
    return {"seconds": seconds, "loop_seconds": timings["seconds"] - timings["diagnose_seconds"],
            "rss": float(own.read_text()), "tree_rss": tree_rss}


def direct_run(project: Path, out: Path, batch_size: int) -> dict[str, float]:
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-c", DIRECT, str(project),
                                str(project / "data/corpus.jsonl"),
                                str(out), str(batch_size)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stderr is not None
    stdout, stderr = process.stdout.read(), process.stderr.read()  # little output: no deadlock
    code, rss = _waited(process)
    seconds = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"the direct loop failed ({code}): {stderr[-600:]}")
    return {"seconds": seconds, "loop_seconds": float(stdout.split()[-1]),
            "rss": rss, "tree_rss": rss}


def _wait_size(path: Path, size: int, process: subprocess.Popen[str], timeout: float) -> float:
    """Poll until ``path`` is larger than ``size`` bytes; the time it was seen."""
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        try:
            if path.stat().st_size > size:
                return time.perf_counter()
        except FileNotFoundError:
            pass
        if process.poll() is not None:
            raise SystemExit(
                f"the pilot exited {process.returncode} before {path} reached {size} bytes")
        time.sleep(0.005)
    raise SystemExit(f"{path} did not grow past {size} bytes in {timeout} s")


def resume_run(project: Path, run_id: str, full_size: int) -> float:
    """Kill a run at about half its results, resume it: seconds until its first new batch is written."""
    results = project / "runs" / run_id / "results.jsonl"
    killed = _pilot(project, "--run-id", run_id)
    _wait_size(results, full_size // 2, killed, 3600)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    at_kill = results.stat().st_size
    started = time.perf_counter()
    resumed = _pilot(project, "--resume", run_id)
    seen = _wait_size(results, at_kill, resumed, 600)
    resumed.send_signal(signal.SIGKILL)  # the rest of the run is not what is measured
    resumed.wait()
    return seen - started


def corpus(records: int, runs: int, batch_size: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-corpus.", dir=os.environ.get("TMPDIR")) as tmp:
        work = Path(tmp)
        project = make_corpus(work, records, batch_size)
        kdkit_run(project, "warm-up")  # page cache, byte-code caches
        full_size = (project / "runs" / "warm-up" / "results.jsonl").stat().st_size
        sides: dict[str, list[dict[str, float]]] = {"direct": [], "kdkit": []}
        resumes = []
        for run in range(runs):
            sides["direct"].append(direct_run(project, work / f"direct-{run}.jsonl", batch_size))
            sides["kdkit"].append(kdkit_run(project, f"full-{run}"))
            resumes.append(resume_run(project, f"killed-{run}", full_size))
        corpus_bytes = (project / "data" / "corpus.jsonl").stat().st_size
    return _corpus_result(records, runs, batch_size, corpus_bytes, sides, resumes)


def _corpus_result(records: int, runs: int, batch_size: int, corpus_bytes: int,
                   sides: dict[str, list[dict[str, float]]],
                   resumes: list[float]) -> dict[str, Any]:
    result: dict[str, Any] = {"records": records, "corpus_bytes": corpus_bytes,
                              "batch_size": batch_size,
                              "runs": runs,
                              "output_kind": "text", "app": "trivial, no torch import"}
    med = {side: medians(
        {key: [r[key] for r in rows] for key in ("seconds", "loop_seconds", "rss", "tree_rss")})
           for side, rows in sides.items()}
    for side, rows in sides.items():
        result[side] = {"median_seconds": round(med[side]["seconds"], 3),
                        "seconds": rounded([r["seconds"] for r in rows], 3),
                        "median_loop_seconds": round(med[side]["loop_seconds"], 3),
                        "median_peak_rss_mb": round(med[side]["rss"] / 1e6, 1),
                        "peak_rss_mb": rounded([r["rss"] / 1e6 for r in rows], 1),
                        "median_peak_rss_mb_with_children": round(med[side]["tree_rss"] / 1e6, 1)}
    result["overhead_us_per_item"] = round((med["kdkit"]["seconds"] - med["direct"]["seconds"])
                                           / records * 1e6, 2)
    result["loop_overhead_us_per_item"] = round(
        (med["kdkit"]["loop_seconds"] - med["direct"]["loop_seconds"]) / records * 1e6, 2)
    result["resume_first_batch_seconds"] = {"median": round(sorted(resumes)[len(resumes) // 2], 3),
                                            "runs": rounded(resumes, 3)}
    result["goals"] = {
        "overhead_us_per_item<=3": result["overhead_us_per_item"] <= 3,
        "peak_rss_mb<=300": result["kdkit"]["median_peak_rss_mb"] <= 300,
        "resume_first_batch_seconds<=5": result["resume_first_batch_seconds"]["median"] <= 5}
    return result


def _kdkit_vectors(rows: list[bytes], dim: int, batch: int, path: Path) -> float:
    from kdkit.core.vectorfile import VectorWriter

    started = time.perf_counter()
    writer = VectorWriter.create(path, dim)
    try:
        for start in range(0, len(rows), batch):
            writer.append(rows[start:start + batch])
        writer.finish()
    finally:
        writer.close()
    return time.perf_counter() - started


def _numpy_save(array: Any, path: Path, fsync: bool, checksum: bool = False) -> float:
    """numpy.save of the array; with ``fsync`` on disk before it returns; with ``checksum`` also its SHA-256 read
    back (what a verified copy needs, as SHA256SUMS lists kdkit's file)."""
    import numpy

    from kdkit.core.jsonio import sha256_file

    started = time.perf_counter()
    with path.open("wb") as sink:
        numpy.save(sink, array)
        if fsync:
            sink.flush()
            os.fsync(sink.fileno())
    if checksum:
        sha256_file(path)
    return time.perf_counter() - started


def vectors(count: int, dim: int, batch: int, runs: int) -> dict[str, Any]:
    import numpy

    array = numpy.random.default_rng(0).standard_normal((count, dim), dtype=numpy.float32)
    rows = [row.tobytes() for row in array]  # the packed rows the harness holds (outputkinds.pack)
    with tempfile.TemporaryDirectory(prefix="bench-vectors.", dir=os.environ.get("TMPDIR")) as tmp:
        work = Path(tmp)
        cases = {"kdkit": lambda: _kdkit_vectors(rows, dim, batch, work / "kdkit.npy"),
                 "kdkit_one_append": lambda: _kdkit_vectors(
                     rows, dim, count, work / "kdkit-one.npy"),
                 "numpy_save": lambda: _numpy_save(array, work / "numpy.npy", False),
                 "numpy_save_fsync": lambda: _numpy_save(array, work / "numpy-fsync.npy", True),
                 "numpy_save_fsync_sha256": lambda: _numpy_save(
                     array, work / "numpy-sum.npy", True, True)}
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(runs):
            for name, case in cases.items():
                times[name].append(case())
        loaded = numpy.load(work / "kdkit.npy")
        assert loaded.shape == array.shape and numpy.array_equal(loaded, array)
        kd_size, np_size = (work / "kdkit.npy").stat().st_size, (work / "numpy.npy").stat().st_size
    med = medians(times)
    raw = array.nbytes
    ratio = med["numpy_save"] / med["kdkit"]
    return {"rows": count, "dim": dim, "batch_rows": batch, "runs": runs,
            "median_seconds": {name: round(value, 4) for name, value in med.items()},
            "seconds": {name: rounded(values, 4) for name, values in times.items()},
            "speed_vs_numpy_save": round(ratio, 3), "speed_vs_numpy_save_fsync": round(
                med["numpy_save_fsync"] / med["kdkit"], 3),
            "speed_vs_numpy_save_fsync_sha256": round(med["numpy_save_fsync_sha256"]
                                                      / med["kdkit"], 3),
            "one_append_speed_vs_numpy_save_fsync": round(
                med["numpy_save_fsync"] / med["kdkit_one_append"], 3),
            "bytes": {"kdkit": kd_size, "numpy_save": np_size, "raw_array": raw},
            "size_over_raw": round(kd_size / raw - 1, 7),
            "goals": {"speed>=0.9x_numpy_save": ratio >= 0.9,
                      "size_within_1%": abs(kd_size / raw - 1) <= 0.01}}


def main(args: Any) -> int:
    if args.corpus:
        result = corpus(args.records, args.runs, args.batch_size)
        write_result("pilot_corpus", {**result, "machine": machine(load=True)})
        print(
            f"{result['records']:,} JSONL records, batch {result['batch_size']}, medians of "
            f"{result['runs']} runs")
        for side in ("direct", "kdkit"):
            r = result[side]
            print(f"  {side:<7} {r['median_seconds']:>8.2f} s whole, "
                  f"{r['median_loop_seconds']:>8.2f} s loop, peak RSS "
                  f"{r['median_peak_rss_mb']:>7.1f} MB own, "
                  f"{r['median_peak_rss_mb_with_children']:>7.1f} MB with its children")
        print(f"  overhead {result['overhead_us_per_item']} us/item whole, "
              f"{result['loop_overhead_us_per_item']} us/item loop (goal <= 3); resume to the "
              f"first new batch {result['resume_first_batch_seconds']['median']} s (goal <= 5)")
    if args.vectors:
        result = vectors(args.vector_rows, 768, args.batch_size, args.runs)
        write_result("pilot_vectors", {**result, "machine": machine(load=True)})
        print(f"vectors {result['rows']:,} x {result['dim']}: {result['median_seconds']} s; kdkit "
              f"at {result['speed_vs_numpy_save']}x numpy.save's speed (goal >= 0.9), "
              f"{result['speed_vs_numpy_save_fsync']}x numpy.save+fsync (one append: "
              f"{result['one_append_speed_vs_numpy_save_fsync']}x); size "
              f"{result['size_over_raw']:+.5%} over the raw array (goal within 1 %)")
    return 0
