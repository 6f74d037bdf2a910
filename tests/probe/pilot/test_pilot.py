"""`kdkit pilot` and `kdkit copy-out`: the example app, wrong apps caught by name, resume, copies.

Every run is real: the harness, the example PyTorch classifier on CPU, fsynced
results, SIGKILL of a real subprocess. The wrong apps live in tests/data/apps/ and
are copied into a scaffolded project's src/ next to the correct "oracle" app.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from kdkit.core import resultlines
from kdkit.core.pilotconfig import load_pilot
from kdkit.core.pilotmanifest import Document
from kdkit.core.runresults import RunFolder
from kdkit.probe.pilot.accounting import account, not_answered_line
from tests.conftest import DATA, REPO, invoke, tree_snapshot, wait_for_lines

APPS = DATA / "apps"


def use_app(project: Path, name: str, **config: Any) -> Path:
    """Put a test app in the project's src/ and point the pilot config at it (device cpu)."""
    shutil.copy(APPS / "oracle.py", project / "src" / "oracle.py")
    shutil.copy(APPS / f"{name}.py", project / "src" / f"{name}.py")
    return edit_config(project, entry=f"src.{name}:predict", device="cpu", **config)


def edit_config(project: Path, **changes: Any) -> Path:
    path = project / "config" / "pilot.json"
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data, indent=2))
    return project


