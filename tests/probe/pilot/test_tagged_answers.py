"""One answer JSON cannot carry as it is (a NaN, a numpy array, an object that is not a dict) sends its whole
batch from the app's process tagged, value by value: the other answers of that batch must still arrive as the
JSON data they are, objects included, and be judged on their own (kdkit/probe/pilot/appchild.py `_value`)."""

from __future__ import annotations

from pathlib import Path

from tests.probe.pilot.test_output_kinds import JSON_ANSWERS, SCHEMA, make_project, pilot, records


def test_a_nan_answer_spoils_only_itself_in_a_json_batch(project: Path) -> None:
    (project / "config" / "answer.schema.json").write_text(__import__("json").dumps(SCHEMA))
    docs = [("a", "one two", {}), ("b", "NAN here", {}), ("c", "three", {}),
            ("d", "four five six", {})]
    make_project(project, {"kind": "json", "schema": "config/answer.schema.json"}, JSON_ANSWERS,
                 docs, batch_size=4)
    code, summary = pilot(project)
    kept = records(Path(summary["run_dir"]))
    assert code == 1 and kept["b"]["outcome"] == "invalid"  # the NaN: that item's problem alone
    for ident, text in (("a", "one two"), ("c", "three"), ("d", "four five six")):
        assert kept[ident]["outcome"] == "accepted", kept[ident]
        assert kept[ident]["output"] == {"length": len(text), "words": text.split()}
    assert summary["problems"][0].startswith("b: the output is not JSON data")
    assert summary["problems"][1:] == ["accepted 3 + rejected 0 = 3, not the 4 IDs of the manifest"]
