"""`kdkit close` counts only runs that prove their pass (issue 24 §5): a run folder counts when it verifies
against its SHA256SUMS and holds every file a closed run holds (the check of `copy-out --verify`), names
itself, and holds results that add up to its summary. Forged, edited, linked or copied folders are
"unverified": no pass, no hours, one deviation naming the reason. A folder's own `kind` is never trusted; a
worker's share counts only with every share of its run, proven as `kdkit gather` proves them; a run of 1 of
the manifest's IDs is no output; the runs folder is the pilot's (a bad `$.runs` is exit 2); hours of folders
that do not verify are shown apart. Real runs are made by `kdkit pilot`.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kdkit.core.checksums import write_sums
from kdkit.core.runverify import read_run
from tests.conftest import invoke, reseal, tree_snapshot
from tests.probe.pilot.test_pilot import edit_config, pilot, use_app

FORGER = '''\
"""Answers correctly, and forges three passing sibling run folders while it runs (params, summary)."""
import json
from pathlib import Path

from src.oracle import predict as correct

RUNS = Path(__file__).resolve().parent.parent / "runs"


def predict(items):
    for n in range(3):
        folder = RUNS / f"20990101T00000{n}Z-f0rged{n}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "params.json").write_text(json.dumps({"run_id": folder.name, "params_hash": f"forged{n}"}))
        (folder / "summary.json").write_text(json.dumps({
            "run_id": folder.name, "kind": "pilot", "verdict": "pass", "total": 12, "accepted": 11,
            "rejected": 1, "problems": [], "timings": {"seconds": 3600}}))
    return correct(items)
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Runs closed by the real pilot: one that passes, one stopped by a stop rule, and a project whose app
    forged sibling folders during its (passing) pilot."""
    from kdkit.project.init import init_project

    project = init_project(tmp_path_factory.mktemp("made") / "proj", name="proj", backend="cpu")
    use_app(project, "oracle")
    assert pilot(project, "--run-id", "real")[0] == 0
    use_app(project, "raises", batch_size=2, stop={"max_rejected": 0, "max_seconds": None})
    assert pilot(project, "--run-id", "stopped")[0] == 1
    forging = init_project(tmp_path_factory.mktemp("forging") / "proj", name="proj", backend="cpu")
    use_app(forging, "oracle")
    (forging / "src" / "forger.py").write_text(FORGER)
    edit_config(forging, entry="src.forger:predict")
    code, summary, _ = pilot(forging, "--run-id", "real")
    # the app's own run is sound: the forgery is beside it
    assert code == 0 and summary["verdict"] == "pass"
    return {"real": project / "runs" / "real",
            "stopped": project / "runs" / "stopped", "forging": forging}


@pytest.fixture
def order(tmp_path: Path) -> Path:
    path = tmp_path / "order.json"
    result = invoke("plan", "--gpu", "RTX 4090", "--days", "3", "--lots", "1", "--price", "100",
                    "--hours", "10",
                    "--save", path)
    assert result.exit_code == 0, result.output
    return path


def _with(project: Path, *runs: Path) -> dict[str, Path]:
    """Copies of real runs in the project's runs/ (the originals stay as the pilot closed them)."""
    return {run.name: Path(shutil.copytree(run, project / "runs" / run.name, symlinks=True))
            for run in runs}


def _close(project: Path, order: Path) -> dict[str, Any]:
    before = tree_snapshot(project / "runs")
    result = invoke("close", project, "--order", order, "--json")
    assert result.exit_code == 0, result.output
    assert tree_snapshot(project / "runs") == before  # close reads runs/, never writes there
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def _unverified(report: dict[str, Any], run_id: str) -> str:
    """The one deviation naming ``run_id`` as unverified (and the run counted nowhere)."""
    row = {r["run_id"]: r for r in report["runs"]}[run_id]
    assert row["verdict"] == "unverified" and row["problems"]
    assert run_id not in report["accepted_outputs"]["counted_runs"]
    lines = [d for d in report["deviations"] if d.startswith(f"run {run_id} is unverified: ")]
    assert len(lines) == 1, report["deviations"]
    assert lines[0].endswith("counted neither as a pass nor in the observed hours")
    return lines[0]


def _seconds(run: Path) -> float:
    return float(json.loads((run / "summary.json").read_text())["timings"]["seconds"])


