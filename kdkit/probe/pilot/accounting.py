"""The pilot's accounting: every rule a run must satisfy to pass, judged without side effects.

It takes the records of results.jsonl (streamed, or batch by batch as the run
appends them, with per-ID counters) against the manifest and returns the counts
and every problem, each naming the ID concerned. Nothing here touches files.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kdkit.core.outputkinds import SCORE
from kdkit.core.pilotconfig import Output
from kdkit.core.pilotmanifest import Document, document_ids

CATEGORY_SHAPE, OUTPUT_SHAPE = '{"id": ..., "category": ...}', '{"id": ..., "output": ...}'  # a result's shape


@dataclass
class Accounting:
    total: int
    accepted: int = 0
    rejected: int = 0
    correct: int = 0
    quality: float | None = None
    problems: list[str] = field(default_factory=list)
    # First record per manifest ID (what summary.md shows) and how many records each ID got.
    first: dict[str, dict[str, Any]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not self.problems


def _name(ident: Any) -> str:
    return json.dumps(ident, ensure_ascii=False)


class Tally:
    """Records counted per manifest ID as they come, a batch at a time, then judged once.

    The pilot feeds each batch as it is appended, so judging the run needs no second
    read of results.jsonl; a resumed run (or a file that changed) is fed from the file.
    """

    def __init__(self, documents: Sequence[Document]) -> None:
        self.documents = documents
        self.known = document_ids(documents)  # a JSONL corpus's without a Document each
        self.first: dict[str, dict[str, Any]] = {}  # first record per manifest ID (what summary.md shows)
        self.counts: dict[str, int] = {}  # how many records each manifest ID got
        self.stray: list[str] = []  # malformed answers and IDs the app was not given

    def add(self, records: Iterable[dict[str, Any]]) -> None:
        known, first, counts = self.known, self.first, self.counts
        for record in records:
            ident, outcome = record.get("id"), record.get("outcome")
            if outcome == "malformed":
                self.stray.append(f"batch {record.get('batch')}: malformed result {_name(record.get('answer'))}; "
                                  f"each result must be {CATEGORY_SHAPE} or {{\"id\": ..., \"error\": ...}}")
            elif outcome == "unrequested":
                self.stray.append(f"{_name(ident)}: the app answered an ID it was not given in batch "
                                  f"{record.get('batch')}" if ident in known else f"{_name(ident)}: invented ID, "
                                  f"not in the manifest (batch {record.get('batch')})")
            elif isinstance(ident, str) and ident in known:
                counts[ident] = counts.get(ident, 0) + 1
                first.setdefault(ident, record)

    def judge(self, min_quality: float, output: Output | None = None) -> Accounting:
        """Exactly once per ID, nothing invented, answers of the declared kind, reasons given, expectations met,
        quality at least ``min_quality`` (a category run: accuracy against the labels; any other kind: the mean
        score of the answers the manifest gives an expected output for, when there is one)."""
        result = Accounting(total=len(self.documents), first=self.first, counts=self.counts)
        categories = output is None or output.kind == "category"
        misclassified, scores = [], []
        for doc in self.documents:
            problem = _judge_document(doc, result)
            if problem:
                result.problems.append(problem)
            first = result.first.get(doc.id)
            if not first or first["outcome"] != "accepted":
                continue
            if categories and first.get("category") != doc.label:
                misclassified.append(f"{doc.id} ({doc.label or 'no label'} -> {first.get('category')})")
            elif not categories and doc.expected is not None:
                scores.append((doc.id, first.get(SCORE)))
        result.problems.extend(self.stray if categories else [p.replace(CATEGORY_SHAPE, OUTPUT_SHAPE)
                                                              for p in self.stray])
        if categories:
            _check_totals(result, misclassified, min_quality)
        else:
            _check_count(result)
            _check_scores(result, scores, min_quality)
        return result


def account(documents: Sequence[Document], records: Iterable[dict[str, Any]], min_quality: float,
            output: Output | None = None) -> Accounting:
    """Judge a run from all its records at once (see Tally)."""
    tally = Tally(documents)
    tally.add(records)
    return tally.judge(min_quality, output)


def _judge_document(doc: Document, result: Accounting) -> str | None:
    """Count one manifest ID's outcome; the problem with it, if any."""
    count, record = result.counts.get(doc.id, 0), result.first.get(doc.id)
    if record is None:
        return f"{doc.id}: no result (the run did not reach it; resume the run)"
    outcome = record["outcome"]
    if outcome == "accepted":
        result.accepted += 1
        result.correct += record.get("category") == doc.label
    elif outcome == "rejected":
        result.rejected += 1
    if count > 1:
        return f"{doc.id}: {count} results; every ID must appear exactly once"
    if outcome == "unanswered":
        return f"{doc.id}: the app returned no result for it (batch {record.get('batch')})"
    if outcome == "invalid":
        return f"{doc.id}: {record.get('problem')}"
    if outcome == "rejected" and not str(record.get("reason", "")).strip():
        return f"{doc.id}: rejected without a reason"
    if outcome == "accepted" and doc.expect == "reject":
        return f"{doc.id}: expected a rejection, but accepted" + (f" as {record.get('category')}"
                                                                  if "category" in record else "")
    if outcome == "rejected" and doc.expect == "accept":
        return f"{doc.id}: expected acceptance, but rejected: {record.get('reason')}"
    return None


def _check_count(result: Accounting) -> None:
    if result.accepted + result.rejected != result.total:
        result.problems.append(f"accepted {result.accepted} + rejected {result.rejected} = "
                               f"{result.accepted + result.rejected}, not the {result.total} IDs of the manifest")


def _check_scores(result: Accounting, scores: list[tuple[str, Any]], min_quality: float) -> None:
    """The mean score of the answers the manifest gives an expected output for; None (and min_quality not
    required) when there are none. A score that is not a number in [0, 1] (NaN) is a problem, never a pass."""
    bad = [ident for ident, score in scores if isinstance(score, bool) or not isinstance(score, (int, float))
           or not 0 <= score <= 1]
    result.problems += [f"{ident}: accepted without a valid quality score against its expected output"
                        for ident in bad]
    valid = sorted((float(score), ident) for ident, score in scores if ident not in bad)
    if not valid:
        return
    result.quality = math.fsum(score for score, _ in valid) / len(valid)
    result.correct = sum(score == 1 for score, _ in valid)
    if result.quality < min_quality:
        lowest = ", ".join(f"{ident} ({score:.3f})" for score, ident in valid[:10])
        result.problems.append(f"quality {result.quality:.3f} < min_quality {min_quality:g} over {len(valid)} "
                               f"scored answer(s): lowest {lowest}")


def _check_totals(result: Accounting, misclassified: list[str], min_quality: float) -> None:
    _check_count(result)
    if result.accepted == 0:
        result.problems.append("no document accepted: quality is undefined")
        return
    result.quality = result.correct / result.accepted
    if result.quality < min_quality:
        shown = ", ".join(misclassified[:10]) + (f" (+{len(misclassified) - 10} more)" if len(misclassified) > 10
                                                 else "")
        result.problems.append(f"quality {result.quality:.3f} < min_quality {min_quality:g}: misclassified {shown}")