def pilot(project: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    """Run `kdkit pilot PROJECT --json ...` in-process: (exit code, summary, stderr)."""
    result = invoke("pilot", project, "--json", *args)
    summary = json.loads(result.stdout) if result.stdout.strip() else {}
    return result.exit_code, summary, result.stderr


def result_ids(run_dir: Path) -> Counter[str]:
    lines = (run_dir / "results.jsonl").read_text().splitlines()
    return Counter(json.loads(line)["id"] for line in lines)


def twelve() -> Counter[str]:
    return Counter(f"doc-{n:02d}" for n in range(1, 13))


# ---------------------------------------------------------------- the example app


def test_example_app_passes_its_own_pilot_on_cpu(project: Path) -> None:
    code, summary, _ = pilot(project)
    assert code == 0, summary["problems"]
    assert (summary["verdict"], summary["total"], summary["accepted"],
            summary["rejected"]) == ("pass", 12, 11, 1)
    assert summary["quality"] >= 0.9
    run_dir = Path(summary["run_dir"])
    assert sorted(p.name for p in run_dir.iterdir()) == [
        "SHA256SUMS", "env.json", "params.json", "results.jsonl", "summary.json", "summary.md"]
    assert result_ids(run_dir) == twelve()
    records = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    (doc12,) = [r for r in records if r["id"] == "doc-12"]
    assert (doc12["outcome"], doc12["by"]) == ("rejected", "harness")
    assert doc12["reason"].startswith(
        "input file doc-12.txt is not valid UTF-8 (byte 0xb3 at offset")
    assert json.loads((run_dir / "env.json").read_text())["verdict"] == "pass"
    assert "| doc-12 | reject | - | rejected | harness: input file doc-12.txt is not valid UTF-8" in (
        run_dir / "summary.md").read_text()


def test_example_app_is_deterministic(project: Path) -> None:
    first = pilot(project)[1]
    second = pilot(project)[1]
    assert first["run_id"] != second["run_id"]

    def outcomes(summary: dict[str, Any]) -> list[tuple[str, str]]:
        lines = (Path(summary["run_dir"]) / "results.jsonl").read_text().splitlines()
        return [(r["id"], r.get("category") or r["reason"]) for r in map(json.loads, lines)]

    assert outcomes(first) == outcomes(second)


def test_training_examples_do_not_leak_pilot_text() -> None:
    """The example app learns from sentences of its own, none taken from the pilot documents."""
    template = REPO / "project-template"
    pilot_text = " ".join(p.read_bytes().decode("utf-8", "replace").lower()
                          for p in (template / "data" / "pilot").glob("*.txt"))
    for line in (template / "src" / "examples.jsonl").read_text().splitlines():
        words = json.loads(line)["text"].lower().split()
        for start in range(len(words) - 5):
            assert " ".join(words[start:start + 6]) not in pilot_text, line


def test_params_record_config_hash_and_code_revision(project: Path) -> None:
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    subprocess.run(["git", "-C", str(project), "-c", "user.email=t@example.org", "-c",
                    "user.name=t",
                    "commit", "-qm", "init", "--allow-empty"], check=True)
    summary = pilot(use_app(project, "oracle"))[1]
    params = json.loads((Path(summary["run_dir"]) / "params.json").read_text())
    assert summary["run_id"].endswith("-" + params["params_hash"][:8])
    assert len(params["code"]["revision"]) == 40
    assert params["code"]["dirty"] is True  # the scaffold's files are untracked
    assert params["params"]["entry"] == "src.oracle:predict"


def test_without_git_the_revision_is_null_with_a_note(project: Path) -> None:
    summary = pilot(use_app(project, "oracle"))[1]
    code = json.loads((Path(summary["run_dir"]) / "params.json").read_text())["code"]
    assert code["revision"] is None and code["dirty"] is None and "not a git repository" in code["note"]


def test_a_changed_config_gives_a_new_run_id(project: Path) -> None:
    first = pilot(use_app(project, "oracle"))[1]["run_id"]
    edit_config(project, batch_size=3)
    assert pilot(project)[1]["run_id"].split("-")[1] != first.split("-")[1]


# ---------------------------------------------------------------- wrong apps, each caught and named


@pytest.mark.parametrize(("app", "problem"), [
    ("invents", '"doc-99": invented ID, not in the manifest (batch 0)'),
    ("drops", "doc-05: the app returned no result for it (batch 1)"),
    ("outside", 'doc-03: category "spam" is not one of invoice, contract, research, support'),
    ("twice", "doc-02: 2 results; every ID must appear exactly once"),
    ("malformed", 'batch 0: malformed result "doc-04 is support"'),
    ("malformed", "doc-08: the result has both a category and an error"),
    ("malformed", "doc-10: rejected without a reason (empty error)"),
])
def test_wrong_app_is_caught_and_named(project: Path, app: str, problem: str) -> None:
    use_app(project, app)
    code, summary, _ = pilot(project)
    assert code == 1
    assert summary["verdict"] == "fail"
    assert any(p.startswith(problem) for p in summary["problems"]), summary["problems"]


def test_the_correct_app_passes(project: Path) -> None:
    use_app(project, "oracle")
    code, summary, _ = pilot(project)
    assert (code, summary["accepted"], summary["rejected"], summary["problems"]) == (0, 11, 1, [])


def test_an_app_that_raises_on_one_item_loses_only_that_item(project: Path) -> None:
    use_app(project, "raises")
    code, summary, _ = pilot(project)
    assert code == 1
    assert (summary["accepted"], summary["rejected"]) == (10, 2)
    assert summary["problems"] == [
        "doc-06: expected acceptance, but rejected: the app raised ValueError: cannot parse doc-06"]
    records = [json.loads(line)
               for line in (Path(summary["run_dir"]) / "results.jsonl").read_text().splitlines()]
    culprit = [r for r in records if r["id"] == "doc-06"]
    assert [(r["outcome"], r["by"]) for r in culprit] == [("rejected", "app-exception")]
    assert {r["id"] for r in records if r["outcome"] == "accepted"} == {
        f"doc-{n:02d}" for n in range(1, 12) if n != 6}


def test_an_answer_that_is_not_a_list_rejects_each_item_with_the_reason(project: Path) -> None:
    (project / "src" / "tuple_app.py").write_text(
        "def predict(items):\n    return tuple({'id': i['id'], 'category': 'invoice'} for i in "
        "items)\n")
    edit_config(project, entry="src.tuple_app:predict", device="cpu", stop={})
    code, summary, _ = pilot(project)
    assert (code, summary["accepted"], summary["rejected"]) == (1, 0, 12)
    assert ("doc-01: expected acceptance, but rejected: predict returned tuple, expected a list of "
            "results"
            in summary["problems"])


def test_harness_rejections_never_reach_the_app(project: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch
                                                ) -> None:
    spy = tmp_path / "seen.txt"
    monkeypatch.setenv("SPY_FILE", str(spy))
    use_app(project, "oracle", max_input_bytes=4096, stop={})
    (project / "data" / "pilot" / "doc-03.txt").unlink()
    (project / "data" / "pilot" / "doc-10.txt").unlink()
    (project / "data" / "pilot" / "doc-10.txt").mkdir()
    code, summary, _ = pilot(project)
    seen = set(spy.read_text().split())
    assert {"doc-03", "doc-07", "doc-09", "doc-06", "doc-10", "doc-11", "doc-12"}.isdisjoint(seen)
    assert code == 1
    problems = "\n".join(summary["problems"])
    assert "doc-03: expected acceptance, but rejected: input file doc-03.txt not found" in problems
    assert "doc-10: expected acceptance, but rejected: input file doc-10.txt unreadable: Is a directory" in problems
    assert "doc-09: expected acceptance, but rejected: input file doc-09.txt is 18673 bytes, over " \
           "max_input_bytes 4096" in problems
    assert summary["accepted"] + summary["rejected"] == 12


# ---------------------------------------------------------------- stop rules, interrupts, resume


def test_an_interrupted_large_run_says_how_many_ids_are_unanswered_in_one_line() -> None:
    """Issue 31: 61,002 IDs the run did not reach are one problem line with a sample, not one line each; every
    one of them is listed in summary.json's not_answered, in manifest order."""
    docs = [Document(f"d{i:06d}", f"d{i}.txt", f"d{i}.txt", None, "any") for i in range(100_000)]
    answered = [{"id": doc.id, "outcome": "accepted", "category": "x"} for doc in docs[:38_998]]
    acc = account(docs, answered, 0.0)
    unreached = [p for p in acc.problems if "not yet answered" in p]
    assert unreached == ["61,002 IDs not yet answered (the run did not reach them; resume the "
                         "run): d038998, d038999, d039000, d039001, d039002, ...; all 61,002 in "
                         "summary.json's not_answered"]
    assert len(acc.problems) <= 3 and acc.not_answered == [doc.id for doc in docs[38_998:]]
    one = account(docs[:2], answered[:1], 0.0)
    assert "1 ID not yet answered (the run did not reach it; resume the run): d000001" in one.problems


def test_stop_rule_max_rejected_writes_stop_json_and_resume_finishes(project: Path) -> None:
    use_app(project, "raises", batch_size=2, stop={"max_rejected": 0, "max_seconds": None})
    code, summary, _ = pilot(project, "--run-id", "stopped")
    assert code == 1
    run_dir = project / "runs" / "stopped"
    stop = json.loads((run_dir / "stop.json").read_text())
    assert stop["rule"] == "max_rejected"
    assert stop["reason"] == "stop rule: 1 inputs rejected, more than max_rejected 0"
    assert summary["problems"][0].startswith("stopped early: stop rule: 1 inputs rejected")
    assert "doc-12" in summary["not_answered"] and not any(
        p.startswith("doc-12:") for p in summary["problems"])
    assert not_answered_line(summary["not_answered"]) in summary["problems"]
    assert (run_dir / "SHA256SUMS").exists()
    code, summary, _ = pilot(project, "--resume", "stopped")
    assert code == 1 and json.loads((run_dir / "stop-1.json").read_text())["rule"] == "max_rejected"


def test_stop_rule_max_seconds_interrupts_a_slow_app(project: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLOW_SECONDS", "30")
    use_app(project, "slow", stop={"max_rejected": None, "max_seconds": 0.5})
    code, summary, _ = pilot(project, "--run-id", "slow")
    assert code == 1
    stop = json.loads((project / "runs" / "slow" / "stop.json").read_text())
    assert (stop["rule"],
            stop["reason"]) == ("max_seconds",
                                "stop rule: the run took longer than max_seconds 0.5")
    assert summary["timings"]["seconds"] < 30


def _start(project: Path, run_id: str, **env: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "kdkit.probe", "pilot", str(project), "--run-id", run_id, "--quiet"],
        env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)


def test_sigkill_of_a_hung_app_then_resume_is_exactly_once(project: Path, tmp_path: Path) -> None:
    baseline = use_app(shutil.copytree(project, tmp_path / "baseline"), "oracle", batch_size=2)
    expected = pilot(baseline)[1]
    use_app(project, "hangs", batch_size=2)
    process = _start(project, "killed", HANG_ON="doc-07")
    results = project / "runs" / "killed" / "results.jsonl"
    wait_for_lines(results, 6, process)
    time.sleep(0.3)  # it is now inside predict() for doc-07, hanging
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert result_ids(results.parent) == Counter(f"doc-{n:02d}" for n in range(1, 7))
    assert not (results.parent / "summary.json").exists()

    code, summary, _ = pilot(project, "--resume", "killed")
    assert code == 0, summary["problems"]
    assert result_ids(results.parent) == twelve()
    same = ("verdict", "total", "accepted", "rejected", "quality", "problems")
    assert {k: summary[k] for k in same} == {k: expected[k] for k in same}
    assert summary["resumed"] is True


def test_a_torn_last_line_is_dropped_and_that_item_redone(project: Path) -> None:
    use_app(project, "oracle", batch_size=2)
    pilot(project, "--run-id", "torn")
    results = project / "runs" / "torn" / "results.jsonl"
    lines = results.read_bytes().splitlines(keepends=True)
    # doc-10's line cut by a crash mid-write
    results.write_bytes(b"".join(lines[:9]) + lines[9][:25])
    # which a crash there would not have written
    for name in ("summary.json", "summary.md", "SHA256SUMS"):
        (results.parent / name).unlink()
    code, summary, _ = pilot(project, "--resume", "torn")
    assert code == 0, summary["problems"]
    # the torn line and the rest of its batch (doc-09)
    assert summary["lines_dropped_on_resume"] == 2
    assert result_ids(results.parent) == twelve()


def test_ctrl_c_records_the_stop_and_exits_130(project: Path) -> None:
    use_app(project, "slow")
    process = _start(project, "interrupted", SLOW_SECONDS="0.4")
    wait_for_lines(project / "runs" / "interrupted" / "results.jsonl", 4, process)
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=60) == 130
    run_dir = project / "runs" / "interrupted"
    assert json.loads((run_dir / "stop.json").read_text())["reason"] == "interrupted (Ctrl-C)"
    assert json.loads((run_dir / "summary.json").read_text())["verdict"] == "fail"
    assert (run_dir / "SHA256SUMS").exists()