def test_a_real_pass_counts_once_at_the_whole_price(made: dict[str, Path],
                                                    project: Path, order: Path) -> None:
    runs = _with(project, made["real"], made["stopped"])
    report = _close(project, order)
    assert report["accepted_outputs"]["counted_runs"] == ["real"]
    assert report["cost"]["per_output_usd"] == "100.00"
    rows = {r["run_id"]: r for r in report["runs"]}
    assert rows["real"]["verdict"] == "pass" and rows["real"]["problems"] == []
    # closed by its stop: it verifies
    assert rows["stopped"]["verdict"] == "fail" and rows["stopped"]["stop_reason"]
    assert report["hours"]["observed"] == round((_seconds(runs["real"]) + _seconds(runs["stopped"]))
                                                / 3600, 2)
    assert not any("unverified" in d for d in report["deviations"])


def test_folders_an_app_forged_during_its_pilot_are_not_counted(
    made: dict[str, Path], order: Path) -> None:
    """The issue's case: before, 4 accepted outputs at 25.00 USD each; the forged folders have no SHA256SUMS."""
    forging = made["forging"]
    report = _close(forging, order)
    assert report["accepted_outputs"]["counted_runs"] == ["real"]
    assert report["cost"]["per_output_usd"] == "100.00"
    for n in range(3):
        line = _unverified(report, f"20990101T00000{n}Z-f0rged{n}")
        assert "SHA256SUMS: not found; the run was never closed" in line
    # not +3 h
    assert report["hours"]["observed"] == round(_seconds(forging / "runs" / "real") / 3600, 2)
    markdown = (forging / "reports" / "campaign-report.md").read_text()
    assert "| 20990101T000000Z-f0rged0 | forged0 | unverified |" in markdown


def _forge_sealed(project: Path, real: Path, name: str, drop: tuple[str, ...]) -> Path:
    """A forged folder with a self-consistent SHA256SUMS over what it holds, missing ``drop``."""
    folder = Path(shutil.copytree(real, project / "runs" / name))
    for file in ("params.json", "summary.json"):
        data = json.loads((folder / file).read_text())
        data["run_id"] = name
        (folder / file).write_text(json.dumps(data))
    for file in drop:
        (folder / file).unlink()
    (folder / "SHA256SUMS").unlink()
    write_sums(folder, [(p.name, p) for p in sorted(folder.iterdir())])
    return folder


@pytest.mark.parametrize("drop", [("env.json",), ("results.jsonl",), ("summary.md", "env.json")])
def test_a_sealed_forgery_missing_required_files_is_not_counted(made: dict[str, Path],
                                                                project: Path, order: Path,
                                                               drop: tuple[str, ...]) -> None:
    _forge_sealed(project, made["real"], "20990101T000000Z-sealed", drop)
    report = _close(project, order)
    line = _unverified(report, "20990101T000000Z-sealed")
    assert f"{drop[0]}: missing, and not listed in SHA256SUMS either" in line or \
        f"{drop[-1]}: missing, and not listed in SHA256SUMS either" in line
    assert report["accepted_outputs"]["count"] == 0


