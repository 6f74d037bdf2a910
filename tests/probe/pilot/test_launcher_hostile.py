"""What a hostile tester found in the launchers' round, each now refused in one line, with real processes.

- a second launch with the same run ID joined a worker folder another pilot was still writing (both wrote
  its results.jsonl): the folder is held by the pilot writing it, and a second one is refused;
- a worker its launcher started again found its folder finished and printed the old PASS although the
  app had changed since: a finished folder is reported only when it is the same run;
- `--run-id` did not win over a bad KDKIT_RUN_ID;
- a worker folder whose params.json names a run ID like "../../x" made gather write outside --from.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

from tests.conftest import tree_snapshot, wait_for_lines
from tests.machine.test_workers import use_oracle
from tests.probe.pilot.test_launcher_runs import env, gather_from, run

K8S = {"JOB_COMPLETION_INDEX": "1", "KDKIT_WORKERS": "2", "KDKIT_RUN_ID": "kdkit-pilot"}


def test_a_second_launch_never_writes_into_a_folder_another_pilot_holds(project: Path) -> None:
    use_oracle(project, "hangs", batch_size=2)
    first = subprocess.Popen(["kdkit", "pilot", str(project), "--quiet"],
                             env=env(HANG_ON="doc-09", **K8S),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    folder = project / "runs" / "kdkit-pilot-w1of2"
    try:
        # worker 1 hangs on doc-09, its folder open
        wait_for_lines(folder / "results.jsonl", 4, first)
        before = (folder / "results.jsonl").read_bytes()
        # the replacement pod, too early
        second = run(["kdkit", "pilot", str(project), "--quiet"], **K8S)
        assert second.returncode == 2, second.stderr
        assert second.stderr.strip().endswith(f"Error: {folder}: another pilot is writing this run "
                                              "folder right now; wait for it to end, or give this "
                                              "launch another run ID")
        assert (folder
                / "results.jsonl").read_bytes() == before and not (folder / "stop.json").exists()
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=120)
    # the first is gone: now it resumes
    again = run(["kdkit", "pilot", str(project), "--quiet"], **K8S)
    assert again.returncode == 0 and f"kdkit: {folder} exists: resuming it" in again.stderr, again.stderr


def test_a_finished_worker_is_reported_only_if_it_is_the_same_run(project: Path) -> None:
    for index in ("0", "1"):
        done = run(["kdkit", "pilot", str(project), "--quiet"],
                   **{**K8S, "JOB_COMPLETION_INDEX": index})
        assert done.returncode == 0, done.stderr
    again = run(["kdkit", "pilot", str(project), "--quiet"], **K8S)
    assert again.returncode == 0 and "is finished: nothing to do; its summary follows" in again.stderr
    app = project / "src" / "classify.py"
    app.write_text(app.read_text(encoding="utf-8")
                   + "\n# changed after the run\n", encoding="utf-8")
    before = tree_snapshot(project / "runs")
    changed = run(["kdkit", "pilot", str(project), "--quiet"], **K8S)
    assert changed.returncode == 2 and "the app's code changed since this run started (src/classify.py" in \
        changed.stderr and changed.stderr.strip().endswith("give this launch a new run ID "
                                                           "(KDKIT_RUN_ID, or the launcher's "
                                                           "job)"), changed.stderr
    assert tree_snapshot(project / "runs") == before


def test_run_id_wins_over_a_bad_one_in_the_environment(project: Path) -> None:
    done = run(["kdkit", "pilot", str(project), "--quiet", "--run-id", "good"],
               **{"RANK": "0", "WORLD_SIZE": "2", "KDKIT_RUN_ID": "../x"})
    assert done.returncode == 0, done.stderr
    assert (project / "runs" / "good-w0of2" / "SHA256SUMS").is_file()


def test_gather_never_writes_where_a_params_json_points(project: Path, tmp_path: Path) -> None:
    for index in ("0", "1"):
        assert run(["kdkit", "pilot", str(project), "--quiet"],
                   **{**K8S, "JOB_COMPLETION_INDEX": index}).returncode == 0
    copies = tmp_path / "a" / "b"
    for index in ("0", "1"):
        folder = copies / f"kdkit-pilot-w{index}of2"
        (folder.parent).mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["cp", "-r", str(project / "runs" / f"kdkit-pilot-w{index}of2"), str(folder)],
            check=(True))
        params = json.loads((folder / "params.json").read_text(encoding="utf-8"))
        params["run_id"] = f"../../ESCAPED-w{index}of2"
        (folder / "params.json").write_text(json.dumps(params), encoding="utf-8")
    before = tree_snapshot(tmp_path)
    code, _summary, stderr = gather_from("--from", copies, "--project", project)
    assert code == 2 and "$.run_id '../../ESCAPED-w" in stderr and "is not a run ID" in stderr, stderr
    assert tree_snapshot(tmp_path) == before and not list(tmp_path.glob("**/ESCAPED*"))


def test_a_run_id_is_checked_before_it_names_any_folder(project: Path, tmp_path: Path) -> None:
    # where runs/../../elsewhere-w0of2 would land: a finished-looking folder
    outside = tmp_path / "elsewhere-w0of2"
    outside.mkdir()
    (outside / "params.json").write_text("{}", encoding="utf-8")
    before = tree_snapshot(tmp_path)
    escaped = run(["kdkit", "pilot", str(project), "--quiet", "--run-id", "../../elsewhere"],
                  **{"RANK": "0", "WORLD_SIZE": "2"})
    assert escaped.returncode == 2 and escaped.stderr.strip().endswith(
        "Error: --run-id '../../elsewhere': not a valid run ID; use letters, digits, '.', '_' and "
        "'-' (first a letter or digit), at most 128"), escaped.stderr
    assert tree_snapshot(tmp_path) == before


def test_a_run_id_never_ends_like_a_workers_folder(project: Path) -> None:
    named = run(["kdkit", "pilot", str(project), "--quiet", "--run-id", "trial-w0of2"],
                **{"RANK": "0", "WORLD_SIZE": "2"})
    assert named.returncode == 2 and "--run-id 'trial-w0of2': ends like a worker's folder (-wIofN)" in named.stderr
    from_env = run(["kdkit", "pilot", str(project), "--quiet"],
                   **{**K8S, "KDKIT_RUN_ID": "trial-w1of2"})
    assert from_env.returncode == 2 and "KDKIT_RUN_ID='trial-w1of2': ends like a worker's folder" in from_env.stderr
    assert not (project / "runs").exists() or not any((project / "runs").iterdir())


def test_gather_from_skips_another_tools_params_json_and_finds_the_workers_below_it(project: Path,
                                                                                      tmp_path: Path) -> None:
    for index in ("0", "1"):
        assert run(["kdkit", "pilot", str(project), "--quiet"],
                   **{**K8S, "JOB_COMPLETION_INDEX": index}).returncode == 0
    copies = tmp_path / "copies"
    (copies / "checkpoints").mkdir(parents=True)
    # a model's, not kdkit's
    (copies / "checkpoints" / "params.json").write_text("[0.1, 0.2]", encoding="utf-8")
    (copies / "sweep").mkdir()
    (copies / "sweep" / "params.json").write_text('{"lr": 0.1}', encoding="utf-8")
    for index in ("0", "1"):  # one worker below the sweep's folder, one beside it
        where = copies / ("sweep" if index == "0" else "node1") / f"kdkit-pilot-w{index}of2"
        where.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["cp", "-r", str(project / "runs" / f"kdkit-pilot-w{index}of2"), str(where)],
            check=(True))
    code, summary, stderr = gather_from("--from", copies, "--project", project,
                                        "--out", tmp_path / "gathered")
    assert code == 0 and summary["verdict"] == "pass", stderr
    damaged = copies / "node1" / "kdkit-pilot-w1of2" / "params.json"
    # a worker's own params.json, damaged: named, never skipped
    damaged.write_text("[", encoding="utf-8")
    code, _summary, stderr = gather_from("--from", copies, "--project", project,
                                         "--out", tmp_path / "again")
    assert code == 2 and str(damaged) in stderr, stderr
    assert not (tmp_path / "again").exists()


def test_a_restart_that_finds_its_folder_finished_meanwhile_reports_it(project: Path) -> None:
    """The old pilot ends between the restarted worker's first look (unfinished: resume it) and its taking the
    folder over: the folder is finished by then, and it is reported as a finished folder is, never refused."""
    from kdkit.core.pilotconfig import load_pilot
    from kdkit.probe.pilot.command import open_run
    from kdkit.probe.pilot.launchers import resolve
    from kdkit.probe.pilot.shares import restrict

    assert run(["kdkit", "pilot", str(project), "--quiet"], **K8S).returncode == 0
    placed = resolve(K8S, None, None)
    assert placed.launched and placed.share is not None
    cfg = restrict(load_pilot(project), placed.share)
    before = tree_snapshot(project / "runs")
    # as continuing() chose
    run_folder, resumed = open_run(cfg, None, "kdkit-pilot", [], placed.share, placed)
    assert resumed is None and run_folder.path == project / "runs" / "kdkit-pilot-w1of2"
    assert tree_snapshot(project / "runs") == before
    run_folder.own()  # given back: the next pilot may take it
    run_folder.disown()
