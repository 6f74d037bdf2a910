"""Issue 25, item 4: quality per kind with the project's own scorer (``"quality": {"scorer": "src.score:score",
"min": 0.9}``), ``min_quality`` not required where nothing can be expected, and validate's look at a manifest's
expected outputs (a text over max_chars, a vector of the wrong length; a text's line breaks kept and compared
exactly).

The scorer is called in the harness's process as scorer(item, answer, expected): ``item`` as predict got it
({"id", "text" | "bytes" | "record", "sha256"}), ``answer`` the answer's output value, ``expected`` the
manifest's. A score that is NaN, not a number or outside [0, 1], or a scorer that raises, is that item's
rejection by the harness with the reason, never a pass.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from kdkit.core.pilotconfig import config_problems, load_pilot, params_hash
from tests.conftest import invoke, tree_snapshot
from tests.probe.pilot.test_output_kinds import TEXT_ANSWERS, make_project, pilot, records

CONFIG = "config/pilot.json"
TEXT = {"kind": "text", "max_chars": 100}

SCORER = '''
import math

def score(item, answer, expected):
    if sorted(item) != ["id", "sha256", "text"] or len(item["sha256"]) != 64:
        raise AssertionError(f"the item is not as predict got it: {sorted(item)}")
    word = item["text"].split()[0]
    if word == "RAISE":
        raise ValueError("cannot score " + item["id"])
    if word == "NANSCORE":
        return math.nan
    if word == "BIG":
        return 1.5
    if word == "WORDY":
        return "high"
    if word == "TRUE":
        return True
    if word == "EXIT":
        raise SystemExit(0)  # a scorer ending the process "successfully": the item's failure, never a pass
    return 1.0 if answer == expected else 0.25

NOT_CALLABLE = 3
'''


def with_scorer(project: Path, docs: list[tuple[str, str, dict[str, Any]]],
                quality: dict[str, Any] | None,
                drop_min: bool = False, **config: Any) -> Path:
    """A text-kind project (its app answers each input upper-cased) with src/score.py and ``quality``."""
    extra = {} if quality is None else {"quality": quality}
    make_project(project, TEXT, TEXT_ANSWERS, docs, **extra, **config)
    (project / "src/score.py").write_text(SCORER)
    if drop_min:
        path = project / CONFIG
        data = json.loads(path.read_text())
        data.pop("min_quality")
        path.write_text(json.dumps(data, indent=2))
    return project


# ---------------------------------------------------------------- the scorer at run time


@pytest.mark.parametrize(("word", "reason"), [
    ("RAISE", "the quality scorer raised ValueError: cannot score odd"),
    ("NANSCORE", "the quality scorer returned nan, NaN: not a score"),
    ("BIG", "the quality scorer returned 1.5, outside [0, 1]: not a score"),
    ("WORDY", "the quality scorer returned high (str), not a number in [0, 1]"),
    ("TRUE", "the quality scorer returned True (bool), not a number in [0, 1]"),
    ("EXIT", "the quality scorer raised SystemExit: 0"),
])
def test_a_bad_score_is_that_items_rejection_with_its_reason(
    project: Path, word: str, reason: str) -> None:
    docs = [("good", "abc", {"expected": "ABC"}), ("odd", f"{word} x", {"expected": "anything"})]
    with_scorer(project, docs, {"scorer": "src.score:score", "min": 0.0}, drop_min=True)
    code, summary = pilot(project)
    assert code == 1 and summary["verdict"] == "fail", summary
    kept = records(Path(summary["run_dir"]))
    assert (kept["odd"]["outcome"], kept["odd"]["by"],
            kept["odd"]["reason"]) == ("rejected", "harness", reason)
    assert "score" not in kept["odd"] and kept["good"]["score"] == 1.0
    assert f"odd: expected acceptance, but rejected: {reason}" in summary["problems"]


def test_a_good_scorer_below_min_fails_naming_the_lowest(project: Path) -> None:
    docs = [("right", "abc", {"expected": "ABC"}), ("wrong", "def", {"expected": "nope"}),
            ("free", "ghi", {})]
    with_scorer(project, docs, {"scorer": "src.score:score", "min": 0.9}, drop_min=True)
    code, summary = pilot(project)
    assert code == 1 and summary["quality"] == pytest.approx(0.625)
    assert summary["min_quality"] == 0.9
    assert any(p.startswith(
        "quality 0.625 < min_quality 0.9 over 2 scored answer(s): lowest wrong (0.250)")
               for p in summary["problems"]), summary["problems"]
    kept = records(Path(summary["run_dir"]))
    assert kept["right"]["score"] == 1.0 and kept["wrong"]["score"] == 0.25 and "score" not in kept["free"]


def test_a_good_scorer_above_min_passes(project: Path) -> None:
    docs = [("right", "abc", {"expected": "ABC"}), ("wrong", "def", {"expected": "nope"}),
            ("free", "ghi", {}),
            ("refused", "ERROR no", {"expect": "reject"})]
    with_scorer(project, docs, {"scorer": "src.score:score", "min": 0.6}, drop_min=True)
    code, summary = pilot(project)
    assert code == 0, summary["problems"]
    assert (summary["verdict"], summary["quality"],
            summary["min_quality"]) == ("pass", pytest.approx(0.625), 0.6)
    params = json.loads((Path(summary["run_dir"]) / "params.json").read_text())
    text = json.dumps(params)
    assert "src/score.py" in text and hashlib.sha256(SCORER.encode()).hexdigest() in text


def test_min_quality_alone_still_judges_a_scorer(project: Path) -> None:
    docs = [("right", "abc", {"expected": "ABC"}), ("wrong", "def", {"expected": "nope"})]
    with_scorer(project, docs, {"scorer": "src.score:score"}, min_quality=0.7)
    code, summary = pilot(project)
    assert code == 1 and summary["min_quality"] == 0.7 and summary["quality"] == pytest.approx(
        0.625)


# ---------------------------------------------------------------- a scorer that is not the project's own


def _refused(project: Path, place: str, said: str, *, validate_too: bool = True) -> None:
    before = tree_snapshot(project)
    if validate_too:
        checked = invoke("validate", project)
        assert checked.exit_code == 2, checked.output
        assert any(f"{project / CONFIG}: {place}" in line and said in line
                   for line in checked.stderr.splitlines()), \
            checked.stderr
    piloted = invoke("pilot", project)
    assert piloted.exit_code == 2, piloted.output
    lines = piloted.stderr.strip().splitlines()
    assert len(
        lines) == 1 and f"{project / CONFIG}: {place}: " in lines[0] and said in lines[0], piloted.stderr
    assert "Traceback" not in piloted.output
    assert tree_snapshot(project) == before  # no run folder, no bytecode


@pytest.mark.parametrize(("scorer", "said"), [
    ("os:system", "not the project's own function: module 'os' not found"),
    ("json.decoder:scanstring", "not the project's own function: module 'json.decoder' not found"),
    ("src.nowhere:score", "not the project's own function: module 'src.nowhere' not found"),
])
def test_a_scorer_outside_the_project_is_exit_2_nothing_written(
    project: Path, scorer: str, said: str) -> None:
    with_scorer(project, [("a", "abc", {"expected": "ABC"})], {"scorer": scorer})
    _refused(project, "$.quality.scorer", said)


@pytest.mark.parametrize(("scorer", "said"), [
    ("src.score:NOT_CALLABLE",
     "src.score has no function 'NOT_CALLABLE' (entry src.score:NOT_CALLABLE); define "
     "NOT_CALLABLE(item, answer, expected) -> a number in [0, 1]"),
    ("src.score:missing", "src.score has no function 'missing'"),
    ("src.broken:score", "cannot import src.broken (entry src.broken:score)"),
])
def test_a_scorer_that_is_not_a_function_is_exit_2_nothing_written(
    project: Path, scorer: str, said: str) -> None:
    with_scorer(project, [("a", "abc", {"expected": "ABC"})], {"scorer": scorer})
    (project / "src/broken.py").write_text("raise RuntimeError('broken at import')\n")
    # validate never runs the project's code
    _refused(project, "$.quality.scorer", said, validate_too=False)


def test_a_scorer_for_the_category_kind_is_refused(project: Path) -> None:
    path = project / CONFIG
    data = json.loads(path.read_text())
    data["quality"] = {"scorer": "src.classify:predict"}
    path.write_text(json.dumps(data, indent=2))
    _refused(
        project, "$.quality.scorer",
        "the category kind's quality is accuracy against the manifest's labels")


def test_min_quality_and_quality_min_together_are_refused(project: Path) -> None:
    with_scorer(project, [("a", "abc", {"expected": "ABC"})], {"min": 0.5})
    _refused(project, "$.quality.min", 'both "min_quality" and "quality.min" are given; keep one')


@pytest.mark.parametrize(("quality", "place"), [({}, "$.quality"), ({"min": 2}, "$.quality.min"),
                                                ({"scorer": "src/score.py"}, "$.quality.scorer"),
                                                ({"scorer": "src.score:score", "weight": 1},
                                                 "$.quality"),
                                                ("src.score:score", "$.quality")])
def test_a_malformed_quality_is_refused(project: Path, quality: Any, place: str) -> None:
    with_scorer(project, [("a", "abc", {"expected": "ABC"})], quality, drop_min=True)
    _refused(project, place, "")


# ---------------------------------------------------------------- min_quality where nothing is expected

CORPUS_APP = '''
def predict(items):
    return [{"id": item["id"], "output": item["record"]["text"].upper()} for item in items]
'''


def corpus_project(project: Path, output: dict[str, Any], **extra: Any) -> Path:
    corpus = project / "data/corpus/corpus.jsonl"
    corpus.parent.mkdir(parents=True)
    corpus.write_text(
        "".join(json.dumps({"id": f"r-{n}", "text": "word " * n}) + "\n" for n in range(1, 6)))
    (project / "src/corpusapp.py").write_text(CORPUS_APP)
    path = project / CONFIG
    data = json.loads(path.read_text())
    for key in ("categories", "manifest", "min_quality"):
        data.pop(key)
    data.update(inputs={"jsonl": "data/corpus/corpus.jsonl", "id": "id"}, output=output,
                entry="src.corpusapp:predict", device="cpu", **extra)
    path.write_text(json.dumps(data, indent=2))
    return project


def test_a_corpus_without_expectations_needs_no_min_quality(project: Path) -> None:
    corpus_project(project, TEXT)
    checked = invoke("validate", project)
    assert checked.exit_code == 0, checked.output
    cfg = load_pilot(project)
    assert cfg.min_quality == 0.0 and cfg.quality is None and "quality" not in cfg.resolved()
    code, summary = pilot(project)
    assert code == 0, summary.get("problems")
    assert (summary["verdict"], summary["accepted"], summary["quality"]) == ("pass", 5, None)


def test_a_corpus_without_expectations_still_fails_on_its_accounting(project: Path) -> None:
    corpus_project(project, {"kind": "text", "max_chars": 8})  # "WORD WORD WORD" is longer
    code, summary = pilot(project)
    assert code == 1 and summary["accepted"] == 1
    assert any(p.startswith("r-2: the output is 10 characters, over max_chars 8")
               for p in summary["problems"])


def test_min_quality_stays_required_where_something_can_be_expected(project: Path) -> None:
    # a manifest can hold expected answers
    corpus_project(project, TEXT, manifest="data/corpus/manifest.json")
    data = json.loads((project / CONFIG).read_text())
    assert ("$",
            "missing required key 'min_quality'; add it (or \"quality\": {\"min\": ...}): a "
            "manifest's labels and expected answers are judged against it") in config_problems(data)


def test_a_category_corpus_without_a_manifest_needs_no_min_quality(project: Path) -> None:
    # no labels: nothing to be accurate against
    corpus_project(project, {"kind": "category", "categories": ["a"]})
    assert config_problems(json.loads((project / CONFIG).read_text())) == []


def test_a_folder_of_inputs_still_needs_min_quality(project: Path) -> None:
    with_scorer(project, [("a", "abc", {"expected": "ABC"})], None, drop_min=True)
    _refused(project, "$", "missing required key 'min_quality'")


# ---------------------------------------------------------------- the run's identity


def test_todays_template_resolves_as_before(project: Path) -> None:
    """The config `kdkit init` writes today: no quality key, min_quality kept, the resolved parameters (and so
    the run-ID hash) unchanged."""
    template = json.loads((project / CONFIG).read_text())
    assert "quality" not in template and template["min_quality"] == 0.9
    cfg = load_pilot(project)
    manifest = project / "data/pilot/manifest.json"
    expected = {
        "config_file": CONFIG, "inputs": "data/pilot", "manifest": "data/pilot/manifest.json",
        "manifest_sha256": hashlib.sha256(manifest.read_bytes()).hexdigest(),
        "categories": template["categories"], "entry": template["entry"],
        "batch_size": template["batch_size"],
        "device": template["device"], "max_input_bytes": template["max_input_bytes"],
        "min_quality": 0.9,
        "runs": "runs", "stop": {key: float(v) if key != "max_rejected" and v is not None else v
                                 for key, v in template["stop"].items()},
    }
    assert json.dumps(cfg.resolved()) == json.dumps(expected)
    assert cfg.quality is None and cfg.scorer_file is None and cfg.output.scorer is None


def test_the_scorer_and_its_code_are_part_of_the_run(project: Path) -> None:
    with_scorer(project, [("a", "abc", {"expected": "ABC"})],
                {"scorer": "src.score:score", "min": 0.5},
                drop_min=True)
    first = load_pilot(project).resolved()
    assert first["min_quality"] == 0.5
    assert first["quality"] == {"scorer": "src.score:score", "min": 0.5,
                                "scorer_file": "src/score.py",
                                "scorer_sha256": hashlib.sha256(SCORER.encode()).hexdigest()}
    (project / "src/score.py").write_text(SCORER + "\n# changed\n")
    assert params_hash(load_pilot(project).resolved()) != params_hash(first)


# ---------------------------------------------------------------- a manifest's expected outputs


@pytest.mark.parametrize(("output", "expected", "said"), [
    (TEXT, 42, "expected the reference text, got int"),
    ({"kind": "text", "max_chars": 5}, "ABCDEF",
     "6 characters, over max_chars 5; no answer could match it"),
    ({"kind": "vector", "dim": 3},
     [1.0, 2.0], "expected a list of 3 finite numbers (the reference vector)"),
    ({"kind": "vector", "dim": 3},
     [1.0, "2", 3.0], "expected a list of 3 finite numbers (the reference vector)"),
])
def test_validate_refuses_an_expected_output_of_another_shape(project: Path, output: dict[str, Any],
                                                              expected: Any, said: str) -> None:
    make_project(project, output, TEXT_ANSWERS,
                 [("a", "abc", {}), ("b", "abd", {"expected": expected})])
    before = tree_snapshot(project)
    manifest = project / "data/pilot/manifest.json"
    checked = invoke("validate", project)
    assert checked.exit_code == 2, checked.output
    assert any(f"{manifest}: $.documents[1].expected: {said}" in line
               for line in checked.stderr.splitlines()), \
        checked.stderr
    piloted = invoke("pilot", project)
    lines = piloted.stderr.strip().splitlines()
    assert piloted.exit_code == 2 and len(lines) == 1, piloted.output
    assert f"{manifest}: $.documents[1].expected: {said}" in lines[0]
    assert tree_snapshot(project) == before


def test_an_expected_text_with_line_breaks_is_kept_and_compared_exactly(project: Path) -> None:
    """A line break is text like any other: the manifest's expected text keeps it, and the built-in score is an
    exact match (a CRLF is not an LF)."""
    docs = [("lf", "line one\nline two", {"expected": "LINE ONE\nLINE TWO"}),
            ("crlf", "line one\nline two", {"expected": "LINE ONE\r\nLINE TWO"}),
            ("refused", "ERROR no", {"expect": "reject"})]
    make_project(project, TEXT, TEXT_ANSWERS, docs, min_quality=0.5)
    checked = invoke("validate", project)
    assert checked.exit_code == 0, checked.output
    assert [d.expected
            for d in load_pilot(project).documents] == [
                "LINE ONE\nLINE TWO", "LINE ONE\r\nLINE TWO", None]
    code, summary = pilot(project)
    assert code == 0, summary["problems"]
    kept = records(Path(summary["run_dir"]))
    assert kept["lf"]["output"] == "LINE ONE\nLINE TWO" and kept["lf"]["score"] == 1.0
    assert kept["crlf"]["score"] == 0.0 and summary["quality"] == pytest.approx(0.5)


# ---------------------------------------------------------------- the schema editors read says the same

TODAY = {"inputs": "data/pilot", "manifest": "data/pilot/manifest.json", "categories": ["a", "b"],
         "entry": "src.classify:predict", "batch_size": 4, "device": "auto",
         "max_input_bytes": 65536,
         "min_quality": 0.9, "runs": "runs"}
CORPUS = {**{k: v for k,
             v in TODAY.items() if k not in ("inputs", "manifest", "categories", "min_quality")},
          "inputs": {"jsonl": "data/corpus/corpus.jsonl"}, "output": TEXT}
SHAPES: list[tuple[str, dict[str, Any]]] = [
    ("today", TODAY),
    ("today without min_quality", {k: v for k, v in TODAY.items() if k != "min_quality"}),
    ("today with quality.min",
     {**{k: v for k, v in TODAY.items() if k != "min_quality"}, "quality": {"min": 0.5}}),
    ("today with both", {**TODAY, "quality": {"min": 0.5}}),
    ("today with a scorer", {**TODAY, "quality": {"scorer": "src.score:score"}}),
    ("corpus without min", CORPUS),
    ("corpus with a manifest, without min", {**CORPUS, "manifest": "data/corpus/manifest.json"}),
    ("corpus with a manifest and quality", {**CORPUS, "manifest": "data/corpus/manifest.json",
                                            "quality": {"scorer": "src.score:score", "min": 0.8}}),
    ("corpus of categories without min",
     {**CORPUS, "output": {"kind": "category", "categories": ["a"]}}),
    ("corpus with a scorer alone", {**CORPUS, "quality": {"scorer": "src.score:score"}}),
    ("folder of text without min",
     {**{k: v for k, v in TODAY.items() if k not in ("categories", "min_quality")},
      "output": TEXT}),
    ("quality empty", {**CORPUS, "quality": {}}),
    ("quality min out of range", {**CORPUS, "quality": {"min": 1.5}}),
    ("quality scorer a path", {**CORPUS, "quality": {"scorer": "src/score.py"}}),
    ("quality extra key", {**CORPUS, "quality": {"min": 0.5, "weight": 2}}),
    ("quality a string", {**CORPUS, "quality": "src.score:score"}),
]


@pytest.mark.parametrize(("name", "data"), SHAPES, ids=[case[0] for case in SHAPES])
def test_the_schema_says_what_the_model_says_of_quality(name: str, data: dict[str, Any]) -> None:
    from kdkit.config.schemas import _validator

    schema_ok = not list(_validator("pilot").iter_errors(data))
    assert schema_ok == (config_problems(data) == []), (name, config_problems(data))
