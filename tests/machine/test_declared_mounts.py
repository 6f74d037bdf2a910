"""kdkit.json's declared mounts, `--mount SRC:NAME`, the cache, config/ and src/ over the image's, and
KDKIT_LAUNCH: the spec `kdkit run` builds, without Docker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kdkit.config.project import load_project
from kdkit.core.errors import BadInput
from kdkit.core.launchrecord import launch_field, parse_launch, with_launch_revision
from kdkit.docker_adapter import ImageFacts, Mount
from kdkit.image.container import APP, CACHE, source_mounts
from kdkit.image.context import project_files
from kdkit.image.labels import project_digest, project_labels, project_match
from kdkit.machine.mounts import declared_mounts, extra_mounts, launch_env, parse_mount_options
from tests.conftest import invoke


def _declare(root: Path, mounts: dict[str, object]) -> None:
    path = root / "kdkit.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["mounts"] = mounts
    path.write_text(json.dumps(data), encoding="utf-8")


@pytest.fixture
def declared(project: Path) -> Path:
    (project / "models" / "m").mkdir(parents=True)
    (project / "scratch").mkdir()
    _declare(project,
             {"model": {"path": "models/m", "env": "MODEL_DIR"}, "out-dir": {"path": "scratch",
                                                                             "writable": True}})
    return project


def test_declared_mounts_are_at_mnt_name_read_only_unless_writable_with_their_variables(
    declared: Path) -> None:
    project = load_project(declared)
    mounts = declared_mounts(project)
    assert [(m.name, m.source, m.writable) for m in mounts] == [
        ("model", (declared / "models/m").resolve(), False),
        ("out-dir", (declared / "scratch").resolve(), True)]
    bound, env = extra_mounts(project, mounts)
    assert Mount((declared / "models/m").resolve(), "/mnt/model", True) in bound
    assert Mount((declared / "scratch").resolve(), "/mnt/out-dir", False) in bound
    assert Mount(declared.resolve() / ".kdkit-cache", CACHE, False) in bound
    assert env["KDKIT_MOUNT_MODEL"] == env["MODEL_DIR"] == "/mnt/model"
    assert env["KDKIT_MOUNT_OUT_DIR"] == "/mnt/out-dir"
    assert (env["HF_HOME"], env["TORCH_HOME"], env["TRITON_CACHE_DIR"], env["XDG_CACHE_HOME"]) == (
        "/cache/huggingface", "/cache/torch", "/cache/triton", "/cache")


def test_mount_option_overrides_a_declared_folder_with_one_outside_the_project(declared: Path,
                                                                               tmp_path: Path) -> None:
    other = tmp_path / "elsewhere"
    other.mkdir()
    (tmp_path / "link").symlink_to(other)
    mounts = declared_mounts(load_project(declared), [f"{tmp_path / 'link'}:model"])
    assert mounts[0].source == other.resolve()  # resolved through the link


@pytest.mark.parametrize("value, message", [
    ("no-colon", "expected SRC:NAME"), (":model", "expected SRC:NAME"),
    ("/tmp:bad name", "expected SRC:NAME"),
    ("/no/such/folder:model", "is not an existing folder"),
])
def test_a_malformed_mount_option_is_bad_input(value: str, message: str) -> None:
    with pytest.raises(BadInput, match=message):
        parse_mount_options([value])


def test_an_undeclared_name_or_a_file_is_refused(declared: Path, tmp_path: Path) -> None:
    with pytest.raises(BadInput, match=r"declares no mount 'weights' \(declared: model, out-dir\)"):
        declared_mounts(load_project(declared), [f"{tmp_path}:weights"])
    (tmp_path / "file").write_text("x")
    with pytest.raises(BadInput, match="is not an existing folder"):
        declared_mounts(load_project(declared), [f"{tmp_path / 'file'}:model"])


def test_a_declared_path_leaving_the_project_through_a_link_is_refused_unless_overridden(
        project: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (project / "models").symlink_to(outside)
    _declare(project, {"model": {"path": "models"}})
    with pytest.raises(
        BadInput, match=r"\$\.mounts\.model\.path: 'models' leads to .*outside the project"):
        declared_mounts(load_project(project))
    assert declared_mounts(
        load_project(project), [f"{outside}:model"])[0].source == outside.resolve()
    result = invoke("validate", project)
    assert result.exit_code != 0 and "$.mounts.model.path" in result.output


def test_a_declared_name_without_a_path_needs_the_option(project: Path, tmp_path: Path) -> None:
    _declare(project, {"data": {}})
    with pytest.raises(
        BadInput, match=r"\$\.mounts\.data: no path; give the folder with `kdkit run --mount"):
        declared_mounts(load_project(project))
    assert declared_mounts(
        load_project(project), [f"{tmp_path}:data"])[0].source == tmp_path.resolve()


def test_the_schema_holds_names_and_variables(project: Path) -> None:
    _declare(project, {"bad name": {"path": "src"}})
    assert invoke("validate", project).exit_code == 2
    _declare(project, {"m": {"path": "src", "env": "KDKIT_LAUNCH"}})
    assert invoke("validate", project).exit_code == 2
    _declare(project, {"m": {"path": "/etc"}})
    assert invoke("validate", project).exit_code == 2


def test_config_and_src_are_mounted_read_only_and_a_link_out_is_refused(
    project: Path, tmp_path: Path) -> None:
    mounts = source_mounts(project)
    assert [(m.target, m.read_only) for m in mounts] == [
        (f"{APP}/kdkit.json", True), (f"{APP}/config", True), (f"{APP}/src", True)]
    (tmp_path / "secret.txt").write_text("x")
    (project / "src" / "leak.txt").symlink_to(tmp_path / "secret.txt")
    with pytest.raises(BadInput, match=r"leak.txt: leads to .*outside the project"):
        source_mounts(project)


def test_launch_names_image_lock_revision_network_and_mounts(declared: Path) -> None:
    project = load_project(declared)
    facts = ImageFacts("p:cpu-1", "sha256:" + "a" * 64, {"dev.kdkit.lock.sha256": "b" * 64,
                                                         "org.opencontainers.image.revision": "c"
                                                         * 40},
                       "kdkit", 1, [], "", "amd64", "linux", ())
    mounts = declared_mounts(project)
    bound, _ = extra_mounts(project, mounts)
    text = launch_env(project, facts, "none", bound, mounts)["KDKIT_LAUNCH"]
    assert "\n" not in text and ": " not in text  # compact
    record = parse_launch(text)
    assert (record["image_id"], record["image"], record["lock_sha256"], record["network"]) == (
        "sha256:" + "a" * 64, "p:cpu-1", "b" * 64, "none")
    assert record["revision"] == "c" * 40  # not a git checkout: the image's label
    names = {m["name"]: m for m in record["mounts"]}
    assert names["model"] == {"name": "model", "target": "/mnt/model", "writable": False,
                              "source": str((declared / "models/m").resolve())}
    assert names["cache"]["writable"] and names["src"]["target"] == f"{APP}/src"


@pytest.mark.parametrize("text, where", [
    ("{bad", "KDKIT_LAUNCH:1:2: malformed JSON"), ("[]", "KDKIT_LAUNCH: $: expected a JSON object"),
    ('{"image_id": 1}', "KDKIT_LAUNCH: $.image_id: expected a str"),
])
def test_a_bad_launch_variable_is_bad_input_naming_it(text: str, where: str) -> None:
    with pytest.raises(BadInput, match=where.replace("$", r"\$").replace("[", r"\[")) as caught:
        launch_field({"KDKIT_LAUNCH": text})
    assert caught.value.exit_code == 2
    assert launch_field({}) == {}


@pytest.mark.parametrize(("given", "expected"), [
    ("a" * 40, {"revision": "a" * 40, "dirty": False}),
    # the host's checkout (kdkit.machine.mounts)
    ("b" * 40 + "+dirty", {"revision": "b" * 40, "dirty": True}),
    # the image's label (git describe --dirty)
    ("c" * 40 + "-dirty", {"revision": "c" * 40, "dirty": True}),
])
def test_a_container_run_records_the_revision_kdkit_run_passed(
    given: str, expected: dict[str, object]) -> None:
    """Issue 31: no git checkout in the container (revision null) -> the launch record's revision, said so."""
    state = with_launch_revision({"revision": None, "dirty": None, "note": "not a git repository"},
                                 {"revision": given})
    assert {k: state[k] for k in expected} == expected and "KDKIT_LAUNCH" in state["note"]
    checkout = {"revision": "d" * 40, "dirty": False, "note": None}
    assert with_launch_revision(checkout, {"revision": given}) == checkout  # git's own answer wins
    for nothing in (None, {"revision": None}, {"revision": "unknown"}):
        assert with_launch_revision({"revision": None}, nothing) == {"revision": None}


