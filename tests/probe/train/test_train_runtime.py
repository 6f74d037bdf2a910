"""kdkit train: a training loop run as a run (issue 28 item 1): the run folder, the stop rules, a loop killed,
resume after a kill of kdkit train itself, a half-written checkpoint never chosen, reload, bad config.

The loop is a tiny deterministic one of this file's own (standard library only, through kdkit.core.trainapi):
gradient descent on (w - 3)^2, a checkpoint folder every --save-every steps, resumed from
trainapi.latest_checkpoint()."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from kdkit.core import checkpoints
from kdkit.core.checksums import read_sums
from kdkit.core.jsonio import sha256_file
from kdkit.core.runid import RunId
from kdkit.probe.train import command, params
from kdkit.probe.train.command import reopen
from kdkit.probe.train.supervise import Outcome, Supervisor

LOOP = (Path(__file__).resolve().parents[2] / "tiny_train_loop.py").read_text()


def make_project(root: Path, config: dict[str, Any] | None = None) -> Path:
    (root / "src").mkdir(parents=True)
    (root / "config").mkdir()
    (root / "src" / "__init__.py").write_text("")
    (root / "src" / "train.py").write_text(LOOP)
    (root / "kdkit.json").write_text(json.dumps({"name": "tp", "train": "src.train"}))
    if config is not None:
        (root / "config" / "train.json").write_text(json.dumps(config))
    return root


@pytest.fixture
def proj(tmp_path: Path) -> Path:
    return make_project(tmp_path / "p")


def train(root: Path, *args: str,
          env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kdkit", "train", *args], cwd=root,
                          capture_output=True, text=True,
                          timeout=120, env=env, check=False)


def start(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "kdkit", "train", *args], cwd=root, text=True,
                            env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def folder_of(root: Path, run_id: str) -> Path:
    return root / "runs" / run_id


def stop_of(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "stop.json").read_text())


def metrics(folder: Path) -> list[tuple[int, Any]]:
    lines = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in lines]


def final_w(folder: Path) -> float:
    summary = json.loads((folder / "summary.json").read_text())
    state = folder / "checkpoints" / summary["final_checkpoint"] / "trainer_state.json"
    return float(json.loads(state.read_text())["w"])


def assert_closed(folder: Path) -> None:
    sums = read_sums(folder, "run folder", "close it")
    for name, digest in sums.items():
        assert sha256_file(folder / name) == digest, name
    listed = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    assert listed - {"SHA256SUMS"} == set(sums)
    for _step, path in checkpoints.checkpoint_folders(folder / "checkpoints"):
        assert checkpoints.problem(path) is None


def test_a_run_is_recorded_closed_and_reloads(proj: Path) -> None:
    done = train(proj, "--run-id", "r1", "--", "--steps", "12", "--save-every", "5")
    assert done.returncode == 0, done.stderr
    folder = folder_of(proj, "r1")
    params = json.loads((folder / "params.json").read_text())
    assert params["kind"] == "train" and params["module"] == "src.train" and params["args"][:2] == [
        "--steps", "12"]
    assert params["code"]["src/train.py"] == sha256_file(proj / "src" / "train.py")
    assert [s for s, _ in metrics(folder)] == list(range(1, 13))
    names = [json.loads(line)["name"]
             for line in (folder / "checkpoints.jsonl").read_text().splitlines()]
    assert names == ["step-00000005", "step-00000010", "step-00000012"]
    assert stop_of(folder)["reason"] == "exit" and stop_of(folder)["run_id"] == "r1"
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["verdict"] == "pass" and summary["final_checkpoint"] == "step-00000012"
    assert summary["save"]["seconds_median"] is not None
    reload = json.loads((folder / "reload.json").read_text())
    assert reload["argv"][1:] == ["-m",
                                  "src.train", "--reload", "runs/r1/checkpoints/step-00000012"]
    assert "done w=" in (folder / "output.log").read_text()
    assert_closed(folder)
    checked = train(proj, "--verify-reload", "r1", "--json")
    assert checked.returncode == 0, checked.stderr
    record = json.loads((folder / "reload-check.json").read_text())
    assert record["ok"] and "reload OK: step 12" in record["output"]
    assert json.loads((folder / "summary.json").read_text())["reload"]["ok"] is True
    assert_closed(folder)


@pytest.mark.parametrize(("config", "args", "reason"), [
    (None, ["--nan-at", "3"], "nan_loss"),
    ({"stop": {"loss_above": {"value": 1.0, "after_steps": 2}}},
     ["--loss-scale", "100"], "loss_bound"),
    ({"stop": {"eval_below": {"metric": "accuracy", "value": 0.5}}},
     ["--accuracy", "0.2"], "eval_below"),
    ({"stop": {"max_checkpoint_gap_minutes": 0.005}},
     ["--save-every", "100000", "--sleep", "0.05"], "no_checkpoint"),
    ({"stop": {"max_seconds": 0.5}}, ["--sleep", "0.05"], "max_seconds"),
    (None, ["--kill-self-at", "7"], "killed"),
    (None, ["--break-checkpoint"], "checkpoint_incomplete"),
])
def test_stop_rules(tmp_path: Path, config: dict[str, Any] | None,
                    args: list[str], reason: str) -> None:
    root = make_project(tmp_path / "p", config)
    done = train(root, "--run-id", "s", "--json", "--", "--steps", "400", *args)
    assert done.returncode == 1, done.stderr
    folder = folder_of(root, "s")
    stop = stop_of(folder)
    assert stop["reason"] == reason and stop["run_id"] == "s"
    summary = json.loads(done.stdout)
    assert summary["stop"]["reason"] == reason and summary["verdict"] in ("stopped", "fail")
    if reason == "nan_loss":
        assert stop["step"] == 3 and (3, "NaN") in metrics(folder)
    if reason == "loss_bound":
        assert stop["step"] == 2
    assert_closed(folder) if reason != "checkpoint_incomplete" else None


def test_bad_train_config_is_one_line_exit_2_nothing_written(tmp_path: Path) -> None:
    for bad, place in [({"stop": {"max_seconds": "ten"}}, "$.stop.max_seconds"),
                       ({"stpo": {}}, "$.stpo"),
                       ({"stop": {"loss_above": {"value": 1e999}}}, "not a finite number")]:
        root = make_project(tmp_path / str(len(place)) / "p", None)
        (root / "config" / "train.json").write_text(json.dumps(bad).replace("Infinity", "1e999"))
        done = train(root)
        assert done.returncode == 2, done.stderr
        assert "train.json" in done.stderr and place in done.stderr and len(
            done.stderr.strip().splitlines()) == 1
        assert not (root / "runs").exists()


def wait_for(predicate: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def pids_gone(pid_file: Path) -> bool:
    if not pid_file.exists():
        return True
    for line in pid_file.read_text().split():
        try:
            os.kill(int(line), 0)
        except ProcessLookupError:
            continue
        return False
    return True


def reference(tmp_path: Path, *args: str) -> tuple[float, list[tuple[int, Any]]]:
    root = make_project(tmp_path / "reference", None)
    done = train(root, "--run-id", "ref", "--", *args)
    assert done.returncode == 0, done.stderr
    return final_w(folder_of(root, "ref")), metrics(folder_of(root, "ref"))


def test_resume_after_kdkit_train_is_killed(tmp_path: Path) -> None:
    args = ("--steps", "40", "--save-every", "5", "--sleep", "0.01")
    w, series = reference(tmp_path, *args)
    root = make_project(tmp_path / "p", None)
    env = {**os.environ, "TINY_PID_FILE": str(tmp_path / "pids")}
    process = start(root, "--run-id", "k", "--", *args, env=env)
    log = folder_of(root, "k") / "checkpoints.jsonl"
    wait_for(lambda: log.exists() and len(log.read_text().splitlines()) >= 2)
    process.send_signal(signal.SIGKILL)
    process.wait()
    wait_for(lambda: pids_gone(tmp_path / "pids"))
    assert not (folder_of(root, "k") / "summary.json").exists()
    done = train(root, "--resume", "k", "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["resumed_from"] is not None and summary["verdict"] == "pass"
    folder = folder_of(root, "k")
    assert final_w(folder) == w and metrics(folder) == series
    assert_closed(folder)


def status_of(root: Path, run_id: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "kdkit", "status", run_id, "--project",
                           str(root), "--json"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def test_status_of_a_training_running_killed_and_resumed(tmp_path: Path) -> None:
    """`kdkit status` reads a training run's heartbeat (its step, steps per second), calls it lost once its process
    is gone (naming --resume), and passed from its summary after the resume; the closed folder holds no heartbeat."""
    root = make_project(tmp_path / "p", None)
    env = {**os.environ, "TINY_PID_FILE": str(tmp_path / "pids")}
    process = start(root, "--run-id", "st", "--", "--steps", "60", "--save-every", "5", "--sleep",
                    "0.05", env=env)
    beat = folder_of(root, "st") / "heartbeat.json"
    wait_for(lambda: beat.exists() and json.loads(beat.read_text())["done"] >= 3)
    running = status_of(root, "st")
    assert running["state"] == "running" and running["kind"] == "train" and running["step"] >= 3
    process.send_signal(signal.SIGKILL)
    process.wait()
    wait_for(lambda: pids_gone(tmp_path / "pids"))
    lost = status_of(root, "st")
    assert lost["state"] == "lost" and "kdkit train --resume" in lost["reason"]
    done = train(root, "--resume", "st")
    assert done.returncode == 0, done.stderr
    closed = status_of(root, "st")
    assert (closed["state"], closed["verdict"], closed["reason"],
            closed["step"]) == ("passed", "pass", None, 60)
    assert not beat.exists()
    assert_closed(folder_of(root, "st"))


def _as_if_killed(folder: Path, args: tuple[str, ...], *gone: str) -> None:
    """A finished short run made to look like a longer one (``args``) whose session was killed
    before it wrote the files named in ``gone``."""
    params = json.loads((folder / "params.json").read_text())
    params["args"] = list(args)
    (folder / "params.json").write_text(json.dumps(params))
    for name in gone:
        (folder / name).unlink()


def test_half_written_checkpoint_is_never_chosen(tmp_path: Path) -> None:
    args = ("--steps", "20", "--save-every", "5")
    w, series = reference(tmp_path, *args)
    root = make_project(tmp_path / "p", None)
    assert train(root, "--run-id", "h", "--", "--steps", "10", "--save-every", "5").returncode == 0
    folder = folder_of(root, "h")
    # as if killed before it closed (a passed run is never resumed)
    _as_if_killed(folder, args, "summary.json")
    ckpts = folder / "checkpoints"
    torn = ckpts / ".step-00000015.partial-999999"  # a writer killed mid-save
    torn.mkdir()
    (torn / "model.pt").write_text("half")
    os.utime(torn, (0, 0))
    (ckpts / "step-00000010" / "model.pt").write_text("changed after it was sealed")
    nosums = ckpts / "step-00000012"
    nosums.mkdir()
    (nosums / "trainer_state.json").write_text(json.dumps({"global_step": 12, "w": 99.0}))
    done = train(root, "--resume", "h", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["resumed_from"] == "step-00000005"
    assert not torn.exists() and not nosums.exists()
    assert final_w(folder) == w and metrics(folder) == series
    assert (folder / "stop-1.json").exists()
    assert_closed(folder)


def _killed_mid_session(tmp_path: Path, config: dict[str, Any] | None,
                        last_read: int) -> tuple[Path, float, list[tuple[int, Any]]]:
    """A run of 20 steps (a checkpoint every 5) as ``kdkit train`` leaves it when it was SIGKILLed
    at step 10 while behind: no stop.json, no summary, metrics.jsonl read up to ``last_read`` and
    step-10's checkpoint message never read; with the uninterrupted run's final w and metrics."""
    args = ("--steps", "20", "--save-every", "5")
    reference_root = make_project(tmp_path / "reference", config)
    assert train(reference_root, "--run-id", "ref", "--", *args).returncode == 0
    w, series = final_w(folder_of(reference_root, "ref")), metrics(folder_of(reference_root, "ref"))
    root = make_project(tmp_path / "p", config)
    assert train(root, "--run-id", "g", "--", "--steps", "10", "--save-every", "5").returncode == 0
    folder = folder_of(root, "g")
    _as_if_killed(folder, args, "summary.json", "stop.json")
    for name, keep in (("metrics.jsonl", lambda r: r["step"] <= last_read),
                       ("checkpoints.jsonl", lambda r: r["name"] != "step-00000010")):
        lines = (folder / name).read_text().splitlines()
        (folder / name).write_text("".join(f"{line}\n" for line in lines if keep(json.loads(line))))
    return root, w, series


def test_a_checkpoint_saved_after_the_last_report_read_is_done_again(tmp_path: Path) -> None:
    # the loop reported steps 8-10 and saved step-10, but the session never read those lines:
    # resuming at step-10 would lose three reports for good
    root, w, series = _killed_mid_session(tmp_path, None, 7)
    done = train(root, "--resume", "g", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["resumed_from"] == "step-00000005"
    assert "removed step-00000010 (saved after step 7, the last report kdkit train read; its " \
           "steps run again)" in done.stderr
    folder = folder_of(root, "g")
    assert final_w(folder) == w and metrics(folder) == series
    assert_closed(folder)


def test_an_unrecorded_checkpoint_past_the_last_report_is_done_again_whatever_log_every(
        tmp_path: Path) -> None:
    # log_every 4: no scheduled report fell between step 8 and step-10, but a loss that is not
    # finite is sent at any step; only the steps since the last report read are safe to trust
    root, w, series = _killed_mid_session(tmp_path, {"log_every": 4}, 8)
    assert [step for step, _loss in series] == [4, 8, 12, 16, 20]
    done = train(root, "--resume", "g", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["resumed_from"] == "step-00000005"
    assert "removed step-00000010 (saved after step 8" in done.stderr
    folder = folder_of(root, "g")
    assert final_w(folder) == w and metrics(folder) == series
    assert_closed(folder)


def test_an_unread_off_schedule_nan_still_stops_the_resumed_run(tmp_path: Path) -> None:
    # the loop sent a NaN loss at step 5 (off log_every's schedule) and saved step-7, and kdkit
    # train was killed before it read either: the resumed run stops at step 5 as the whole one did
    config = {"log_every": 4}
    args = ("--steps", "12", "--save-every", "7", "--nan-at", "5")
    whole = make_project(tmp_path / "whole", config)
    assert train(whole, "--run-id", "w", "--", *args).returncode == 1
    root = make_project(tmp_path / "p", config)
    assert train(root, "--run-id", "n", "--", "--steps", "7", "--save-every", "7").returncode == 0
    folder = folder_of(root, "n")
    _as_if_killed(folder, args, "summary.json", "stop.json", "checkpoints.jsonl")
    lines = (folder / "metrics.jsonl").read_text().splitlines()
    (folder / "metrics.jsonl").write_text(
        "".join(f"{line}\n" for line in lines if json.loads(line)["step"] <= 4))
    done = train(root, "--resume", "n", "--json")
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["resumed_from"] is None
    assert stop_of(folder)["reason"] == stop_of(folder_of(whole, "w"))["reason"] == "nan_loss"
    # the stop comes at step 5; the loop may log a step or two more before its SIGTERM lands
    assert [step for step, _ in metrics(folder)][:2] == [4, 5]


def test_a_closed_session_read_every_report_so_its_newest_checkpoint_is_kept(
        tmp_path: Path) -> None:
    # stop.json says the session read the channel to its end (here the loop died after saving
    # step-10, before its message and step 10's report): no report waits unread, step-10 is kept
    root, w, _series = _killed_mid_session(tmp_path, None, 9)
    folder = folder_of(root, "g")
    (folder / "stop.json").write_text(json.dumps({"reason": "killed", "detail": "x", "step": 9}))
    done = train(root, "--resume", "g", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["resumed_from"] == "step-00000010"
    assert "removed" not in done.stderr and final_w(folder) == w
    assert_closed(folder)


def test_a_resume_holds_the_run_from_its_first_cut_to_its_session_so_a_second_is_refused(
        tmp_path: Path) -> None:
    # the reopen cuts metrics.jsonl and checkpoints.jsonl; it used to let go of the run's lock
    # before cutting, so a second --resume started at that moment cut the same files beside it
    root, _w, _series = _killed_mid_session(tmp_path, None, 7)
    folder = folder_of(root, "g")
    opened, _params, point, lock = reopen(root / "runs", RunId("g"))
    try:
        assert opened == folder and point is not None and point.name == "step-00000005"
        other = os.open(folder, os.O_RDONLY)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(other)
        cut = (folder / "metrics.jsonl").read_bytes()
        listed = (folder / "checkpoints.jsonl").read_bytes()
        done = train(root, "--resume", "g", "--json")
        assert done.returncode == 2 and "the run is still running" in done.stderr, done.stderr
        assert (folder / "metrics.jsonl").read_bytes() == cut
        assert (folder / "checkpoints.jsonl").read_bytes() == listed
        assert [json.loads(line)["name"] for line in listed.decode().splitlines()] == [
            "step-00000005"]
    finally:
        os.close(lock)


def _held_by_another(folder: Path) -> bool:
    """Whether some other open file holds the run folder's lock (a second open of it cannot)."""
    other = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(other)


