"""The pilot's accounting: every rule a run must satisfy to pass, judged without side effects.

It takes the records of results.jsonl (streamed, or batch by batch as the run
appends them, with per-ID counters) against the manifest and returns the counts
and every problem, each naming the ID concerned. Nothing here touches files.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from kdkit.core.outputkinds import SCORE
from kdkit.core.pilotconfig import Output
from kdkit.core.pilotmanifest import CorpusDocuments, Document

# a result's shape
CATEGORY_SHAPE, OUTPUT_SHAPE = '{"id": ..., "category": ...}', '{"id": ..., "output": ...}'
# The first documents, in manifest order, whose accepted record is kept whole: all summary.md reads
# of an accepted answer (report.py's table and its near-limit look-ahead). Past them an accepted
# record is kept slim (its outcome, category and score: what judging needs), so a corpus's generated
# texts are not all held in memory.
KEPT_WHOLE = 10_000


@dataclass
class Accounting:
    total: int
    accepted: int = 0
    rejected: int = 0
    correct: int = 0
    quality: float | None = None
    problems: list[str] = field(default_factory=list)
    # First record per manifest ID (None: none came): whole where summary.md may show it (every
    # record not accepted, and the accepted ones of the first KEPT_WHOLE documents), else slim (see
    # Tally). counts: the IDs that got more than one record, and how many (a first record alone
    # means one).
    first: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    # the IDs no record came for, in manifest order
    not_answered: list[str] = field(default_factory=list)

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
        # First record per manifest ID, keyed by the documents' own ID strings (a record's parsed ID
        # is not kept twice); None until one comes. Its keys are the manifest's IDs, in manifest
        # order.
        self.first: dict[str, dict[str, Any] | None] = dict.fromkeys(_ids(documents))
        # IDs whose accepted record is kept whole
        self.whole = frozenset(islice(self.first, KEPT_WHOLE))
        self.counts: dict[str, int] = {}  # the IDs that got more than one record, and how many
        self.stray: list[str] = []  # malformed answers and IDs the app was not given
        self.accepted: dict[str, str] = {"outcome": "accepted"}  # the slim accepted record, shared
        # a slim accepted record per category, shared
        self.categories: dict[str, dict[str, str]] = {}

    def add(self, records: Iterable[dict[str, Any]]) -> None:
        first = self.first
        for record in records:
            ident, outcome = record.get("id"), record.get("outcome")
            if outcome == "malformed":
                self.stray.append(f"batch {record.get('batch')}: malformed result "
                                  f"{_name(record.get('answer'))}; each result must be "
                                  f"{CATEGORY_SHAPE} or {{\"id\": ..., \"error\": ...}}")
            elif outcome == "unrequested":
                self.stray.append(f"{_name(ident)}: the app answered an ID it was not given in "
                                  f"batch {record.get('batch')}" if ident in first
                                  else f"{_name(ident)}: invented ID, "
                                  f"not in the manifest (batch {record.get('batch')})")
            elif isinstance(ident, str) and ident in first:
                self._count(ident, outcome, record)

    def _count(self, ident: str, outcome: Any, record: dict[str, Any]) -> None:
        """One record of the manifest's ID ``ident``: its first kept (whole, or slim past the first
        KEPT_WHOLE IDs when accepted), a later one counted."""
        first = self.first
        if first[ident] is not None:
            self.counts[ident] = self.counts.get(ident, 1) + 1
        elif outcome != "accepted" or ident in self.whole:
            first[ident] = record  # the key stays the document's own string
        else:
            first[ident] = self._slim(record)

    def _slim(self, record: dict[str, Any]) -> dict[str, Any]:
        """What judging reads of an accepted record: its outcome, its category, its score (only
        where the manifest gives an expected value); one shared object per category and for all the
        others."""
        category = record.get("category")
        if SCORE in record:
            return {"outcome": "accepted", SCORE: record[SCORE],
                    **({"category": category} if "category" in record
                       else {})}
        if "category" not in record:
            return self.accepted
        if not isinstance(category, str):
            return {"outcome": "accepted", "category": category}
        slim = self.categories.get(category)
        if slim is None:
            slim = self.categories[category] = {"outcome": "accepted", "category": category}
        return slim

    def judge(self, min_quality: float, output: Output | None = None) -> Accounting:
        """Exactly once per ID, nothing invented, answers of the declared kind, reasons given,
        expectations met, quality at least ``min_quality`` (a category run: accuracy against the
        labels; any other kind: the mean score of the answers the manifest gives an expected output
        for, when there is one)."""
        result = Accounting(total=len(self.documents), first=self.first, counts=self.counts)
        categories = output is None or output.kind == "category"
        misclassified, scores, unexpected = [], [], 0
        for doc in self.documents:
            problem = _judge_document(doc, result)
            if problem:
                result.problems.append(problem)
            first = result.first.get(doc.id)
            if not first or first["outcome"] != "accepted":
                continue
            if categories and doc.expect == "any" and doc.label is None:
                unexpected += 1  # a full corpus's record: no label, so never right or wrong
            elif categories and first.get("category") != doc.label:
                misclassified.append(
                    f"{doc.id} ({doc.label or 'no label'} -> {first.get('category')})")
            elif not categories and doc.expected is not None:
                scores.append((doc.id, first.get(SCORE)))
        if result.not_answered:
            result.problems.insert(0, not_answered_line(result.not_answered))
        result.problems.extend(self.stray if categories
                               else [p.replace(CATEGORY_SHAPE, OUTPUT_SHAPE)
                                     for p in self.stray])
        if categories:
            _check_totals(result, misclassified, min_quality, unexpected)
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


def _ids(documents: Sequence[Document]) -> Iterator[str]:
    """The documents' IDs in order (a whole corpus's without making a Document each)."""
    if isinstance(documents, CorpusDocuments) and documents.picked is None:
        return iter(documents.ids)
    return (doc.id for doc in documents)


def _judge_document(doc: Document, result: Accounting) -> str | None:
    """Count one manifest ID's outcome; the problem with it, if any."""
    record = result.first.get(doc.id)
    if record is None:
        # one line for them all (not_answered_line), not one each
        result.not_answered.append(doc.id)
        return None
    count = result.counts.get(doc.id, 1)
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


