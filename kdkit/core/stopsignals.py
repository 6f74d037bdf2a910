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