def _train_watched(monkeypatch: pytest.MonkeyPatch, root: Path, module: Any,
                   *argv: str) -> tuple[Any, int, list[int], list[bool]]:
    """`kdkit train ARGV` in this process, the real loop running: (summary, exit code, the locks
    ``module.lock_run`` took, whether another file held the run's lock when the session began)."""
    taken: list[int] = []
    held: list[bool] = []
    lock_run, run = module.lock_run, Supervisor.run

    def counted(path: Path, wait_s: float = 0.0) -> int:
        taken.append(lock_run(path, wait_s))
        return taken[-1]

    def observed(self: Supervisor) -> Outcome:
        held.append(_held_by_another(self.folder))
        return run(self)

    monkeypatch.setattr(module, "lock_run", counted)
    monkeypatch.setattr(Supervisor, "run", observed)
    monkeypatch.chdir(root)
    args = command.build_parser().parse_args(list(argv))
    args.loop_args = []
    summary, code = command.train(args)
    return summary, code, taken, held


def test_a_resumed_session_runs_under_the_lock_its_reopen_took(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # one lock from the first cut to the session's end: never let go in between (the real loop runs)
    root, w, series = _killed_mid_session(tmp_path, None, 7)
    summary, code, taken, held = _train_watched(monkeypatch, root, command, "--resume", "g")
    assert (code, summary["resumed_from"]) == (0, "step-00000005")
    assert len(taken) == 1 and held == [True]
    folder = folder_of(root, "g")
    assert final_w(folder) == w and metrics(folder) == series


def test_a_new_run_writes_its_params_under_the_lock_its_session_then_runs_under(
        proj: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a --resume of this ID never finds params.json while the lock is free (the real loop runs)
    at_params: list[bool] = []
    write = params.atomic_write_json

    def written(path: Path, value: Any) -> None:
        at_params.append(_held_by_another(path.parent))
        write(path, value)

    monkeypatch.setattr(params, "atomic_write_json", written)
    summary, code, taken, held = _train_watched(monkeypatch, proj, params, "--run-id", "n")
    assert (code, summary["verdict"]) == (0, "pass")
    assert len(taken) == 1 and at_params == [True] and held == [True]
    assert_closed(folder_of(proj, "n"))


def test_a_rewrite_a_killed_resume_left_is_removed_and_the_run_still_verifies(
        tmp_path: Path) -> None:
    # a resume SIGKILLed while it rewrote checkpoints.jsonl leaves its temporary file beside it
    root, w, _series = _killed_mid_session(tmp_path, None, 7)
    folder = folder_of(root, "g")
    left = folder / ".checkpoints.jsonl.999999.x1y2.tmp"
    left.write_text('{"name": "step-00000005"}\n')
    os.utime(left, (0, 0))
    done = train(root, "--resume", "g", "--json")
    assert done.returncode == 0, done.stderr
    assert not left.exists() and f"removed {left}" in done.stderr
    assert final_w(folder) == w
    assert_closed(folder)


def test_a_linked_metrics_file_is_refused_before_the_folder_changes(tmp_path: Path) -> None:
    root, _w, _series = _killed_mid_session(tmp_path, None, 7)
    folder = folder_of(root, "g")
    (folder / "metrics.jsonl").rename(tmp_path / "elsewhere.jsonl")
    (folder / "metrics.jsonl").symlink_to(tmp_path / "elsewhere.jsonl")
    before = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))
    done = train(root, "--resume", "g", "--json")
    assert done.returncode == 2 and "metrics.jsonl: exists and is a symbolic link" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")) == before


