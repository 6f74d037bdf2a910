"""The project's own app as the in-process server: the pilot's inputs as requests, predict(items)
called as the pilot calls it, every answer judged as the pilot judges it (the same output kinds,
scorer and labels).

Each request is one pilot input under an ID of its own (``<input ID>@<request number>``), so one
input asked twice in a batch is two requests. Standard library only (torch where present).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import random
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kdkit.core.jsonio import atomic_write_bytes
from kdkit.core.outputkinds import SCORE
from kdkit.core.pilotconfig import PilotConfig
from kdkit.probe.pilot.harness import Item, Predict, classify_answers
from kdkit.probe.serve.engine import Request
from kdkit.probe.serve.stats import ANSWERED, APP_ERROR

# the pilot's outcomes that answer the request
ANSWERS = frozenset({"accepted", "rejected", "invalid"})


def quality(item: Item, record: dict[str, Any] | None, kind: str) -> float | None:
    """1 or 0 (a category, or a refusal the manifest expects), or the scorer's score; None when the
    manifest expects nothing of this input."""
    doc = item.doc
    if record is None:
        return None
    outcome = record.get("outcome")
    if doc.expect == "reject":
        return 1.0 if outcome == "rejected" else 0.0
    if kind == "category":
        return None if doc.label is None else float(outcome == "accepted"
                                                    and record.get("category") == doc.label)
    if doc.expected is None:
        return None
    return float(record[SCORE]) if outcome == "accepted" and isinstance(
        record.get(SCORE), (int, float)) else 0.0


class BatchTimeout(BaseException):
    """One call into the app outlived its bound (a BaseException: the app's own ``except Exception``
    cannot swallow it)."""


class AppOutput:
    """The app's own output, kept off the terminal and out of ``--json``: around each call into the
    app, Python's sys.stdout/sys.stderr and the process's file descriptors 1 and 2 point at a
    scratch file, kept in the run folder as app-output.log when the app wrote anything."""

    def __init__(self) -> None:
        # open for the whole test, closed by save
        self.file = tempfile.TemporaryFile()  # noqa: SIM115
        self.text = io.StringIO()

    @contextlib.contextmanager
    def around(self) -> Iterator[None]:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        os.dup2(self.file.fileno(), 1)
        os.dup2(self.file.fileno(), 2)
        try:
            with contextlib.redirect_stdout(self.text), contextlib.redirect_stderr(self.text):
                yield
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])

    def save(self, path: Path) -> int:
        """Write what the app printed to ``path`` (nothing when it printed nothing); its size in
        bytes."""
        self.file.seek(0)
        data = self.text.getvalue().encode("utf-8", "backslashreplace") + self.file.read()
        self.file.close()
        if data:
            atomic_write_bytes(path, data)
        return len(data)


@dataclass
class AppServer:
    """``serve(indexes)`` for the engine: the requests' items handed to predict, each answer judged;
    a call bounded by ``timeout`` seconds (SIGALRM, in the main thread), the app's output kept
    apart."""

    predict: Predict
    config: PilotConfig
    items: list[Item]  # one per request, under the request's own ID
    timeout: float = 0.0  # seconds one call may take; 0: unbounded
    output: AppOutput | None = None
    # the first few app failures, for the report
    errors: list[str] = dataclasses.field(default_factory=list)

    def call(self, items: list[dict[str, Any]]) -> Any:
        """predict(items) with its output kept apart and its time bounded."""
        timer = self.timeout > 0 and threading.current_thread() is threading.main_thread()
        with self.output.around() if self.output is not None else contextlib.nullcontext():
            if timer:
                previous = signal.signal(signal.SIGALRM, _timed_out)
                signal.setitimer(signal.ITIMER_REAL, self.timeout)
            try:
                return self.predict(items)
            finally:
                if timer:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                    signal.signal(signal.SIGALRM, previous)

    def _failed(self, said: str, count: int) -> list[tuple[str, float | None]]:
        if len(self.errors) < 5:
            self.errors.append(said)
        return [(APP_ERROR, None)] * count

    def __call__(self, indexes: Sequence[int]) -> list[tuple[str, float | None]]:
        batch = [self.items[i] for i in indexes]
        try:
            records = classify_answers(batch, self.call([item.app_item() for item in batch]),
                                       self.config.output, 0)
        except BatchTimeout:
            return self._failed(f"the app took longer than {self.timeout:g} s "
                                "(max_seconds_per_rate) on one batch",
                                len(batch))
        # the app's failure is data: its requests failed, the next batch goes on
        except Exception as exc:
            said = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
            return self._failed(f"{type(exc).__name__}: {said}".rstrip(": "), len(batch))
        by_id: dict[Any, list[dict[str, Any]]] = {}
        for record in records:
            by_id.setdefault(record.get("id"), []).append(record)
        return [self._judged(item, by_id.get(item.doc.id, [])) for item in batch]

    def _judged(self, item: Item, mine: list[dict[str, Any]]) -> tuple[str, float | None]:
        """One request's outcome from its records: answered exactly once (the pilot's rule), else an
        error."""
        if len(mine) != 1 or mine[0].get("outcome") not in ANSWERS:
            return APP_ERROR, None
        return ANSWERED, quality(item, mine[0], self.config.output.kind)


def _timed_out(signum: int, frame: Any) -> None:
    raise BatchTimeout


def input_order(inputs: Sequence[Item], seed: int) -> list[Item]:
    """The inputs in the seeded order requests ask them (request ``i`` asks ``order[i % n]``), the
    same in process and against a URL."""
    order = list(inputs)
    random.Random(f"kdkit-serve-test-inputs:{seed}").shuffle(order)
    return order


def requests_for(inputs: Sequence[Item],
                 arrivals: Sequence[float], seed: int) -> tuple[list[Request], list[Item]]:
    """Request ``i`` asks input ``order[i % n]`` (:func:`input_order`); its item under its own
    ID."""
    order = input_order(inputs, seed)
    requests, items = [], []
    for index, arrival in enumerate(arrivals):
        item = order[index % len(order)]
        own = dataclasses.replace(item, doc=item.doc._replace(id=f"{item.doc.id}@{index}"))
        requests.append(Request(index, item.doc.id, len(item.payload), arrival))
        items.append(own)
    return requests, items
