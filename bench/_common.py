"""What the benchmarks share: timing a fresh process, runs that take turns, medians, the machine's
description, and writing bench/results/<name>.json.

Each script in bench/ imports it as ``_common`` (the script's folder is first on ``sys.path``); importing it
also puts the repository first on ``sys.path``, so that the scripts time this tree's kdkit.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent  # kdkit's own venv: its console scripts (kdkit, pip-sync)
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def timed(argv: Sequence[str], *, expect: int = 0, cwd: Path | None = None,
          env: Mapping[str, str] | None = None,
          timeout: float | None = None) -> float:
    """Seconds ``argv`` takes as a fresh process, its output captured; SystemExit with the tail of its output
    when it exits other than ``expect``."""
    started = time.perf_counter()
    done = subprocess.run(list(argv), cwd=cwd, env=env, capture_output=True, text=True,
                          check=False, timeout=timeout)
    seconds = time.perf_counter() - started
    if done.returncode != expect:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}, expected {expect}:\n"
                         f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return seconds


def interleaved(cases: Mapping[str, Callable[[], float]], runs: int, *,
                warm: bool = False) -> dict[str, list[float]]:
    """The seconds of each case over ``runs`` rounds, the cases taking turns within each round, so that drift in
    the machine's load hits every case alike. With ``warm``, each case runs once first, untimed (page cache,
    byte-code caches)."""
    if warm:
        for case in cases.values():
            case()
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(runs):
        for name, case in cases.items():
            times[name].append(case())
    return times


def medians(times: Mapping[str, Iterable[float]]) -> dict[str, float]:
    return {name: statistics.median(values) for name, values in times.items()}


def rounded(values: Iterable[float], digits: int) -> list[float]:
    return [round(value, digits) for value in values]


def machine(*, load: bool = False, **extra: Any) -> dict[str, Any]:
    """The machine a result was measured on: cores and Python (with ``load``, the 1-minute load average at the
    end), plus ``extra``."""
    described: dict[str, Any] = {"cpus": os.cpu_count(), "python": platform.python_version()}
    if load:
        described["load_average_1m_at_end"] = round(os.getloadavg()[0], 2)
    return {**described, **extra}


def write_result(name: str, result: Mapping[str, Any]) -> Path:
    """Write ``result`` as bench/results/<name>.json (indented, a final newline); returns the path."""
    out = REPO / "bench" / "results" / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return out


def print_medians(heading: str, unit: str, median: Mapping[str, float], *, width: int, digits: int,
                  value_width: int = 10) -> None:
    """A table of medians: a heading line, then one line a name (left, ``width``) and its value (right)."""
    print(f"{heading:<{width}}{unit:>{value_width}}")
    for name, value in median.items():
        print(f"{name:<{width}}{value:>{value_width}.{digits}f}")