def test_incomplete_last_batch_is_cut_off_on_scan(tmp_path: Path) -> None:
    run = RunFolder(tmp_path)
    run.append([{"id": "a", "outcome": "accepted", "batch": 0}])
    run.append(
        [{"id": "b", "outcome": "accepted", "batch": 1},
         {"id": "c", "outcome": "rejected", "batch": 1}])
    run.close()
    complete = run.results.read_bytes()
    # c's line never reached the disk
    run.results.write_bytes(complete[: complete.rindex(b'{"id":"c"')])
    scan = run.scan()
    assert (scan.finished, scan.next_batch, scan.dropped_lines) == ({"a"}, 1, 1)
    assert run.results.read_bytes() == complete[: complete.index(b'{"id":"b"')]


def test_scan_and_records_agree_across_many_blocks(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # every block boundary falls inside a batch
    monkeypatch.setattr(resultlines, "BLOCK_BYTES", 100)
    run = RunFolder(tmp_path)
    for batch in range(20):
        run.append([{"id": f"i{batch}-{k}",
                     "outcome": "rejected" if k == 0 else "accepted", "batch": batch}
                    for k in range(3)])
    run.close()
    scan = run.scan()
    assert (len(scan.finished), scan.rejected, scan.next_batch,
            scan.lines, scan.dropped_lines) == (60, 20, 20, 60, 0)
    assert [r["id"] for r in run.records()] == [f"i{b}-{k}" for b in range(20) for k in range(3)]


def test_a_damaged_line_in_the_middle_is_refused(tmp_path: Path) -> None:
    run = RunFolder(tmp_path)
    run.append([{"id": "a", "outcome": "accepted", "batch": 0}])
    run.close()
    run.results.write_bytes(b"garbage\n" + run.results.read_bytes())
    with pytest.raises(
        Exception, match=r"results.jsonl:1: not valid JSON; the file was edited or damaged"):
        run.scan()


# ---------------------------------------------------------------- bad input, IDs as data


@pytest.mark.parametrize(("change", "message"), [
    (lambda p: edit_config(p, batch_size=0),
     "config/pilot.json: $.batch_size: 0 is out of range; use a value >= 1"),
    (lambda p: edit_config(p, entry="src/classify.py"),
     "config/pilot.json: $.entry: 'src/classify.py' is not \"module:function\""),
    (lambda p: (p / "data/pilot/manifest.json").write_text("{"),
     "data/pilot/manifest.json:1:2: malformed JSON"),
    (lambda p: _manifest(p, lambda docs: docs[0].update(id="../../evil")),
     "data/pilot/manifest.json: $.documents[0].id: \"../../evil\" is not a safe ID"),
    (lambda p: _manifest(p, lambda docs: docs[1].update(id="doc-01")),
     "data/pilot/manifest.json: $.documents[1].id: duplicate ID 'doc-01'"),
    (lambda p: _manifest(p, lambda docs: docs[0].update(file="../../kdkit.json")),
     "data/pilot/manifest.json: $.documents[0].file: '../../kdkit.json' points outside"),
])
def test_bad_input_is_exit_2_and_writes_nothing(project: Path, change: Any, message: str) -> None:
    change(project)
    before = tree_snapshot(project)
    result = invoke("pilot", project)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"Error: {project}/{message}"), result.stderr
    assert tree_snapshot(project) == before