NOT_ANSWERED = "not_answered"  # summary.json's key listing every ID no record came for
SAMPLE = 5


def not_answered_line(ids: Sequence[str]) -> str:
    """One problem line for every ID the run did not reach: how many, a few of them, where all are
    listed."""
    many = len(ids) > 1
    count = f"{len(ids):,} ID{'s' if many else ''}"
    sample = ", ".join(ids[:SAMPLE]) + (", ..." if len(ids) > SAMPLE else "")
    where = f"; all {len(ids):,} in summary.json's {NOT_ANSWERED}" if len(ids) > SAMPLE else ""
    return (f"{count} not yet answered (the run did not reach {'them' if many else 'it'}; resume "
            f"the run): {sample}{where}")


def _check_count(result: Accounting) -> None:
    if result.accepted + result.rejected != result.total:
        result.problems.append(f"accepted {result.accepted} + rejected {result.rejected} = "
                               f"{result.accepted + result.rejected}, not the {result.total} IDs "
                               "of the manifest")


def _check_scores(result: Accounting, scores: list[tuple[str, Any]], min_quality: float) -> None:
    """The mean score of the answers the manifest gives an expected output for; None (and
    min_quality not required) when there are none. A score that is not a number in [0, 1] (NaN) is a
    problem, never a pass."""
    bad = [ident for ident,
           score in scores if isinstance(score, bool) or not isinstance(score, (int, float))
           or not 0 <= score <= 1]
    result.problems += [f"{ident}: accepted without a valid quality score against its expected "
                        "output"
                        for ident in bad]
    valid = sorted((float(score), ident) for ident, score in scores if ident not in bad)
    if not valid:
        return
    result.quality = math.fsum(score for score, _ in valid) / len(valid)
    result.correct = sum(score == 1 for score, _ in valid)
    if result.quality < min_quality:
        lowest = ", ".join(f"{ident} ({score:.3f})" for score, ident in valid[:10])
        below = _below(result.quality, min_quality)
        result.problems.append(f"quality {below} < min_quality {min_quality:g} over {len(valid)} "
                               f"scored answer(s): lowest {lowest}")


def _check_totals(result: Accounting, misclassified: list[str], min_quality: float,
                  unexpected: int = 0) -> None:
    """Accuracy against the labels over the accepted documents that expect something
    (``unexpected``: accepted records a full corpus names no label for, left out; with only those
    there is no quality to judge)."""
    _check_count(result)
    judged = result.accepted - unexpected
    if judged == 0 and unexpected:
        return
    if judged == 0:
        result.problems.append("no document accepted: quality is undefined")
        return
    result.quality = result.correct / judged
    if result.quality < min_quality:
        shown = ", ".join(misclassified[:10]) + (f" (+{len(misclassified) - 10} more)"
                                                 if len(misclassified) > 10
                                                 else "")
        result.problems.append(f"quality {_below(result.quality, min_quality)} < min_quality "
                               f"{min_quality:g}: misclassified {shown}")


def _below(quality: float, minimum: float) -> str:
    """``quality`` to three decimals, or to as many as show it below ``minimum`` (0.98999, never
    "0.990 < 0.99")."""
    for digits in range(3, 17):
        shown = f"{quality:.{digits}f}"
        if float(shown) < minimum:
            return shown
    return repr(quality)
