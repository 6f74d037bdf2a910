"""Issue 24 §1/§12 follow-up: a config path too long for a file system, and a runs folder that is not its own.

* A path held to the safe set but too long (a name over 255 bytes less the staging suffix, a whole over
  :data:`kdkit.core.projectfiles.MAX_PATH`) was a traceback (``File name too long``) in `validate`, `bundle`
  and `lock`: now one line naming the key, exit 2, nothing written, from each.
* ``runs`` naming the project root or a part of the project (``.``, ``src``, ``src/sub``, ``data/pilot/.``, a
  link to ``src``) passed `validate` and `pilot`, which then wrote run folders into the code or the inputs and
  (``"."``) deleted files in the root named like staging leftovers. One rule
  (:func:`kdkit.core.projectfiles.runs_problem`) refuses it in `validate`, `pilot`, `bundle` and `run`; the
  pilot's stale-staging cleanup removes only staging folders in its runs folder, never a file or a link.
* A category holding a control character is named alone, not run together with the others.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from kdkit.core.pilotconfig import config_problems
from kdkit.core.projectfiles import MAX_PATH, MAX_SEGMENT
from kdkit.core.stalestaging import clean_stale_in
from tests.conftest import invoke, tree_snapshot
from tests.core.test_safe_paths import PATH_KEYS, _refused, set_key
from tests.transfer.test_bundle import write_fresh_lock

LONG = {
    "one name of 300": lambda v: "a" * 300,
    "a name one over the cap": lambda v: f"x/{'b' * (MAX_SEGMENT + 1)}",
    "a last name that staging would push past 255": lambda v: "c" * 250,
    "past PATH_MAX": lambda v: "/".join(["a"] * 2100),
    "one over the whole cap": lambda v: "/".join(["d" * 100] * (MAX_PATH // 101 + 1)),
}


def _validate_refuses(project: Path, file: str, where: str) -> str:
    before = tree_snapshot(project)
    result = invoke("validate", project)
    assert result.exit_code == 2, result.output
    lines = result.output.splitlines()
    assert len(lines) == 2 and lines[0].startswith(f"{project}/{file}: {where}: "), result.output
    assert "Traceback" not in result.output
    assert tree_snapshot(project) == before
    return lines[0]


@pytest.mark.parametrize("name", list(LONG))
@pytest.mark.parametrize(("file", "where", "value"), PATH_KEYS, ids=[k[1] for k in PATH_KEYS])
def test_validate_refuses_a_path_too_long_in_one_line(project: Path, file: str, where: str,
                                                      value: str,
                                                      name: str) -> None:
    set_key(project, file, where, LONG[name](value))
    _validate_refuses(project, file, where)


@pytest.mark.parametrize("name", ["one name of 300", "past PATH_MAX"])
@pytest.mark.parametrize(("file", "where", "value"), PATH_KEYS, ids=[k[1] for k in PATH_KEYS])
def test_bundle_refuses_a_path_too_long(project: Path, tmp_path: Path, file: str, where: str,
                                        value: str,
                                        name: str) -> None:
    write_fresh_lock(project)
    set_key(project, file, where, LONG[name](value))
    out = tmp_path / "bundle"
    _refused(["bundle", project, "--out", out, "--no-image", "--no-kdkit-wheels"], [project], where)
    assert not out.exists()


@pytest.mark.parametrize("name", ["one name of 300", "past PATH_MAX"])
@pytest.mark.parametrize("where", ["$.backends.cpu.lock", "$.requirements", "$.pilot_config"])
def test_lock_refuses_a_path_too_long(project: Path, where: str, name: str) -> None:
    set_key(project, "kdkit.json", where, LONG[name](""))
    _refused(["lock", project, "--backend", "cpu"], [project], where)


@pytest.mark.parametrize("name", ["one name of 300", "past PATH_MAX"])
@pytest.mark.parametrize("key", ["inputs", "manifest", "runs"])
def test_pilot_refuses_a_path_too_long(project: Path, key: str, name: str) -> None:
    set_key(project, "config/pilot.json", f"$.{key}", LONG[name](""))
    _refused(["pilot", project, "--run-id", "long"], [project], f"$.{key}")


def test_the_longest_allowed_name_and_path_pass_the_rule() -> None:
    """The caps refuse no more than they must."""
    template = {"inputs": "data/pilot", "manifest": "data/pilot/manifest.json", "categories": ["a"],
                "entry": "src.app:predict", "batch_size": 1, "device": "cpu",
                "max_input_bytes": 1, "min_quality": 0}
    for runs in ("r" * MAX_SEGMENT, "/".join(["e" * 99] * (MAX_PATH // 100)) + "/f"):
        assert len(runs) <= MAX_PATH
        assert config_problems({**template, "runs": runs}) == [], runs


# ---------------------------------------------------------------- runs: a folder of its own

NOT_OWN = [".", "./.", "./", "src", "./src", "src/.", "src/", "src/sub", "data", "data/pilot",
           "data/pilot/.",
           "data/pilot/runs", "config", "config/runs",
           "requirements", "requirements/runs", "src/../src"]


def _runs_case(project: Path, value: str) -> None:
    if value == "src/../src":  # '..' is the safe set's business: here a link leads into src instead
        (project / "results").symlink_to("src")
        value = "results"
    set_key(project, "config/pilot.json", "$.runs", value)


@pytest.mark.parametrize("value", NOT_OWN)
def test_validate_refuses_a_runs_folder_that_is_part_of_the_project(
    project: Path, value: str) -> None:
    _runs_case(project, value)
    line = _validate_refuses(project, "config/pilot.json", "$.runs")
    assert "give the results a folder of their own" in line, line


@pytest.mark.parametrize("value", NOT_OWN)
def test_pilot_and_bundle_refuse_the_same_runs_folders(project: Path,
                                                       tmp_path: Path, value: str) -> None:
    write_fresh_lock(project)
    _runs_case(project, value)
    _refused(["pilot", project, "--run-id", "own"], [project], "$.runs")
    out = tmp_path / "bundle"
    _refused(["bundle", project, "--out", out, "--no-image", "--no-kdkit-wheels"],
             [project], "$.runs")
    assert not out.exists()


@pytest.mark.parametrize("value", ["runs", "results/pilot", "out.d", "data/results"])
def test_a_folder_of_its_own_passes(project: Path, value: str) -> None:
    set_key(project, "config/pilot.json", "$.runs", value)
    result = invoke("validate", project)
    assert result.exit_code == 0, result.output


# ---------------------------------------------------------------- the stale-staging cleanup

def _old(path: Path) -> Path:
    past = time.time() - 3600
    os.utime(path, (past, past), follow_symlinks=False)
    return path


def test_the_runs_cleanup_removes_only_staging_folders(tmp_path: Path) -> None:
    """In a runs folder kdkit stages run folders only: a file or a link named like staging is someone's data."""
    (tmp_path / "target").mkdir()
    kept = [tmp_path / ".weights.partial-999999", tmp_path / ".notes.4242424.x.tmp"]
    for path in kept:
        path.write_bytes(b"data")
        _old(path)
    (tmp_path / ".link.partial-999999").symlink_to("target", target_is_directory=True)
    _old(tmp_path / ".link.partial-999999")
    gone = tmp_path / ".20260101T000000Z-pilot-abcd.partial-999999"
    gone.mkdir()
    _old(gone)
    before = tree_snapshot(tmp_path)
    assert clean_stale_in(tmp_path, folders_only=True) == [gone]
    assert all(path.exists() for path in kept) and (tmp_path / ".link.partial-999999").is_symlink()
    assert tree_snapshot(tmp_path) == before


