"""The two signals that ask kdkit to stop (Ctrl-C's SIGINT, `docker stop`'s SIGTERM), handled for a while.

Standard library only: the in-container side uses it too.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def handling_stops(handler: Callable[[int, FrameType | None], None]) -> Iterator[None]:
    """``handler`` for SIGINT and SIGTERM while the block runs (main thread only); the previous handlers after."""
    saved = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, previous in saved.items():
            signal.signal(sig, previous)


@contextmanager
def interrupts() -> Iterator[None]:
    """While kdkit waits on what it started (containers), SIGINT and SIGTERM raise Interrupted in the main thread,
    so what runs is stopped before kdkit ends (SIGTERM's default would end kdkit at once, leaving it)."""
    import threading

    from kdkit.core.errors import Interrupted

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, _frame: FrameType | None) -> None:
        raise Interrupted(signum)

    with handling_stops(interrupt):
        yield


@contextmanager
def deferred_stops() -> Iterator[None]:
    """SIGINT and SIGTERM held back while the block runs, then delivered: a step that must end whole (the engine
    creating a container: once it exists, the caller knows it and can remove it). Main thread only: Python runs
    its handlers there, so another thread's step is never cut by one."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, saved)
