"""The accounting's Tally keeps a whole record only where summary.md may show it (every record not accepted, the
accepted ones of the first KEPT_WHOLE documents), a slim one elsewhere, counts only the IDs seen more than once
and keys by the documents' own ID strings: the verdict, the problems and summary.md stay those of a tally that
keeps every first record whole (what it did before), here compared on the records of real runs."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from kdkit.core.pilotconfig import PilotConfig, load_pilot
from kdkit.probe.pilot import accounting, report
from kdkit.probe.pilot.accounting import Accounting, account
from tests.probe.pilot.test_output_kinds import TEXT_ANSWERS, make_project, pilot


def _run_records(project: Path) -> list[dict[str, Any]]:
    run = next((project / "runs").iterdir())
    return [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]


def _text_project(project: Path) -> tuple[PilotConfig, list[dict[str, Any]]]:
    docs = [("a1", "abc", {"expected": "ABC"}), ("a2", "dd", {"expected": "nope"}),
            ("a3", "LONG one", {}),
            ("e1", "ERROR it broke", {}), ("e2", "ERROR planned", {"expect": "reject"}),
            ("n1", "NUMBER", {}),
            ("a4", "last", {"expected": "LAST"})]
    make_project(project, {"kind": "text", "max_chars": 100}, TEXT_ANSWERS, docs, min_quality=0.1)
    pilot(project)
    return load_pilot(project), _run_records(project)


def _kept_whole(cfg: PilotConfig, records: list[dict[str, Any]]) -> Accounting:
    """The accounting as the committed code kept it: every ID's whole first record and its number of records."""
    first: dict[str, dict[str, Any] | None] = {}
    counts: dict[str, int] = {}
    ids = {doc.id for doc in cfg.documents}
    for record in records:
        ident = record.get("id")
        if isinstance(ident, str) and ident in ids \
                and record.get("outcome") not in ("malformed", "unrequested"):
            counts[ident] = counts.get(ident, 0) + 1
            first.setdefault(ident, record)
    acc = account(cfg.documents, records, cfg.min_quality, cfg.output)
    return dataclasses.replace(acc, first=first, counts=counts, problems=list(acc.problems))


def _markdown(cfg: PilotConfig, acc: Accounting) -> str:
    return report.summary_markdown(report.summary_data("r", cfg, acc, None, {}), cfg, acc)


def _judged(acc: Accounting) -> tuple[Any, ...]:
    return acc.total, acc.accepted, acc.rejected, acc.correct, acc.quality, acc.problems


@pytest.mark.parametrize("whole", [0, 1, 3, 10_000])
def test_slim_records_judge_and_show_as_whole_ones(project: Path, whole: int,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    cfg, records = _text_project(project)
    records += [records[0], records[0], records[3]]  # a1 three times, e1 twice
    reference = _kept_whole(cfg, records)
    monkeypatch.setattr(accounting, "KEPT_WHOLE", whole)
    acc = account(cfg.documents, records, cfg.min_quality, cfg.output)
    assert _judged(acc) == _judged(reference)
    assert "a1: 3 results; every ID must appear exactly once" in acc.problems
    assert "e1: 2 results; every ID must appear exactly once" in acc.problems
    assert acc.counts == {"a1": 3, "e1": 2}  # a single record is not counted
    # every accepted record whole, as summary.md reads them: the same file, byte for byte
    if whole == 10_000:
        assert _markdown(cfg, acc) == _markdown(cfg, reference)
        assert "| a1 | accept | - | accepted (x3) | ABC (score 1.000) |" in _markdown(cfg, acc)


def test_what_is_kept_whole_and_what_slim(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg, records = _text_project(project)
    monkeypatch.setattr(accounting, "KEPT_WHOLE", 1)
    acc = account(cfg.documents, records, cfg.min_quality, cfg.output)
    by_id = {r["id"]: r for r in records}
    assert acc.first["a1"] is by_id["a1"]  # within the first KEPT_WHOLE documents
    # not accepted: whole, reason kept
    assert acc.first["e1"] is by_id["e1"] and acc.first["n1"] is by_id["n1"]
    assert acc.first["a3"] == {"outcome": "accepted"}  # no expected value: nothing but its outcome
    assert acc.first["a2"] == {"outcome": "accepted", "score": 0.0}  # its score, never its text
    assert "e1: expected acceptance, but rejected: refused: ERROR it broke" in acc.problems
    assert any(p.startswith("n1: the output is int") for p in acc.problems)


def test_keys_are_the_documents_own_strings_and_slim_categories_shared(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"r{n}", "text": "t"}) + "\n" for n in range(4)))
    from kdkit.core.pilotkeys import Output
    from kdkit.core.pilotmanifest import corpus_documents

    output = Output("category", ("a", "b"))
    docs = corpus_documents(corpus, "id", None, output)
    records = [json.loads(
        json.dumps({"id": f"r{n}", "outcome": "accepted", "category": "ab"[n % 2]}))
               for n in range(4)]
    tally = accounting.Tally(docs)
    tally.whole = frozenset()  # every accepted record slim
    tally.add(records)
    keys = {key: key for key in tally.first}
    assert all(keys[f"r{n}"] is docs.ids[n] for n in range(4))  # not the records' parsed strings
    assert tally.first["r0"] is tally.first["r2"] and tally.first["r1"] is tally.first["r3"]
    assert tally.first["r0"] == {"outcome": "accepted", "category": "a"}
    acc = tally.judge(0.0, output)
    assert (acc.accepted, acc.counts) == (4, {})


def test_the_category_table_is_unchanged(project: Path) -> None:
    """Today's template (the category kind, a planned rejection): the same summary.md from the slim tally."""
    pilot(project)
    cfg = load_pilot(project)
    records = _run_records(project)
    acc = account(cfg.documents, records, cfg.min_quality, cfg.output)
    run = next((project / "runs").iterdir())
    assert _markdown(cfg, acc) == _markdown(cfg, _kept_whole(cfg, records))
    assert (run
            / "summary.md").read_text() == _markdown(cfg, acc).replace("# Pilot run r:",
                                                                       f"# Pilot run "
                                                                           f"{run.name}:")


def test_the_table_and_the_look_ahead_lie_within_the_whole_records() -> None:
    assert report.TABLE_ROWS <= accounting.KEPT_WHOLE and report.NEAR_LIMIT_LOOKED <= accounting.KEPT_WHOLE
