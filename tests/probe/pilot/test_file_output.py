"""The file output kind through the real pilot (issue 25, item 1): each item's files written by the app into its
out_dir, checked, hashed, moved into the run folder's outputs/ before the line that names them, listed in
SHA256SUMS, verified at close and copy-out, cut back on resume after a SIGKILL (every item's files exactly once).

Every run is real: a project scaffolded by `kdkit init`, its config declaring ``{"kind": "file"}``, a small app
written into its src/, `kdkit pilot` in-process (the app in its own process) or in a subprocess killed with SIGKILL.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from kdkit.core import outputfiles
from kdkit.core.runverify import read_run
from tests.conftest import REPO, invoke
from tests.probe.pilot.test_output_kinds import make_project, pilot, records, verified

FILE_APP = '''
import json, os

def _files(item, text):
    d = item["out_dir"]
    with open(os.path.join(d, "result.txt"), "w") as handle:
        handle.write(text.upper())
    os.mkdir(os.path.join(d, "sub"))
    with open(os.path.join(d, "sub", "meta.json"), "w") as handle:
        json.dump({"id": item["id"], "sha256": item["sha256"]}, handle)

def _answer(item):
    text, ident, d = item["text"].strip(), item["id"], item["out_dir"]
    if os.listdir(d):
        return {"id": ident, "error": "out_dir was not empty: " + repr(os.listdir(d))}
    if text.startswith("ERROR"):
        with open(os.path.join(d, "partial.bin"), "wb") as handle:
            handle.write(b"half")
        return {"id": ident, "error": "refused: " + text}
    if text.startswith("EMPTY"):
        return {"id": ident, "output": None}
    if text.startswith("LINK"):
        _files(item, text)
        os.symlink("/etc/hostname", os.path.join(d, "sub", "link"))
        return {"id": ident, "output": None}
    if text.startswith("STRAY"):
        _files(item, text)
        with open(os.path.join(os.path.dirname(os.path.dirname(d)), "side.txt"), "w") as handle:
            handle.write("written beside the outputs")
        return {"id": ident, "output": None}
    if text.startswith("INTO"):
        _files(item, text)
        with open(os.path.join(os.path.dirname(os.path.dirname(d)), "outputs", "extra.txt"), "w") as handle:
            handle.write("written into outputs/ directly")
        return {"id": ident, "output": None}
    if text.startswith("BIG"):
        with open(os.path.join(d, "big.bin"), "wb") as handle:
            handle.write(b"x" * 5000)
        return {"id": ident, "output": None}
    if text.startswith("CATEGORY"):
        return {"id": ident, "category": "x"}
    if text.startswith("BARE"):
        _files(item, text)
        return {"id": ident}
    _files(item, text)
    return {"id": ident, "output": {"chars": len(text)}}

def predict(items):
    if os.environ.get("SLOW_APP"):
        import time
        time.sleep(float(os.environ["SLOW_APP"]))
    if os.environ.get("RAISE_ON_BATCH") and len(items) > 1:
        for item in items:  # half a batch's files, then a raise: each item is retried from an empty out_dir
            _files(item, "first try")
        raise RuntimeError("the batch fails; items alone work")
    return [_answer(item) for item in items]
'''
FILE = {"kind": "file"}
DOCS: list[tuple[str, str, dict[str, Any]]] = [(f"f-{n:02d}", "x" * (n + 1), {}) for n in range(6)]


def make(project: Path, docs: list[tuple[str, str, dict[str, Any]]],
         output: dict[str, Any] | None = None,
         **config: Any) -> Path:
    make_project(project, output or FILE, "", docs, **config)
    (project / "src" / "kinds.py").write_text(FILE_APP)
    return project


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def expected_files(ident: str, text: str, input_sha: str) -> dict[str, bytes]:
    meta = json.dumps({"id": ident, "sha256": input_sha}).encode()
    return {"result.txt": text.upper().encode(), "sub/meta.json": meta}


def assert_kept_once(run_dir: Path, docs: list[tuple[str, str, dict[str, Any]]]) -> None:
    """Every accepted item's files in outputs/<id>/ exactly as its record lists them, nothing else there, each
    listed in SHA256SUMS; no staging folder left."""
    kept = records(run_dir)
    lines = (run_dir / "results.jsonl").read_text().splitlines()
    assert len(lines) == len(kept) == len(docs)
    sums = dict(reversed(line.split("  ", 1))
                for line in (run_dir / "SHA256SUMS").read_text().splitlines())
    on_disk = sorted(p.relative_to(run_dir).as_posix() for p in (run_dir / "outputs").rglob("*")
                     if p.is_file())
    listed = []
    for ident, text, _ in docs:
        record = kept[ident]
        assert record["outcome"] == "accepted", record
        assert record["folder"] == f"outputs/{ident}"
        want = expected_files(ident, text, record["sha256"])
        assert record["files"] == {name: sha(data) for name, data in want.items()}
        for name, data in want.items():
            assert (run_dir / "outputs" / ident / name).read_bytes() == data
            assert sums[f"outputs/{ident}/{name}"] == sha(data)
            listed.append(f"outputs/{ident}/{name}")
    assert on_disk == sorted(listed)
    assert not (run_dir / outputfiles.STAGING).exists()


# ---------------------------------------------------------------- accepted, rejected


def test_accepted_files_kept_hashed_listed_and_verified(project: Path, tmp_path: Path) -> None:
    make(project, DOCS)
    code, summary = pilot(project, "--copy-to", str(tmp_path / "copy"))
    assert code == 0, summary.get("problems")
    assert (summary["verdict"], summary["accepted"]) == ("pass", 6)
    run_dir = Path(summary["run_dir"])
    assert_kept_once(run_dir, DOCS)
    assert records(run_dir)["f-02"]["output"] == {"chars": 3}
    assert "outputs/f-00/sub/meta.json" in summary["files"]
    assert verified(run_dir) == [] and read_run(run_dir).verdict == "pass"
    copied = Path(summary["copy"]["path"])
    assert (copied / "outputs" / "f-05" / "result.txt").read_text() == "XXXXXX"
    assert invoke("copy-out", copied, "--verify").exit_code == 0
    params = json.loads((run_dir / "params.json").read_text())
    assert params["params"]["output"] == {"kind": "file"}


def test_copy_out_verify_catches_an_edited_a_missing_and_an_extra_output_file(
    project: Path) -> None:
    make(project, DOCS[:2])
    code, summary = pilot(project)
    run_dir = Path(summary["run_dir"])
    assert code == 0 and invoke("copy-out", run_dir, "--verify").exit_code == 0
    target = run_dir / "outputs" / "f-01" / "result.txt"
    before = target.read_bytes()
    target.write_bytes(b"edited")
    result = invoke("copy-out", run_dir, "--verify")
    assert result.exit_code == 1 and "outputs/f-01/result.txt" in result.output and "differs" in result.output
    target.unlink()
    result = invoke("copy-out", run_dir, "--verify")
    assert result.exit_code == 1 and "outputs/f-01/result.txt: missing" in result.output
    target.write_bytes(before)
    assert invoke("copy-out", run_dir, "--verify").exit_code == 0
    (run_dir / "outputs" / "f-00" / "added.txt").write_text("after the close")
    result = invoke("copy-out", run_dir, "--verify")
    assert result.exit_code == 1 and "outputs/f-00/added.txt: not listed in SHA256SUMS" in result.output
    assert read_run(run_dir).verdict == "unverified"


@pytest.mark.parametrize(("text", "reason"), [
    ("EMPTY", "the app wrote no file into its out_dir (an empty out_dir is a rejection)"),
    ("LINK", "out_dir holds a symbolic link 'sub/link'"),
    ("BIG", "out_dir holds more than max_bytes 4096 bytes"),
])
def test_an_out_dir_that_cannot_be_kept_is_that_items_rejection(
    project: Path, text: str, reason: str) -> None:
    docs = [*DOCS[:3], ("bad", text, {"expect": "reject"})]
    make(project, docs, {"kind": "file", "max_bytes": 4096})
    code, summary = pilot(project)
    run_dir = Path(summary["run_dir"])
    bad = records(run_dir)["bad"]
    assert (bad["outcome"],
            bad["by"]) == ("rejected", "harness") and bad["reason"].startswith(reason), bad
    assert "files" not in bad and not (run_dir / "outputs" / "bad").exists()
    assert code == 0 and summary["verdict"] == "pass", summary["problems"]  # a planned rejection
    assert sorted(p.name for p in (run_dir / "outputs").iterdir()) == ["f-00", "f-01", "f-02"]
    assert verified(run_dir) == []


def test_an_app_error_keeps_nothing_of_its_out_dir(project: Path) -> None:
    docs = [*DOCS[:2], ("err", "ERROR no", {"expect": "reject"})]
    make(project, docs)
    code, summary = pilot(project)
    run_dir = Path(summary["run_dir"])
    assert code == 0, summary["problems"]
    assert records(run_dir)["err"]["outcome"] == "rejected" and records(
        run_dir)["err"]["by"] == "app"
    assert not (run_dir / "outputs" / "err").exists() and verified(run_dir) == []
    assert "partial.bin" not in (run_dir / "SHA256SUMS").read_text()


def test_a_category_answer_is_invalid_for_the_file_kind(project: Path) -> None:
    make(project, [*DOCS[:1], ("cat", "CATEGORY", {})])
    code, summary = pilot(project)
    bad = records(Path(summary["run_dir"]))["cat"]
    assert code == 1 and bad["outcome"] == "invalid"
    assert bad["problem"].startswith(
        "the result has a category, but this run's output is files written into out_dir")


def test_a_batch_retried_item_by_item_starts_each_item_from_an_empty_out_dir(project: Path) -> None:
    make(project, DOCS[:4])
    os.environ["RAISE_ON_BATCH"] = "1"
    try:
        code, summary = pilot(project)
    finally:
        del os.environ["RAISE_ON_BATCH"]
    assert code == 0, summary["problems"]
    assert_kept_once(Path(summary["run_dir"]), DOCS[:4])


@pytest.mark.parametrize("text", ["STRAY", "INTO"])
def test_a_file_written_outside_its_out_dir_fails_the_run(project: Path, text: str) -> None:
    make(project, [*DOCS[:2], ("odd", text, {})])
    code, summary = pilot(project)
    assert code == 1 and summary["verdict"] == "fail"
    where = "side.txt" if text == "STRAY" else "outputs/extra.txt"
    assert any(p.startswith(where) for p in summary["problems"]), summary["problems"]
    assert where not in (Path(summary["run_dir"]) / "SHA256SUMS").read_text()


def test_folder_names_safe_ids_as_they_are_others_hashed() -> None:
    assert outputfiles.folder_name("doc-1.a") == "doc-1.a"
    odd = outputfiles.folder_name("a/../b c")
    assert odd == "_" + sha(b"a/../b c") and outputfiles.folder_name("_x").startswith("_") and len(
        odd) == 65


# ---------------------------------------------------------------- resume after a kill


def _kill_and_resume(project: Path, seed: int) -> None:
    """A pilot killed with SIGKILL after a seeded number of result lines, then resumed to its end."""
    env = {**os.environ, "SLOW_APP": "0.05"}
    rng = random.Random(seed)
    process = subprocess.Popen([sys.executable, "-m", "kdkit", "pilot", str(project), "--json",
                                "--quiet",
                                "--run-id", f"kill{seed}"], cwd=REPO, env=env,
                               stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    run_dir = project / "runs" / f"kill{seed}"
    wanted, deadline = rng.randint(0, 14), time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        results = run_dir / "results.jsonl"
        if results.exists() and results.read_bytes().count(b"\n") >= wanted:
            time.sleep(rng.random() * 0.05)
            break
        time.sleep(0.002)
    process.send_signal(signal.SIGKILL)
    process.wait()
    # killed before the run folder existed: start it again
    if not (run_dir / "params.json").exists():
        code, summary = pilot(project, "--run-id", f"kill{seed}")
    elif process.returncode != 0:
        code, summary = pilot(project, "--resume", f"kill{seed}")
    else:
        code, summary = 0, {}
    assert code == 0 and process.returncode in (0, -signal.SIGKILL), summary.get("problems")
    assert_kept_once(run_dir, SIXTEEN)
    assert verified(run_dir) == []


SIXTEEN: list[tuple[str, str, dict[str, Any]]] = [(f"f-{n:02d}", "x" * (n + 1), {})
                                                  for n in range(16)]


@pytest.mark.parametrize("seed", range(4))
def test_sigkill_then_resume_keeps_every_items_files_exactly_once(project: Path, seed: int) -> None:
    make(project, SIXTEEN)
    _kill_and_resume(project, seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4, 24))
def test_sigkill_at_twenty_more_seeded_points_keeps_files_once(project: Path, seed: int) -> None:
    make(project, SIXTEEN)
    _kill_and_resume(project, seed)


def test_folders_no_complete_line_names_are_cut_on_resume(project: Path) -> None:
    """What a kill between a batch's rename (done first) and its lines leaves: folders no line names, a torn
    batch, a half-staged folder. The resume removes them, redoes the items, and every item's files are kept once."""
    docs = [*DOCS[:4], ("stop", "ERROR stop here", {"expect": "reject"}), *DOCS[4:6]]
    make(project, docs, stop={"max_rejected": 0})
    code, summary = pilot(project, "--run-id", "torn")
    assert code == 1 and summary["stopped"]["rule"] == "max_rejected"
    run_dir = project / "runs" / "torn"
    (run_dir / "outputs" / "f-05").mkdir()  # an orphan folder: renamed, its line never written
    (run_dir / "outputs" / "f-05" / "result.txt").write_text("orphan")
    (run_dir / outputfiles.STAGING / "f-04").mkdir(parents=True)
    (run_dir / outputfiles.STAGING / "f-04" / "half.txt").write_text("half")
    lines = (run_dir / "results.jsonl").read_bytes().splitlines(keepends=True)
    (run_dir / "results.jsonl").write_bytes(b"".join(lines[:-1]))  # the last batch torn
    torn = json.loads(lines[-1])
    code, summary = pilot(project, "--resume", "torn")
    assert summary["stopped"]["rule"] == "max_rejected"
    kept = records(run_dir)
    on_disk = sorted(p.name for p in (run_dir / "outputs").iterdir())
    assert on_disk == sorted(i for i, r in kept.items() if r["outcome"] == "accepted")
    assert "f-05" not in on_disk and torn["id"] in kept
    assert not (run_dir / outputfiles.STAGING).exists() and verified(run_dir) == []