def test_the_session_holds_the_run_until_its_last_file_is_written(
        proj: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a --resume waiting for the lock gets it only once summary.json says "pass": then it is refused
    at_close: list[bool] = []
    summarize, close = command.summarize, command.close

    def summarized(folder: Path, *rest: Any) -> Any:
        at_close.append(_held_by_another(folder))
        return summarize(folder, *rest)

    def closed(folder: Path, *rest: Any) -> None:
        close(folder, *rest)
        at_close.append(_held_by_another(folder))

    monkeypatch.setattr(command, "summarize", summarized)
    monkeypatch.setattr(command, "close", closed)
    summary, code, taken, held = _train_watched(monkeypatch, proj, params, "--run-id", "n")
    assert (code, summary["verdict"]) == (0, "pass")
    assert len(taken) == 1 and held == [True] and at_close == [True, True]
    assert not _held_by_another(folder_of(proj, "n"))  # let go once the command ends
    done = train(proj, "--resume", "n")
    assert done.returncode == 2 and "the run finished" in done.stderr, done.stderr


def test_a_params_file_without_its_loop_is_refused_before_the_folder_changes(
        tmp_path: Path) -> None:
    root, _w, _series = _killed_mid_session(tmp_path, None, 7)
    folder = folder_of(root, "g")
    written = json.loads((folder / "params.json").read_text())
    del written["module"]
    (folder / "params.json").write_text(json.dumps(written))
    before = {p.relative_to(folder).as_posix(): p.read_bytes()
              for p in folder.rglob("*") if p.is_file()}
    done = train(root, "--resume", "g")
    assert done.returncode == 2 and "params.json: not as kdkit train writes it" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in folder.rglob("*") if p.is_file()} == before


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except OSError:
        return 0


