"""The project's own app as the in-process server: the pilot's inputs as requests, predict(items) called as the
pilot calls it, every answer judged as the pilot judges it (the same output kinds, scorer and labels).

Each request is one pilot input under an ID of its own (``<input ID>@<request number>``), so one input asked
twice in a batch is two requests. Standard library only (torch where present).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kdkit.core.outputkinds import SCORE
from kdkit.core.pilotconfig import PilotConfig
from kdkit.probe.pilot.harness import Item, Predict, classify_answers
from kdkit.probe.serve.engine import Request
from kdkit.probe.serve.stats import ANSWERED, APP_ERROR

ANSWERS = frozenset({"accepted", "rejected", "invalid"})  # the pilot's outcomes that answer the request


def quality(item: Item, record: dict[str, Any] | None, kind: str) -> float | None:
    """1 or 0 (a category, or a refusal the manifest expects), or the scorer's score; None when the manifest
    expects nothing of this input."""
    doc = item.doc
    if record is None:
        return None
    outcome = record.get("outcome")
    if doc.expect == "reject":
        return 1.0 if outcome == "rejected" else 0.0
    if kind == "category":
        return None if doc.label is None else float(outcome == "accepted" and record.get("category") == doc.label)
    if doc.expected is None:
        return None
    return float(record[SCORE]) if outcome == "accepted" and isinstance(record.get(SCORE), (int, float)) else 0.0


@dataclass
class AppServer:
    """``serve(indexes)`` for the engine: the requests' items handed to predict, each answer judged."""

    predict: Predict
    config: PilotConfig
    items: list[Item]  # one per request, under the request's own ID
    errors: list[str] = dataclasses.field(default_factory=list)  # the first few app failures, for the report

    def __call__(self, indexes: Sequence[int]) -> list[tuple[str, float | None]]:
        batch = [self.items[i] for i in indexes]
        try:
            answers = self.predict([item.app_item() for item in batch])
            records = classify_answers(batch, answers, self.config.output, 0)
        except Exception as exc:  # the app's failure is data: its requests failed, the next batch goes on
            if len(self.errors) < 5:
                said = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
                self.errors.append(f"{type(exc).__name__}: {said}".rstrip(": "))
            return [(APP_ERROR, None)] * len(batch)
        first: dict[Any, dict[str, Any]] = {}
        for record in records:
            first.setdefault(record.get("id"), record)
        out = []
        for item in batch:
            got = first.get(item.doc.id)
            answered = got is not None and got.get("outcome") in ANSWERS
            out.append((ANSWERED, quality(item, got, self.config.output.kind)) if answered else (APP_ERROR, None))
        return out


def input_order(inputs: Sequence[Item], seed: int) -> list[Item]:
    """The inputs in the seeded order requests ask them (request ``i`` asks ``order[i % n]``), the same in process
    and against a URL."""
    order = list(inputs)
    random.Random(f"kdkit-serve-test-inputs:{seed}").shuffle(order)
    return order


def requests_for(inputs: Sequence[Item], arrivals: Sequence[float], seed: int) -> tuple[list[Request], list[Item]]:
    """Request ``i`` asks input ``order[i % n]`` (:func:`input_order`); its item under its own ID."""
    order = input_order(inputs, seed)
    requests, items = [], []
    for index, arrival in enumerate(arrivals):
        item = order[index % len(order)]
        own = dataclasses.replace(item, doc=item.doc._replace(id=f"{item.doc.id}@{index}"))
        requests.append(Request(index, item.doc.id, len(item.payload), arrival))
        items.append(own)
    return requests, items
