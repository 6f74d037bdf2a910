"""The template's loop (project-template/src/train.py) since issue 28: a checkpoint FOLDER in the Hugging Face
Trainer layout, the NaN guard, `--reload` in a new process, and the loop's side of `kdkit train`
(kdkit.core.trainapi: a report every step, checkpoints through the helper, resume from the one it names),
run here with the helper's environment set by hand; without kdkit importable the loop still runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from kdkit.probe.measure.states import differences, load_folder, load_state

pytestmark = pytest.mark.slow

HF_FILES = ["model.pt", "optimizer.pt", "rng_state.pth",
            "scaler.pt", "scheduler.pt", "trainer_state.json"]
HELPER_KEYS = {"step", "loss", "lr", "samples_per_s", "peak_memory_bytes", "at"}


def _loop(project: Path, *args: str, env: dict[str, str] | None = None,
          pass_fds: tuple[int, ...] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "src.train", "--device", "cpu", *args],
                          cwd=project, text=True,
                          capture_output=True, env={**os.environ, **(env or {})},
                          pass_fds=pass_fds, timeout=300)


def _under_helper(project: Path, run: Path, *args: str, resume: Path | None = None) -> tuple[
        subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """The loop as `kdkit train` starts it: KDKIT_TRAIN_RUN, the channel's descriptor, the checkpoint to resume."""
    run.mkdir(parents=True)
    read, write = os.pipe()
    env = {"KDKIT_TRAIN_RUN": str(run), "KDKIT_TRAIN_RUN_ID": run.name,
           "KDKIT_TRAIN_FD": str(write)}
    if resume is not None:
        env["KDKIT_TRAIN_RESUME"] = str(resume)
    try:
        done = _loop(project, *args, env=env, pass_fds=(write,))
    finally:
        os.close(write)
    with os.fdopen(read, encoding="utf-8") as channel:
        return done, [json.loads(line) for line in channel]


def test_the_checkpoint_is_a_trainer_folder_that_reloads_in_a_new_process(project: Path) -> None:
    done = _loop(project, "--steps", "2", "--lr", "0.01", "--checkpoint", "runs/a/ckpt")
    assert done.returncode == 0, done.stderr
    ckpt = project / "runs/a/ckpt"
    assert sorted(path.name for path in ckpt.iterdir()) == HF_FILES
    assert not list((project / "runs/a").glob(".ckpt*"))  # no staging left behind
    assert json.loads((ckpt / "trainer_state.json").read_text(encoding="utf-8"))["global_step"] == 2
    reload = _loop(project, "--reload", "runs/a/ckpt")
    assert reload.returncode == 0, reload.stderr
    assert reload.stdout == ("reload OK: runs/a/ckpt: step 2, model, optimizer, scheduler, scaler, "
                             "rng loaded into a new model; every number finite\n")
    # An older loop's single file of the same parts reloads too.
    torch.save(load_folder(ckpt), project / "runs/a/single.pt")
    assert _loop(project, "--reload", "runs/a/single.pt").returncode == 0


def test_a_checkpoint_that_cannot_be_reloaded_is_exit_1_in_one_line(project: Path) -> None:
    assert _loop(project, "--steps", "1", "--checkpoint", "runs/a/ckpt").returncode == 0
    ckpt = project / "runs/a/ckpt"
    model = torch.load(ckpt / "model.pt", weights_only=True)
    model["0.weight"][0, 0] = float("nan")
    torch.save(model, ckpt / "model.pt")
    failed = _loop(project, "--reload", "runs/a/ckpt")
    assert (failed.returncode, failed.stdout) == (1, "")
    assert failed.stderr == "reload FAILED: runs/a/ckpt: ValueError: not finite: model.0.weight\n"
    (ckpt / "optimizer.pt").unlink()
    failed = _loop(project, "--reload", "runs/a/ckpt")
    assert failed.returncode == 1 and failed.stderr.endswith(
        "ValueError: the checkpoint lacks optimizer\n")


def test_a_non_finite_loss_stops_the_loop_with_exit_4_and_no_checkpoint_of_it(
    project: Path) -> None:
    done = _loop(project, "--steps", "8", "--lr", "1e30", "--checkpoint", "runs/nan/ckpt",
                 "--metrics", "runs/nan/metrics.json")
    assert done.returncode == 4, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(
        "src.train: the loss is nan at step ") and "(non-finite): stopped" in line
    assert not (project / "runs/nan/ckpt").exists()
    metrics = json.loads((project / "runs/nan/metrics.json").read_text(encoding="utf-8"))
    assert metrics["stop"] == "nonfinite_loss" and metrics["end_step"] < 8


def test_a_bad_learning_rate_is_refused(project: Path) -> None:
    for value in ("nan", "-1", "0"):
        done = _loop(project, "--lr", value)
        assert done.returncode == 2 and "not a positive finite number" in done.stderr


def test_under_kdkit_train_it_reports_each_step_saves_through_the_helper_and_resumes_exactly(
    project: Path) -> None:
    done, lines = _under_helper(project, project / "runs/train-a", "--steps",
                                "4", "--save-every", "2")
    assert done.returncode == 0, done.stderr
    reports = [line["report"] for line in lines if "report" in line]
    assert [r["step"] for r in reports] == [1,
                                            2, 3, 4] and all(set(r) == HELPER_KEYS for r in reports)
    assert all(r["samples_per_s"] > 0 and r["peak_memory_bytes"] > 0 and r["lr"] > 0
               for r in reports)
    assert [line["checkpoint"]["name"] for line in lines
            if "checkpoint" in line] == ["step-00000002", "step-00000004"]
    checkpoints = project / "runs/train-a/checkpoints"
    assert sorted(p.name
                  for p in (checkpoints / "step-00000002").iterdir()) == sorted(
                      [*HF_FILES, "SHA256SUMS"])
    # A new session resumes from the checkpoint the supervisor names; it does not write that one again.
    done, lines = _under_helper(project, project / "runs/train-b", "--steps", "4", "--save-every",
                                "2",
                                resume=checkpoints / "step-00000002")
    assert done.returncode == 0, done.stderr
    resumed = [line["report"] for line in lines if "report" in line]
    assert [r["loss"] for r in resumed] == [r["loss"] for r in reports[2:]]
    assert sorted(p.name
                  for p in (project / "runs/train-b/checkpoints").iterdir()) == ["step-00000004"]
    assert list(differences(load_state(checkpoints / "step-00000004"),
                            load_state(project / "runs/train-b/checkpoints/step-00000004"))) == []


def test_without_kdkit_importable_the_loop_still_runs(project: Path, tmp_path: Path) -> None:
    # a kdkit without kdkit.core: the import fails
    (tmp_path / "shadow" / "kdkit").mkdir(parents=True)
    (tmp_path / "shadow" / "kdkit" / "__init__.py").write_text("", encoding="utf-8")
    done = _loop(project, "--steps", "1", "--checkpoint", "runs/a/ckpt",
                 env={"PYTHONPATH": str(tmp_path / "shadow"),
                      "KDKIT_TRAIN_RUN": str(tmp_path / "ignored")})
    assert done.returncode == 0, done.stderr
    assert (project / "runs/a/ckpt/model.pt").is_file() and not (tmp_path / "ignored").exists()