def crash_trial(root: Path, tmp: Path, run_id: str, steps: int,
                args: tuple[str, ...]) -> str | None:
    """Start `kdkit train`, SIGKILL it once ``steps`` steps are in metrics.jsonl (0: at once), wait for its loop
    to be gone, then resume until it ends; the checkpoint each resume chose (None when the kill came before the
    run folder was usable). The kill point is counted in steps, never in seconds: a loaded machine only slows
    the loop, it does not move the kill before the first checkpoint."""
    pids = tmp / f"{run_id}.pids"
    env = {**os.environ, "TINY_PID_FILE": str(pids)}
    process = start(root, "--run-id", run_id, "--", *args, env=env)
    if steps > 0:  # a kill while the loop runs; 0: at once, perhaps before the run folder exists
        log = folder_of(root, run_id) / "metrics.jsonl"
        wait_for(lambda: _lines(log) >= steps or process.poll() is not None)
    process.send_signal(signal.SIGKILL)
    process.wait()
    wait_for(lambda: pids_gone(pids))
    folder = folder_of(root, run_id)
    if not (folder / "params.json").exists():  # killed before the run existed: start it again
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
        assert train(root, "--run-id", run_id, "--", *args).returncode == 0
        return None
    if (folder / "summary.json").exists():  # it had ended before the kill
        return "ended"
    done = train(root, "--resume", run_id, "--json")
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["resumed_from"])