# ---------------------------------------------------------------- workers gathered


def test_workers_files_gathered_into_one_folder_each_item_once(project: Path) -> None:
    make(project, SIXTEEN)
    for worker in (0, 1):
        code, summary = pilot(project, "--run-id", "W", "--worker", str(worker), "--workers", "2")
        assert code == 0, summary.get("problems")
    folders = [project / "runs" / f"W-w{i}of2" for i in (0, 1)]
    owned = [sorted(p.name for p in (folder / "outputs").iterdir()) for folder in folders]
    assert owned[0] and owned[1] and not set(owned[0]) & set(owned[1])
    result = invoke("gather", *folders, "--json")
    summary = json.loads(result.stdout)
    assert result.exit_code == 0 and summary["verdict"] == "pass" and summary["outputs"] == 16, summary["problems"]
    out = Path(summary["out"])
    assert sorted(p.name
                  for p in (out / "outputs").iterdir()) == sorted(ident for ident, _, _ in SIXTEEN)
    sums = (out / "SHA256SUMS").read_text()
    for worker_dir in folders:
        for ident, record in records(worker_dir).items():
            for name, digest in record["files"].items():
                assert f"{digest}  outputs/{ident}/{name}\n" in sums
                assert (out / "outputs" / ident
                        / name).read_bytes() == (worker_dir / "outputs" / ident /
                                                                         name).read_bytes()
    assert invoke("copy-out", out, "--verify").exit_code == 0
    before = (out / "outputs" / "f-03" / "result.txt").read_bytes()
    (out / "outputs" / "f-03" / "result.txt").write_text("edited")
    result = invoke("copy-out", out, "--verify")
    assert result.exit_code == 1 and "outputs/f-03/result.txt" in result.output
    # an edited gathering is never replaced
    result = invoke("gather", *folders, "--json", "--force")
    assert result.exit_code == 2 and "does not match its own SHA256SUMS" in result.output
    (out / "outputs" / "f-03" / "result.txt").write_bytes(before)
    # the gathering as kdkit wrote it: replaced
    result = invoke("gather", *folders, "--json", "--force")
    assert result.exit_code == 0 and json.loads(result.stdout)["outputs"] == 16
    assert invoke("copy-out", out, "--verify").exit_code == 0


