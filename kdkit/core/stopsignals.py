"""The two signals that ask kdkit to stop (Ctrl-C's SIGINT, `docker stop`'s SIGTERM), handled for a
while; and SIGHUP, what a dropped connection sends (:class:`HungUp`): kdkit stops following, what it
started runs on.

Standard library only: the in-container side uses it too.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

from kdkit.core.errors import Interrupted

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
HANGUP_EXIT = 128 + int(signal.SIGHUP)  # 129, as shells report a process ended by SIGHUP


class HungUp(Interrupted):
    """SIGHUP (the terminal or the SSH connection is gone): stop following, leave what runs
    running."""

    def __init__(self) -> None:
        super().__init__(int(signal.SIGHUP))


def say_lost(line: str) -> None:
    """Best effort on stderr: after a hangup the terminal may be gone (EIO, EPIPE), which is
    ignored."""
    import sys

    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


@contextmanager
def handling_stops(handler: Callable[[int, FrameType | None], None]) -> Iterator[None]:
    """``handler`` for SIGINT and SIGTERM while the block runs (main thread only); the previous
    handlers after."""
    saved = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, previous in saved.items():
            signal.signal(sig, previous)


@contextmanager
def interrupts(hangup: bool = False) -> Iterator[None]:
    """While kdkit waits on what it started (containers), SIGINT and SIGTERM raise Interrupted in
    the main thread, so what runs is stopped before kdkit ends (SIGTERM's default would end kdkit at
    once, leaving it); with ``hangup``, SIGHUP raises :class:`HungUp` (the caller leaves what runs
    running)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, _frame: FrameType | None) -> None:
        raise Interrupted(signum)

    def hung_up(_signum: int, _frame: FrameType | None) -> None:
        raise HungUp()

    saved = signal.signal(signal.SIGHUP, hung_up) if hangup else None
    try:
        with handling_stops(interrupt):
            yield
    finally:
        if saved is not None:
            signal.signal(signal.SIGHUP, saved)


@contextmanager
def deferred_stops() -> Iterator[None]:
    """SIGINT and SIGTERM held back while the block runs, then delivered: a step that must end whole
    (the engine creating a container: once it exists, the caller knows it and can remove it). Main
    thread only: Python runs its handlers there, so another thread's step is never cut by one."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = signal.pthread_sigmask(signal.SIG_BLOCK, (*STOP_SIGNALS, signal.SIGHUP))
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, saved)