def test_crash_at_seeded_random_points_resumes_to_the_uninterrupted_result(tmp_path: Path) -> None:
    import random

    args = ("--steps", "30", "--save-every", "3", "--sleep", "0.006")
    w, series = reference(tmp_path, *args)
    root = make_project(tmp_path / "p", None)
    chance = random.Random(28)
    chosen = []
    for trial in range(20):
        run_id = f"c{trial}"
        chosen.append(
            crash_trial(root, tmp_path, run_id,
                        0 if trial % 7 == 0 else chance.randint(1, 29), args))
        folder = folder_of(root, run_id)
        assert final_w(folder) == w, trial
        assert metrics(folder) == series, trial
        assert not [p for p in (folder / "checkpoints").iterdir() if p.name.startswith(".")]
        assert_closed(folder)
    resumed = [c for c in chosen if c is not None and c.startswith("step-")]
    assert len(resumed) >= 10, chosen  # most kills landed mid-run, after a checkpoint


def test_save_interval_measured_and_transfer_timed(tmp_path: Path) -> None:
    config = {"max_lost_minutes": 0.002, "max_save_share": 0.01,
              "base_model": {"name": "org/base", "revision": "main"}}
    root = make_project(tmp_path / "p", config)
    dest = tmp_path / "dest"
    dest.mkdir()
    done = train(root, "--run-id", "sv", "--json", "--copy-to", str(dest), "--",
                 "--steps", "60", "--save-every", "30", "--sleep", "0.005")
    assert done.returncode == 0, done.stderr
    save = json.loads(done.stdout)["save"]
    assert save["saves"] == 2 and save["seconds_median"] > 0 and 0 < save["share"] < 1
    assert save["recommended_every_steps"] is not None and save["recommended_every_steps"] < 30
    assert "too rarely" in save["warning"] and "max_save_share" in save["warning"]
    assert save["transfer"]["seconds"] is not None, save["transfer"]
    assert (dest / "step-00000060" / "model.pt").is_file()
    params = json.loads((folder_of(root, "sv") / "params.json").read_text())
    assert params["base_model"] == {"name": "org/base", "revision": "main"}


