"""The full corpus after the pilot (issue 25, items 4 and 5): a JSONL corpus without a manifest expects nothing of
any record. An answer or a rejection with its reason is each record's due; the verdict rests on the accounting
(every record exactly once) and each answer's check, under the stop rules (max_rejected). Nothing is scored, so
no min_quality binds: not for text, and not for categories, where a record without a label is never "wrong"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.probe.pilot.test_output_kinds import pilot, records

APP = '''
def predict(items):
    out = []
    for item in items:
        text = item["record"]["text"]
        if text.startswith("REFUSE"):
            out.append({"id": item["id"], "error": "refused: " + text})
        elif CATEGORY:
            out.append({"id": item["id"], "category": "a" if len(text) % 2 else "b"})
        else:
            out.append({"id": item["id"], "output": text.upper()})
    return out
'''


def corpus(project: Path, texts: list[str], output: dict[str, Any], **config: Any) -> None:
    (project / "data" / "full").mkdir()
    lines = [json.dumps({"id": f"r{n:03d}", "text": text}) for n, text in enumerate(texts)]
    (project / "data" / "full" / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    (project / "src"
     / "full.py").write_text(APP.replace("CATEGORY", str(output["kind"] == "category")))
    data = {"inputs": {"jsonl": "data/full/corpus.jsonl", "id": "id"}, "output": output,
            "entry": "src.full:predict",
            "batch_size": 3, "device": "cpu", "max_input_bytes": 4096, "runs": "runs", **config}
    (project / "config" / "full.json").write_text(json.dumps(data, indent=2))


TEXTS = ["one", "two words", "REFUSE this one", "three",
         "a longer record of the corpus", "six", "seven"]


@pytest.mark.parametrize("output", [{"kind": "text", "max_chars": 100},
                                    {"kind": "category", "categories": ["a", "b"]}])
def test_a_rejection_with_its_reason_is_a_records_due_in_the_full_corpus(project: Path,
                                                                        output: dict[str,
                                                                                     Any]) -> None:
    corpus(project, TEXTS, output, **({"min_quality": 0.9} if output["kind"] == "category" else {}))
    code, summary = pilot(project, "--config", "config/full.json")
    assert code == 0 and summary["verdict"] == "pass", summary["problems"]
    assert (summary["total"], summary["accepted"], summary["rejected"]) == (7, 6, 1)
    assert summary["quality"] is None and summary["expected_rejections"] == []
    kept = records(Path(summary["run_dir"]))
    assert kept["r002"]["outcome"] == "rejected" and kept["r002"]["reason"] == "refused: REFUSE this one"


def test_the_stop_rule_still_binds_the_full_corpus(project: Path) -> None:
    corpus(project, TEXTS, {"kind": "text", "max_chars": 100}, stop={"max_rejected": 0})
    code, summary = pilot(project, "--config", "config/full.json")
    assert code == 1 and summary["stopped"]["rule"] == "max_rejected"
