"""`kdkit resume-test` with checkpoint folders (the Hugging Face Trainer layout, the template's since issue 28)
and with an older loop's single file; reading a folder: a part whose file is absent is missing (the scaler
excepted), a file its SHA256SUMS lists must be there, the Trainer's own generator files are understood."""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from pathlib import Path

import pytest
import torch

from kdkit.core.errors import CheckFailed
from kdkit.probe.measure.states import load_folder, load_state, missing_parts, state_bytes
from tests.conftest import invoke

LEGACY = Path(__file__).resolve().parents[2] / "data" / "legacy-project"
HF_FILES = ["model.pt", "optimizer.pt", "rng_state.pth",
            "scaler.pt", "scheduler.pt", "trainer_state.json"]


def _folder(path: Path, leave_out: str | None = None) -> Path:
    """A small checkpoint folder as the template writes it (generators as lists in rank order)."""
    path.mkdir(parents=True)
    parts = {"model.pt": {"w": torch.ones(2)}, "optimizer.pt": {"state": {}, "param_groups": []},
             "scheduler.pt": {"last_epoch": 3}, "scaler.pt": {},
             "rng_state.pth": {"python": [random.getstate()], "torch": [torch.get_rng_state()],
                               "cuda": [None],
                               "numpy": [None]}}
    for name, value in parts.items():
        if name != leave_out:
            torch.save(value, path / name)
    trainer = {"global_step": 3, "data_position": {"epoch": 0, "index": 3, "order": [0, 1, 2, 3]},
               "meta": {"run_id": None, "processes": 1}}
    (path / "trainer_state.json").write_text(json.dumps(trainer), encoding="utf-8")
    return path


@pytest.mark.slow
def test_the_template_checkpoint_is_a_trainer_folder_and_resumes_identically(project: Path) -> None:
    result = invoke("resume-test", project, "--steps", "3", "--save-at", "1", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ok"] is True and report["missing"] == []
    checkpoint = Path(report["checkpoint"])
    assert checkpoint.is_dir() and sorted(path.name for path in checkpoint.iterdir()) == HF_FILES
    assert report["checkpoint_bytes"] == state_bytes(checkpoint) > 0
    assert json.loads(
        (checkpoint / "trainer_state.json").read_text(encoding="utf-8"))["global_step"] == 1


@pytest.mark.slow
def test_an_older_loop_writing_one_file_still_resumes_exactly(tmp_path: Path) -> None:
    legacy = tmp_path / "legacy"
    # a project made by kdkit init before issue 28: its own single-file loop
    shutil.copytree(LEGACY, legacy)
    result = invoke("resume-test", legacy, "--steps", "3", "--save-at", "1",
                    "--device", "cpu", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ok"] is True and report["missing"] == []
    checkpoint = Path(report["checkpoint"])
    assert checkpoint.is_file() and report["checkpoint_bytes"] == checkpoint.stat().st_size


def test_a_folder_reads_as_the_single_files_dict(tmp_path: Path) -> None:
    state = load_state(_folder(tmp_path / "ckpt"))
    assert sorted(state) == ["data_position", "model", "optimizer", "rng",
                             "scaler", "scheduler", "step"]
    assert state["step"] == 3 and missing_parts(state) == []
    # kept apart, never compared
    assert load_folder(tmp_path / "ckpt")["meta"] == {"run_id": None, "processes": 1}


@pytest.mark.parametrize(("left_out", "missing"),
                         [("optimizer.pt", ["optimizer"]), ("scheduler.pt", ["scheduler"]),
                          ("rng_state.pth", ["rng"]), ("scaler.pt", [])])
def test_a_folder_missing_a_file_names_the_part(tmp_path: Path, left_out: str,
                                                missing: list[str]) -> None:
    state = load_state(_folder(tmp_path / "ckpt", leave_out=left_out))
    assert missing_parts(state) == missing
    # the Trainer writes it only with mixed precision: no scaler, not a lost one
    if left_out == "scaler.pt":
        assert state["scaler"] is None


def test_a_folder_without_its_trainer_state_lacks_the_step_and_position(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "ckpt")
    (folder / "trainer_state.json").unlink()
    assert missing_parts(load_state(folder)) == ["step", "data_position"]


def test_a_file_its_sha256sums_lists_must_be_there_unchanged(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "ckpt")
    (folder
     / "SHA256SUMS").write_text("".join(f"{hashlib.sha256((folder / n).read_bytes()).hexdigest()}  "
                                        f"{n}\n"
                                               for n in HF_FILES), encoding="utf-8")
    assert load_state(folder)["step"] == 3
    (folder / "optimizer.pt").unlink()
    with pytest.raises(CheckFailed, match=r"ckpt/optimizer.pt: listed in SHA256SUMS but missing"):
        load_state(folder)


def test_the_trainers_own_generator_files_are_understood(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "ckpt", leave_out="rng_state.pth")
    # one file per process, the CPU generator named "cpu", one process's states each
    for rank in (0, 1):
        torch.save({"python": random.getstate(), "cpu": torch.get_rng_state(),
                    "cuda": None, "numpy": None},
                   folder / f"rng_state_{rank}.pth")
    rng = load_state(folder)["rng"]
    assert sorted(rng) == ["cuda", "numpy", "python", "torch"] and len(rng["torch"]) == 2
    assert missing_parts(load_state(folder)) == []


def test_a_damaged_trainer_state_is_named(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "ckpt")
    (folder / "trainer_state.json").write_text("{", encoding="utf-8")
    with pytest.raises(CheckFailed, match=r"ckpt/trainer_state.json: not JSON"):
        load_state(folder)