def test_a_signal_to_kdkit_train_stops_the_loop_and_closes_the_run(
    proj: Path, tmp_path: Path) -> None:
    env = {**os.environ, "TINY_PID_FILE": str(tmp_path / "pids")}
    process = subprocess.Popen([sys.executable, "-m", "kdkit", "train", "--run-id", "sg", "--",
                                "--steps", "100000",
                                "--sleep", "0.01"], cwd=proj, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    log = folder_of(proj, "sg") / "metrics.jsonl"
    wait_for(lambda: log.exists() and log.stat().st_size > 0)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 128 + signal.SIGTERM
    assert pids_gone(tmp_path / "pids")
    folder = folder_of(proj, "sg")
    assert stop_of(folder)["reason"] == "signal" and "SIGTERM" in stop_of(folder)["detail"]
    assert_closed(folder)


def test_a_closed_training_run_verifies_as_a_run_folder(proj: Path) -> None:
    from kdkit.core.runfolder import folder_kind
    from kdkit.core.runverify import closed_problems

    assert train(proj, "--run-id", "v", "--", "--steps", "6", "--save-every", "3").returncode == 0
    folder = folder_of(proj, "v")
    params = json.loads((folder / "params.json").read_text())
    summary = json.loads((folder / "summary.json").read_text())
    assert folder_kind(folder, summary) == "train"
    assert closed_problems(folder, params, summary) == []
    (folder / "checkpoints" / "step-00000003" / "model.pt").write_text("tampered")
    assert closed_problems(folder, params, summary)


def test_log_every_keeps_every_nth_step_and_any_nan(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", {"log_every": 4})
    done = train(root, "--run-id", "le", "--", "--steps", "12", "--nan-at", "7")
    assert done.returncode == 1
    steps = [step for step, _loss in metrics(folder_of(root, "le"))]
    # the loop may log on till stopped
    assert steps[:2] == [4, 7] and all(step % 4 == 0 for step in steps[2:])
    assert (7, "NaN") in metrics(folder_of(root, "le"))


def template_project(root: Path) -> Path:
    """`kdkit init`'s project (its pilot config, manifest and data) with this file's tiny loop as its src/train.py."""
    from kdkit.project.init import init_project

    project = init_project(root, name="tt", backend="cpu")
    (project / "src" / "train.py").write_text(LOOP, encoding="utf-8")
    return project


def test_params_record_the_data_as_the_pilot_records_it(tmp_path: Path) -> None:
    project = template_project(tmp_path / "p")
    done = train(project, "--run-id", "d", "--", "--steps", "3")
    assert done.returncode == 0, done.stderr
    params = json.loads((folder_of(project, "d") / "params.json").read_text())
    manifest = project / "data" / "pilot" / "manifest.json"
    assert params["data"] == {"inputs": "data/pilot", "manifest": "data/pilot/manifest.json",
                              "manifest_sha256": sha256_file(manifest)}
    assert params["model"] is None and params["code"]["src/train.py"] == sha256_file(
        project / "src" / "train.py")


def test_a_pilot_config_that_does_not_load_is_one_line_exit_2_nothing_written(
    tmp_path: Path) -> None:
    project = template_project(tmp_path / "p")
    (project / "config" / "pilot.json").write_text('{"inputs": "data/pilot",', encoding="utf-8")
    done = train(project, "--run-id", "bad", "--", "--steps", "3")
    assert done.returncode == 2
    assert done.stderr.count(
        "\n") == 1 and "config/pilot.json" in done.stderr and "Traceback" not in done.stderr
    assert not (project / "runs" / "bad").exists()


def memory_cgroup(tmp_path: Path, limit: int) -> Path | None:
    """A memory cgroup of this test's own with ``limit`` bytes (v1's memory controller, else v2's), or None when
    this machine does not let us make one."""
    for parent, limit_file in ((Path("/sys/fs/cgroup/memory"), "memory.limit_in_bytes"),
                               (Path("/sys/fs/cgroup"), "memory.max")):
        if not (parent / "cgroup.procs").is_file() \
                or (limit_file == "memory.max" and "memory" not in
                                                       (parent
                                                        / "cgroup.controllers").read_text(errors="replace")):
            continue
        group = parent / f"kdkit-oom-{os.getpid()}-{tmp_path.name}"
        try:
            group.mkdir()
            (group / limit_file).write_text(str(limit))
            if (group / "memory.swap.max").exists():
                (group / "memory.swap.max").write_text("0")
            return group
        except OSError:
            if group.is_dir():
                group.rmdir()
    return None


def test_a_loop_killed_by_the_oom_killer_stops_with_reason_oom(tmp_path: Path, proj: Path) -> None:
    """For real: kdkit train in a memory cgroup of 300 MB, the loop taking memory at step 3; the kernel's OOM killer
    ends it, and the run stops with reason "oom" (the cgroup's oom_kill count rose), closed and resumable."""
    group = memory_cgroup(tmp_path, 300 << 20)
    if group is None:
        pytest.skip(
            "no memory cgroup can be made here (needs root and cgroup v1's memory or v2's memory "
            "controller)")
    try:
        done = subprocess.run(["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(group),
                               sys.executable,
                               "-m", "kdkit", "train", "--run-id", "oom", "--", "--steps",
                               "6", "--hog-at", "3"],
                              cwd=proj, capture_output=True, text=True, timeout=300, check=False)
    finally:
        wait_for(lambda: not (group / "cgroup.procs").read_text().strip())
        group.rmdir()
    folder = folder_of(proj, "oom")
    assert done.returncode == 1, done.stderr
    assert stop_of(folder)["reason"] == "oom", stop_of(folder)
    assert json.loads((folder / "summary.json").read_text())["verdict"] == "fail"
    assert_closed(folder)


def test_verify_reload_refuses_a_run_changed_after_closing(proj: Path) -> None:
    """A checkpoint byte changed after the run closed: --verify-reload is exit 1 naming the file, and the folder is
    not re-sealed over the change (copy-out still sees it)."""
    assert train(proj, "--run-id", "t", "--", "--steps", "4", "--save-every", "2").returncode == 0
    folder = folder_of(proj, "t")
    model = folder / "checkpoints" / "step-00000004" / "model.pt"
    model.write_bytes(model.read_bytes() + b"x")
    sums = (folder / "SHA256SUMS").read_bytes()
    done = train(proj, "--verify-reload", "t")
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "model.pt" in done.stderr and "Traceback" not in done.stderr
    assert (folder
            / "SHA256SUMS").read_bytes() == sums and not (folder / "reload-check.json").exists()


@pytest.mark.parametrize(("args", "said"), [
    (("--resume", "f"), "the run finished (summary.json: pass at step 3); nothing to resume"),
    (("--run-id", "g", "--resume", "f"), "--run-id with --resume: a resumed run keeps its ID"),
    (("--run-id", ""), "--run-id"),
])
def test_resume_of_a_finished_run_and_odd_ids_are_refused(
    proj: Path, args: tuple[str, ...], said: str) -> None:
    assert train(proj, "--run-id", "f", "--", "--steps", "3").returncode == 0
    before = sorted(p.relative_to(proj).as_posix() for p in (proj / "runs").rglob("*"))
    done = train(proj, *args)
    assert done.returncode == 2 and done.stderr.count(
        "\n") == 1 and said in done.stderr, done.stderr
    assert sorted(p.relative_to(proj).as_posix() for p in (proj / "runs").rglob("*")) == before
