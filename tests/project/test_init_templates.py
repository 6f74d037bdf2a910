"""`kdkit init --template classify|embed|generate`: each template's files, its app's answers, its own pilot."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from kdkit.config.shipped import template_dir
from kdkit.project.templates import OVERLAYS, TEMPLATES
from tests.conftest import invoke, tree_snapshot, valid_outside_git

APPS = {"classify": "src/classify.py", "embed": "src/embed.py", "generate": "src/generate.py"}
# template: (inputs, accepted, the planned rejection's ID)
PILOTS = {"classify": (12, 11, "doc-12"), "embed": (10, 9, "text-10"),
          "generate": (8, 7, "prompt-08")}


def make(tmp_path: Path, template: str) -> Path:
    """A project from ``template``, made by the real command."""
    target = tmp_path / template
    result = invoke("init", target, "--backend", "cpu", "--template", template)
    assert result.exit_code == 0, result.output
    return target


def load_app(project: Path, template: str) -> ModuleType:
    """The project's app module, imported from its own file under a name no other project shares."""
    path = project / APPS[template]
    spec = importlib.util.spec_from_file_location(f"kdkit_template_{template}_{id(project)}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pilot_items(project: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the manifest's documents, an item per document readable as UTF-8) as the pilot would hand them."""
    manifest = project / "data/pilot/manifest.json"
    documents = json.loads(manifest.read_text())["documents"]
    items = []
    for doc in documents:
        try:
            items.append(
                {"id": doc["id"],
                 "text": (manifest.parent / doc["file"]).read_bytes().decode("utf-8")})
        except UnicodeDecodeError:
            continue  # the harness rejects it before the app sees it
    return documents, items


@pytest.mark.parametrize("template", list(TEMPLATES))
def test_init_writes_the_template_and_never_the_overlays(tmp_path: Path, template: str) -> None:
    project = make(tmp_path, template)
    assert not (project / OVERLAYS).exists()
    for rel in ("kdkit.json", "config/pilot.json", "requirements/base.in", ".gitignore",
                ".env.example",
                "src/__init__.py", "src/train.py", "README.md", "data/pilot/manifest.json",
                APPS[template]):
        assert (project / rel).is_file(), rel
    assert (project / "runs").is_dir()
    others = [app for name, app in APPS.items() if name != template]
    assert not any((project / app).exists() for app in others)
    config = json.loads((project / "config/pilot.json").read_text())
    assert config["entry"] == f"src.{template}:predict"
    documents = json.loads((project / "data/pilot/manifest.json").read_text())["documents"]
    shipped = {doc["file"] for doc in documents} | {"manifest.json"}
    # none of another template's inputs
    assert {p.name for p in (project / "data/pilot").iterdir()} == shipped
    assert [doc["expect"] for doc in documents].count("reject") == 1
    readme = (project / "README.md").read_text()
    assert template in readme and "{{" not in readme and f"# {template}\n" in readme


@pytest.mark.parametrize("template", ["embed", "generate"])
def test_overlay_inputs_are_copied_byte_for_byte(tmp_path: Path, template: str) -> None:
    project = make(tmp_path, template)
    for source in (template_dir() / OVERLAYS / template / "data/pilot").iterdir():
        assert (project / "data/pilot" / source.name).read_bytes() == source.read_bytes()


@pytest.mark.parametrize("template", ["embed", "generate"])
def test_pilot_inputs_span_short_usual_and_near_limit_sizes(template: str) -> None:
    overlay = template_dir() / OVERLAYS / template
    limit = json.loads((overlay / "config/pilot.json").read_text())["max_input_bytes"]
    sizes = sorted(p.stat().st_size for p in (overlay / "data/pilot").glob("*.txt"))
    assert sizes[0] < 64 and sizes[-1] <= limit and sizes[-1] > 0.9 * limit
    assert any(0.01 * limit < size < 0.5 * limit for size in sizes)


def test_unknown_template_is_refused_in_one_line_and_nothing_is_written(tmp_path: Path) -> None:
    before = tree_snapshot(tmp_path)
    result = invoke("init", tmp_path / "p", "--template", "translate")
    assert result.exit_code == 2
    assert result.output.strip() == (
        "Error: --template 'translate': unknown template; choose one of classify, embed, generate")
    assert tree_snapshot(tmp_path) == before and list(tmp_path.iterdir()) == []


def test_init_help_explains_each_template() -> None:
    result = invoke("init", "--help")
    assert result.exit_code == 0
    for name in TEMPLATES:
        assert f"\n    {name}" in result.output


def test_default_template_is_classify(tmp_path: Path) -> None:
    result = invoke("init", tmp_path / "p", "--backend", "cpu")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "p/src/classify.py").is_file() and not (tmp_path / "p" / OVERLAYS).exists()
    assert json.loads((tmp_path / "p/config/pilot.json").read_text())["categories"] == [
        "invoice", "contract", "research", "support"]