# ---------------------------------------------------------------- names SHA256SUMS cannot list

RECORD_APP = '''
import os

def predict(items):
    out = []
    for item in items:
        text = item["record"]["text"]
        name = "bad\\nname.txt" if text == "BADNAME" else "out.txt"
        with open(os.path.join(item["out_dir"], name), "w", encoding="utf-8") as handle:
            handle.write(item["id"])
        out.append({"id": item["id"], "output": None})
    return out
'''


def test_a_file_name_sha256sums_cannot_list_is_that_items_rejection(project: Path) -> None:
    """Over a JSONL corpus (records reach the app as dicts): a file named with a newline is refused by name."""
    idents = ["plain-1", "plain-2", "odd"]
    lines = [json.dumps({"id": ident, "text": "BADNAME" if ident == "odd" else "ok"})
             for ident in idents]
    (project / "data" / "corpus.jsonl").write_text("".join(line + "\n" for line in lines))
    (project / "src" / "records.py").write_text(RECORD_APP)
    (project / "config" / "pilot.json").write_text(json.dumps({
        "inputs": {"jsonl": "data/corpus.jsonl", "id": "id"}, "output": FILE,
        "entry": "src.records:predict",
        "batch_size": 2, "device": "cpu", "max_input_bytes": 4096, "runs": "runs",
        "stop": {"max_rejected": None}}))
    code, summary = pilot(project)
    run_dir = Path(summary["run_dir"])
    kept = records(run_dir)
    assert kept["plain-2"]["folder"] == "outputs/plain-2" and kept["plain-2"]["files"] == {
        "out.txt": sha(b"plain-2")}
    assert kept["odd"]["outcome"] == "rejected" and kept["odd"]["reason"].startswith(
        "out_dir holds a file named 'bad\\nname.txt'"), kept["odd"]
    # a full corpus expects nothing: a rejection with its reason
    assert code == 0 and summary["problems"] == []
    assert sorted(p.name for p in (run_dir / "outputs").iterdir()) == ["plain-1", "plain-2"]
    assert verified(run_dir) == [] and invoke("copy-out", run_dir, "--verify").exit_code == 0


