"""Issue 10 §3 and §4: one run is one app version over one config and one set of inputs, and a
finished run is never rewritten.

A resume is refused (exit 2, nothing written, the difference named) when the app's code, the
config or an input already answered changed since the run started; a finished run (closed by
its SHA256SUMS, not stopped) is refused whatever changed, so every earlier copy keeps verifying.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import invoke, tree_snapshot
from tests.probe.pilot.test_pilot import edit_config, pilot, use_app


def stopped_run(project: Path, run_id: str = "r") -> Path:
    """A run stopped by max_rejected after its first batches: resumable."""
    use_app(project, "raises", batch_size=2, stop={"max_rejected": 0, "max_seconds": None})
    code, summary, _ = pilot(project, "--run-id", run_id)
    assert code == 1 and summary["stopped"]["rule"] == "max_rejected", summary
    return project / "runs" / run_id


def refused(project: Path, run_id: str, *words: str) -> str:
    before = tree_snapshot(project)
    result = invoke("pilot", project, "--resume", run_id)
    assert result.exit_code == 2, result.output
    line = result.stderr.strip()
    assert "\n" not in line and line.startswith("Error: "), line
    for word in words:
        assert word in line, line
    assert tree_snapshot(project) == before
    return line


CODE_CHANGES: list[tuple[str, Callable[[Path], None], str]] = [
    ("edited",
     lambda p: (p / "src/oracle.py").write_text((p / "src/oracle.py").read_text() + "\n# v2\n"),
     "src/oracle.py changed"),
    ("added", lambda p: (p / "src/helper.py").write_text("X = 1\n"), "src/helper.py added"),
    ("removed", lambda p: (p / "src/train.py").unlink(), "src/train.py removed"),
    ("data file",
     lambda p: (p / "src/examples.jsonl").write_text("{}\n"), "src/examples.jsonl changed"),
    ("nested",
     lambda p: (p / "src/sub").mkdir()
     or (p / "src/sub/m.py").write_text(""), "src/sub/m.py added"),
]


@pytest.mark.parametrize(("name", "change", "named"), CODE_CHANGES,
                         ids=[c[0] for c in CODE_CHANGES])
def test_a_changed_app_is_not_resumed(project: Path, name: str,
                                      change: Callable[[Path], None], named: str) -> None:
    stopped_run(project)
    change(project)
    refused(project, "r", "the app's code changed since this run started", named, "start a new run")


def test_byte_code_caches_are_not_code_changes(project: Path) -> None:
    stopped_run(project)
    (project / "src" / "__pycache__").mkdir(exist_ok=True)
    (project / "src" / "__pycache__" / "oracle.cpython-311.pyc").write_bytes(b"\0" * 16)
    _code, summary, _ = pilot(project, "--resume", "r")
    assert summary.get("resumed") is True, summary


CONFIG_CHANGES: list[tuple[str, dict[str, object], str]] = [
    ("quality", {"min_quality": 0.5}, "min_quality: 0.9 -> 0.5"),
    ("batch", {"batch_size": 3}, "batch_size: 2 -> 3"),
    ("categories",
     {"categories": ["invoice", "contract", "research", "support", "spam"]}, "categories:"),
    ("entry",
     {"entry": "src.oracle:predict"}, "entry: \"src.raises:predict\" -> \"src.oracle:predict\""),
]


@pytest.mark.parametrize(("name", "change", "named"), CONFIG_CHANGES,
                         ids=[c[0] for c in CONFIG_CHANGES])
def test_a_changed_config_is_not_resumed_and_the_change_is_named(project: Path, name: str,
                                                                 change: dict[str, object],
                                                                 named: str) -> None:
    stopped_run(project)
    edit_config(project, **change)
    refused(project, "r", "the parameters changed since this run started", named, "drop --resume")


def test_a_changed_manifest_is_not_resumed(project: Path) -> None:
    stopped_run(project)
    path = project / "data/pilot/manifest.json"
    data = json.loads(path.read_text())
    data["documents"][5]["label"] = "support"
    path.write_text(json.dumps(data))
    refused(project, "r", "manifest_sha256")


INPUT_CHANGES: list[tuple[str, Callable[[Path], None], str]] = [
    ("content", lambda p: (p / "data/pilot/doc-01.txt").write_text("something else"),
     "doc-01.txt (doc-01): its content changed"),
    ("one byte", lambda p: (p / "data/pilot/doc-02.txt").write_bytes(
        (p / "data/pilot/doc-02.txt").read_bytes()[:-1] + b"!"),
     "doc-02.txt (doc-02): its content changed"),
    ("removed",
     lambda p: (p / "data/pilot/doc-01.txt").unlink(),
     "doc-01.txt (doc-01): now refused by the harness"),
    ("replaced by a link", lambda p: ((p / "data/pilot/doc-01.txt").unlink(),
                                      (p / "data/pilot/doc-01.txt").symlink_to("/etc/hostname")),
     "now refused by the harness (input file doc-01.txt is a symbolic link leading outside the "
     "project"),
]


@pytest.mark.parametrize(("name", "change", "named"), INPUT_CHANGES,
                         ids=[c[0] for c in INPUT_CHANGES])
def test_an_answered_input_that_changed_is_not_resumed(project: Path, name: str,
                                                       change: Callable[[Path], None],
                                                      named: str) -> None:
    stopped_run(project)
    change(project)
    refused(project, "r", "inputs changed since this run answered them", named)


def test_an_input_not_yet_answered_may_change(project: Path) -> None:
    run_dir = stopped_run(project)
    answered = {json.loads(line)["id"]
                for line in (run_dir / "results.jsonl").read_text().splitlines()}
    assert "doc-11" not in answered
    (project / "data/pilot/doc-11.txt").write_text("support ticket: my password reset fails")
    edit_config(project, entry="src.raises:predict")
    _code, summary, _ = pilot(project, "--resume", "r")
    assert summary["resumed"] is True


def test_a_fixed_harness_rejection_is_a_changed_input(project: Path) -> None:
    """doc-12 is rejected by the harness (not UTF-8); turning it into good UTF-8 changes the run's input."""
    use_app(project, "oracle", batch_size=12, stop={"max_rejected": 0, "max_seconds": None})
    _code, summary, _ = pilot(project, "--run-id", "r")
    assert summary["stopped"]["rule"] == "max_rejected"
    (project / "data/pilot/doc-12.txt").write_text("now it is UTF-8", encoding="utf-8")
    refused(project, "r", "doc-12.txt (doc-12): its content changed")


