"""`kdkit diagnose --expect cpu` against `python -c "import torch"`: what the walk to real kernels costs.

Three commands, each a fresh process, alternating, several runs; medians:
  peer            python -c "import torch"
  kdkit           kdkit diagnose --expect cpu            (the console script, through click)
  probe           python -m kdkit.probe diagnose --expect cpu   (as inside the image, no click)
Goal: kdkit at most 1 s more than the peer. For reference, research.md measured
torch.utils.collect_env at 1.74 s against 1.28 s for `import torch` on this kind of machine.

    .venv/bin/python bench/bench_diagnose.py [--runs 7]

Writes bench/results/diagnose.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def commands() -> dict[str, list[str]]:
    kdkit = BIN / "kdkit"
    return {
        "peer": [sys.executable, "-c", "import torch"],
        "kdkit": [str(kdkit) if kdkit.exists() else sys.executable, *([] if kdkit.exists() else ["-m", "kdkit"]),
                  "diagnose", "--expect", "cpu"],
        "probe": [sys.executable, "-m", "kdkit.probe", "diagnose", "--expect", "cpu"],
    }


def timed(argv: list[str], cwd: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stdout[-500:]}{done.stderr[-500:]}")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    argvs = commands()
    times: dict[str, list[float]] = {name: [] for name in argvs}
    with tempfile.TemporaryDirectory(prefix="bench-diagnose.") as tmp:  # no kdkit.json above: no extensions
        for argv in argvs.values():
            timed(argv, Path(tmp))  # warm the page cache once for each
        for _ in range(args.runs):
            for name, argv in argvs.items():
                times[name].append(timed(argv, Path(tmp)))
    medians = {name: statistics.median(values) for name, values in times.items()}
    result = {
        "runs": args.runs,
        "commands": {name: " ".join(argv) for name, argv in argvs.items()},
        "median_seconds": {name: round(value, 4) for name, value in medians.items()},
        "seconds": {name: [round(t, 4) for t in values] for name, values in times.items()},
        "kdkit_minus_peer_seconds": round(medians["kdkit"] - medians["peer"], 4),
        "probe_minus_peer_seconds": round(medians["probe"] - medians["peer"], 4),
        "goal": "kdkit_minus_peer_seconds <= 1.0",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                           "load_average_1m_at_end": round(os.getloadavg()[0], 2)},
    }
    (REPO / "bench" / "results").mkdir(parents=True, exist_ok=True)
    (REPO / "bench" / "results" / "diagnose.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"{'command':<50}{'median s':>10}")
    for name, argv in argvs.items():
        print(f"{' '.join(Path(a).name if i == 0 else a for i, a in enumerate(argv))[:49]:<50}{medians[name]:>10.3f}")
    print(f"\nkdkit diagnose costs {result['kdkit_minus_peer_seconds']:+.3f} s over import torch "
          f"(python -m kdkit.probe: {result['probe_minus_peer_seconds']:+.3f} s); goal <= +1 s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