def _manifest(project: Path, change: Any) -> None:
    path = project / "data/pilot/manifest.json"
    data = json.loads(path.read_text())
    change(data["documents"])
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("args",
                         [("--run-id", "../outside"), ("--resume", "../../etc"),
                          ("--resume", "nope")])
def test_run_ids_cannot_steer_a_path(project: Path, args: tuple[str, str]) -> None:
    before = tree_snapshot(project.parent)
    result = invoke("pilot", project, *args)
    assert result.exit_code == 2
    assert tree_snapshot(project.parent) == before


def test_an_app_answering_a_path_like_id_writes_nothing_outside_the_run(project: Path) -> None:
    (project / "src" / "pathy.py").write_text(
        "def predict(items):\n    return [{'id': '../../../escaped', 'category': 'invoice'}]\n")
    edit_config(project, entry="src.pathy:predict", device="cpu")
    before = {p for p in tree_snapshot(project.parent) if not p.startswith("proj/runs/")}
    code, summary, _ = pilot(project)
    assert code == 1
    assert '"../../../escaped": invented ID, not in the manifest (batch 0)' in summary["problems"]
    after = {p for p in tree_snapshot(project.parent) if not p.startswith("proj/runs/")}
    assert after == before


def test_an_entry_that_cannot_be_imported_stops_the_run_with_the_reason(project: Path) -> None:
    (project / "src" / "broken.py").write_text("def predict(items)\n")
    edit_config(project, entry="src.broken:predict")
    code, summary, _ = pilot(project, "--run-id", "broken")
    assert code == 1
    stop = json.loads((project / "runs" / "broken" / "stop.json").read_text())
    assert stop["rule"] == "app-code"
    assert stop["reason"].startswith(
        "error: cannot import src.broken (entry src.broken:predict) from ")
    assert "SyntaxError" in stop["reason"]
    assert summary["accepted"] == 0
    # The hint is the command that works: a resume would keep the broken code (and refuse the fixed one).
    assert summary["problems"][0].endswith("; fix the app, then start a new run (kdkit pilot, "
                                           "without --resume: the code is part of a run)")
    (project / "src" / "broken.py").write_text("from src.classify import predict as predict\n")
    # what the old hint said: refused
    assert invoke("pilot", project, "--resume", "broken").exit_code == 2
    code, summary, _ = pilot(project)  # what the new one says: passes
    assert code == 0 and summary["verdict"] == "pass"


