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
import sys
import tempfile
from pathlib import Path

from _common import BIN, interleaved, machine, medians, print_medians, rounded, timed, write_result


def commands() -> dict[str, list[str]]:
    kdkit = BIN / "kdkit"
    return {
        "peer": [sys.executable, "-c", "import torch"],
        "kdkit": [str(kdkit) if kdkit.exists() else sys.executable,
                  *([] if kdkit.exists() else ["-m", "kdkit"]),
                  "diagnose", "--expect", "cpu"],
        "probe": [sys.executable, "-m", "kdkit.probe", "diagnose", "--expect", "cpu"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    argvs = commands()
    # no kdkit.json above: no extensions
    with tempfile.TemporaryDirectory(prefix="bench-diagnose.") as tmp:
        cases = {name: (lambda argv=argv: timed(argv, cwd=Path(tmp))) for name,
                 argv in argvs.items()}
        times = interleaved(cases, args.runs, warm=True)
    median = medians(times)
    result = {
        "runs": args.runs,
        "commands": {name: " ".join(argv) for name, argv in argvs.items()},
        "median_seconds": {name: round(value, 4) for name, value in median.items()},
        "seconds": {name: rounded(values, 4) for name, values in times.items()},
        "kdkit_minus_peer_seconds": round(median["kdkit"] - median["peer"], 4),
        "probe_minus_peer_seconds": round(median["probe"] - median["peer"], 4),
        "goal": "kdkit_minus_peer_seconds <= 1.0",
        "machine": machine(load=True),
    }
    write_result("diagnose", result)
    shown = {" ".join(Path(a).name if i == 0 else a for i, a in enumerate(argv))[:49]: median[name]
             for name, argv in argvs.items()}
    print_medians("command", "median s", shown, width=50, digits=3)
    print(f"\nkdkit diagnose costs {result['kdkit_minus_peer_seconds']:+.3f} s over import torch "
          f"(python -m kdkit.probe: {result['probe_minus_peer_seconds']:+.3f} s); goal <= +1 s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
