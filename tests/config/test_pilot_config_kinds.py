"""Issue 25, the config side: the pilot config declares its output (category, text, vector, json), its inputs (a
folder, or a JSONL corpus), how files are decoded, its model and its params. One model (kdkit.core.pilotconfig)
judges them for `kdkit validate` and `kdkit pilot`; every bad input is one line, exit 2, nothing written; a config
using none of the new keys (today's template) resolves exactly as before, so its run IDs and resumes hold.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kdkit.config.schemas import _validator, problem_line
from kdkit.core.errors import BadInput
from kdkit.core.pilotconfig import config_problems, load_pilot, params_hash
from kdkit.probe.pilot.origin import config_changes
from kdkit.project.validate import check_project, validate_project
from tests.conftest import invoke, tree_snapshot, valid_outside_git

# Today's project-template/config/pilot.json, copied: the config every existing project holds.
TODAY = {
    "inputs": "data/pilot",
    "manifest": "data/pilot/manifest.json",
    "categories": ["invoice", "contract", "research", "support"],
    "entry": "src.classify:predict",
    "batch_size": 4,
    "device": "auto",
    "max_input_bytes": 65536,
    "min_quality": 0.9,
    "runs": "runs",
    "stop": {"max_rejected": 3, "max_seconds": 600, "max_batch_seconds": 300},
}
REVISION = "0123456789abcdef0123456789abcdef01234567"
CONFIG = "config/pilot.json"
CORPUS = "data/corpus/corpus.jsonl"


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2))


def records(count: int = 6) -> list[dict[str, Any]]:
    return [{"id": f"rec-{n}", "text": "word " * n} for n in range(1, count + 1)]


def write_corpus(root: Path, rows: list[Any]) -> None:
    path = root / CORPUS
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))


def corpus_config(**change: Any) -> dict[str, Any]:
    data = {key: value for key,
            value in TODAY.items() if key not in ("categories", "manifest", "inputs")}
    data.update(inputs={"jsonl": CORPUS, "id": "id"}, output={"kind": "vector", "dim": 3})
    data.update(change)
    return {key: value for key, value in data.items() if value is not None}


@pytest.fixture
def corpus(project: Path) -> Path:
    """The project turned into an embedding job over a JSONL corpus, with a model folder and params."""
    write_corpus(project, records())
    (project / "models/enc").mkdir(parents=True)
    (project / "models/enc/weights.bin").write_bytes(b"\x00\x01weights")
    (project / "models/enc/config.json").write_text("{}")
    write_json(project / CONFIG,
               corpus_config(model={"path": "models/enc", "hub": "org/enc", "revision": REVISION},
                             params={"temperature": 0.2, "seed": 7}))
    return project


Edit = Callable[[Path], None]


def config(**change: Any) -> Edit:
    return lambda root: write_json(root / CONFIG, corpus_config(**change))


def text(rel: str, content: str) -> Edit:
    def apply(root: Path) -> None:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(content)
    return apply


def both(*edits: Edit) -> Edit:
    def apply(root: Path) -> None:
        for edit in edits:
            edit(root)
    return apply


def link_out(root: Path) -> None:
    outside = root.parent / "elsewhere"
    outside.mkdir(exist_ok=True)
    (outside / "w.bin").write_bytes(b"x")
    (root / "models/enc/out").symlink_to(outside)


MANIFEST = "data/corpus/manifest.json"


def expectations(*docs: dict[str, Any], **change: Any) -> Edit:
    return both(text(MANIFEST, json.dumps({"documents": list(docs)})),
                config(manifest=MANIFEST, **change))


# (name, edit of the corpus project, file named, place named: "VALIDATE|PILOT" where strict JSON's line and column
# read "line L column C" in validate's list and "FILE:L:C" in the pilot's line)
BAD: list[tuple[str, Edit, str, str]] = [
    ("unknown output kind", config(output={"kind": "audio"}), CONFIG, "$.output.kind"),
    ("vector without dim", config(output={"kind": "vector"}), CONFIG, "$.output"),
    ("dim out of range", config(output={"kind": "vector", "dim": 65537}), CONFIG, "$.output.dim"),
    ("max_chars zero",
     config(output={"kind": "text", "max_chars": 0}), CONFIG, "$.output.max_chars"),
    ("a setting of another kind",
     config(output={"kind": "text", "max_chars": 9, "dim": 3}), CONFIG, "$.output"),
    ("categories and output", config(categories=["a"]), CONFIG, "$"),
    ("schema not JSON", both(config(output={"kind": "json", "schema": "config/answer.schema.json"}),
                             text("config/answer.schema.json", "{nope")),
     "config/answer.schema.json",
     "line 1 column 2|:1:2"),
    ("schema keyword unsupported",
     both(config(output={"kind": "json", "schema": "config/answer.schema.json"}),
          text("config/answer.schema.json", '{"type": "object", "if": {}}')),
     "config/answer.schema.json", "$"),
    ("schema file missing",
     config(output={"kind": "json", "schema": "config/none.json"}), CONFIG, "$.output.schema"),
    ("a broken line",
     lambda r: write_corpus(r, [*records(2), "{broken", *records(1)]), CORPUS, "line 3"),
    ("a duplicate ID", lambda r: write_corpus(r, [*records(2), {"id": "rec-1"}]), CORPUS, "line 3"),
    ("an ID field missing",
     lambda r: write_corpus(r, [*records(2), {"text": "x"}]), CORPUS, "line 3"),
    ("an ID not a string", lambda r: write_corpus(r, [{"id": 5}]), CORPUS, "line 1"),
    ("an unsafe ID", lambda r: write_corpus(r, [{"id": "../x"}]), CORPUS, "line 1"),
    ("decode bytes for a corpus", config(decode="bytes"), CONFIG, "$.decode"),
    ("a corpus in the root", config(inputs={"jsonl": "corpus.jsonl"}), CONFIG, "$.inputs.jsonl"),
    ("a manifest ID not in the corpus", expectations({"id": "rec-1", "expect": "accept"},
                                                     {"id": "ghost", "expect": "reject"}), MANIFEST,
     "$.documents[1].id"),
    ("a vector of the wrong length",
     expectations({"id": "rec-1", "expect": "accept", "expected": [1, 2]}),
     MANIFEST, "$.documents[0].expected"),
    ("a label for a vector", expectations({"id": "rec-1", "expect": "accept", "label": "x"}),
     MANIFEST,
     "$.documents[0].label"),
    ("a branch as revision",
     config(model={"hub": "org/enc", "revision": "main"}), CONFIG, "$.model.revision"),
    ("a hub without revision", config(model={"hub": "org/enc"}), CONFIG, "$.model"),
    ("a base at a tag",
     config(model={"path": "models/enc", "base": {"hub": "o/b", "revision": "v1.0"}}), CONFIG,
     "$.model.base.revision"),
    ("params not an object", config(params=[1, 2]), CONFIG, "$.params"),
    ("params holding NaN",
     text(CONFIG, json.dumps(corpus_config())[:-1] + ', "params": {"t": NaN}}'), CONFIG,
     "line 1 column|:1:"),
    ("params too large", config(params={"blob": "x" * 70000}), CONFIG, "$.params"),
    ("a model folder outside", config(model={"path": "../elsewhere"}), CONFIG, "$.model.path"),
    ("a model led out by a link",
     both(link_out, config(model={"path": "models/enc"})), CONFIG, "$.model.path"),
    ("an empty model folder",
     both(lambda r: (r / "models/none").mkdir(), config(model={"path": "models/none"})),
     CONFIG, "$.model.path"),
    ("a missing model folder", config(model={"path": "models/gone"}), CONFIG, "$.model.path"),
]


@pytest.mark.parametrize(("name", "edit", "file", "place"), BAD, ids=[case[0] for case in BAD])
def test_a_bad_input_is_one_line_exit_2_and_nothing_written(corpus: Path, name: str, edit: Edit,
                                                            file: str,
                                                            place: str) -> None:
    edit(corpus)
    before = tree_snapshot(corpus)
    validate_place, _sep, pilot_place = place.partition("|")
    checked = invoke("validate", corpus)
    assert checked.exit_code == 2, (name, checked.output)
    named = [line for line in checked.stderr.splitlines()
             if f"{corpus / file}: {validate_place}" in line]
    assert named, (name, checked.stderr)
    piloted = invoke("pilot", corpus)
    assert piloted.exit_code == 2, (name, piloted.output)
    lines = piloted.stderr.strip().splitlines()
    said = f"{corpus / file}{pilot_place}" if pilot_place else f"{corpus / file}: {place}"
    assert len(lines) == 1 and said in lines[0], (name, piloted.stderr)
    assert "Traceback" not in piloted.output
    assert tree_snapshot(corpus) == before


def test_a_corpus_project_validates_and_loads(corpus: Path) -> None:
    assert validate_project(corpus) == []
    cfg = load_pilot(corpus)
    assert cfg.jsonl == corpus / CORPUS and cfg.inputs_dir == corpus / "data/corpus" and cfg.id_field == "id"
    assert [d.id for d in cfg.documents] == [f"rec-{n}" for n in range(1, 7)]
    first = cfg.documents[1]
    assert (first.file, first.location,
            first.expect, first.label) == ("line 2", str(corpus / CORPUS), "any", None)
    raw = (corpus / CORPUS).read_bytes()
    assert raw[first.offset:first.offset + first.length] == (
        json.dumps(records()[1]) + "\n").encode()
    assert cfg.output.kind == "vector" and cfg.output.dim == 3 and cfg.categories == ()
    assert cfg.params == {"temperature": 0.2, "seed": 7} and cfg.manifest_path is None
    resolved = cfg.resolved()
    assert resolved["inputs"] == {"jsonl": CORPUS, "id": "id",
                                  "sha256": hashlib.sha256(raw).hexdigest()}
    assert resolved["output"] == {"kind": "vector", "dim": 3}
    assert resolved["params"] == {"temperature": 0.2, "seed": 7} and "decode" not in resolved
    weights = hashlib.sha256(b"\x00\x01weights").hexdigest()
    assert resolved["model"] == {"path": "models/enc", "hub": "org/enc", "revision": REVISION,
                                 "files": {
                                     "config.json": hashlib.sha256(b"{}").hexdigest(),
                                     "weights.bin": weights}}


def test_a_changed_model_file_or_param_is_another_run_named_by_its_key(corpus: Path) -> None:
    before = load_pilot(corpus).resolved()
    (corpus / "models/enc/weights.bin").write_bytes(b"other")
    after = load_pilot(corpus).resolved()
    assert params_hash(before) != params_hash(after)
    assert [c.split(":")[0] for c in config_changes(before, after)] == ["model.files.weights.bin"]
    data = json.loads((corpus / CONFIG).read_text())
    data["params"]["temperature"] = 0.7
    write_json(corpus / CONFIG, data)
    assert config_changes(after,
                          load_pilot(corpus).resolved()) == ["params.temperature: 0.2 -> 0.7"]


def test_todays_config_resolves_byte_for_byte_as_before(project: Path) -> None:
    write_json(project / CONFIG, TODAY)
    manifest = project / "data/pilot/manifest.json"
    cfg = load_pilot(project)
    expected = {
        "config_file": CONFIG, "inputs": "data/pilot", "manifest": "data/pilot/manifest.json",
        "manifest_sha256": hashlib.sha256(manifest.read_bytes()).hexdigest(),
        "categories": ["invoice", "contract", "research", "support"],
        "entry": "src.classify:predict",
        "batch_size": 4, "device": "auto", "max_input_bytes": 65536, "min_quality": 0.9,
        "runs": "runs",
        "stop": {"max_rejected": 3, "max_seconds": 600.0, "max_batch_seconds": 300.0},
    }
    assert json.dumps(cfg.resolved()) == json.dumps(expected)  # keys, order and values
    assert (cfg.output.kind, cfg.decode, cfg.jsonl, cfg.id_field, cfg.model, cfg.params) == \
        ("category", "utf-8", None, None, None, None)
    assert all(d.offset == -1 and d.expected is None for d in cfg.documents)
    result = invoke("validate", project)
    assert result.exit_code == 0 and result.output.strip() == valid_outside_git(
        project), result.output
    assert check_project(project)[1] == []


def test_the_category_kind_said_as_output_is_the_same_run(project: Path) -> None:
    write_json(project / CONFIG, TODAY)
    today = load_pilot(project).resolved()
    said = {key: value for key, value in TODAY.items() if key != "categories"}
    write_json(project / CONFIG,
               {**said, "output": {"kind": "category", "categories": TODAY["categories"]}})
    assert load_pilot(project).resolved() == today


def test_a_folder_of_bytes_with_text_answers_and_null_labels(project: Path) -> None:
    manifest = project / "data/pilot/manifest.json"
    data = json.loads(manifest.read_text())
    for doc in data["documents"]:
        doc["label"] = None
        doc["sha256"], doc["size"] = "0" * 64, 1
    data["documents"][0]["expected"] = "a reference answer"
    write_json(manifest, data)
    said = {key: value for key, value in TODAY.items() if key != "categories"}
    write_json(project / CONFIG,
               {**said, "output": {"kind": "text", "max_chars": 2000}, "decode": "bytes"})
    assert validate_project(project) == []
    cfg = load_pilot(project)
    assert cfg.decode == "bytes" and cfg.documents[0].expected == "a reference answer"
    assert cfg.resolved()["decode"] == "bytes" and cfg.resolved()["output"] == {
        "kind": "text", "max_chars": 2000}


def test_a_json_output_records_its_schema(corpus: Path) -> None:
    schema = {"type": "object", "properties": {"score": {"type": "number"}}, "required": ["score"]}
    write_json(corpus / "config/answer.schema.json", schema)
    json_output = {"kind": "json", "schema": "config/answer.schema.json"}
    expectations(
        {"id": "rec-1", "expect": "accept", "expected": {"score": 1}}, output=json_output)(corpus)
    assert validate_project(corpus) == []
    cfg = load_pilot(corpus)
    assert cfg.output.schema == schema and cfg.output.schema_file == "config/answer.schema.json"
    digest = hashlib.sha256((corpus / "config/answer.schema.json").read_bytes()).hexdigest()
    assert cfg.resolved()["output"] == {"kind": "json", "schema": "config/answer.schema.json",
                                        "schema_sha256": digest}
    assert cfg.documents[0].expected == {"score": 1} and cfg.documents[1].expected is None
    expectations(
        {"id": "rec-1", "expect": "accept", "expected": {"score": "high"}}, output=json_output)(corpus)
    with pytest.raises(
        BadInput, match=r"\$\.documents\[0\]\.expected: does not fit the answer schema"):
        load_pilot(corpus)


def test_a_corpus_manifest_maps_expectations_and_warns_about_the_sample(corpus: Path) -> None:
    expectations({"id": "rec-2", "expect": "accept", "expected": [0.5, 1, -2]})(corpus)
    cfg = load_pilot(corpus)
    assert cfg.documents[1].expected == [0.5, 1, -2] and cfg.documents[0].expected is None
    assert cfg.resolved()["manifest"] == MANIFEST
    assert validate_project(corpus) == []
    warnings = check_project(corpus)[1]
    assert [(w.where, w.name) for w in warnings] == [(MANIFEST, "$.documents")]
    for lack in ("a near-limit input", 'a planned rejection ("expect": "reject")'):
        assert lack in warnings[0].why
    write_corpus(corpus, [*records(), {"id": "big", "text": "x" * 20000}])
    expectations({"id": "rec-2", "expect": "accept"}, {"id": "rec-1", "expect": "reject"})(corpus)
    assert check_project(corpus)[1] == []
    # a full corpus: no expectations, no sample to judge
    write_json(corpus / CONFIG, corpus_config())
    assert check_project(corpus)[1] == []


def test_a_model_folder_follows_links_inside_the_project(corpus: Path) -> None:
    (corpus / "blobs").mkdir()
    (corpus / "blobs/shard").write_bytes(b"shard")
    (corpus / "models/enc/shard.bin").symlink_to(corpus / "blobs/shard")
    (corpus / "models/enc/.cache").mkdir()
    (corpus / "models/enc/.cache/lock").write_text("a hub client's, skipped")
    files = load_pilot(corpus).resolved()["model"]["files"]
    assert sorted(files) == ["config.json", "shard.bin", "weights.bin"]
    assert files["shard.bin"] == hashlib.sha256(b"shard").hexdigest()


def test_runs_stays_apart_from_the_corpus_and_the_model(corpus: Path) -> None:
    for runs, place in (("data/corpus/runs", "data/corpus"), ("models/enc/runs", "models/enc")):
        config(runs=runs, model={"path": "models/enc"})(corpus)
        problems = [p for p in validate_project(corpus) if p.name == "$.runs"]
        assert problems and place in problems[0].why, problems
        with pytest.raises(BadInput, match=r"\$\.runs"):
            load_pilot(corpus)


def test_params_with_a_non_finite_number_built_in_code_are_refused() -> None:
    assert ("$.params.t", "inf is not a finite number; JSON numbers must be finite") in \
        config_problems(corpus_config(params={"t": float("inf")}))
    assert config_problems(corpus_config(params={"nested": {"ok": [1, 2.5, None, "x"]}})) == []


# The schema editors read says what the model says, for the new keys too.
SHAPES: list[tuple[str, dict[str, Any]]] = [
    ("vector", corpus_config()),
    ("text", corpus_config(output={"kind": "text", "max_chars": 100})),
    ("text without max_chars", corpus_config(output={"kind": "text"})),
    ("json", corpus_config(output={"kind": "json", "schema": "config/a.json"})),
    ("category output", corpus_config(output={"kind": "category", "categories": ["a", "b"]})),
    ("category output empty", corpus_config(output={"kind": "category", "categories": []})),
    ("unknown kind", corpus_config(output={"kind": "file"})),
    ("kind missing", corpus_config(output={"dim": 3})),
    ("output not an object", corpus_config(output="vector")),
    ("dim zero", corpus_config(output={"kind": "vector", "dim": 0})),
    ("dim float", corpus_config(output={"kind": "vector", "dim": 3.5})),
    ("extra setting", corpus_config(output={"kind": "vector", "dim": 3, "max_chars": 2})),
    ("both", corpus_config(categories=["a"])),
    ("neither", {k: v for k, v in corpus_config().items() if k != "output"}),
    ("jsonl id field", corpus_config(inputs={"jsonl": CORPUS, "id": "doc_id"})),
    ("jsonl id empty", corpus_config(inputs={"jsonl": CORPUS, "id": ""})),
    ("jsonl extra key", corpus_config(inputs={"jsonl": CORPUS, "format": "x"})),
    ("jsonl missing", corpus_config(inputs={"id": "id"})),
    ("inputs a number", corpus_config(inputs=3)),
    ("decode utf-8", corpus_config(decode="utf-8")),
    ("decode bytes jsonl", corpus_config(decode="bytes")),
    ("decode bytes folder", {**TODAY, "decode": "bytes"}),
    ("decode latin-1", {**TODAY, "decode": "latin-1"}),
    ("folder without manifest", {k: v for k, v in TODAY.items() if k != "manifest"}),
    ("jsonl with manifest", corpus_config(manifest=MANIFEST)),
    ("model path", corpus_config(model={"path": "models/x"})),
    ("model hub", corpus_config(model={"hub": "org/x", "revision": REVISION})),
    ("model hub no org", corpus_config(model={"hub": "gpt2", "revision": REVISION})),
    ("model branch", corpus_config(model={"hub": "org/x", "revision": "main"})),
    ("model upper hex", corpus_config(model={"hub": "org/x", "revision": REVISION.upper()})),
    ("model revision alone", corpus_config(model={"path": "m", "revision": REVISION})),
    ("model empty", corpus_config(model={})),
    ("model extra", corpus_config(model={"path": "m", "url": "x"})),
    ("model base",
     corpus_config(model={"path": "m", "base": {"hub": "o/b", "revision": REVISION}})),
    ("model base branch",
     corpus_config(model={"path": "m", "base": {"hub": "o/b", "revision": "main"}})),
    ("model base nested",
     corpus_config(model={"path": "m", "base": {"path": "b", "base": {"path": "c"}}})),
    ("model a string", corpus_config(model="models/x")),
    ("params", corpus_config(params={"temperature": 0.1, "stop": ["\n"]})),
    ("params empty", corpus_config(params={})),
    ("params a list", corpus_config(params=[1])),
]


@pytest.mark.parametrize(("name", "data"), SHAPES, ids=[case[0] for case in SHAPES])
def test_the_schema_says_what_the_model_says_of_the_new_keys(
    name: str, data: dict[str, Any]) -> None:
    schema_ok = not list(_validator("pilot").iter_errors(data))
    assert schema_ok == (config_problems(data) == []), (name, config_problems(data))


def test_a_manifest_of_a_folder_still_needs_its_file_names(project: Path) -> None:
    manifest = project / "data/pilot/manifest.json"
    data = json.loads(manifest.read_text())
    del data["documents"][2]["file"]
    write_json(manifest, data)
    problems = [problem_line(p) for p in validate_project(project)]
    assert any("$.documents[2].file: missing" in p for p in problems), problems
    with pytest.raises(BadInput, match=r"\$\.documents\[2\]\.file"):
        load_pilot(project)


def test_a_resume_with_other_params_is_refused_naming_the_key(corpus: Path) -> None:
    write_json(corpus / CONFIG, {**TODAY, "params": {"temperature": 0.2}})
    first = invoke("pilot", corpus, "--run-id", "p1", "--json")
    # a run, passed or not: its params.json is written
    assert first.exit_code in (0, 1), first.output
    recorded = json.loads((corpus / "runs/p1/params.json").read_text())
    assert recorded["params"]["params"] == {"temperature": 0.2}
    write_json(corpus / CONFIG, {**TODAY, "params": {"temperature": 0.9}})
    before = tree_snapshot(corpus)
    again = invoke("pilot", corpus, "--resume", "p1")
    assert again.exit_code == 2 and "params.temperature: 0.2 -> 0.9" in again.stderr, again.output
    assert tree_snapshot(corpus) == before
    assert os.path.isdir(corpus / "runs/p1")


def test_the_host_reads_the_same_model_for_bundle_and_run(corpus: Path) -> None:
    from kdkit.config.files import AllowList
    from kdkit.config.project import load_project
    from kdkit.transfer.bundle import _pilot_inputs, essential_files

    project = load_project(corpus)
    allow = AllowList.of(project)
    assert allow.carries(CORPUS) and allow.carries("models/enc/weights.bin")
    assert not allow.carries("data/other.txt")
    # no manifest: the corpus lists the inputs
    assert essential_files(project, project.backend().lock)[3] == CORPUS
    assert _pilot_inputs(project) == "data/corpus"  # what RUN.md mounts read-only


def test_kdkit_run_mounts_the_model_folder_read_only(corpus: Path) -> None:
    from kdkit.config.project import load_project
    from kdkit.machine.run import APP, named_mounts

    project = load_project(corpus)
    mounts = named_mounts(project, project.pilot_config(), (corpus / "data/corpus").resolve())
    assert [(m.source, m.target, m.read_only) for m in mounts] == \
        [((corpus / "models/enc").resolve(), f"{APP}/models/enc", True)]  # the corpus is in the inputs folder
