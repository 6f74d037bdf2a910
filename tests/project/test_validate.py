"""`kdkit validate`: schema errors and portability rules, each one named and nothing written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, invoke, tree_snapshot, valid_outside_git

Edit = Callable[[Path], None]


def edit_json(rel: str, change: Callable[[Any], None]) -> Edit:
    def apply(root: Path) -> None:
        path = root / rel
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data, indent=2))

    return apply


def set_key(rel: str, keys: list[str | int], value: Any) -> Edit:
    def change(data: Any) -> None:
        for key in keys[:-1]:
            data = data[key]
        data[keys[-1]] = value

    return edit_json(rel, change)


def drop_key(rel: str, key: str) -> Edit:
    return edit_json(rel, lambda data: data.pop(key))


def write(rel: str, text: str) -> Edit:
    def apply(root: Path) -> None:
        (root / rel).write_text(text)

    return apply


def manifest_docs(change: Callable[[list[dict[str, Any]]], None]) -> Edit:
    return edit_json("data/pilot/manifest.json", lambda data: change(data["documents"]))


def run_validate(root: Path) -> tuple[int, str]:
    before = tree_snapshot(root)
    result = invoke("validate", root)
    assert tree_snapshot(root) == before, "validate must not write anything"
    return result.exit_code, result.output


def test_fresh_scaffold_is_valid(project: Path) -> None:
    code, output = run_validate(project)
    assert code == 0, output
    assert output.strip() == valid_outside_git(project)


def test_validate_finds_the_root_upward(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project / "data" / "pilot")
    assert invoke("validate").exit_code == 0


def test_validate_outside_a_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = invoke("validate")
    assert result.exit_code == 2
    assert "no kdkit.json here or in any parent folder" in result.output


CASES: list[tuple[str, Edit, str]] = [
    ("malformed JSON", write("kdkit.json", '{\n  "name": "x",\n  "python": 3.11,,\n}'),
     "kdkit.json: line 3 column 18: malformed JSON (Expecting property name enclosed in double "
     "quotes)"),
    ("wrong type", set_key("config/pilot.json", ["batch_size"], "4"),
     'config/pilot.json: $.batch_size: expected integer, got str "4"'),
    ("unknown backend", set_key("kdkit.json", ["default_backend"], "tpu"),
     'kdkit.json: $.default_backend: "tpu" is not allowed; expected one of "cuda", "rocm", "cpu"'),
    ("unknown backend section", set_key("kdkit.json", ["backends", "tpu"], {}),
     "kdkit.json: $.backends: unknown key 'tpu'; allowed keys: cpu, cuda, rocm (a typo?)"),
    ("missing required key", drop_key("config/pilot.json", "categories"),
     "config/pilot.json: $: missing required key 'categories'; add it"),
    ("unknown key (typo)", set_key("config/pilot.json", ["batch_szie"], 2),
     "config/pilot.json: $: unknown key 'batch_szie'; allowed keys:"),
    ("absolute path", set_key("config/pilot.json", ["inputs"], "/data/pilot"),
     "config/pilot.json: $.inputs: '/data/pilot' is an absolute path, which exists on one machine "
     "only"),
    ("home path", set_key("config/pilot.json", ["runs"], "~/runs"),
     "config/pilot.json: $.runs: '~/runs' is a path into a home folder"),
    ("/home path", set_key("kdkit.json", ["requirements"], "/home/ana/req.in"),
     "kdkit.json: $.requirements: '/home/ana/req.in' is a path into a home folder"),
    ("/root path", set_key("config/pilot.json", ["manifest"], "/root/manifest.json"),
     "config/pilot.json: $.manifest: '/root/manifest.json' is a path into a home folder"),
    ("temporary path", set_key("config/pilot.json", ["inputs"], "/tmp/pilot"),
     "config/pilot.json: $.inputs: '/tmp/pilot' is a path into a temporary folder"),
    ("path outside the project", set_key("config/pilot.json", ["inputs"], "../elsewhere"),
     "config/pilot.json: $.inputs: '../elsewhere' points outside the project folder"),
    ("path that does not exist", set_key("config/pilot.json", ["inputs"], "data/missing"),
     "config/pilot.json: $.inputs: 'data/missing' does not exist in the project folder"),
    ("secret-like key", set_key("config/pilot.json", ["stop", "api_key"], "abc"),
     "config/pilot.json: $.stop: unknown key 'api_key'"),
    ("secret key at the root of kdkit.json", set_key("kdkit.json", ["hf_token"], "x"),
     "kdkit.json: $.hf_token: key 'hf_token' looks like a secret; secrets go in .env (see "
     ".env.example)"),
    ("credential-shaped value", set_key("kdkit.json", ["target_gpu"], "hf_" + "a" * 34),
     "kdkit.json: $.target_gpu: value looks like a Hugging Face token; remove it and put it in "
     ".env"),
    ("password in a URL", set_key("kdkit.json", ["backends", "cpu", "torch_index"],
                                  "https://ana:s3cret@mirror.example/whl/cpu"),
     "kdkit.json: $.backends.cpu.torch_index: value looks like a password inside a URL"),
    ("entry module missing", set_key("config/pilot.json", ["entry"], "src.nope:predict"),
     "config/pilot.json: $.entry: module 'src.nope' not found: expected src/nope.py"),
    ("duplicate ID", manifest_docs(lambda docs: docs[1].update(id=docs[0]["id"])),
     "data/pilot/manifest.json: $.documents[1].id: duplicate ID 'doc-01' (first at "
     "$.documents[0])"),
    ("unsafe ID", manifest_docs(lambda docs: docs[2].update(id="../../etc/passwd")),
     "data/pilot/manifest.json: $.documents[2].id: ID '../../etc/passwd' is unsafe as a file name"),
    ("empty ID", manifest_docs(lambda docs: docs[3].update(id=" ")),
     "data/pilot/manifest.json: $.documents[3].id: empty ID"),
    ("manifest file missing", manifest_docs(lambda docs: docs[4].update(file="gone.txt")),
     "data/pilot/manifest.json: $.documents[4].file: 'gone.txt' does not exist"),
    ("manifest file escaping the inputs",
     manifest_docs(lambda docs: docs[4].update(file="../../kdkit.json")),
     "data/pilot/manifest.json: $.documents[4].file: '../../kdkit.json' is not inside the inputs "
     "folder"),
    ("no expected rejection",
     manifest_docs(lambda docs: docs[11].update(expect="accept", label="invoice")),
     "data/pilot/manifest.json: $.documents: no expected rejection declared"),
    ("label outside the categories", manifest_docs(lambda docs: docs[0].update(label="memo")),
     'data/pilot/manifest.json: $.documents[0].label: "memo" is not an allowed category'),
]


@pytest.mark.parametrize(("edit", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_bad_input_is_named_with_exit_2(project: Path, edit: Edit, expected: str) -> None:
    edit(project)
    code, output = run_validate(project)
    assert code == 2
    assert f"{project}/{expected}" in output
    assert output.rstrip().endswith("fix them and run `kdkit validate` again")


def test_manifest_that_does_not_exist(project: Path) -> None:
    (project / "data/pilot/manifest.json").unlink()
    code, output = run_validate(project)
    assert code == 2
    assert "config/pilot.json: $.manifest: 'data/pilot/manifest.json' does not exist in the project folder" in output


def test_every_problem_is_reported_not_just_the_first(project: Path) -> None:
    set_key("config/pilot.json", ["batch_size"], 0)(project)
    set_key("config/pilot.json", ["device"], "gpu")(project)
    set_key("kdkit.json", ["python"], "3")(project)
    code, output = run_validate(project)
    assert code == 2
    assert "$.batch_size" in output and "$.device" in output and "$.python" in output


def test_json_report(project: Path) -> None:
    set_key("config/pilot.json", ["inputs"], "/tmp/x")(project)
    result = invoke("validate", project, "--json")
    assert result.exit_code == 2
    report = json.loads(result.stdout)
    assert report["valid"] is False
    assert report["problems"][0]["where"] == "config/pilot.json"
    assert report["problems"][0]["name"] == "$.inputs"


@pytest.mark.parametrize("which", ["config/pilot.json", "data/pilot/manifest.json"])
def test_validate_refuses_a_config_that_is_a_fifo_without_waiting(
    project: Path, which: str) -> None:
    path = project / which
    path.unlink()
    os.mkfifo(path)
    done = subprocess.run([sys.executable, "-m", "kdkit", "validate", str(project)], cwd=REPO,
                          capture_output=True,
                          text=True, timeout=30, check=False)
    assert done.returncode == 2 and "not a regular file" in done.stderr, done.stderr