def test_the_project_digest_follows_config_and_src_only(project: Path) -> None:
    before = project_digest(project_files(project)[0])
    (project / "README.md").write_text("changed")
    assert project_digest(project_files(project)[0]) == before
    (project / "config" / "pilot.json").write_text((project / "config" / "pilot.json").read_text()
                                                   + " ")
    assert project_digest(project_files(project)[0]) != before


def test_inspect_names_the_files_that_differ_from_the_images_labels(project: Path) -> None:
    labels = project_labels(project_files(project)[0])
    assert project_match(labels, load_project(project))["matches"] is True
    (project / "src" / "classify.py").write_text("changed", encoding="utf-8")
    (project / "src" / "new.py").write_text("new", encoding="utf-8")
    report = project_match(labels, load_project(project))
    assert (report["matches"], report["changed"]) == (False, ["src/classify.py", "src/new.py"])
    without = project_match({k: v for k, v in labels.items() if k.endswith("sha256")},
                            load_project(project))
    # an image with the digest only
    assert (without["matches"], without["changed"]) == (False, None)
    assert project_match({}, load_project(project))["matches"] is None  # built before the label


@pytest.mark.parametrize("mounts, words", [
    ({"a": {"path": "src", "env": "MODEL"}, "b": {"path": "config", "env": "MODEL"}},
     "also the env of"),
    ({"a": {"path": "src", "env": "PYTHONPATH"}}, "the container's own"),
    ({"a": {"path": "src", "env": "LD_PRELOAD"}}, "the container's own"),
    ({"a": {"path": "src", "env": "HF_HOME"}}, "the container's own"),
])
def test_a_mounts_env_is_its_own_and_never_one_the_container_reads_first(project: Path,
                                                                         mounts: dict[str, object],
                                                                           words: str) -> None:
    _declare(project, mounts)
    checked = invoke("validate", project)
    assert checked.exit_code == 2 and words in checked.output

