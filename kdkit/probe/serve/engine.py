"""The in-process service: open-loop arrivals, a batcher with the declared policy, the declared
behaviour at capacity, and the project's own predict(items) as the server.

One thread plays the clock, the queue and the server. Arrival times are fixed before the run
(arrivals.py); while the app computes a batch nobody is dequeued, so the requests that arrived
meanwhile are admitted afterwards, in order, against the queue as it stood at their arrival: the
queue length a capacity check sees is exact. Every time is measured from the scheduled arrival, so a
stall shows in the wait of everyone who arrived during it (no coordinated omission). A batch goes
when it is full or when its oldest request has waited the policy's maximum. A configuration stops
early when an objective is clearly lost (more requests already late than the percentile allows of
the planned count) or when its time bound passes; what was not served is ``cut``. Standard library
only.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from kdkit.core.serviceconfig import Objective, Policy
from kdkit.probe.serve.stats import AT_CAPACITY, CUT, TOO_LARGE, Judge

# A batch of requests -> one record per request: (outcome, quality) in the batch's order (app.py).
Serve = Callable[[Sequence[int]], list[tuple[str, float | None]]]
T = TypeVar("T")
SPIN = 0.0005  # the last half millisecond before a due time is spun, not slept (sleep overshoots)


@dataclass(frozen=True)
class Request:
    """One request as the generator knows it before the run: its input, its size, its scheduled
    arrival."""

    index: int
    ident: str
    size: int
    arrival: float


class Bounds:
    """When a configuration stops: its time bound, or an objective already lost (stats.Judge)."""

    def __init__(self, max_seconds: float, objectives: Sequence[Objective], planned: int) -> None:
        self.max_seconds = max_seconds
        self.judge = Judge(objectives, planned)

    def lost(self) -> str | None:
        objective = self.judge.lost(())
        if objective is None:
            return None
        late = self.judge.late[self.judge.objectives.index(objective)]
        return f"{objective.name} lost: {late} requests late of the {self.judge.planned} planned"


class RealClock:
    """Wall time from the configuration's start: waits are slept (the last half millisecond spun), a
    batch's service is the time the app really takes. What a request feels, stalls of the machine
    included."""

    name = "real"

    def __init__(self) -> None:
        self.origin = time.perf_counter()

    def now(self) -> float:
        return time.perf_counter() - self.origin

    def wait_until(self, due: float) -> None:
        left = due - self.now()
        if left > SPIN:
            time.sleep(left - SPIN)
        while self.now() < due:
            pass

    def timed(self, call: Callable[[], T]) -> tuple[float, float, T]:
        start = self.now()
        got = call()
        return start, self.now(), got


class VirtualClock:
    """Waits skipped, services measured: the app's every batch takes the time it really takes
    (perf_counter around the call), the time between batches is simulated exactly. A test of many
    rates in seconds, blind to what idle time does to a device (clocks that drop, caches that
    cool)."""

    name = "virtual"

    def __init__(self) -> None:
        self.virtual = 0.0

    def now(self) -> float:
        return self.virtual

    def wait_until(self, due: float) -> None:
        self.virtual = max(self.virtual, due)

    def timed(self, call: Callable[[], T]) -> tuple[float, float, T]:
        start = self.virtual
        began = time.perf_counter()
        got = call()
        self.virtual += time.perf_counter() - began
        return start, self.virtual, got


Clock = RealClock | VirtualClock


class Run:
    """One configuration (a rate's arrivals, a policy, a capacity) played against ``serve``."""

    def __init__(self, requests: Sequence[Request], policy: Policy, reject_at: int | None,
                 max_request_bytes: int,
                 bounds: Bounds) -> None:
        self.requests, self.policy, self.reject_at = requests, policy, reject_at
        self.max_bytes, self.bounds = max_request_bytes, bounds
        self.records: list[dict[str, Any]] = []
        self.queue: deque[Request] = deque()
        self.next = 0
        self.stopped: str | None = None

    def _record(self, request: Request, outcome: str, **times: Any) -> None:
        self.records.append({"index": request.index, "id": request.ident, "bytes": request.size,
                             "arrival": request.arrival, "start": None, "end": None, "batch": None,
                             "outcome": outcome, "quality": None, **times})

    def admit(self, now: float) -> None:
        """Every request due by ``now``, in arrival order: refused as too large, refused at
        capacity, or queued."""
        requests = self.requests
        while self.next < len(requests) and requests[self.next].arrival <= now:
            request = requests[self.next]
            self.next += 1
            if request.size > self.max_bytes:
                self._record(request, TOO_LARGE)
                self.bounds.judge.note(self.records[-1])
            elif self.reject_at is not None and len(self.queue) >= self.reject_at:
                # nobody leaves the queue between two batches: its length now is its length at this
                # arrival
                self._record(request, AT_CAPACITY, end=request.arrival)
                self.bounds.judge.note(self.records[-1])
            else:
                self.queue.append(request)

    def due(self) -> float:
        """When the batch at the head of the queue must go: now if full, else its oldest's arrival +
        the wait."""
        if len(self.queue) >= self.policy.max_batch:
            return -math.inf
        return self.queue[0].arrival + self.policy.max_wait_ms / 1000

    def serve_batch(self, serve: Serve, clock: Clock) -> None:
        batch = [self.queue.popleft() for _ in range(min(self.policy.max_batch, len(self.queue)))]
        start, end, answers = clock.timed(lambda: serve([request.index for request in batch]))
        for request, (outcome, quality) in zip(batch, answers, strict=True):
            self._record(request, outcome, start=start, end=end, batch=len(batch), quality=quality)
            self.bounds.judge.note(self.records[-1])

    def cut(self, reason: str) -> None:
        self.stopped = reason
        for request in list(self.queue) + list(self.requests[self.next:]):
            self._record(request, CUT)
        self.queue.clear()
        self.next = len(self.requests)


def play(run: Run, serve: Serve, clock: Clock | None = None) -> list[dict[str, Any]]:
    """Play one configuration (in real time unless given a VirtualClock); the records in completion
    order, times from its start."""
    clock = clock or RealClock()
    requests = run.requests
    while run.next < len(requests) or run.queue:
        now = clock.now()
        run.admit(now)
        stop = run.bounds.lost() or (f"time bound {run.bounds.max_seconds:g} s passed"
                                     if now > run.bounds.max_seconds else None)
        if stop:
            run.cut(stop)
            break
        if run.queue and run.due() <= now:
            run.serve_batch(serve, clock)
            continue
        following = requests[run.next].arrival if run.next < len(requests) else math.inf
        clock.wait_until(
            min(run.due() if run.queue else math.inf, following, run.bounds.max_seconds + 1e-3))
    return run.records
