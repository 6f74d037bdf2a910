"""A file written anywhere else inside runs/ fails the run (issue 25, item 1, the file kind's promise, for every kind).

Real pilots of a scaffolded project: an app that writes beside its run folder, into the project's runs/
(``runs/sneaky.txt``, ``runs/side-vectors/vectors.jsonl``), or outside its out_dir into the staging folder
(``out_dir/../x``, which the harness removes at close), fails the run with the entry named; the run folders
kdkit itself makes there meanwhile (a sibling worker's, a sweep's) never fail it. The snapshot rule itself
(kdkit.core.runstrays) is checked entry by entry, a sibling's staging folder still in the making included.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kdkit.core import outputfiles, runstrays
from kdkit.core.staging import hold, release
from tests.conftest import REPO, invoke
from tests.probe.pilot.test_output_kinds import make_project, pilot, records, verified

STRAY_APP = '''
import os, time

def _runs(item):
    return os.path.dirname(os.path.dirname(os.path.dirname(item["out_dir"])))

def _wait(path):
    deadline = time.monotonic() + 60
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)

def _answer(item):
    text, ident, d = item["text"].strip(), item["id"], item["out_dir"]
    with open(os.path.join(d, "result.txt"), "w") as handle:
        handle.write(text.upper())
    if text.startswith("SNEAKY"):
        with open(os.path.join(_runs(item), "sneaky.txt"), "w") as handle:
            handle.write("beside the run")
    if text.startswith("SIDE"):
        os.makedirs(os.path.join(_runs(item), "side-vectors"), exist_ok=True)
        with open(os.path.join(_runs(item), "side-vectors", "vectors.jsonl"), "a") as handle:
            handle.write('{"id": "%s", "vector": [1.0]}\\n' % ident)
    if text.startswith("UP"):
        with open(os.path.join(d, "..", "x"), "w") as handle:
            handle.write("outside out_dir")
    return {"id": ident, "output": None}

def predict(items):
    if os.environ.get("STRAY_GATE"):
        _wait(os.environ["STRAY_GATE"])
    for path in filter(None, os.environ.get("STRAY_WAIT_FOR", "").split(os.pathsep)):
        _wait(path)
    if os.environ.get("SLOW_APP"):
        time.sleep(float(os.environ["SLOW_APP"]))
    return [_answer(item) for item in items]
'''
FILE = {"kind": "file"}
DOCS: list[tuple[str, str, dict[str, Any]]] = [(f"s-{n:02d}", "x" * (n + 1), {}) for n in range(4)]


def make(project: Path, docs: list[tuple[str, str, dict[str, Any]]]) -> Path:
    make_project(project, FILE, "", docs)
    (project / "src" / "kinds.py").write_text(STRAY_APP)
    return project


def failed_naming(project: Path, where: str) -> dict[str, Any]:
    """The pilot's summary, once it is checked to have failed, exit 1, with ``where`` named in one problem."""
    code, summary = pilot(project)
    assert code == 1 and summary["verdict"] == "fail", summary.get("problems")
    named = [p for p in summary["problems"] if p.startswith(f"{where}: ")]
    assert len(named) == 1 and "the run cannot pass" in named[0], summary["problems"]
    written = json.loads((Path(summary["run_dir"]) / "summary.json").read_text())
    assert written["verdict"] == "fail" and named[0] in written["problems"]
    assert where not in (Path(summary["run_dir"]) / "SHA256SUMS").read_text()
    return summary


# ---------------------------------------------------------------- written beside the run, into runs/


def test_a_normal_run_still_passes(project: Path) -> None:
    make(project, DOCS)
    code, summary = pilot(project)
    assert code == 0 and summary["verdict"] == "pass", summary["problems"]
    assert verified(Path(summary["run_dir"])) == []


def test_a_file_written_into_runs_beside_the_run_fails_it(project: Path) -> None:
    make(project, [*DOCS[:2], ("odd", "SNEAKY", {})])
    summary = failed_naming(project, "runs/sneaky.txt")
    assert "written into runs/ beside the run during this session" in " ".join(summary["problems"])
    # the item itself is fine
    assert records(Path(summary["run_dir"]))["odd"]["outcome"] == "accepted"
    # named, never removed or read
    assert (project / "runs" / "sneaky.txt").read_text() == "beside the run"


def test_a_folder_of_side_vectors_in_runs_fails_the_run(project: Path) -> None:
    make(project, [("a", "SIDE one", {}), *DOCS[:2], ("b", "SIDE two", {})])
    failed_naming(project, "runs/side-vectors")
    assert len((project / "runs" / "side-vectors" / "vectors.jsonl").read_text().splitlines()) == 2


def test_what_was_in_runs_before_the_run_does_not_matter(project: Path) -> None:
    make(project, DOCS)
    (project / "runs").mkdir(exist_ok=True)
    (project / "runs" / "notes.txt").write_text("the user's, from before")
    (project / "runs" / "old-side").mkdir()
    code, summary = pilot(project)
    assert code == 0 and summary["verdict"] == "pass", summary["problems"]


