"""Stopping a pilot cleanly: Ctrl-C, SIGTERM (docker stop), SIGHUP (a dropped connection: rule
``hangup``, exit 129, resumable) and the max_seconds rule.

A stop that arrives while the app runs interrupts it at once (the batch is not
recorded and is redone on resume); one that arrives while the harness writes
results waits until the batch is on disk, so results.jsonl is never torn by us.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any


class StopRequested(BaseException):
    """Raised to leave the run loop; a BaseException so an app's ``except Exception`` cannot swallow
    it."""

    def __init__(self, reason: str, rule: str, exit_code: int = 1,
                 details: dict[str, Any] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.rule = rule
        self.exit_code = exit_code
        # for stop.json: the app's process, the batch in flight
        self.details: dict[str, Any] = dict(details or {})


class StopGuard:
    """Signal handlers and a deadline, installed for the duration of the run loop."""

    def __init__(self, max_seconds: float | None) -> None:
        self.max_seconds = max_seconds
        self.started = time.monotonic()
        self.pending: StopRequested | None = None
        self.in_app = False
        self._saved: dict[int, Any] = {}

    def _raise_or_defer(self, stop: StopRequested) -> None:
        if self.in_app:
            raise stop
        self.pending = self.pending or stop

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if signum == signal.SIGINT:
            self._raise_or_defer(StopRequested("interrupted (Ctrl-C)", "interrupt", 130))
        elif signum == signal.SIGTERM:
            self._raise_or_defer(StopRequested("terminated (SIGTERM)", "terminate", 143))
        # the connection that started it is gone: closed, resumable, never half-written
        elif signum == signal.SIGHUP:
            self._raise_or_defer(StopRequested("hung up (SIGHUP: the terminal or connection was "
                                               "lost); finish it with kdkit pilot --resume",
                                               "hangup", 129))
        else:
            self._raise_or_defer(self._deadline_stop())

    def _deadline_stop(self) -> StopRequested:
        return StopRequested("stop rule: the run took longer than max_seconds "
                             f"{self.max_seconds:g}",
                             "max_seconds")

    @contextmanager
    def installed(self) -> Iterator[StopGuard]:
        if threading.current_thread() is not threading.main_thread():
            # handlers only work in the main thread; the deadline is still checked between batches
            yield self
            return
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGALRM):
            self._saved[int(sig)] = signal.signal(sig, self._on_signal)
        if self.max_seconds is not None:
            signal.setitimer(signal.ITIMER_REAL, self.max_seconds)
        try:
            yield self
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            for number, handler in self._saved.items():
                signal.signal(number, handler)

    @contextmanager
    def app_running(self) -> Iterator[None]:
        """While the app runs, a stop interrupts it immediately."""
        self.check()
        self.in_app = True
        try:
            yield
        finally:
            self.in_app = False

    def check(self) -> None:
        """Raise a stop that arrived while the harness was writing, or a passed deadline."""
        if self.pending is not None:
            raise self.pending
        if self.max_seconds is not None and time.monotonic() - self.started > self.max_seconds:
            raise self._deadline_stop()
