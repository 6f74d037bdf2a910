"""`kdkit resume-test --nproc-per-node N`: every phase under the real torchrun, the scaffold's loop in DDP
(gloo, 2 processes on the CPU); an elastic restart resumes from the run's last checkpoint; bad launches
are one line before anything is written.

Each torchrun costs seconds on the suite's 2 shared cores: steps stay few.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from kdkit.core.errors import BadInput, Unavailable
from kdkit.probe.measure.launch import check_gpus, usable_cpus
from kdkit.probe.measure.states import differences, load_folder, load_state
from tests.conftest import DATA, invoke, tree_snapshot

pytestmark = pytest.mark.slow

NPROC = "2"
STEPS = 6
# torch >= 2.5 lets the restarted workers share the rendezvous store with the last attempt, whose gloo
# addresses they then read and wait on (pytorch/pytorch#135712; torch 2.13 here still does): a restart
# needs this in torchrun's environment.
OWN_STORE = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def _report(project: Path) -> dict[str, Any]:
    (folder,) = sorted((project / "runs").glob("resume-test-*"))
    data: dict[str, Any] = json.loads((folder / "report.json").read_text(encoding="utf-8"))
    return data


def _add_variant(project: Path, name: str) -> str:
    shutil.copyfile(DATA / "resume" / f"{name}.py", project / "src" / f"{name}.py")
    return f"src.{name}"


# ---------------------------------------------------------------- kdkit resume-test --nproc-per-node


def test_scaffolded_loop_resumes_identically_under_torchrun(project: Path) -> None:
    result = invoke("resume-test", project, "--steps", "4", "--save-at", "2",
                    "--nproc-per-node", NPROC, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ok"] is True and report["nproc_per_node"] == 2
    assert report["device"] == "cpu" and report["tolerance"] is None
    assert report["losses"]["full"][2:] == report["losses"]["resumed"]
    assert report["missing"] == report["not_restored"] == report["final_differences"] == []
    assert report["verdict"] == ("resume from step 2 reproduces steps 2..4 in 2 new processes "
                                 "under torchrun (identical)")
    assert "full: torchrun --nproc-per-node 2 -m src.train (1/4)" in result.stderr
    out = Path(report["out"])
    assert (out / "full" / "output.log").read_text(encoding="utf-8").startswith(
        f"$ {sys.executable} -m torch.distributed.run --standalone --nproc-per-node 2 --log-dir "
        f"{out / 'full' / 'workers'} --tee 3 -m src.train --steps 4 ")
    # One checkpoint, written by rank 0, holding each rank's own generators: the ranks drew differently.
    saved = load_folder(out / "save" / "checkpoint")  # the Hugging Face Trainer layout, META kept
    assert saved["meta"]["processes"] == 2 and saved["step"] == 2
    first, second = saved["rng"]["torch"]
    assert not torch.equal(first, second)
    assert sorted(path.name
                  for path in (out / "save").iterdir()) == ["checkpoint", "metrics.json",
                                                            "output.log",
                                                                      "workers"]
    # each worker's own, kept by torchrun
    assert len(list((out / "save" / "workers").rglob("stderr.log"))) == 2


def test_ddp_loop_that_forgets_a_ranks_rng_is_caught_and_named(project: Path) -> None:
    module = _add_variant(project, "train_forgets_rng")
    result = invoke("resume-test", project, "--steps", "4", "--save-at", "2", "--module", module,
                    "--nproc-per-node", NPROC)
    assert result.exit_code == 1, result.output
    report = _report(project)
    assert report["not_restored"] == ["rng.python", "rng.torch"] and report["missing"] == []
    assert report["first_divergent_step"] == 2
    assert result.stderr.splitlines()[-1] == ("Error: resume is not exact: losses differ from step "
                                              "2; not restored after loading: rng.python, "
                                              "rng.torch")


def test_a_worker_that_fails_is_named_by_its_own_error_not_torchruns(project: Path) -> None:
    module = _add_variant(project, "train_crashes")
    result = invoke("resume-test", project, "--steps", "3", "--save-at", "1", "--module", module,
                    "--nproc-per-node", NPROC)
    assert result.exit_code == 1
    last = result.stderr.splitlines()[-1]
    assert last.startswith(f"Error: {module} (restore phase, exit 1): RuntimeError: cannot resume: "
                           "checkpoint format unknown (full output: "), last
    assert "ChildFailedError" in (_out(project) / "restore"
                                  / "output.log").read_text(encoding="utf-8")


def test_a_loop_that_ignores_torchrun_is_refused(project: Path) -> None:
    """N copies of a single-process loop agree with one another and prove nothing about DDP."""
    # rank 0 trains as if alone, the other ranks leave at once
    lone = project / "src" / "train_alone.py"
    lone.write_text("import os, sys\nif os.environ.pop('RANK') != '0':\n    sys.exit(0)\n"
                    "del os.environ['WORLD_SIZE']\nimport src.train as loop\n"
                    "if __name__ == '__main__':\n    sys.exit(loop.main())\n", encoding="utf-8")
    result = invoke("resume-test", project, "--steps", "3", "--save-at", "1", "--module",
                    "src.train_alone",
                    "--nproc-per-node", NPROC)
    assert result.exit_code == 1
    metrics = _out(project) / "full" / "metrics.json"
    assert result.stderr.splitlines()[-1] == (
        f"Error: {metrics}: \"processes\" is 1, not 2: the loop did not run as one job of 2 "
        "processes; it must join torchrun's group and write \"processes\" in its metrics (see the "
        "template's src/train.py)")


def test_without_the_option_each_phase_is_one_plain_process(project: Path) -> None:
    result = invoke("resume-test", project, "--steps", "3", "--save-at", "1", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["nproc_per_node"] is None
    assert report["verdict"] == "resume from step 1 reproduces steps 1..3 in a new process (identical)"
    log = (Path(report["out"]) / "resume" / "output.log").read_text(encoding="utf-8")
    assert log.startswith(
        f"$ {sys.executable} -m src.train --steps 3 ") and "torch.distributed" not in log
    saved = load_folder(Path(report["out"]) / "save" / "checkpoint")
    assert saved["meta"] == {"run_id": None, "processes": 1} and len(saved["rng"]["python"]) == 1


def _out(project: Path) -> Path:
    (folder,) = sorted((project / "runs").glob("resume-test-*"))
    return folder


# ---------------------------------------------------------------- an elastic restart


def torchrun(project: Path, *args: str,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real torchrun with 2 workers in ``project``; its whole process group is killed if it hangs."""
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
            NPROC, *args]
    child = subprocess.Popen(argv, cwd=project, env={**os.environ, **OWN_STORE, **(env or {})},
                             text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        stdout, stderr = child.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        raise
    return subprocess.CompletedProcess(argv, child.returncode, stdout, stderr)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The scaffold's loop, STEPS steps under torchrun without a crash: the reference state and losses."""
    from kdkit.project.init import init_project

    root = init_project(tmp_path_factory.mktemp("elastic") / "proj", name="proj", backend="cpu")
    done = torchrun(root, "-m", "src.train", "--steps", str(STEPS), "--checkpoint",
                    "runs/ref/state",
                    "--metrics", "runs/ref/metrics.json")
    assert done.returncode == 0, done.stderr
    return root / "runs/ref/state", json.loads(
        (root / "runs/ref/metrics.json").read_text(encoding="utf-8"))


def _crashed_once(
    project: Path, crash_at: int) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    done = torchrun(project, "--max-restarts", "1", "-m", "src.train", "--steps", str(STEPS),
                    "--save-every", "2",
                    "--checkpoint", "runs/elastic/state", "--metrics", "runs/elastic/metrics.json",
                    env={"KDKIT_TEST_CRASH_AT_STEP": str(crash_at)})
    assert done.returncode == 0, done.stderr
    metrics = json.loads((project / "runs/elastic/metrics.json").read_text(encoding="utf-8"))
    assert metrics["restart"] == 1  # written by the second attempt: the first one lost a worker
    return done, metrics


def test_an_elastic_restart_resumes_from_the_last_checkpoint(project: Path,
                                                              uninterrupted: tuple[Path,
                                                                                   dict[str,
                                                                                        Any]]) -> None:
    reference, expected = uninterrupted
    _done, metrics = _crashed_once(project, crash_at=3)
    # Killed after step 3, the checkpoint of step 2 is the last: the restart redoes step 3 onwards.
    assert metrics["start_step"] == 2 and metrics["restore_seconds"] is not None
    assert metrics["losses"] == expected["losses"][2:]
    assert list(
        differences(load_state(reference), load_state(project / "runs/elastic/state"))) == []


def test_an_elastic_restart_ignores_a_checkpoint_of_another_run(project: Path,
                                                                uninterrupted: tuple[Path,
                                                                                     dict[str,
                                                                                          Any]]) -> None:
    reference, expected = uninterrupted
    (project / "runs/elastic").mkdir(parents=True)
    # yesterday's run, finished at step STEPS
    shutil.copytree(reference, project / "runs/elastic/state")
    _done, metrics = _crashed_once(project, crash_at=1)
    # Killed before this run's first checkpoint: the restart starts afresh, not from the other run's state.
    assert metrics["start_step"] == 0 and metrics["restore_seconds"] is None
    assert metrics["losses"] == expected["losses"]
    assert list(
        differences(load_state(reference), load_state(project / "runs/elastic/state"))) == []


# ---------------------------------------------------------------- bad launches


def _refused(project: Path, *args: str) -> tuple[int, str]:
    before = tree_snapshot(project)
    result = invoke("resume-test", project, "--steps", "3", "--save-at", "1", *args)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert tree_snapshot(project) == before and list((project / "runs").iterdir()) == []
    return result.exit_code, lines[0]


@pytest.mark.parametrize(("value", "message"), [
    ("0", "Error: --nproc-per-node 0: needs at least 1 process; e.g. --nproc-per-node 2"),
    ("-2", "Error: --nproc-per-node -2: needs at least 1 process; e.g. --nproc-per-node 2"),
    ("two", "Error: --nproc-per-node 'two': not a number; e.g. --nproc-per-node 2"),
    ("1.5", "Error: --nproc-per-node '1.5': expected a whole number; e.g. --nproc-per-node 2"),
])
def test_a_count_that_is_not_a_number_of_processes_is_exit_2(
    project: Path, value: str, message: str) -> None:
    assert _refused(project, "--nproc-per-node", value) == (2, message)


def test_more_processes_than_cpus_is_exit_2(project: Path) -> None:
    cpus = usable_cpus()
    assert _refused(project, "--nproc-per-node", str(cpus + 1), "--device", "cpu") == (
        2,
        f"Error: --nproc-per-node {cpus + 1}: {cpus} CPU(s) are usable here and gloo on the CPU "
        f"runs one process per CPU; give at most {cpus}")


def test_one_gpu_for_every_process_is_exit_2(project: Path) -> None:
    assert _refused(project, "--nproc-per-node", NPROC, "--device", "cuda:0") == (
        2,
        "Error: --device cuda:0 with --nproc-per-node: each process takes cuda:LOCAL_RANK; give "
        "--device cuda (or auto)")


def test_a_gpu_device_where_torch_sees_none_is_exit_3(project: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("this host has a GPU")
    assert _refused(project, "--nproc-per-node", NPROC, "--device", "cuda") == (
        3,
        "Error: --device cuda: torch sees no GPU here; run where the GPU is (`kdkit diagnose` says "
        "why not) or use cpu")


def test_fewer_gpus_than_processes_is_bad_input() -> None:
    """The rule the probe's GPU count meets (this host may have no GPU to count)."""
    check_gpus("python3", 2, "cuda", 2, True, "2.13.0")
    with pytest.raises(BadInput,
                       match=r"^--nproc-per-node 4 with --device auto: torch sees 2 GPU\(s\) here "
                             r"and "
                             r"NCCL needs one per process; give at most 2, or --device cpu$"):
        check_gpus("python3", 4, "auto", 2, True, "2.13.0")
    with pytest.raises(Unavailable, match=r"^python3: torch 2\.13\.0 has no NCCL"):
        check_gpus("python3", 1, "cuda", 1, False, "2.13.0")


def test_an_interpreter_without_torchrun_is_exit_3_and_says_how_to_get_it(
    project: Path, tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)],
                   check=True, timeout=120)
    python = bare / "bin" / "python"
    code, line = _refused(project, "--nproc-per-node", NPROC, "--python", str(python))
    assert code == 3
    assert line == (f"Error: {python}: torchrun is missing (python -m torch.distributed.run: "
                    "ModuleNotFoundError: No module named 'torch'); it comes with torch: install "
                    "the project's torch in that environment (pip install torch) or give --python "
                    "the interpreter that has it")
