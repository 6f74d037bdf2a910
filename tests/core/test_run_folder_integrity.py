"""Issue 10 §12 and §13: a closed run folder is known by its kind, so a file removed together with
its SHA256SUMS line is still a missing file, and so is a file not listed; a damaged SHA256SUMS is
one clean line; an empty or comment-only lock is not a lock.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import invoke, tree_snapshot
from tests.probe.pilot.test_pilot import passing_and_stopped, pilot, use_app


@pytest.fixture(scope="module")
def closed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A passing run and a stopped one (with stop.json), closed by the real pilot."""
    passed, stopped = passing_and_stopped(tmp_path_factory.mktemp("closed"), "passed", "stopped")
    return {"passed": passed, "stopped": stopped}


def _copy(run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run, tmp_path / run.name))


def _drop_with_line(run: Path, name: str) -> None:
    (run / name).unlink()
    sums = run / "SHA256SUMS"
    sums.write_text(
        "".join(line + "\n" for line in sums.read_text().splitlines()
                if not line.endswith(f"  {name}")))


@pytest.mark.parametrize("name",
                         ["params.json", "env.json", "results.jsonl", "summary.json", "summary.md"])
def test_a_required_file_removed_with_its_line_is_missing(closed: dict[str, Path], tmp_path: Path,
                                                         name: str) -> None:
    run = _copy(closed["passed"], tmp_path)
    _drop_with_line(run, name)
    result = invoke("copy-out", run, "--verify")
    assert result.exit_code == 1
    assert f"{run / name}: missing, and not listed in SHA256SUMS either" in result.stderr, result.stderr
    before = tree_snapshot(tmp_path)
    # nor is such a folder copied as if it were whole
    copy = invoke("copy-out", run, tmp_path / "dest")
    assert copy.exit_code == 1 and not (tmp_path / "dest" / run.name).exists()
    assert {k for k in tree_snapshot(tmp_path) if k not in before} == set()


def test_a_stopped_run_without_its_stop_json_is_incomplete(
    closed: dict[str, Path], tmp_path: Path) -> None:
    run = _copy(closed["stopped"], tmp_path)
    assert invoke("copy-out", run, "--verify").exit_code == 0
    _drop_with_line(run, "stop.json")
    result = invoke("copy-out", run, "--verify")
    assert result.exit_code == 1 and "stop.json: missing, and not listed" in result.stderr


def test_an_earlier_sessions_numbered_reports_are_not_required(
    closed: dict[str, Path], tmp_path: Path) -> None:
    run = _copy(closed["passed"], tmp_path)
    assert invoke("copy-out", run, "--verify").exit_code == 0


@pytest.mark.parametrize(("content", "words"), [
    (b"\xff\xfe" + "x".encode("utf-16-le"), "SHA256SUMS: not UTF-8"),
    (b"not a line\n", "malformed line"),
    (b"z" * 64 + b"  params.json\n", "malformed line"),
    (b"0" * 64 + b"  ../../etc/passwd\n", "malformed line"),
    (b"0" * 64 + b"  /etc/passwd\n", "malformed line"),
    (b"0" * 64 + b"  a\n" + b"1" * 64 + b"  a\n", "malformed line"),
], ids=["utf16", "garbage", "not hex", "escape", "absolute", "twice"])
def test_a_damaged_sha256sums_is_one_clean_line(closed: dict[str, Path], tmp_path: Path,
                                                content: bytes,
                                                words: str) -> None:
    run = _copy(closed["passed"], tmp_path)
    (run / "SHA256SUMS").write_bytes(content)
    result = invoke("copy-out", run, "--verify")
    assert result.exit_code == 1, result.output
    assert words in result.stderr and "Traceback" not in result.output
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_file_added_after_closing_is_named(closed: dict[str, Path], tmp_path: Path) -> None:
    run = _copy(closed["passed"], tmp_path)
    (run / "extra.json").write_text("{}")
    result = invoke("copy-out", run, "--verify")
    assert result.exit_code == 1 and "extra.json: not listed in SHA256SUMS" in result.stderr


def test_a_gathered_folder_needs_only_its_own_files(tmp_path: Path) -> None:
    from kdkit.core.checksums import write_sums

    folder = tmp_path / "R-gathered"
    folder.mkdir()
    (folder / "summary.json").write_text(json.dumps({"kind": "gathered", "verdict": "pass"}))
    (folder / "summary.md").write_text("# R\n")
    write_sums(folder, [(name, folder / name) for name in ("summary.json", "summary.md")])
    assert invoke("copy-out", folder, "--verify").exit_code == 0
    _drop_with_line(folder, "summary.md")
    assert invoke("copy-out", folder, "--verify").exit_code == 1


# ---------------------------------------------------------------- §13: an empty lock is not a lock