def test_sweep_hands_a_file_kind_app_an_empty_out_dir_and_leaves_nothing(project: Path) -> None:
    """`kdkit sweep` calls a file-kind app as the pilot does (each item an empty out_dir of its own), times it,
    and keeps none of its files: nothing is left in runs/ but the sweep's own report."""
    make(project, DOCS)
    before = sorted(p.name for p in (project / "runs").iterdir())
    result = invoke("sweep", project, "--batch-sizes", "1,2", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ok"] is True and all(row["errors"] == 0 for row in report["rows"])
    left = sorted(p.name for p in (project / "runs").iterdir() if p.name not in before)
    assert all(name.startswith("sweep-") for name in left), left
    assert not list((project / "runs").rglob("result.txt"))


def test_an_answer_of_the_id_alone_keeps_the_files_it_wrote(project: Path) -> None:
    """For the file kind the files are the answer: {"id"} alone is accepted, as {"id", "output": null} is."""
    make(project, [("bare", "BARE files", {}), ("plain", "abc", {})])
    code, summary = pilot(project)
    assert code == 0 and summary["verdict"] == "pass", summary["problems"]
    kept = records(Path(summary["run_dir"]))
    assert kept["bare"]["outcome"] == "accepted" and "output" not in kept["bare"]
    assert sorted(kept["bare"]["files"]) == ["result.txt", "sub/meta.json"]
