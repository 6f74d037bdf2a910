"""The app's own output (its prints, warnings and tracebacks, a library's progress lines), relayed
to the pilot's stderr with every control character escaped.

The app's process writes its stdout and stderr into one pipe (kdkit.probe.pilot.appchild points fd 1
at fd 2 before the app is imported); a thread of the pilot reads it as it comes and writes it on to
the pilot's own stderr through kdkit.core.safetext.printable (lines kept, ESC, CR, BEL, NUL, C1 and
bidi controls shown as ``\\x1b``...), so an app cannot clear the terminal, draw a fake verdict over
the real one or hide a line. Bytes that are not UTF-8 are shown as U+FFFD. The relay ends when the
last process holding the pipe (the app and anything it started) is gone.

Standard library only.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import threading
from typing import IO

from kdkit.core.safetext import printable

CHUNK = 1 << 16  # bytes read at a time: an app printing a lot is streamed, never held


class Relay:
    """A thread copying ``source`` (closed by the relay at its end) to the fd ``target``,
    escaped."""

    def __init__(self, source: IO[bytes], target: int = 2) -> None:
        self._thread = threading.Thread(target=_relay, args=(source, target),
                                        name="kdkit-app-output", daemon=True)
        self._thread.start()

    def join(self, timeout: float) -> None:
        """Wait for the relay to write what is left (the pipe's writers are gone), at most
        ``timeout`` s."""
        self._thread.join(timeout)


def _relay(source: IO[bytes], target: int) -> None:
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    with source, contextlib.suppress(OSError, ValueError):
        while chunk := os.read(source.fileno(), CHUNK):
            _write(target, printable(decoder.decode(chunk), lines=True))
        _write(target, printable(decoder.decode(b"", final=True), lines=True))


def _write(fd: int, text: str) -> None:
    view = memoryview(text.encode("utf-8"))
    while view:
        view = view[os.write(fd, view):]