# ---------------------------------------------------------------- §4: a finished run is immutable


@pytest.mark.parametrize("app", ["oracle", "drops"])
def test_a_finished_run_is_never_rewritten(project: Path, tmp_path: Path, app: str) -> None:
    use_app(project, app)
    _code, _summary, _ = pilot(project, "--run-id", "done", "--copy-to", str(tmp_path / "copy"))
    run_dir = project / "runs" / "done"
    copy = tmp_path / "copy" / "done"
    refused(project, "done", "this run is finished and closed by its SHA256SUMS", "never rewritten")
    assert invoke("copy-out", copy, "--verify").exit_code == 0
    assert (copy / "SHA256SUMS").read_bytes() == (run_dir / "SHA256SUMS").read_bytes()


def test_a_finished_worker_run_is_never_rewritten(project: Path) -> None:
    use_app(project, "oracle")
    assert invoke("pilot", project, "--run-id", "w", "--worker",
                  "0", "--workers", "2").exit_code == 0
    before = tree_snapshot(project)
    result = invoke("pilot", project, "--resume", "w", "--worker", "0", "--workers", "2")
    assert result.exit_code == 2 and "this run is finished" in result.stderr
    assert tree_snapshot(project) == before


def test_a_run_killed_before_its_checksums_is_still_resumable(project: Path) -> None:
    """Only SHA256SUMS closes a run: a summary without it (a kill between the two) is finished again."""
    use_app(project, "oracle")
    pilot(project, "--run-id", "half")
    (project / "runs" / "half" / "SHA256SUMS").unlink()
    code, summary, _ = pilot(project, "--resume", "half")
    assert code == 0 and summary["resumed"] is True
    assert (project / "runs" / "half" / "SHA256SUMS").is_file()


@pytest.mark.parametrize(("plant", "named"), [
    (lambda run: (run / "notes.txt").symlink_to("/etc/hostname"), "notes.txt (a symbolic link)"),
    (lambda run: (run / "extra").mkdir(), "extra (a folder)"),
    (lambda run: (run / "results.jsonl.bak").write_text("x"), "results.jsonl.bak (a file)"),
], ids=["link", "folder", "file"])
def test_a_run_folder_holding_what_the_harness_did_not_put_there_is_not_resumed(
        project: Path, plant: Callable[[Path], None], named: str) -> None:
    run_dir = stopped_run(project)
    plant(run_dir)
    refused(project, "r", named, "which the harness did not put there")
