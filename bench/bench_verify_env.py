"""verify-env against `uv pip sync --dry-run` and `pip-sync --dry-run`, on one venv and its hashed lock.

Each tool runs as a user runs it, as a fresh process, on the same venv and lock, taking turns in
the same run:

- in the image: the image's own command, `kdkit verify-env --lock LOCK` through the image's shim
  (kdkit.image.context.SHIM: `python -m kdkit.probe` with kdkit's probe on PYTHONPATH), run BY the
  venv's interpreter, with the probe laid out and byte-compiled as Dockerfile.common does it and
  PYTHONDONTWRITEBYTECODE set, as in the image;
- `kdkit verify-env --python VENV`, the console script of kdkit's own venv (a second interpreter
  reports the venv's sys.path);
- `uv pip sync --dry-run --offline --python VENV LOCK` (uv from kdkit's venv; its cache warm);
- `pip-sync --dry-run --python-executable VENV LOCK`.

Medians of several runs each; every ratio is a median over uv's, the fastest peer. Goals (issue 14):
the in-image form no slower than uv (ratio <= 1), `kdkit verify-env --python` at most 2x uv.

    .venv/bin/python bench/bench_verify_env.py [--dists 49] [--runs 15]

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

from kdkit.image.context import SHIM, probe_files

IN_IMAGE = "in the image: kdkit verify-env (shim)"
HOST = "kdkit verify-env --python VENV"
UV = "uv pip sync --dry-run --offline"
PIP_SYNC = "pip-sync --dry-run"
GOALS = {IN_IMAGE: 1.0, HOST: 2.0}  # at most this many times uv's median


def prepare(root: Path, count: int) -> tuple[Path, Path, int]:
    """A venv holding ``count`` tiny wheels (plus pip) and the lock naming them; returns (python, lock, dists)."""
    wheels = root / "wheels"
    names = [f"bench-pkg-{i:03d}" for i in range(count)]
    built = {name: build_wheel(wheels, name, f"1.{i}.0") for i, name in enumerate(names)}
    python = make_venv(root / "venv", with_pip=True)
    pip_install(python, wheels, [f"{name}==1.{i}.0" for i, name in enumerate(names)])
    lock = root / "lock.txt"
    lock.write_text(
        "".join(lock_line(n, f"1.{i}.0", built[n]) for i, n in enumerate(names)), encoding="utf-8")
    listed = subprocess.run([str(python), "-m", "pip", "list", "--format=json"],
                            capture_output=True, text=True,
                            check=True)
    return python, lock, len(json.loads(listed.stdout))


def image_probe(root: Path, python: Path) -> Path:
    """kdkit's probe laid out as the image holds it (/opt/kdkit/lib), byte-compiled by ``python`` as
    Dockerfile.common does, and the image's shim (/opt/kdkit/bin/kdkit) with those two paths moved here."""
    for rel, source in probe_files():
        target = root / rel.removeprefix("kdkit/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    subprocess.run([str(python), "-m", "compileall", "-q", str(root / "lib")], check=True)
    text = SHIM.replace("/opt/kdkit/venv/bin/python",
                        str(python)).replace("/opt/kdkit/lib", str(root / "lib"))
    if "/opt/kdkit" in text:
        raise SystemExit(f"the shim names a path this bench does not move:\n{SHIM}")
    shim = root / "bin" / "kdkit"
    shim.parent.mkdir(parents=True, exist_ok=True)
    shim.write_text(text, encoding="utf-8")
    shim.chmod(0o755)
    return shim


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dists", type=int,
                        default=49, help="tiny distributions locked and installed (default 49)")
    parser.add_argument("--runs", type=int, default=15, help="runs of each tool (default 15)")
    args = parser.parse_args()
    uv = shutil.which("uv", path=str(BIN))
    if uv is None:
        raise SystemExit(f"no uv in {BIN}: install kdkit's dev lock (make venv)")
    with tempfile.TemporaryDirectory(prefix="kdkit-bench-") as tmp:
        python, lock, dists = prepare(Path(tmp), args.dists)
        shim = image_probe(Path(tmp) / "image", python)
        host_env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
        host_env["UV_CACHE_DIR"] = str(Path(tmp) / "uv-cache")
        # the image's ENV
        image_env = {**host_env, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}
        tools = {
            IN_IMAGE: ([str(shim), "verify-env", "--lock", str(lock)], image_env),
            HOST: (
                [str(BIN / "kdkit"), "verify-env", "--lock", str(lock), "--python", str(python)],
                host_env),
            UV: (
                [uv, "pip", "sync", "--dry-run", "--offline", "--python", str(python), str(lock)],
                host_env),
            PIP_SYNC: (
                [str(BIN / "pip-sync"), "--dry-run", "--python-executable", str(python), str(lock)],
                host_env),
        }
        cases = {name: (lambda argv=argv, env=env: timed(argv, env=env)) for name,
                 (argv, env) in tools.items()}
        times = interleaved(cases, args.runs, warm=True)
    median = medians(times)
    peer = median[UV]
    verdicts = {name: median[name] / peer <= goal for name, goal in GOALS.items()}
    out = write_result("verify_env", {
        "benchmark": "verify_env",
        "machine": machine(load=True, platform=f"{sys.platform}-{platform.machine()}"),
        "distributions_installed": dists, "locked": args.dists, "runs": args.runs,
        "tools": {name: {"median_s": round(median[name], 4), "runs_s": rounded(times[name], 4),
                         "over_uv": round(median[name] / peer, 2)} for name in tools},
        "goals": {name: {"at_most_times_uv": goal, "met": verdicts[name]} for name,
                  goal in GOALS.items()},
    })
    print(f"{dists} installed distributions, {args.dists} locked, {args.runs} runs each (medians)")
    print(f"{'tool':<40} {'median':>9} {'/ uv':>7}  goal")
    for name in tools:
        goal = (f"<= {GOALS[name]:.0f}x uv: {'MET' if verdicts[name] else 'NOT MET'}"
                if name in GOALS else "")
        print(f"{name:<40} {median[name] * 1000:>7.1f}ms {median[name] / peer:>6.2f}x  {goal}")
    print(f"written: {out.relative_to(REPO)}")
    return 0 if all(verdicts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