def test_resume_with_a_changed_config_is_refused(project: Path) -> None:
    use_app(project, "oracle")
    pilot(project, "--run-id", "first")
    edit_config(project, min_quality=0.5)
    result = invoke("pilot", project, "--resume", "first")
    assert result.exit_code == 2
    assert "the parameters changed since this run started" in result.stderr


# ---------------------------------------------------------------- copies


def test_copy_to_verifies_the_copy(project: Path, tmp_path: Path) -> None:
    use_app(project, "oracle")
    code, summary, _ = pilot(project, "--copy-to", str(tmp_path / "backup"))
    assert code == 0
    copy = tmp_path / "backup" / summary["run_id"]
    assert summary["copy"] == {"path": str(copy), "verified": True}
    assert tree_snapshot(copy) == tree_snapshot(Path(summary["run_dir"]))


def test_a_flipped_byte_in_a_copy_is_named(project: Path, tmp_path: Path) -> None:
    use_app(project, "oracle")
    summary = pilot(project)[1]
    result = invoke("copy-out", summary["run_dir"], tmp_path / "backup")
    assert result.exit_code == 0, result.output
    copy = tmp_path / "backup" / summary["run_id"]
    assert invoke("copy-out", copy, "--verify").exit_code == 0
    data = bytearray((copy / "results.jsonl").read_bytes())
    data[40] ^= 0x01
    (copy / "results.jsonl").write_bytes(bytes(data))
    result = invoke("copy-out", copy, "--verify")
    assert result.exit_code == 1
    assert result.stderr.startswith(f"Error: {copy}/results.jsonl: SHA-256 ")
    assert "differs from SHA256SUMS" in result.stderr