# ---------------------------------------------------------------- each app, called in-process


def test_classify_predict_answers_categories(tmp_path: Path) -> None:
    pytest.importorskip(
        "torch", reason="the template apps are PyTorch apps: torch is not installed")
    project = make(tmp_path, "classify")
    app = load_app(project, "classify")
    documents, items = pilot_items(project)
    answers = app.predict(items)
    assert [a["id"] for a in answers] == [item["id"] for item in items]
    labels = {doc["id"]: doc["label"] for doc in documents}
    assert sum(a.get("category") == labels[a["id"]] for a in answers) >= 0.9 * len(answers)


def test_embed_predict_answers_unit_vectors_close_to_the_references(tmp_path: Path) -> None:
    pytest.importorskip(
        "torch", reason="the template apps are PyTorch apps: torch is not installed")
    project = make(tmp_path, "embed")
    app = load_app(project, "embed")
    dim = json.loads((project / "config/pilot.json").read_text())["output"]["dim"]
    documents, items = pilot_items(project)
    answers = {a["id"]: a for a in app.predict(items)}
    assert list(answers) == [item["id"] for item in items]
    for doc in documents:
        answer = answers[doc["id"]]
        if doc["expect"] == "reject":
            assert set(answer) == {"id", "error"} and "no words" in answer["error"]
            continue
        vector = answer["output"]
        assert len(vector) == dim == app.DIM and all(isinstance(v, float) and math.isfinite(v)
                                                     for v in vector)
        assert abs(math.fsum(v * v for v in vector) - 1) < 1e-5
        expected = doc["expected"]
        cosine = math.fsum(a * b for a, b in zip(vector, expected, strict=True)) / math.sqrt(
            math.fsum(b * b for b in expected))
        assert cosine > 0.999, doc["id"]


def test_embed_vectors_place_paraphrases_together(tmp_path: Path) -> None:
    pytest.importorskip(
        "torch", reason="the template apps are PyTorch apps: torch is not installed")
    app = load_app(make(tmp_path, "embed"), "embed")
    rain, storm, cake = app.embed(["Heavy rain on the coast tomorrow",
                                   "Storms and showers by the sea",
                                   "Bake the cake for forty minutes"])
    assert sum(a * b for a,
               b in zip(rain, storm, strict=True)) > sum(
                   a * b for a, b in zip(rain, cake, strict=True))


def test_generate_predict_matches_the_greedy_references_with_the_config_params(
    tmp_path: Path) -> None:
    pytest.importorskip(
        "torch", reason="the template apps are PyTorch apps: torch is not installed")
    project = make(tmp_path, "generate")
    app = load_app(project, "generate")
    config = json.loads((project / "config/pilot.json").read_text())
    documents, items = pilot_items(project)
    answers = {a["id"]: a for a in app.predict(items, config["params"])}
    assert list(answers) == [item["id"] for item in items]
    with_expected = [doc for doc in documents if "expected" in doc]
    assert len(with_expected) >= 2
    for doc in documents:
        answer = answers[doc["id"]]
        if doc["expect"] == "reject":
            assert set(answer) == {"id", "error"} and "empty prompt" in answer["error"]
            continue
        assert isinstance(answer["output"], str)
        assert len(
            answer["output"]) == config["params"]["max_new_tokens"] <= config["output"]["max_chars"]
        if "expected" in doc:
            assert answer["output"] == doc["expected"], doc["id"]


