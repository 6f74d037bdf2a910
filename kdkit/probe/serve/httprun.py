"""The open-loop run behind :func:`kdkit.probe.serve.http.drive`: each request is sent at its
scheduled time whatever the earlier ones are doing (on another connection when all are busy), its
latency counted from that time, and the run stops early when its time is up or an objective is
clearly lost. Standard library only.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import ssl
import time
from collections.abc import Sequence
from typing import Any

from kdkit.core.serviceconfig import Objective
from kdkit.probe.serve.stats import ANSWERED, APP_ERROR, AT_CAPACITY, CUT, TOO_LARGE, Judge
from kdkit.probe.serve.wire import Pool, Stale, StreamTimes, exchange

EARLY = 0.002  # seconds before a due time the scheduler stops sleeping and only yields to the loop
TICK = 0.01  # seconds: the longest the scheduler sleeps between looks at the stop conditions
BURST = 64  # requests sent back to back (behind schedule) before the scheduler lets the others run
# the statuses of a service refusing by design
REFUSED = {413: TOO_LARGE, 429: AT_CAPACITY, 503: AT_CAPACITY}
GRACE = 1.0  # seconds the drain waits past timeout_s before it cuts what is still in flight
FAILURES = (OSError, EOFError, ValueError, asyncio.LimitOverrunError, Stale)


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or "no detail"
    line = f"{type(exc).__name__}: {text}"
    return line if len(line) <= 160 else line[:157] + "..."


class Run:
    """One measured configuration against the URL; :meth:`go` returns its records."""

    def __init__(self, host: str, port: int, *, tls: bool, streaming: bool, ids: Sequence[str],
                 requests: Sequence[bytes], sizes: Sequence[int], arrivals: Sequence[float],
                 max_request_bytes: int,
                 timeout_s: float, max_seconds: float,
                 objectives: Sequence[Objective], connections: int) -> None:
        self.host, self.port, self.tls = host, port, tls
        self.streaming, self.requests = streaming, requests
        self.arrivals = list(arrivals)
        self.max_request_bytes, self.timeout_s, self.max_seconds = (
            max_request_bytes, timeout_s, max_seconds)
        self.connections = connections
        self.judge = Judge(objectives, len(self.arrivals))
        self.records = [self._record(i, ids[i % len(ids)], sizes[i % len(sizes)], at)
                        for i, at in enumerate(self.arrivals)]
        self.over = [r["bytes"] > max_request_bytes for r in self.records]
        self.inflight: dict[int, float] = {}  # index -> scheduled arrival
        self.expired: set[int] = set()  # requests cancelled by their timeout
        self.tasks: set[asyncio.Task[None]] = set()
        self.t0 = 0.0
        self.scanned = -math.inf
        self.stop_reason = ""

    def _record(self, index: int, key: str, size: int, arrival: float) -> dict[str, Any]:
        record: dict[str, Any] = {"index": index, "id": key, "bytes": size, "arrival": arrival,
                                  "start": None,
                                  "end": None, "batch": 1, "outcome": CUT,
                                  "quality": None, "status": None}
        if self.streaming:
            record.update(ttft=None, itl=[])
        return record

    def _now(self) -> float:
        return time.perf_counter() - self.t0

    async def go(self) -> list[dict[str, Any]]:
        context = ssl.create_default_context() if self.tls else None
        self.pool = Pool(self.host, self.port, context, self.connections)
        self.t0 = time.perf_counter()
        try:
            sent = await self._schedule()
            await self._drain()
        finally:
            self.pool.close()
        for record in self.records:
            if record["outcome"] == CUT:
                record["error"] = (f"not sent: {self.stop_reason}" if record["index"] >= sent else
                                   f"still in flight {self.timeout_s:g} s after sending stopped "
                                   f"({self.stop_reason})")
        return self.records

    async def _schedule(self) -> int:
        """Start every request at its time; the index of the first one left unsent."""
        for i, at in enumerate(self.arrivals):
            if not await self._wait_until(at):
                return i
            self.inflight[i] = at
            task = asyncio.create_task(self._one(i))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
            if i % BURST == BURST - 1:
                await asyncio.sleep(0)
        self.stop_reason = "every request sent"
        return len(self.arrivals)

    async def _wait_until(self, at: float) -> bool:
        """Sleep until ``at``; False (and why, in stop_reason) when the run must stop first."""
        while True:
            now = self._now()
            if now >= self.max_seconds:
                self.stop_reason = f"the time bound of {self.max_seconds:g} s was reached"
                return False
            lost = self.judge.lost(self._overdue(now))
            if lost is not None:
                self.stop_reason = f"objective {lost.name} already lost"
                return False
            if at <= now:
                return True
            # The event loop's sleep overshoots by up to a millisecond (epoll rounds its timeout
            # up), and every overshoot would be counted as latency: sleep to EARLY before the due
            # time, then only yield.
            left = min(at - now, TICK, self.max_seconds - now)
            await asyncio.sleep(left - EARLY if left > EARLY else 0)

    def _overdue(self, now: float) -> list[int]:
        """Per objective, the requests in flight already past it (looked at once a tick at most)."""
        if now - self.scanned < TICK:
            return []
        self.scanned = now
        late = [0] * len(self.judge.objectives)
        for i, at in self.inflight.items():
            if self.over[i]:
                continue  # may yet be refused as too large, which is not late
            for k, objective in enumerate(self.judge.objectives):
                late[k] += (now - at) * 1000 > objective.ms
        return late

    async def _drain(self) -> None:
        """Wait for the requests in flight, each up to its own timeout_s from its arrival (then an
        error); any still going a moment past that (a backstop) is cut."""
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=self.timeout_s + GRACE)
        pending = list(self.tasks)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    async def _one(self, i: int) -> None:
        """Request ``i`` from its arrival to its outcome, cancelled (an error) timeout_s after its
        arrival: a timer, not asyncio.wait_for, which would cost a second task per request."""
        record = self.records[i]
        task = asyncio.current_task()
        assert task is not None
        timer = asyncio.get_running_loop().call_later(self.timeout_s, self._expire, i, task)
        try:
            await self._send(i, record)
        except asyncio.CancelledError:
            if i not in self.expired:
                raise  # cut by the drain
            self._failed(record, f"no full answer within {self.timeout_s:g} s of its arrival")
        except FAILURES as exc:
            self._failed(record, _reason(exc))
        finally:
            timer.cancel()
            self.inflight.pop(i, None)
        self.judge.note(record)

    def _expire(self, i: int, task: asyncio.Task[Any]) -> None:
        self.expired.add(i)
        task.cancel()

    def _failed(self, record: dict[str, Any], reason: str) -> None:
        record.update(outcome=APP_ERROR, end=self._now(), error=reason)

    async def _send(self, i: int, record: dict[str, Any]) -> None:
        request = self.requests[i % len(self.requests)]
        async with self.pool.slots:
            try:
                status, text, times = await self._attempt(record, request, fresh=False)
            # the idle connection had been closed by the server: once more on a new one
            except Stale:
                status, text, times = await self._attempt(record, request, fresh=True)
        record["end"] = self._now()
        self._settle(record, status, text, times)

    async def _attempt(self, record: dict[str, Any], request: bytes,
                       fresh: bool) -> tuple[int, str, StreamTimes | None]:
        times = StreamTimes() if self.streaming else None
        conn = await self.pool.take(fresh)
        keep = False

        def sent() -> None:
            record["start"] = self._now()

        try:
            status, keep, text = await exchange(conn, request, times.feed if times else None, sent)
        finally:
            self.pool.give(conn, keep)
        return status, text, times

    def _settle(self, record: dict[str, Any], status: int, text: str,
                times: StreamTimes | None) -> None:
        record["status"] = status
        # under the declared limit: not by design
        if status == 413 and record["bytes"] <= self.max_request_bytes:
            record.update(outcome=APP_ERROR,
                          error=f"HTTP 413 for {record['bytes']} bytes, within max_request_bytes "
                                f"{self.max_request_bytes}")
        elif status in REFUSED:
            record["outcome"] = REFUSED[status]
        elif not 200 <= status < 300:
            record.update(outcome=APP_ERROR, error=f"HTTP {status}" + (f": {text}" if text else ""))
        elif times is not None and (times.error or not times.done):
            record.update(outcome=APP_ERROR,
                          error=times.error or "the stream ended before data: [DONE]")
        else:
            record["outcome"] = ANSWERED
        if record["outcome"] == ANSWERED and record["bytes"] > self.max_request_bytes:
            record["beyond_limit"] = True  # answered although over the declared limit
        if times is not None and times.tokens:
            record["ttft"] = times.tokens[0] - self.t0 - record["arrival"]
            record["itl"] = [later - earlier for earlier, later in itertools.pairwise(times.tokens)]