def test_a_file_written_outside_its_out_dir_into_staging_fails_the_run(project: Path) -> None:
    make(project, [*DOCS[:2], ("odd", "UP", {})])
    summary = failed_naming(project, f"{outputfiles.STAGING}/x")
    assert "written outside its item's out_dir" in " ".join(summary["problems"])
    # removed at close, once named
    assert not (Path(summary["run_dir"]) / outputfiles.STAGING).exists()


# ---------------------------------------------------------------- what kdkit makes there meanwhile


def _popen_pilot(project: Path, env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "kdkit", "pilot", str(project), "--json",
                             "--quiet", *args],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _finished(process: subprocess.Popen[bytes]) -> tuple[int, dict[str, Any]]:
    out, err = process.communicate(timeout=120)
    assert out.strip(), err.decode()
    return process.returncode, json.loads(out)


def test_two_workers_started_at_once_both_pass(project: Path) -> None:
    docs = [(f"w-{n:02d}", "x" * (n + 1), {}) for n in range(8)]
    make(project, docs)
    runs = project / "runs"
    both = os.pathsep.join(str(runs / f"W-w{i}of2" / "params.json") for i in (0, 1))
    # each app waits for its sibling's folder
    env = {**os.environ, "STRAY_WAIT_FOR": both, "SLOW_APP": "0.05"}
    workers = [_popen_pilot(project, env, "--run-id", "W", "--worker", str(i), "--workers", "2")
               for i in (0, 1)]
    for code, summary in map(_finished, workers):
        assert code == 0 and summary["verdict"] == "pass", summary["problems"]
    assert sorted(p.name for p in runs.iterdir()) == ["W-w0of2", "W-w1of2"]


def test_a_sweep_run_beside_the_pilot_does_not_fail_it(project: Path, tmp_path: Path) -> None:
    make(project, DOCS)
    gate = tmp_path / "gate"
    process = _popen_pilot(project, {**os.environ, "STRAY_GATE": str(gate)}, "--run-id", "P")
    try:
        deadline = time.monotonic() + 60
        while not (project / "runs" / "P" / "params.json").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        # its own folder, its scratch folder
        result = invoke("sweep", project, "--batch-sizes", "1,2", "--json")
        assert result.exit_code == 0, result.output
    finally:
        gate.touch()
    code, summary = _finished(process)
    assert code == 0 and summary["verdict"] == "pass", summary["problems"]
    assert any(p.name.startswith("sweep-") for p in (project / "runs").iterdir())


# ---------------------------------------------------------------- the rule, entry by entry


def test_the_snapshot_rule_entry_by_entry(tmp_path: Path) -> None:
    runs, root = tmp_path / "runs", tmp_path
    runs.mkdir()
    (runs / "before.txt").write_text("old")
    (runs / "replaced").mkdir()
    before = runstrays.snapshot(runs)
    assert runstrays.snapshot(tmp_path / "missing") == {}
    (runs / "replaced").rmdir()
    (runs / "replaced").write_text("a file now")  # same name, another entry
    (runs / "own").mkdir()
    for name, file in (("sibling-w1of2", "params.json"), ("R-gathered", "summary.json")):
        (runs / name).mkdir()
        (runs / name / file).write_text("{}")
    (runs / "sweep-20261203-221500").mkdir()
    (runs / "resume-test-20261203-221500-2").mkdir()
    (runs / ".kdkit-sweep-outputs-abc123").mkdir()
    (runs / f".sibling-w0of2.partial-{os.getpid()}").mkdir()  # in the making: its owner holds it
    owner = hold(runs / f".sibling-w0of2.partial-{os.getpid()}")
    (runs / ".gone.partial-999999999").mkdir()  # its owner is gone, nobody holds it
    (runs / "fake").mkdir()
    (runs / "fake" / "params.json").mkdir()  # not a regular file
    (runs / "params.json").write_text("{}")
    (runs / "link").symlink_to(runs / "sibling-w1of2")
    try:
        found = runstrays.strays(runs, before, "own", root)
    finally:
        release(owner)
    assert [p.split(":")[0] for p in found] == [f"runs/{n}"
                                                for n in (".gone.partial-999999999", "fake", "link",
                                                          "params.json", "replaced")]
    assert found[0].endswith("written into runs/ beside the run during this session; not part of "
                             "any run: the run cannot pass")


def test_staging_strays_spare_the_items_in_flight(tmp_path: Path) -> None:
    assert outputfiles.staging_strays(tmp_path, ["a"]) == []  # no staging folder
    staging = tmp_path / outputfiles.STAGING
    (staging / "a").mkdir(parents=True)
    (staging / "a" / "half.txt").write_text("in flight")
    (staging / "b").mkdir()
    (staging / "x").write_text("up")
    found = outputfiles.staging_strays(tmp_path, ["a", "x"])
    assert [p.split(":")[0]
            for p in found] == [f"{outputfiles.STAGING}/b", f"{outputfiles.STAGING}/x"]
