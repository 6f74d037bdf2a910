"""A JSONL corpus's documents held compactly (pilotmanifest.CorpusDocuments): the same Documents, in the same
order, as one made per record, with the manifest's expectations; what is left after a resume, in order; and a
resume of a corpus whose whole file is unchanged skips reading the answered records again (origin)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kdkit.core.errors import BadInput
from kdkit.core.jsonlcorpus import scan
from kdkit.core.pilotkeys import Output
from kdkit.core.pilotmanifest import CorpusDocuments, Document, corpus_documents, remaining
from kdkit.probe.pilot.origin import corpus_unchanged

OUT = Output("category", ("a", "b"))


def _corpus(tmp_path: Path, count: int) -> Path:
    lines = [json.dumps({"text": f"t{n}", "id": f"r{n}"}) for n in range(count)]
    lines.insert(2, "")  # a blank line: skipped, line numbers still count it
    path = tmp_path / "corpus.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_compact_documents_are_those_of_a_scan(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path, 7)
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"documents": [{"id": "r3", "label": "b", "expect": "reject"}]}))
    docs = corpus_documents(corpus, "id", manifest, OUT)
    expected = [Document(line.id, f"line {line.number}", str(corpus),
                         "b" if line.id == "r3" else None,
                         "reject" if line.id == "r3" else "any", line.offset, line.length)
                for line, _record in scan(corpus, "id")]
    assert isinstance(docs, CorpusDocuments) and len(docs) == 7
    assert list(docs) == expected and [docs[n] for n in range(7)] == expected
    assert docs[-1] == expected[-1] and docs[1:3] == tuple(
        expected[1:3]) and docs[:100] == tuple(expected)
    with pytest.raises(IndexError):
        docs[7]
    left = remaining(docs, {"r0", "r4"})
    assert list(left) == [d for d in expected if d.id not in ("r0", "r4")] and len(left) == 5
    assert left[0] == expected[1] and left[-1] == expected[-1] and left[1:3] == (
        expected[2], expected[3])
    assert list(remaining(left, {"r1"})) == [d for d in expected if d.id not in ("r0", "r1", "r4")]
    assert remaining(tuple(expected), {"r0"}) == expected[1:]


def test_a_manifest_id_the_corpus_lacks_is_still_refused(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path, 3)
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"documents": [{"id": "r1", "label": "a", "expect": "accept"},
                                                  {"id": "zz", "label": "a", "expect": "accept"}]}))
    with pytest.raises(BadInput, match=r"\$\.documents\[1\]\.id: 'zz' is not in the corpus"):
        corpus_documents(corpus, "id", manifest, OUT)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(BadInput, match="no record"):
        corpus_documents(empty, "id", None, OUT)


def test_an_unchanged_corpus_is_known_by_its_whole_sha256(tmp_path: Path) -> None:
    from types import SimpleNamespace

    cfg = SimpleNamespace(jsonl=tmp_path / "c.jsonl", corpus_sha256="ab" * 32)
    recorded = {"params": {"inputs": {"jsonl": "c.jsonl", "id": "id", "sha256": "ab" * 32}}}
    assert corpus_unchanged(cfg, recorded)  # type: ignore[arg-type]
    assert not corpus_unchanged(cfg,
                                {"params": {
                                    "inputs": {"sha256": "cd" * 32}}})  # type: ignore[arg-type]
    folder = SimpleNamespace(jsonl=None, corpus_sha256=None)
    assert not corpus_unchanged(folder, {"params": {"inputs": "data"}})  # type: ignore[arg-type]