@pytest.mark.parametrize("text",
                         ["", "\n\n", "# only a comment\n", "# kdkit: header=1\n#\n", "   \n\t\n",
                          "\ufeff", "--index-url https://pypi.org/simple\n"],
                         ids=["empty", "blank lines", "comment", "header only",
                              "whitespace", "bom", "options only"])
def test_verify_env_refuses_a_lock_without_pins(tmp_path: Path, text: str) -> None:
    lock = tmp_path / "cpu.txt"
    lock.write_text(text, encoding="utf-8")
    before = tree_snapshot(tmp_path)
    result = invoke("verify-env", "--lock", lock)
    assert result.exit_code == 2, result.output
    assert "no pinned requirement in it" in result.stderr or "cannot parse" in result.stderr, result.stderr
    assert "MATCH" not in result.output and tree_snapshot(tmp_path) == before


def test_the_in_image_form_refuses_it_too(tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.conftest import REPO

    lock = tmp_path / "cpu.txt"
    lock.write_text("# nothing\n")
    done = subprocess.run([sys.executable, "-I", "-m", "kdkit.probe", "verify-env", "--lock",
                           str(lock), "--json"],
                          capture_output=True, text=True, cwd=REPO, check=False)
    assert done.returncode == 2 and "no pinned requirement" in done.stderr
    assert json.loads(done.stdout or "null") is None


def test_an_earlier_sessions_report_removed_with_its_line_is_missing(tmp_path: Path) -> None:
    """A resumed run names every file it holds in summary.json: stop-1.json, the record of how the
    first session ended, cannot go away with its SHA256SUMS line unnoticed."""
    from kdkit.project.init import init_project

    project = init_project(tmp_path / "proj", name="proj", backend="cpu")
    use_app(project, "raises", batch_size=2, stop={"max_rejected": 0, "max_seconds": None})
    assert pilot(project, "--run-id", "r")[0] == 1
    run = project / "runs" / "r"
    # stops again on the same rule; the first stop.json is kept
    assert pilot(project, "--resume", "r")[0] == 1
    summary = json.loads((run / "summary.json").read_text())
    assert "stop-1.json" in summary["files"] and "env-1.json" in summary["files"]
    assert invoke("copy-out", run, "--verify").exit_code == 0
    copy = _copy(run, tmp_path / "c")
    _drop_with_line(copy, "stop-1.json")
    result = invoke("copy-out", copy, "--verify")
    assert result.exit_code == 1 and "stop-1.json: missing, and not listed" in result.stderr


# ---------------------------------------------------------------- the one model: reader, IDs, collisions


def test_read_run_reads_exactly_what_the_pilot_wrote(closed: dict[str, Path]) -> None:
    from kdkit.core.runverify import read_run

    passed, stopped = read_run(closed["passed"]), read_run(closed["stopped"])
    params = json.loads((closed["passed"] / "params.json").read_text())
    assert (passed.run_id, passed.kind, passed.verdict, passed.has_params, passed.has_summary) == \
        ("passed", "pilot", "pass", True, True)
    assert passed.params_hash == params["params_hash"] and passed.share is None and passed.workers is None
    assert passed.total == (passed.accepted or 0) + (passed.rejected
                                                     or 0) and passed.seconds is not None
    assert passed.peak_device == "cpu" and (passed.peak_bytes or 0) > 0
    stop = json.loads((closed["stopped"] / "stop.json").read_text())
    assert stopped.verdict == "fail" and stopped.stop_reason == stop["reason"]


def test_a_taken_name_gets_the_next_counter_and_a_new_folder_is_made_atomically(
    tmp_path: Path) -> None:
    import re

    from kdkit.core.runfolder import claim, new_run_folder

    def take(name: str) -> str:
        (tmp_path / name).mkdir()  # FileExistsError when taken
        return name

    assert [claim("x", take) for _ in range(3)] == ["x", "x-2", "x-3"]
    made = [new_run_folder(tmp_path / "runs", "sweep", "runs folder") for _ in range(2)]
    assert made[0] != made[1] and all(p.is_dir() and not any(p.iterdir()) for p in made)
    assert all(re.fullmatch(r"sweep-\d{8}-\d{6}(-\d+)?", p.name) for p in made)
    assert re.fullmatch(r"resume-test-\d{8}-\d{6}",
                        new_run_folder(tmp_path / "runs", "resume-test", "x").name)


def test_a_run_folder_that_cannot_be_made_is_one_line(tmp_path: Path) -> None:
    from kdkit.core.errors import BadInput
    from kdkit.core.runfolder import new_run_folder

    (tmp_path / "runs").write_text("a file")
    with pytest.raises(
        BadInput, match=r"runs is not a folder; move it away or choose another runs folder$"):
        new_run_folder(tmp_path / "runs", "sweep", "runs folder")
