"""When requests arrive: seeded Poisson arrivals at a rate, or a recorded trace of arrival times.

Times are seconds from the start of one measured configuration. They are fixed before anything is
sent: a request's latency is counted from its scheduled arrival, so a generator or a service that
falls behind shows the whole wait (no coordinated omission). Standard library only.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

from kdkit.core.errors import BadInput
from kdkit.core.serviceconfig import MAX_RATE, MAX_REQUESTS
from kdkit.core.textfile import read_text_file

MAX_TRACE = MAX_REQUESTS  # arrival times a trace may hold (each one a recorded request)


def poisson_arrivals(rate: float, count: int, seed: int) -> list[float]:
    """``count`` arrival times of a Poisson process at ``rate`` per second; the same seed and rate
    give the same times (each rate its own stream, so adding a rate changes no other rate's
    arrivals)."""
    draw = random.Random(f"kdkit-serve-test:{seed}:{rate!r}")
    now, times = 0.0, []
    for _ in range(count):
        now += draw.expovariate(rate)
        times.append(now)
    return times


def read_trace(path: Path) -> list[float]:
    """A trace file: one arrival time in seconds per line (blank lines and ``#`` comments skipped),
    never going backwards; returned relative to the first. BadInput naming the line on anything
    else."""
    # a regular UTF-8 file (a FIFO would block)
    text = read_text_file(path, "trace").removeprefix("\ufeff")
    times: list[float] = []
    for number, line in enumerate(text.splitlines(), 1):
        value = line.split("#", 1)[0].strip()
        if not value:
            continue
        try:
            when = float(value)
        except ValueError:
            when = math.nan
        if not math.isfinite(when) or when < 0:
            raise BadInput(f"{path}: line {number}: {value[:40]!r} is not a time in seconds (a "
                           "finite number, 0 or more)")
        if times and when < times[-1]:
            raise BadInput(f"{path}: line {number}: {when:g} s comes before the previous line's "
                           f"{times[-1]:g} s; a trace's times must never go backwards")
        times.append(when)
        if len(times) > MAX_TRACE:
            raise BadInput(f"{path}: more than {MAX_TRACE:,} arrival times; cut the trace")
    if len(times) < 2:
        raise BadInput(f"{path}: a trace needs at least two arrival times")
    if not trace_rate(times) <= MAX_RATE:
        raise BadInput(f"{path}: {len(times)} arrivals within {times[-1] - times[0]:g} s is faster "
                       f"than {MAX_RATE:,g} requests/s; give times in seconds")
    first = times[0]
    return [when - first for when in times]


def trace_rate(times: list[float]) -> float:
    """The mean arrival rate of a trace (requests per second over its span)."""
    span = times[-1] - times[0]
    return (len(times) - 1) / span if span > 0 else math.inf
