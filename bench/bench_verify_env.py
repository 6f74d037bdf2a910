"""verify-env against `pip-sync --dry-run` on one venv of ~100 distributions and its hashed lock.

Each is run as the user runs it, as a fresh process, on the same venv and lock, in the
same run: `python -m kdkit.probe verify-env` run BY the venv's own interpreter (the
in-container form: kdkit's package on its path, no click, no second process),
`python -m kdkit.probe verify-env --python VENV` and `kdkit verify-env --python VENV` from
kdkit's own venv (a second interpreter reports sys.path), and
`pip-sync --dry-run --python-executable VENV`. Medians of
several runs each; the ratio is pip-sync's median over kdkit's. Goal: at least 10x.

    .venv/bin/python bench/bench_verify_env.py [--dists 100] [--runs 7]

Writes bench/results/verify_env.json and prints a short table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import BIN, REPO, interleaved, machine, medians, rounded, timed, write_result

sys.path.insert(0, str(REPO / "tests"))
from tinywheels import build_wheel, lock_line, make_venv, pip_install


def prepare(root: Path, count: int) -> tuple[Path, Path, int]:
    """A venv holding ``count`` tiny wheels (plus pip) and the lock naming them; returns (python, lock, dists)."""
    wheels = root / "wheels"
    names = [f"bench-pkg-{i:03d}" for i in range(count)]
    built = {name: build_wheel(wheels, name, f"1.{i}.0") for i, name in enumerate(names)}
    python = make_venv(root / "venv", with_pip=True)
    pip_install(python, wheels, [f"{name}==1.{i}.0" for i, name in enumerate(names)])
    lock = root / "lock.txt"
    lock.write_text("".join(lock_line(n, f"1.{i}.0", built[n]) for i, n in enumerate(names)), encoding="utf-8")
    listed = subprocess.run([str(python), "-m", "pip", "list", "--format=json"], capture_output=True, text=True,
                            check=True)
    return python, lock, len(json.loads(listed.stdout))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dists", type=int, default=100, help="tiny distributions in the venv (default 100)")
    parser.add_argument("--runs", type=int, default=7, help="runs of each tool (default 7)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kdkit-bench-") as tmp:
        python, lock, dists = prepare(Path(tmp), args.dists)
        probe_path = Path(tmp) / "probe"  # a copy of the package alone, as the image carries it
        shutil.copytree(REPO / "kdkit", probe_path / "kdkit", ignore=shutil.ignore_patterns("__pycache__"))
        inside = {**os.environ, "PYTHONPATH": str(probe_path)}
        tools = {
            "in venv: python -m kdkit.probe verify-env": [str(python), "-m", "kdkit.probe", "verify-env",
                                                         "--lock", str(lock)],
            "python -m kdkit.probe verify-env --python": [sys.executable, "-m", "kdkit.probe", "verify-env", "--lock",
                                                 str(lock), "--python", str(python)],
            "kdkit verify-env --python": [str(BIN / "kdkit"), "verify-env", "--lock", str(lock),
                                          "--python", str(python)],
            "pip-sync --dry-run": [str(BIN / "pip-sync"), "--dry-run", "--python-executable", str(python),
                                   str(lock)],
        }
        envs = {name: inside if name.startswith("in venv") else None for name in tools}
        cases = {name: (lambda name=name, argv=argv: timed(argv, env=envs[name])) for name, argv in tools.items()}
        times = interleaved(cases, args.runs, warm=True)
    median = medians(times)
    peer = median["pip-sync --dry-run"]
    out = write_result("verify_env", {
        "benchmark": "verify_env",
        "machine": machine(platform=f"{sys.platform}-{platform.machine()}"),
        "distributions_installed": dists, "locked": args.dists, "runs": args.runs,
        "tools": {name: {"median_s": round(median[name], 4), "runs_s": rounded(times[name], 4),
                         "pip_sync_over_this": round(peer / median[name], 1)} for name in tools},
        "goal": "pip-sync median / kdkit median >= 10",
    })
    print(f"{dists} installed distributions, {args.dists} locked, {args.runs} runs each")
    print(f"{'tool':<44} {'median':>9} {'pip-sync / this':>16}")
    for name in tools:
        print(f"{name:<44} {median[name] * 1000:>7.0f}ms {peer / median[name]:>15.1f}x")
    print(f"written: {out.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
