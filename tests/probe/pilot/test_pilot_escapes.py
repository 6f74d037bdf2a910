"""Issue 10 §5 (the pilot's side): every path the pilot reads or writes is resolved through its
links and stays inside the project; inputs that are not regular files are refused per item
without being opened for reading.

Links and special files are made for real (symlink, mkfifo, a Unix socket, a device node when
this machine lets root make one).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import time
from pathlib import Path

import pytest

from tests.conftest import invoke, tree_snapshot
from tests.core.test_safe_paths import HOSTILE, PATH_KEYS, USED, _refused, set_key
from tests.probe.pilot.test_pilot import edit_config, pilot, use_app


def rejection(summary: dict[str, object], doc: str) -> str:
    problems = [p for p in summary["problems"] if isinstance(p, str)
                and p.startswith(f"{doc}: ")]  # type: ignore[union-attr]
    assert problems, summary["problems"]
    return problems[0]


@pytest.fixture
def spy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "seen.txt"
    monkeypatch.setenv("SPY_FILE", str(path))
    return path


LINKED_OUTSIDE = ["/etc/passwd",
                  "/etc/hostname", "/proc/self/environ", "../../../../../../etc/passwd"]


@pytest.mark.parametrize("target", LINKED_OUTSIDE)
def test_an_input_linked_outside_is_rejected_and_never_reaches_the_app(project: Path, spy: Path,
                                                                       target: str) -> None:
    use_app(project, "oracle")
    doc = project / "data/pilot/doc-03.txt"
    doc.unlink()
    doc.symlink_to(target)
    code, summary, _ = pilot(project)
    assert code == 1
    assert rejection(summary,
                     "doc-03") == ("doc-03: expected acceptance, but rejected: input file "
                                            "doc-03.txt is a symbolic link leading outside the "
                                            "project; copy the file in")
    assert "doc-03" not in spy.read_text().split()
    records = (Path(summary["run_dir"]) / "results.jsonl").read_text()  # type: ignore[arg-type]
    assert "root:" not in records


def test_a_link_chain_that_ends_outside_is_rejected(project: Path, spy: Path) -> None:
    use_app(project, "oracle")
    hop = project / "data/pilot/hop.txt"
    hop.symlink_to("/etc/passwd")
    doc = project / "data/pilot/doc-04.txt"
    doc.unlink()
    doc.symlink_to("hop.txt")
    _code, summary, _ = pilot(project)
    assert "symbolic link leading outside the project" in rejection(summary, "doc-04")


def test_an_input_linked_inside_the_project_is_read(project: Path) -> None:
    use_app(project, "oracle")
    doc = project / "data/pilot/doc-02.txt"
    shutil.move(doc, project / "data" / "kept.txt")
    doc.symlink_to("../kept.txt")
    code, summary, _ = pilot(project)
    assert code == 0, summary["problems"]


def test_a_nested_name_through_a_linked_folder_outside_is_rejected(
    project: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "doc-05.txt").write_text("invoice total due")
    (project / "data/pilot/sub").symlink_to(outside)
    manifest = project / "data/pilot/manifest.json"
    data = json.loads(manifest.read_text())
    data["documents"][4]["file"] = "sub/doc-05.txt"
    manifest.write_text(json.dumps(data))
    use_app(project, "oracle")
    _code, summary, _ = pilot(project)
    assert "input file sub/doc-05.txt leads outside the project" in rejection(summary, "doc-05")


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _socket(path: Path) -> None:
    path.unlink()
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))  # left bound: the file is a socket for the rest of the test


def _device(path: Path) -> None:
    path.unlink()
    try:
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero's numbers
    except PermissionError:
        pytest.skip("this machine does not let root make a device node")


def _folder(path: Path) -> None:
    path.unlink()
    path.mkdir()


@pytest.mark.parametrize(("make", "said"), [
    (_fifo, "is a FIFO (named pipe), not a regular file; the harness never reads it"),
    (_socket, "is a socket, not a regular file"),
    (_device, "is a character device, not a regular file"),
    (_folder, "unreadable: Is a directory"),
], ids=["fifo", "socket", "device", "folder"])
def test_special_files_are_rejected_per_item_without_hanging(project: Path, spy: Path, make: object,
                                                             said: str) -> None:
    use_app(project, "oracle", stop={"max_rejected": None, "max_seconds": 900})
    make(project / "data/pilot/doc-07.txt")  # type: ignore[operator]
    started = time.monotonic()
    code, summary, _ = pilot(project)
    # a FIFO once hung the pilot forever (then max_seconds ended it)
    assert time.monotonic() - started < 600
    assert code == 1
    assert said in rejection(summary, "doc-07")
    assert "doc-07" not in spy.read_text().split()
    assert summary["accepted"] == 10


@pytest.mark.parametrize("key", ["runs", "inputs"])
def test_a_folder_linked_outside_the_project_is_refused_before_anything_is_written(
        project: Path, tmp_path: Path, key: str) -> None:
    outside = tmp_path / f"outside-{key}"
    folder = project / ("runs" if key == "runs" else "data/pilot")
    shutil.copytree(folder, outside)
    shutil.rmtree(folder)
    folder.symlink_to(outside)
    use_app(project, "oracle")
    before, before_outside = tree_snapshot(project), tree_snapshot(outside)
    result = invoke("pilot", project)
    assert result.exit_code == 2
    assert f"$.{key}: " in result.stderr and "outside the project" in result.stderr and "symbolic link" in result.stderr
    assert tree_snapshot(project) == before and tree_snapshot(outside) == before_outside


def test_a_manifest_linked_outside_is_refused(project: Path, tmp_path: Path) -> None:
    manifest = project / "data/pilot/manifest.json"
    shutil.copy(manifest, tmp_path / "manifest.json")
    manifest.unlink()
    manifest.symlink_to(tmp_path / "manifest.json")
    result = invoke("pilot", project)
    assert result.exit_code == 2 and "$.manifest: " in result.stderr and "outside the project" in result.stderr


def test_a_config_that_is_a_fifo_is_refused_not_waited_on(project: Path) -> None:
    config = project / "config/pilot.json"
    config.unlink()
    os.mkfifo(config)
    started = time.monotonic()
    result = invoke("pilot", project)
    assert time.monotonic() - started < 120  # a hang only
    assert result.exit_code == 2 and "not a regular file" in result.stderr


def test_runs_as_home_path_is_refused_not_made_literally(project: Path) -> None:
    edit_config(project, runs="~/runs")
    before = tree_snapshot(project)
    result = invoke("pilot", project)
    assert result.exit_code == 2
    assert "$.runs: '~/runs' starts with '~', which kdkit never expands" in result.stderr
    assert not (project / "~").exists() and tree_snapshot(project) == before


@pytest.mark.parametrize("name", USED)
@pytest.mark.parametrize(("file", "where", "value"),
                         [k for k in PATH_KEYS if k[0] != "kdkit.json" or
                          k[1] == "$.pilot_config"], ids=str)
def test_pilot_refuses_a_config_edited_after_validate(project: Path, file: str, where: str,
                                                      value: str,
                                                      name: str) -> None:
    set_key(project, file, where, HOSTILE[name](value))
    _refused(["pilot", project, "--run-id", "hostile"], [project], where)
