"""`kdkit lock --resolver uv` against `kdkit lock --resolver pip-tools` on a realistic base.in, with the raw tools.

A scaffolded cpu project whose base.in holds torch==2.13.0, numpy, pandas, scikit-learn, transformers,
accelerate and safetensors; torch from a local folder of wheels (--torch-find-links: the PyTorch index
may be out of reach), everything else through this machine's pip configuration, the same for every
case. Four cases, each a fresh process starting without a previous lock, interleaved, warm caches (one
untimed run of each first):

* `kdkit lock --resolver uv` and `kdkit lock --resolver pip-tools`, as the user runs them;
* `uv pip compile` and `pip-compile` alone, with the very arguments and environment kdkit gives them
  (kdkit.lock.uvcompile.uv_arguments, kdkit.lock.pipcompile.compile_arguments), so kdkit's own work
  around each (pip's configuration, the checks, provenance, the header) shows as the difference.

Goal: kdkit lock with uv at least 10x faster than with pip-tools (median over median).

    .venv/bin/python bench/bench_lock.py [--runs 3] [--torch-wheels DIR]

Writes bench/results/lock.json and prints a short table.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from _common import BIN, REPO, interleaved, machine, medians, rounded, timed, write_result

BASE_IN = "torch==2.13.0\nnumpy\npandas\nscikit-learn\ntransformers\naccelerate\nsafetensors\n"
KDKIT_UV = "kdkit lock --resolver uv"
KDKIT_PIP_TOOLS = "kdkit lock --resolver pip-tools"
RAW_UV = "uv pip compile (alone)"
RAW_PIP_COMPILE = "pip-compile (alone)"
GOAL = 10.0


def scaffold(root: Path) -> Path:
    """A cpu project of `kdkit init` with the realistic base.in."""
    from kdkit.project.init import init_project

    project = init_project(root / "proj", name="bench-lock", backend="cpu")
    (project / "requirements" / "base.in").write_text(BASE_IN, encoding="utf-8")
    return project


def raw_commands(project: Path,
                 wheels: Path, out: Path) -> dict[str, tuple[list[str], dict[str, str]]]:
    """The two tools' command lines and environments, as kdkit builds them for this project."""
    from kdkit.config.project import load_project
    from kdkit.lock import pipcompile, uvcompile
    from kdkit.lock.pipconfig import pip_configuration

    backend = load_project(project).backend("cpu")
    config = pip_configuration()
    cert = uvcompile.uv_cert(config, None, in_container=False)
    uv_args = uvcompile.uv_arguments(backend, config, wheels, False, [], cert)
    uv = [str(uvcompile.find_uv()), "pip", "compile", *uv_args, "--python", sys.executable,
          "--output-file",
          str(out), "requirements/base.in"]
    pip_compile = [sys.executable, "-m", "piptools", "compile",
                   *pipcompile.compile_arguments(backend, config, wheels, False, []),
                   "--output-file", str(out), "requirements/base.in"]
    return {RAW_UV: (uv, uvcompile.uv_environment(config, os.environ)),
            RAW_PIP_COMPILE: (pip_compile, {**os.environ})}


def fresh(output: Path, argv: Sequence[str], cwd: Path, env: dict[str, str] | None = None,
          keep: Path | None = None) -> Callable[[], float]:
    """A case: ``output`` removed (no previous lock), then ``argv`` timed as a fresh process; its output copied
    to ``keep`` after the clock stopped."""
    def case() -> float:
        output.unlink(missing_ok=True)
        seconds = timed(argv, cwd=cwd, env=env, timeout=1800)
        if keep is not None:
            shutil.copyfile(output, keep)
        return seconds
    return case


def same_pins(a: Path, b: Path) -> bool:
    from kdkit.core.lockfile import parse_lock

    pins = [{key: pin.version for key, pin in parse_lock(path).pins.items()} for path in (a, b)]
    return pins[0] == pins[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each case (default 3)")
    parser.add_argument("--torch-wheels", type=Path,
                        default=Path(os.environ.get("KDKIT_TEST_TORCH_WHEELS",
                                                     "/opt/wheels")),
                        help=(
                            "folder holding torch 2.13.0+cpu for this Python (default: "
                            "$KDKIT_TEST_TORCH_WHEELS)"))
    args = parser.parse_args()
    wheels = args.torch_wheels.resolve()
    with tempfile.TemporaryDirectory(prefix="kdkit-bench-lock-") as tmp:
        project = scaffold(Path(tmp))
        lock, raw_out = project / "requirements" / "cpu.txt", Path(tmp) / "raw.txt"
        kept = {resolver: Path(tmp) / f"{resolver}.txt" for resolver in ("uv", "pip-tools")}
        kdkit = [str(BIN / "kdkit"), "lock", str(project), "--backend", "cpu", "--torch-find-links",
                 str(wheels)]
        cases = {KDKIT_UV: fresh(lock, [*kdkit, "--resolver", "uv"], project, keep=kept["uv"]),
                 KDKIT_PIP_TOOLS: fresh(lock, [*kdkit, "--resolver", "pip-tools"], project,
                                        keep=kept["pip-tools"])}
        cases |= {name: fresh(raw_out, argv, project, env) for name, (argv, env) in
                  raw_commands(project, wheels, raw_out).items()}
        times = interleaved(cases, args.runs, warm=True)
        agree = same_pins(kept["uv"], kept["pip-tools"])
    return report(times, args.runs, agree)


def report(times: dict[str, list[float]], runs: int, agree: bool) -> int:
    median = medians(times)
    ratio = median[KDKIT_PIP_TOOLS] / median[KDKIT_UV]
    out = write_result("lock", {
        "benchmark": "lock",
        "machine": machine(load=True, platform=f"{sys.platform}-{platform.machine()}"),
        "base_in": BASE_IN.splitlines(), "runs": runs, "warm": True, "previous_lock": False,
        "torch": "--torch-find-links (torch 2.13.0+cpu); the rest through this machine's pip "
                 "configuration",
        "cases": {name: {"median_s": round(median[name], 3), "runs_s": rounded(times[name], 3)}
                  for name in times},
        "kdkit_overhead_s": {"uv": round(median[KDKIT_UV] - median[RAW_UV], 3),
                             "pip-tools": round(median[KDKIT_PIP_TOOLS]
                                                - median[RAW_PIP_COMPILE], 3)},
        "pip_tools_over_uv": {"kdkit lock": round(ratio, 1),
                              "tools alone": round(median[RAW_PIP_COMPILE] / median[RAW_UV], 1)},
        "same_pins": agree,
        "goal": "kdkit lock --resolver pip-tools median / kdkit lock --resolver uv median >= "
                f"{GOAL:g}",
        "goal_met": ratio >= GOAL,
    })
    print(
        f"{runs} runs each, warm caches, no previous lock; same pins from both resolvers: {agree}")
    print(f"{'case':<34} {'median':>9}")
    for name in times:
        print(f"{name:<34} {median[name]:>8.2f}s")
    print(f"kdkit lock: pip-tools / uv = {ratio:.1f}x (goal {GOAL:g}x: "
          f"{'met' if ratio >= GOAL else 'NOT met'}); kdkit's own time around uv "
          f"{median[KDKIT_UV] - median[RAW_UV]:.2f}s")
    print(f"written: {out.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
