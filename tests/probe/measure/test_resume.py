"""`kdkit resume-test`: the scaffold's loop resumes exactly; broken loops are caught and named."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from kdkit.probe.measure.resume import phase_env
from kdkit.probe.measure.states import differences, first_divergence, missing_parts
from tests.conftest import DATA, invoke, tree_snapshot

pytestmark = pytest.mark.slow


def _add_variant(project: Path, name: str) -> str:
    shutil.copyfile(DATA / "resume" / f"{name}.py", project / "src" / f"{name}.py")
    return f"src.{name}"


def _report(project: Path) -> dict[str, object]:
    (folder,) = sorted((project / "runs").glob("resume-test-*"))
    data: dict[str, object] = json.loads((folder / "report.json").read_text(encoding="utf-8"))
    return data


def test_scaffolded_loop_resumes_identically_on_cpu(project: Path) -> None:
    result = invoke("resume-test", project, "--steps", "6", "--save-at", "2", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ok"] is True
    assert report["device"] == "cpu" and report["tolerance"] is None
    assert report["losses"]["full"][2:] == report["losses"]["resumed"]
    assert report["missing"] == report["not_restored"] == report["final_differences"] == []
    assert report["checkpoint_bytes"] > 0 and report["save_seconds"] > 0 and report["restore_seconds"] > 0
    assert report["verdict"] == "resume from step 2 reproduces steps 2..6 in a new process (identical)"
    assert _report(project) == report


def test_loop_that_forgets_the_rng_is_caught_and_named(project: Path) -> None:
    module = _add_variant(project, "train_forgets_rng")
    result = invoke("resume-test", project, "--steps", "6", "--save-at", "2", "--module", module)
    assert result.exit_code == 1
    report = _report(project)
    assert report["not_restored"] == ["rng.python", "rng.torch"]
    assert report["missing"] == []
    assert report["first_divergent_step"] == 2
    assert result.stderr.splitlines()[-1] == (
        "Error: resume is not exact: losses differ from step 2; "
        "not restored after loading: rng.python, rng.torch"
    )


def test_loop_whose_checkpoint_lacks_the_scheduler_is_caught_and_named(project: Path) -> None:
    module = _add_variant(project, "train_forgets_scheduler")
    result = invoke("resume-test", project, "--steps", "6", "--save-at", "2",
                    "--module", module, "--json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["missing"] == ["scheduler"]
    assert report["not_restored"] == []
    assert "optimizer" in report["final_differences"] and "model" in report["final_differences"]
    assert "the checkpoint lacks scheduler" in result.stderr


def test_loop_that_crashes_on_resume_names_the_phase_and_error(project: Path) -> None:
    module = _add_variant(project, "train_crashes")
    result = invoke("resume-test", project, "--steps", "4", "--save-at", "2", "--module", module)
    assert result.exit_code == 1
    last = result.stderr.splitlines()[-1]
    assert last.startswith(
        f"Error: {module} (restore phase, exit 1): RuntimeError: cannot resume: ")
    assert last.endswith("restore/output.log)")


def test_every_phase_runs_with_the_thread_counts_fixed(project: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # a CPU run under load must not differ from one on an idle machine: MKL and OpenMP are told
    # not to drop threads, in every one of the four interpreters
    monkeypatch.delenv("MKL_DYNAMIC", raising=False)
    monkeypatch.delenv("OMP_DYNAMIC", raising=False)
    module = _add_variant(project, "train_wants_fixed_threads")
    result = invoke("resume-test", project, "--steps", "3", "--save-at", "1", "--module", module)
    assert result.exit_code == 0, result.output
    assert _report(project)["ok"] is True


def test_a_thread_setting_the_user_made_is_kept() -> None:
    env = phase_env({"MKL_DYNAMIC": "TRUE"})
    assert env["MKL_DYNAMIC"] == "TRUE" and env["OMP_DYNAMIC"] == "FALSE"
    assert env["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--save-at", "0"], "Error: --save-at 0: must be between 1 and --steps - 1 (7)\n"),
        (["--steps", "5", "--save-at", "5"],
         "Error: --save-at 5: must be between 1 and --steps - 1 (4)\n"),
        (["--steps", "1"],
         "Error: --steps 1: need at least 2 steps so a resume can happen in between\n"),
        (["--module", "src.nothing"], "train module 'src.nothing' not found"),
        (["--module", "src/train.py"],
         "Error: --module 'src/train.py': not a dotted module name (e.g. src.train)\n"),
    ],
)
def test_bad_input_exits_2_and_writes_nothing(project: Path, args: list[str], message: str) -> None:
    before = tree_snapshot(project)
    result = invoke("resume-test", project, *args)
    assert result.exit_code == 2
    assert message in result.stderr
    assert tree_snapshot(project) == before


def test_differences_name_paths_and_respect_the_gpu_tolerance() -> None:
    a = {"model": {"w": torch.ones(3)}, "scheduler": {"last_epoch": 3},
         "rng": {"torch": torch.zeros(2)}}
    b = {"model": {"w": torch.ones(3) + 1e-6}, "scheduler": {"last_epoch": 0},
         "rng": {"torch": torch.zeros(2)}}
    assert list(differences(a, b)) == ["model.w", "scheduler.last_epoch"]
    assert list(differences(a, b, gpu=True)) == ["scheduler.last_epoch"]


def test_missing_parts_include_rng_generators() -> None:
    state = {"step": 1, "data_position": 0, "model": {}, "optimizer": {}, "scaler": None,
             "rng": {"python": None, "torch": None}}
    assert missing_parts(state) == ["scheduler", "rng.cuda", "rng.numpy"]
    assert missing_parts([1, 2]) == ["step", "data_position", "model", "optimizer",
                                     "scheduler", "scaler", "rng"]


def test_first_divergence_counts_from_step_zero() -> None:
    assert first_divergence([1.0, 2.0], [1.0, 2.0], 3, gpu=False) is None
    assert first_divergence([1.0, 2.0], [1.0, 2.5], 3, gpu=False) == 4
    assert first_divergence([1.0, 2.0], [1.0], 3, gpu=False) == 4