def test_generate_params_change_the_output_and_sampling_is_seeded_per_item(tmp_path: Path) -> None:
    pytest.importorskip(
        "torch", reason="the template apps are PyTorch apps: torch is not installed")
    app = load_app(make(tmp_path, "generate"), "generate")
    items = [{"id": "a", "text": "the keeper "}, {"id": "b", "text": "the keeper "}]
    short = app.predict(items, {"max_new_tokens": 5, "temperature": 0, "seed": 0})
    assert [len(a["output"]) for a in short] == [5, 5] and short[0]["output"] == short[1]["output"]
    sampled = {"max_new_tokens": 40, "temperature": 1.5, "seed": 7}
    together = app.predict(items, sampled)
    alone = app.predict(items[1:], sampled)
    assert together[1] == alone[0]  # the batch an item comes in does not change its answer
    assert together[0]["output"] != together[1]["output"]  # each item draws from its own generator
    assert app.predict(items[:1], {**sampled, "seed": 8})[0] != together[0]
    refused = app.predict(items, {"max_new_tokens": "many"})
    assert [set(a)
            for a in refused] == [
                {"id", "error"}] * 2 and "params.max_new_tokens" in refused[0]["error"]


# ---------------------------------------------------------------- each template's own pilot


@pytest.mark.slow
@pytest.mark.parametrize("template", list(TEMPLATES))
def test_each_template_passes_its_own_pilot_on_cpu(tmp_path: Path, template: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip(
        "torch", reason="the template apps are PyTorch apps: torch is not installed")
    for name in [name for name in sys.modules if name == "src" or name.startswith("src.")]:
        # another test's app imported in this process (serve-test's)
        monkeypatch.delitem(sys.modules, name)
    project = make(tmp_path, template)
    assert invoke("validate", project).exit_code == 0
    result = invoke("pilot", project, "--json")
    summary = json.loads(result.stdout) if result.stdout.strip() else {}
    assert result.exit_code == 0, (result.stdout, result.stderr)
    total, accepted, rejection = PILOTS[template]
    assert (summary["verdict"], summary["total"], summary["accepted"], summary["rejected"]) == (
        "pass", total, accepted, total - accepted)
    assert summary["quality"] >= json.loads(
        (project / "config/pilot.json").read_text())["min_quality"]
    run_dir = Path(summary["run_dir"])
    records = {r["id"]: r
               for r in map(json.loads, (run_dir / "results.jsonl").read_text().splitlines())}
    assert len(records) == total and records[rejection]["outcome"] == "rejected"
    assert sys.modules.get(f"src.{template}") is None  # the app ran in the pilot's own process


def test_validate_takes_a_token_count_in_params_for_a_setting_and_still_refuses_a_token(
    tmp_path: Path) -> None:
    """A number or a boolean under a key named like a secret (max_new_tokens) is a setting; a string is not."""
    project = make(tmp_path, "generate")
    result = invoke("validate", project)
    assert (result.exit_code, result.output.strip()) == (0, valid_outside_git(project))
    path = project / "config/pilot.json"
    data = json.loads(path.read_text())
    data["params"]["hf_token"] = "not-a-real-token-but-a-string"
    path.write_text(json.dumps(data))
    result = invoke("validate", project)
    assert result.exit_code == 2
    assert "$.params.hf_token: key 'hf_token' looks like a secret" in result.output


@pytest.mark.slow
def test_the_training_loop_resumes_in_a_project_without_categories(tmp_path: Path) -> None:
    """src/train.py (kdkit.json's "train") gives each document a class of its own when the output is not a
    category: `kdkit resume-test` works on the embed and generate templates as on classify."""
    pytest.importorskip(
        "torch", reason="the template apps are PyTorch apps: torch is not installed")
    import subprocess

    from tests.conftest import REPO

    project = make(tmp_path, "embed")
    done = subprocess.run([str(REPO / ".venv/bin/kdkit"), "resume-test", str(project)],
                          capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "OK: resume from step" in done.stdout