def test_a_source_changed_after_closing_is_caught_and_no_copy_is_left(
    project: Path, tmp_path: Path) -> None:
    use_app(project, "oracle")
    run_dir = Path(pilot(project)[1]["run_dir"])
    data = bytearray((run_dir / "summary.md").read_bytes())
    data[3] ^= 0x20
    (run_dir / "summary.md").write_bytes(bytes(data))
    result = invoke("copy-out", run_dir, tmp_path / "backup")
    assert result.exit_code == 1
    assert f"{tmp_path}/backup/{run_dir.name}/summary.md: SHA-256" in result.stderr
    assert not any((tmp_path / "backup").iterdir())


def test_copy_out_refuses_an_existing_destination(project: Path, tmp_path: Path) -> None:
    use_app(project, "oracle")
    run_dir = Path(pilot(project)[1]["run_dir"])
    (tmp_path / "backup" / run_dir.name).mkdir(parents=True)
    result = invoke("copy-out", run_dir, tmp_path / "backup")
    assert result.exit_code == 2
    assert "exists; choose another DEST" in result.stderr


# ---------------------------------------------------------------- accounting as a pure function


def test_accounting_counts_only_first_results_and_flags_expectations(project: Path) -> None:
    cfg = load_pilot(project)
    records = [{"id": f"doc-{n:02d}", "outcome": "accepted", "category": "invoice", "batch": 0}
               for n in range(1, 13)]
    result = account(cfg.documents, records, cfg.min_quality)
    assert (result.accepted, result.rejected) == (12, 0)
    assert "doc-12: expected a rejection, but accepted as invoice" in result.problems
    assert result.quality == pytest.approx(3 / 12)
    assert result.problems[-1].startswith("quality 0.250 < min_quality 0.9: misclassified doc-02 "
                                          "(contract -> invoice)")


def test_a_results_file_changed_during_the_run_is_read_back_and_judged(project: Path) -> None:
    """The harness keeps a running hash of what it appended; when the file on disk differs, the
    accounting is made from the file itself, so a line written by anything else is caught."""
    use_app(project, "tampers")
    code, summary, _ = pilot(project)
    assert code == 1
    assert any(p.startswith("doc-01: 2 results") for p in summary["problems"]), summary["problems"]


def passing_and_stopped(root: Path, passed: str, stopped: str) -> tuple[Path, Path]:
    """Two runs closed by the real pilot in a new project under ``root``: ``passed`` (the oracle app) and ``stopped``
    (an app that raises, stopped by max_rejected 0, with stop.json)."""
    from kdkit.project.init import init_project

    project = init_project(root / "proj", name="proj", backend="cpu")
    use_app(project, "oracle")
    assert pilot(project, "--run-id", passed)[0] == 0
    use_app(project, "raises", batch_size=2, stop={"max_rejected": 0, "max_seconds": None})
    assert pilot(project, "--run-id", stopped)[0] == 1
    return project / "runs" / passed, project / "runs" / stopped