def test_a_run_folders_cleanup_never_removes_a_folder_named_like_a_staging_file(
    tmp_path: Path) -> None:
    folder = tmp_path / ".notes.4242424.x.tmp"
    folder.mkdir()
    (folder / "keep").write_text("x")
    stale_file = tmp_path / ".summary.json.4242424.y.tmp"
    stale_file.write_text("{")
    _old(stale_file)
    _old(folder)
    assert clean_stale_in(tmp_path) == [stale_file]
    assert (folder / "keep").read_text() == "x"


def test_staging_named_files_in_the_root_survive_a_pilot_whose_runs_is_the_root(
    project: Path) -> None:
    names = [".weights.partial-999999", ".notes.4242424.x.tmp", ".runs.partial-999999"]
    for name in names:
        (project / name).write_bytes(b"precious")
        _old(project / name)
    set_key(project, "config/pilot.json", "$.runs", ".")
    _refused(["pilot", project, "--run-id", "root"], [project], "$.runs")
    assert all((project / name).read_bytes() == b"precious" for name in names)


# ---------------------------------------------------------------- categories

def test_a_category_with_a_control_character_is_shown_alone(project: Path) -> None:
    set_key(project, "config/pilot.json", "$.categories",
            ["invoice", "contract", "research\x1b[2J", "support"])
    line = _validate_refuses(project, "config/pilot.json", "$.categories")
    assert '"research\\u001b[2J"' in line and "invoicecontract" not in line, line
