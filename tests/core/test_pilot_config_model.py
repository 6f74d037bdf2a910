"""Issue 10 §10: one model of the pilot config. `kdkit validate` and `kdkit pilot` judge a config
with the same code (kdkit.core.pilotconfig.config_problems), so they cannot disagree; the JSON
Schema that editors read is held to that model here, value by value.

Today's disagreements of the issue are the first cases: ``max_input_bytes: 1e30`` and
``max_seconds: Infinity`` passed validate and crashed the pilot; ``batch_size: 1e30`` was refused
by validate and run by the pilot; ``batch_size: 4.0`` the other way round; a config or a
manifest that is a folder was "valid".
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from kdkit.config.schemas import _validator
from kdkit.core.errors import BadInput
from kdkit.core.pilotconfig import FIELDS, STOP_FIELDS, config_problems, load_pilot
from kdkit.project.validate import validate_project
from tests.conftest import invoke, tree_snapshot
from tests.core.test_safe_paths import HOSTILE
from tests.probe.pilot.test_pilot import edit_config

TEMPLATE = json.loads(
    (Path(__file__).resolve().parents[2] / "project-template/config/pilot.json").read_text())
# (key, value) — key "stop.x" for a stop rule. Finite JSON values only: the loader refuses the others.
VALUES: list[tuple[str, Any]] = [
    *[("batch_size", v) for v in (1, 4, 4.0, 65536, 65537, 0, -1, 1e30, 2.5, True, "4", None, [4])],
    *[("max_input_bytes", v)
      for v in (1, 65536, 1 << 30, (1 << 30) + 1, 1e30, 0, 1.5, False, "big")],
    *[("min_quality", v) for v in (0, 0.5, 1, 1.0, 1.0000001, -0.1, 2, True, "0.9", None)],
    *[("device", v)
      for v in ("auto", "cpu", "cuda", "cuda:0", "cuda:12", "gpu", "cuda:", "CPU", "cpu\n", 0)],
    *[("entry", v) for v in ("src.classify:predict", "a:b", "src/classify.py", "src.classify", ":x",
                             "src.classify:predict\n", "1src:f", 3)],
    *[("categories", v) for v in (["a"], ["a", "b"], [], ["a", "a"], [""], ["a", 1], "a", None)],
    *[("stop.max_rejected", v) for v in (0, 3, None, 10**9, 10**9 + 1, -1, 1.5, 2.0, True, "3")],
    *[("stop.max_seconds", v)
      for v in (0.5, 600, None, 315360000, 315360001, 0, -5, 1e30, True, "60")],
    *[("stop.max_batch_seconds", v) for v in (1, 0.25, None, 0, -1, 1e300, "1")],
    *[("stop", v)
      for v in ({}, {"max_rejected": 1}, {"max_rejected": 1, "extra": 2}, [], None, "x")],
    *[("unknown_key", v) for v in (1, "x")],
]


def _config(key: str, value: Any) -> dict[str, Any]:
    data = json.loads(json.dumps(TEMPLATE))
    if key.startswith("stop."):
        data["stop"][key.split(".", 1)[1]] = value
    else:
        data[key] = value
    return data


def _schema_ok(data: dict[str, Any]) -> bool:
    return not list(_validator("pilot").iter_errors(data))


def _ids(case: tuple[str, Any]) -> str:
    return f"{case[0]}={json.dumps(case[1])}"


@pytest.mark.parametrize("case", VALUES, ids=[_ids(c) for c in VALUES])
def test_the_schema_says_what_the_model_says(case: tuple[str, Any]) -> None:
    data = _config(*case)
    assert _schema_ok(data) == (config_problems(data) == []), (case, config_problems(data))


@pytest.mark.parametrize("case", VALUES, ids=[_ids(c) for c in VALUES])
def test_validate_and_the_pilot_agree(project: Path, case: tuple[str, Any]) -> None:
    (project / "config/pilot.json").write_text(json.dumps(_config(*case)))
    # What the config itself is judged by (the pilot alone reads the manifest against it).
    validate_says = [p for p in validate_project(project) if p.where == "config/pilot.json"]
    try:
        load_pilot(project)
        pilot_says = None
    except BadInput as exc:
        pilot_says = str(exc) if "config/pilot.json" in str(exc) else None
    assert (validate_says == []) == (pilot_says is None), (validate_says, pilot_says)
    if pilot_says is not None:  # the pilot's line is validate's first problem
        assert f"{validate_says[0].name}: {validate_says[0].why}" in pilot_says


def test_the_model_and_the_schema_list_the_same_keys() -> None:
    schema = json.loads(
        (Path(__file__).resolve().parents[2] / "schemas/pilot.schema.json").read_text())
    assert set(schema["properties"]) == set(FIELDS)
    assert set(schema["properties"]["stop"]["properties"]) == set(STOP_FIELDS)
    assert set(schema["required"]) == {k for k, rule in FIELDS.items() if rule.required}
    for key, rule in FIELDS.items():
        spec = schema["properties"][key]
        assert spec.get("minimum") == rule.minimum and spec.get("maximum") == rule.maximum, key


PATH_VALUES = ["results/pilot", "", "~/runs", "~", "/abs/runs", "C:\\runs",
               "runs\n", "ru\x00ns", "runs\t"]


@pytest.mark.parametrize("value", PATH_VALUES, ids=ascii)
def test_paths_validate_and_the_pilot_agree(project: Path, value: str) -> None:
    """Paths are the one deliberate difference with the schema (it says "a non-empty string"):
    validate and the pilot both refuse a home, absolute, empty or control-character path."""
    data = _config("runs", value)
    (project / "config/pilot.json").write_text(json.dumps(data))
    validate_bad = any(p.name == "$.runs" for p in validate_project(project))
    with pytest.raises(BadInput) if value != "results/pilot" else _nothing():
        load_pilot(project)
    assert validate_bad == (value != "results/pilot")


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


@pytest.mark.parametrize(("change", "words"), [
    ({"max_input_bytes": 1e30}, "$.max_input_bytes: 1e+30 is out of range"),
    ({"batch_size": 1e30}, "$.batch_size: 1e+30 is out of range"),
    ({"stop": {"max_seconds": 1e30}}, "$.stop.max_seconds: 1e+30 is out of range"),
])
def test_the_issue_cases_are_refused_by_both_with_exit_2(
    project: Path, change: dict[str, Any], words: str) -> None:
    (project / "config/pilot.json").write_text(json.dumps({**TEMPLATE, **change}))
    before = tree_snapshot(project)
    for command in ("validate", "pilot"):
        result = invoke(command, project)
        assert result.exit_code == 2 and words in result.stderr, (command, result.output)
    assert tree_snapshot(project) == before


def test_a_whole_float_batch_size_is_taken_by_both(project: Path) -> None:
    (project / "config/pilot.json").write_text(json.dumps({**TEMPLATE, "batch_size": 4.0}))
    assert invoke("validate", project).exit_code == 0
    assert load_pilot(project).batch_size == 4 and isinstance(load_pilot(project).batch_size, int)


@pytest.mark.parametrize("which", ["config/pilot.json", "data/pilot/manifest.json"])
def test_a_config_or_manifest_that_is_a_folder_is_refused_by_both(
    project: Path, which: str) -> None:
    path = project / which
    saved = path.read_bytes()
    path.unlink()
    path.mkdir()
    for command in ("validate", "pilot"):
        result = invoke(command, project)
        assert result.exit_code == 2 and "is a folder, not a file" in result.stderr, (
            command, result.output)
    shutil.rmtree(path)
    path.write_bytes(saved)


@pytest.mark.parametrize("name",
                         ["doc\x00.txt", "doc\n.txt", "~/doc.txt", "/etc/passwd", "", "C:\\x.txt",
                          "../../kdkit.json", "sub/../../../etc/passwd"], ids=ascii)
def test_a_manifest_file_name_is_judged_alike(project: Path, name: str) -> None:
    path = project / "data/pilot/manifest.json"
    data = json.loads(path.read_text())
    data["documents"][0]["file"] = name
    path.write_text(json.dumps(data))
    before = tree_snapshot(project)
    for command in ("validate", "pilot"):
        result = invoke(command, project)
        assert result.exit_code == 2, (command, result.output)
        assert "$.documents[0].file" in result.stderr and "Traceback" not in result.output, result.output
    assert tree_snapshot(project) == before


# ---------------------------------------------------------------- the app is the project's own code


@pytest.mark.parametrize("entry",
                         ["os:system", "builtins:print", "collections:OrderedDict", "json:loads"])
def test_an_entry_outside_the_project_is_refused_by_validate_and_pilot(
    project: Path, entry: str) -> None:
    edit_config(project, entry=entry)
    before = tree_snapshot(project)
    for command in ("validate", "pilot"):
        result = invoke(command, project)
        assert result.exit_code == 2 and "$.entry: module" in result.stderr, (
            command, result.output)
    assert tree_snapshot(project) == before


@pytest.mark.parametrize(("change", "where"), [
    ({"runs": "kdkit.json"}, "$.runs: 'kdkit.json' is a file"),
    ({"inputs": "data/pilot/manifest.json"}, "$.inputs: 'data/pilot/manifest.json' is a file"),
])
def test_a_folder_key_naming_a_file_is_refused_by_both(project: Path,
                                                       change: dict[str, str], where: str) -> None:
    edit_config(project, **change)
    assert where in invoke("validate", project).stderr
    assert invoke("pilot", project).exit_code == 2


@pytest.mark.parametrize("name", list(HOSTILE))
def test_the_schema_and_the_model_refuse_the_same_pilot_paths(name: str) -> None:
    """An editor reading schemas/pilot.schema.json and kdkit's pilot model agree on every hostile path."""
    template = json.loads(
        (Path(__file__).resolve().parents[2] / "project-template/config/pilot.json").read_text())
    for key in ("inputs", "manifest", "runs"):
        data = {**template, key: HOSTILE[name](template[key])}
        assert list(_validator("pilot").iter_errors(data)) and config_problems(data), (
            key, data[key])