def _edit_json(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


EDITS: dict[str, Callable[[Path], None]] = {
    "params.json": lambda run: _edit_json(run / "params.json",
                                          lambda d: d["params"].update(batch_size=3)),
    "summary.json": lambda run: _edit_json(run / "summary.json",
                                           lambda d: d.update(accepted=12, rejected=0)),
    "results.jsonl": lambda run: (run / "results.jsonl").write_text(
        "".join((run / "results.jsonl").read_text().splitlines(keepends=True)[:-1])),
    "summary.md": lambda run: (run / "summary.md").write_text("# Pilot run real: PASS\n"),
}


@pytest.mark.parametrize("name", sorted(EDITS))
def test_a_real_run_edited_after_closing_is_not_counted(made: dict[str, Path], project: Path,
                                                        order: Path,
                                                       name: str) -> None:
    run = _with(project, made["real"])["real"]
    EDITS[name](run)
    assert invoke("copy-out", run, "--verify").exit_code == 1  # the same check copy-out makes
    line = _unverified(_close(project, order), "real")
    assert f"{run / name}: SHA-256 " in line and "differs from SHA256SUMS" in line


@pytest.mark.parametrize(("name", "said"), [
    ("params.json", "params.json: its params_hash is not the hash of its params (edited?)"),
    ("summary.json", "summary.json: says pass with 12 IDs (12 accepted, 0 rejected)"),
    ("results.jsonl", "summary.json: says pass with 12 IDs"),
])
def test_an_edit_covered_by_a_new_sha256sums_is_still_caught(made: dict[str, Path], project: Path,
                                                             order: Path,
                                                             name: str, said: str) -> None:
    """Someone who edits a closed run and rewrites SHA256SUMS over it: the folder verifies, but its parameters no
    longer hash to its params_hash, or its summary no longer adds up from its own results."""
    run = _with(project, made["real"])["real"]
    EDITS[name](run)
    reseal(run)
    # SHA256SUMS alone cannot see it; copy-out --verify's reload checks (kdkit.core.reloadcheck) see a summary or
    # results that no longer agree
    assert invoke("copy-out", run, "--verify").exit_code == (0 if name == "params.json" else 1)
    line = _unverified(_close(project, order), "real")
    assert said in line, line


@pytest.mark.parametrize("line", ["../outside.json", "/etc/passwd", "./params.json", "a/../../x"])
def test_sha256sums_naming_a_path_outside_the_folder_is_unverified(made: dict[str, Path],
                                                                   project: Path,
                                                                   order: Path, line: str) -> None:
    run = _with(project, made["real"])["real"]
    (project / "runs" / "outside.json").write_text("{}")
    with (run / "SHA256SUMS").open("a") as handle:
        handle.write(f"{'0' * 64}  {line}\n")
    reason = _unverified(_close(project, order), "real")
    assert "SHA256SUMS:" in reason and "malformed line" in reason


def test_a_listed_file_replaced_by_a_link_to_the_same_bytes_is_unverified(made: dict[str, Path],
                                                                          project: Path,
                                                                         order: Path,
                                                                          tmp_path: Path) -> None:
    run = _with(project, made["real"])["real"]
    elsewhere = tmp_path / "env.json"
    shutil.copy(run / "env.json", elsewhere)
    (run / "env.json").unlink()
    (run / "env.json").symlink_to(elsewhere)  # same bytes: the digest alone would match
    reason = _unverified(_close(project, order), "real")
    assert f"{run / 'env.json'}: a symbolic link (listed in SHA256SUMS), not a file of the run" in reason


def test_a_sha256sums_that_is_a_link_is_unverified(made: dict[str, Path], project: Path,
                                                   order: Path,
                                                   tmp_path: Path) -> None:
    run = _with(project, made["real"])["real"]
    elsewhere = tmp_path / "SHA256SUMS"
    shutil.copy(run / "SHA256SUMS", elsewhere)
    (run / "SHA256SUMS").unlink()
    (run / "SHA256SUMS").symlink_to(elsewhere)
    reason = _unverified(_close(project, order), "real")
    assert f"{run / 'SHA256SUMS'}: a symbolic link, not the folder's own SHA256SUMS" in reason


def test_an_unlisted_link_in_a_run_folder_is_unverified(made: dict[str, Path],
                                                        project: Path, order: Path) -> None:
    run = _with(project, made["real"])["real"]
    (run / "extra").symlink_to(run / "summary.json")
    reason = _unverified(_close(project, order), "real")
    assert f"{run / 'extra'}: a symbolic link, not listed in SHA256SUMS" in reason


def test_a_run_folder_that_links_to_another_run_counts_nothing(made: dict[str, Path], project: Path,
                                                               order: Path) -> None:
    run = _with(project, made["real"])["real"]
    os.symlink(run, project / "runs" / "real-again")
    report = _close(project, order)
    assert f"a symbolic link to {run}" in _unverified(report, "real-again")
    assert report["accepted_outputs"]["counted_runs"] == ["real"]
    # its hours once, not twice
    assert report["hours"]["observed"] == round(_seconds(run) / 3600, 2)


def test_a_copy_under_another_name_is_not_another_output(
    made: dict[str, Path], project: Path, order: Path) -> None:
    """A copy of a real run under a new folder name still names the run it is (params.json and summary.json
    carry the run ID): unverified. Renamed inside and resealed, it verifies, but it is the same configuration:
    counted once either way."""
    _with(project, made["real"])
    shutil.copytree(made["real"], project / "runs" / "zz-copy")
    report = _close(project, order)
    assert "params.json: names run 'real', not its folder 'zz-copy'" in _unverified(report,
                                                                                    "zz-copy")
    assert report["accepted_outputs"]["counted_runs"] == ["real"]
    shutil.rmtree(project / "runs" / "zz-copy")
    _forge_sealed(project, made["real"], "zz-copy", ())
    report = _close(project, order)
    assert report["accepted_outputs"]["counted_runs"] == ["real"]
    assert any(d.startswith("run zz-copy repeats the configuration of run real")
               for d in report["deviations"])


def test_an_open_run_proves_no_pass_and_keeps_its_old_place(made: dict[str, Path], project: Path,
                                                            order: Path) -> None:
    """A run reopened (by a resume) or killed before closing has no summary and no SHA256SUMS: listed as
    unfinished, as before; one killed between its summary and its SHA256SUMS is unverified, not a pass."""
    run = _with(project, made["real"])["real"]
    (run / "SHA256SUMS").unlink()
    assert read_run(run).verdict == "unverified"
    report = _close(project, order)
    assert "SHA256SUMS: not found" in _unverified(report, "real")
    (run / "summary.json").unlink()
    report = _close(project, order)
    assert {r["run_id"]: r["verdict"] for r in report["runs"]} == {"real": "incomplete"}
    assert "run real has no readable summary.json: unfinished or crashed; resume it or explain" in report["deviations"]
    assert report["accepted_outputs"]["count"] == 0


# ---------------------------------------------------------------- what a folder says of itself is never trusted


@pytest.fixture(scope="module")
def shares(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project whose runs/ holds the two shares of run R (R-w0of2, R-w1of2) and one share of four of run R3."""
    from kdkit.project.init import init_project

    project = init_project(tmp_path_factory.mktemp("shares") / "proj", name="proj", backend="cpu")
    use_app(project, "oracle")
    for args in (("0", "2", "R"), ("1", "2", "R"), ("0", "4", "R3")):
        code, summary, err = pilot(project, "--worker", args[0], "--workers", args[1], "--run-id",
                                   args[2])
        # each worker passes over its own share
        assert code == 0 and summary["verdict"] == "pass", err
    return project


@pytest.fixture
def runs_of(shares: Path, project: Path) -> Callable[..., None]:
    """Copy the named workers' folders into ``project``, which runs the same pilot config as they ran."""
    use_app(project, "oracle")

    def copy(*names: str) -> None:
        for name in names:
            shutil.copytree(shares / "runs" / name, project / "runs" / name, symlinks=True)
    return copy


@pytest.mark.parametrize("params", ["{}", None, '{"run_id": "R-gathered", "params_hash": "x"}'])
def test_a_forged_gathering_is_never_counted(project: Path, order: Path,
                                             params: str | None) -> None:
    """Before: a folder saying kind "gathered", verdict pass, with `{}` as params.json and a matching SHA256SUMS
    was 1 accepted output. A folder holding params.json is a pilot run whatever it says; one without is not a run."""
    folder = project / "runs" / "R-gathered"
    folder.mkdir(parents=True)
    summary = {"run_id": "R", "kind": "gathered", "verdict": "pass", "workers": 2, "total": 12,
               "accepted": 12,
               "rejected": 0, "problems": [], "timings": {"seconds": 3600}}
    files = {"summary.json": json.dumps(summary), "summary.md": "",
             **({"params.json": params} if params else {})}
    for name, text in files.items():
        (folder / name).write_text(text)
    write_sums(folder, [(name, folder / name) for name in files])
    report = _close(project, order)
    assert report["accepted_outputs"]["count"] == 0 and report["hours"]["observed"] is None
    if params is not None:
        assert "missing, and not listed in SHA256SUMS either" in _unverified(report, "R-gathered")
    else:
        assert report["runs"] == []


def test_the_shares_of_one_run_count_once_and_one_share_never(runs_of: Callable[..., None],
                                                              project: Path,
                                                              order: Path) -> None:
    """Before: R3-w0of4 (2 of 12 IDs) was 1 accepted output with no deviation."""
    runs_of("R3-w0of4")
    report = _close(project, order)
    assert report["accepted_outputs"]["count"] == 0
    assert "run R3: 1 of 4 shares closed and verified, not gathered" in report["deviations"]
    runs_of("R-w0of2")
    assert "run R: 1 of 2 shares closed and verified, not gathered" in _close(project,
                                                                              order)["deviations"]
    runs_of("R-w1of2")
    report = _close(project, order)
    assert report["accepted_outputs"]["counted_runs"] == [
        "R"] and report["cost"]["per_output_usd"] == "100.00"
    assert [g["verdict"] for g in report["gathered_runs"]] == ["pass", "incomplete"]


def test_a_share_edited_and_resealed_breaks_its_run(runs_of: Callable[..., None],
                                                    project: Path, order: Path) -> None:
    runs_of("R-w0of2", "R-w1of2")
    share = project / "runs" / "R-w1of2"
    EDITS["results.jsonl"](share)
    reseal(share)
    report = _close(project, order)
    assert report["accepted_outputs"]["count"] == 0
    assert any(d.startswith("run R: 1 of 2 shares closed and verified")
               for d in report["deviations"])


def test_a_run_of_one_id_of_the_manifest_is_not_an_output(
    made: dict[str, Path], project: Path, order: Path) -> None:
    """A sealed run of the project's manifest whose results and summary hold 1 of its 12 IDs."""
    run = _with(project, made["real"])["real"]
    (run
     / "results.jsonl").write_text((run / "results.jsonl").read_text().splitlines(keepends=True)[0])
    line = json.loads((run / "results.jsonl").read_text())
    _edit_json(run / "summary.json",
               lambda d: d.update(total=1, accepted=int(line["outcome"] != "rejected"),
                                   rejected=int(line["outcome"] == "rejected")))
    reseal(run)
    report = _close(project, order)
    assert report["accepted_outputs"]["count"] == 0
    assert "run real answered 1 ID(s) of the project's manifest, which holds 12: not counted as an accepted " \
           "output" in report["deviations"]


@pytest.mark.parametrize("runs", ["linkout", "../x", "/tmp", "a b", "linkout/sub"])
def test_a_runs_folder_the_pilot_refuses_is_bad_input(made: dict[str, Path], project: Path,
                                                      order: Path,
                                                      tmp_path: Path, runs: str) -> None:
    """Before: a runs value leading out of the project was followed (and a bad one fell back to runs/)."""
    outside = tmp_path / "outside"
    _with(outside, made["real"])
    (outside / "sub").mkdir()
    (project / "linkout").symlink_to(outside / "runs" if runs == "linkout" else outside)
    edit_config(project, runs=runs)
    before = tree_snapshot(project)
    result = invoke("close", project, "--order", order)
    assert result.exit_code == 2 and "$.runs" in result.output and "Traceback" not in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1
    assert tree_snapshot(project) == before and not (project / "reports").exists()


@pytest.mark.parametrize("stop", [None, {"reason": "killed"}])
def test_hours_of_a_folder_that_does_not_verify_are_shown_apart(made: dict[str, Path],
                                                                project: Path, order: Path,
                                                                stop: dict[str, str]
                                                                | None) -> None:
    """Before: an open folder's summary {"timings": {"seconds": 360000}} made observed 100 h more."""
    runs = _with(project, made["real"], made["stopped"])
    folder = project / "runs" / "20990101T000000Z-open"
    folder.mkdir()
    (folder / "params.json").write_text(json.dumps({"run_id": folder.name}))
    (folder / "summary.json").write_text(json.dumps({"timings": {"seconds": 360000}}))
    if stop:
        (folder / "stop.json").write_text(json.dumps(stop))
    report = _close(project, order)
    assert report["hours"]["observed"] == round((_seconds(runs["real"]) + _seconds(runs["stopped"]))
                                                / 3600, 2)
    assert report["hours"]["not_counted"] == 100.0
    assert "100.0 h in folders that do not verify (their summaries' timings), not counted" in report["deviations"]
    said = "stopped: killed" if stop else "was never closed (its summary.json has no verdict)"
    assert f"run {folder.name} {said}" in "\n".join(report["deviations"])


@pytest.mark.parametrize("target", ["campaign-report.md", "campaign-report.json"])
def test_out_with_a_link_writes_neither_report(project: Path, order: Path,
                                               tmp_path: Path, target: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / target).symlink_to(tmp_path / "elsewhere")
    before = tree_snapshot(tmp_path)
    result = invoke("close", project, "--order", order, "--out", out)
    assert result.exit_code == 2 and "a symbolic link" in result.output and target in result.output, result.output
    assert tree_snapshot(tmp_path) == before and sorted(p.name for p in out.iterdir()) == [target]
