"""Real runs under launchers: `torchrun --no-python kdkit pilot` (2 and 3 processes, a rank killed and resumed
alone, a group restarted by torchrun), a Kubernetes pod retried, two SkyPilot-style nodes that each run one
worker per GPU, and `kdkit gather --from` over folders copied back in any layout.

torchrun is the real one (it comes with torch in the dev environment). The project's pilot runs on CPU
(the oracle app); the launchers that cannot run here (Slurm, Kubernetes, SkyPilot, dstack) are given their
documented variables by the test, exactly as they set them.
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

from tests.conftest import invoke, tree_snapshot, wait_for_lines
from tests.machine.test_workers import SHARE_1_OF_2, TWELVE, ids, use_oracle

BIN = Path(sys.executable).parent
TORCHRUN = BIN / "torchrun"
pytestmark = pytest.mark.skipif(not TORCHRUN.exists() or not (BIN / "kdkit").exists(),
                                reason=(
                                    f"torchrun and kdkit are not in {BIN} (pip install -r "
                                    "requirements/dev.txt)"))


def env(**extra: str) -> dict[str, str]:
    """This environment (the suite's: no launcher variables), kdkit and torchrun first on PATH."""
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **extra}


def torchrun(project: Path, nproc: int, *args: str, restarts: int = 0, **extra: str) -> list[str]:
    return [str(TORCHRUN), "--standalone", "--nproc-per-node", str(nproc), "--max-restarts",
            str(restarts),
            "--no-python", "kdkit", "pilot", str(project), "--quiet", *args]


def run(argv: list[str], **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env(**extra), capture_output=True, text=True, timeout=300)


def gather_from(*args: str | Path) -> tuple[int, dict[str, Any], str]:
    result = invoke("gather", *args, "--json")
    return (result.exit_code,
            json.loads(result.stdout) if result.stdout.strip() else {}, result.stderr)


def exactly_once(folders: list[Path]) -> None:
    assert sum((ids(folder) for folder in folders), Counter()) == Counter(TWELVE)


def rank_process(launcher: int, rank: int) -> int:
    """The pid of torchrun's worker of ``rank``: its direct child whose environment says RANK=rank."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            environ = dict(item.split("=", 1)
                           for item in (entry / "environ").read_text().split("\0") if "=" in item)
        except (OSError, IndexError, ValueError):
            continue
        if ppid == launcher and environ.get("RANK") == str(rank):
            return int(entry.name)
    raise AssertionError(f"no worker of rank {rank} under torchrun {launcher}")


# ---------------------------------------------------------------- torchrun


@pytest.mark.parametrize("nproc", [2, 3])
def test_torchrun_workers_each_write_their_share_and_the_gathering_proves_every_id_once(project: Path,
                                                                                        nproc: int) -> None:
    use_oracle(project)
    started = time.monotonic()
    # no --run-id: torchrun's TORCHELASTIC_RUN_ID names the run
    done = run(torchrun(project, nproc))
    seconds = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    folders = sorted((project / "runs").iterdir())
    run_id = folders[0].name.rsplit("-w", 1)[0]
    assert [f.name for f in folders] == [f"{run_id}-w{i}of{nproc}" for i in range(nproc)]
    for i, folder in enumerate(folders):
        assert f"kdkit: share {i} of {nproc} from torchrun (RANK={i}, WORLD_SIZE={nproc}); keeps " \
               f"CUDA_VISIBLE_DEVICES={i}" in done.stderr
        launcher = json.loads((folder / "params.json").read_text())["launcher"]
        assert launcher["from"] == "torchrun" and launcher["variables"]["TORCHELASTIC_RUN_ID"] == run_id
        assert set(launcher["variables"]) == {"RANK", "WORLD_SIZE", "LOCAL_RANK",
                                              "LOCAL_WORLD_SIZE",
                                              "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT"}
        assert launcher["visible_devices"] == f"CUDA_VISIBLE_DEVICES={i}"
    exactly_once(folders)
    code, summary, _ = gather_from("--from", project / "runs", "--project", project)
    assert (code, summary["verdict"], summary["total"],
            summary["workers"]) == (0, "pass", 12, nproc)
    assert Path(summary["out"]) == project / "runs" / f"{run_id}-gathered"
    print(f"torchrun --nproc-per-node {nproc}: {seconds:.1f} s")


def test_a_rank_killed_mid_run_and_resumed_alone_leaves_the_gathering_exact(project: Path) -> None:
    use_oracle(project, "hangs", batch_size=2)
    group = subprocess.Popen(torchrun(project, 2, "--run-id", "R"), env=env(HANG_ON="doc-09"),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    w0, w1 = project / "runs" / "R-w0of2", project / "runs" / "R-w1of2"
    wait_for_lines(w1 / "results.jsonl", 4, group)  # doc-01, 04 | 05, 06 | then it hangs on doc-09
    deadline = time.monotonic() + 120
    while not (w0 / "SHA256SUMS").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    os.kill(rank_process(group.pid, 1), signal.SIGKILL)
    group.communicate(timeout=120)
    assert group.returncode != 0  # torchrun reports its failed worker
    code, summary, _ = gather_from(w0, w1)
    assert code == 1 and summary["problems"][0].startswith(f"{w1}: not closed (no SHA256SUMS)")

    # Rank 1 alone, with the variables the launcher gave it and --resume: the run finishes exactly once.
    alone = run(["kdkit", "pilot", str(project), "--quiet", "--resume", "R"],
                RANK="1", WORLD_SIZE="2")
    assert alone.returncode == 0, alone.stderr
    assert alone.stderr.startswith("kdkit: share 1 of 2 from torchrun (RANK=1, WORLD_SIZE=2)")
    assert ids(w1) == Counter(SHARE_1_OF_2)
    code, summary, _ = gather_from(w0, w1, "--force")
    assert (code, summary["verdict"], summary["total"]) == (0, "pass", 12)
    exactly_once([w0, w1])


def test_a_group_torchrun_restarts_continues_its_run_folders(project: Path) -> None:
    use_oracle(project, "stalls", batch_size=2)
    group = subprocess.Popen(torchrun(project, 2, "--run-id", "R", restarts=1),
                             env=env(HANG_ON="doc-09"),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    w0, w1 = project / "runs" / "R-w0of2", project / "runs" / "R-w1of2"
    wait_for_lines(w1 / "results.jsonl", 4, group)  # type: ignore[arg-type]
    deadline = time.monotonic() + 120
    while not (w0 / "SHA256SUMS").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    closed = tree_snapshot(w0)
    os.kill(rank_process(group.pid, 1), signal.SIGKILL)
    _, err = group.communicate(timeout=180)
    assert group.returncode == 0, err
    assert f"kdkit: {w0} is finished (restart 1): nothing to do; its summary follows" in err
    assert f"kdkit: {w1} exists (restart 1): resuming it" in err
    assert tree_snapshot(w0) == closed  # a finished worker is never rewritten
    code, summary, _ = gather_from(w0, w1)
    assert (code, summary["verdict"]) == (0, "pass")
    exactly_once([w0, w1])


# ---------------------------------------------------------------- a Kubernetes pod retried


def test_a_retried_pod_resumes_its_index_and_a_finished_one_is_left_as_it_is(project: Path) -> None:
    use_oracle(project, "hangs", batch_size=2)
    pod = {"KDKIT_WORKERS": "2", "KDKIT_RUN_ID": "kdkit-pilot"}
    first = subprocess.Popen(["kdkit", "pilot", str(project), "--quiet"],
                             env=env(JOB_COMPLETION_INDEX="1",
                             HANG_ON="doc-09", **pod), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    w1 = project / "runs" / "kdkit-pilot-w1of2"
    wait_for_lines(w1 / "results.jsonl", 4, first)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    retried = run(["kdkit", "pilot", str(project), "--quiet"], JOB_COMPLETION_INDEX="1", **pod)
    assert retried.returncode == 0, retried.stderr
    assert f"kdkit: {w1} exists: resuming it" in retried.stderr
    closed = tree_snapshot(w1)
    again = run(["kdkit", "pilot", str(project), "--quiet", "--json"],
                JOB_COMPLETION_INDEX="1", **pod)
    assert again.returncode == 0 and json.loads(again.stdout)["verdict"] == "pass"
    assert f"kdkit: {w1} is finished: nothing to do; its summary follows" in again.stderr
    assert tree_snapshot(w1) == closed
    assert run(["kdkit", "pilot", str(project), "--quiet"],
               JOB_COMPLETION_INDEX="0", **pod).returncode == 0
    code, summary, _ = gather_from("--from", project / "runs", "--run-id", "kdkit-pilot")
    assert (code, summary["verdict"], summary["total"]) == (0, "pass", 12)


# ---------------------------------------------------------------- nodes of several GPUs, copied back


def node(project: Path, rank: int, nodes: int = 2, gpus: int = 2,
         task: str = "sky-task_1") -> dict[str, Any]:
    """One SkyPilot node's `kdkit pilot`: the variables SkyPilot sets, one process for the node."""
    done = run(["kdkit", "pilot", str(project), "--quiet", "--json"], SKYPILOT_NODE_RANK=str(rank),
               SKYPILOT_NUM_NODES=str(nodes), SKYPILOT_NUM_GPUS_PER_NODE=str(gpus),
               SKYPILOT_TASK_ID=task,
               SKYPILOT_NODE_IPS="10.0.0.1\n10.0.0.2")
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    report["stderr"] = done.stderr
    return report


@pytest.fixture
def machines(project: Path, tmp_path: Path) -> list[Path]:
    """Two machines: two copies of one project (the same revision), each a node of its own."""
    use_oracle(project)
    other = Path(shutil.copytree(project, tmp_path / "machine-b"))
    return [project, other]


def test_each_gpu_of_each_node_answers_one_share_and_copies_gather_from_any_layout(machines: list[Path],
                                                                                  tmp_path: Path) -> None:
    reports = [node(machine, rank) for rank, machine in enumerate(machines)]
    assert reports[1]["stderr"].startswith(
        "kdkit: shares 2..3 of 4 from skypilot (SKYPILOT_NODE_RANK=1, SKYPILOT_NUM_NODES=2, "
        "SKYPILOT_NUM_GPUS_PER_NODE=2): one worker per GPU, share = node rank x 2 + GPU")
    assert reports[1]["shares"] == [{"worker": 2, "workers": 4}, {"worker": 3, "workers": 4}]
    assert reports[1]["exit_codes"] == [0, 0] and [w["verdict"]
                                                   for w in reports[1]["workers"]] == ["pass",
                                                                                       "pass"]
    for rank, machine in enumerate(machines):
        for gpu in range(2):
            folder = machine / "runs" / f"sky-task_1-w{rank * 2 + gpu}of4"
            launcher = json.loads((folder / "params.json").read_text())["launcher"]
            assert launcher["visible_devices"] == f"CUDA_VISIBLE_DEVICES={gpu}"
            assert launcher["variables"]["KDKIT_LOCAL_WORKER"] == str(gpu)

    # each machine's runs/ copied back under its own name, one folder copied twice
    copies = tmp_path / "copies"
    shutil.copytree(machines[0] / "runs", copies / "a" / "sky_workdir" / "runs")
    shutil.copytree(machines[1] / "runs", copies / "b" / "runs")
    shutil.copytree(machines[1] / "runs" / "sky-task_1-w3of4",
                    copies / "backup" / "sky-task_1-w3of4")
    code, summary, err = gather_from("--from", copies, "--project", machines[0])
    assert (code, summary["verdict"], summary["total"],
            summary["workers"]) == (0, "pass", 12, 4), summary
    backup, original = (copies / "backup" / "sky-task_1-w3of4",
                        copies / "b" / "runs" / "sky-task_1-w3of4")
    assert f"gather: {backup} is a copy of {original} (the same files, byte for byte); counted once" in err
    assert Path(summary["out"]) == copies / "sky-task_1-gathered"
    exactly_once([Path(w["path"]) for w in summary["per_worker"]])


def test_copies_that_do_not_belong_together_are_refused_and_nothing_is_written(machines: list[Path],
                                                                               tmp_path: Path) -> None:
    node(machines[0], 0)
    node(machines[1], 1)
    third = Path(
        shutil.copytree(machines[0], tmp_path / "machine-c", ignore=shutil.ignore_patterns("runs")))
    node(third, 1)  # a third machine given node rank 1 as well
    # another run, and (as run sky-task_1) another world size
    node(third, 0, gpus=1, task="sky-other_2")
    copies = tmp_path / "copies"
    for name, machine in (("a", machines[0]), ("b", machines[1]), ("c", third)):
        shutil.copytree(machine / "runs", copies / name)
    before = tree_snapshot(copies)

    def refused(*args: str | Path) -> str:
        result = invoke("gather", *args, "--project", machines[0])
        assert result.exit_code == 2 and not result.stdout, result.output
        assert len(result.stderr.strip().splitlines()) == 1
        return result.stderr.strip().removeprefix("Error: ")

    assert refused("--from", copies) == (
        f"{copies / 'c' / 'sky-other_2-w0of2'}: a worker of run sky-other_2, not of run sky-task_1 "
        f"({copies / 'a' / 'sky-task_1-w0of4'}); gather the folders of one run; pick one with "
        "--run-id")
    assert refused("--from", copies, "--run-id", "sky-task_1") == (
        f"worker 2 of 4: two different folders ({copies / 'b' / 'sky-task_1-w2of4'}, "
        f"{copies / 'c' / 'sky-task_1-w2of4'}): two machines ran the same share (given the same "
        "rank?); keep the one to count and move the other out of the way")
    other = copies / "c" / "sky-other_2-w0of2"
    params = json.loads((other / "params.json").read_text())
    params["run_id"] = "sky-task_1-w0of2"
    (other / "params.json").write_text(json.dumps(params))
    assert refused(copies / "a" / "sky-task_1-w0of4", other) == (
        f"{other}: one of 2 workers, but {copies / 'a' / 'sky-task_1-w0of4'} is one of 4: another "
        "world size; gather the folders of one launch")
    assert refused("--from", copies / "a", "--run-id", "nothing-here") == (
        f"--from {copies / 'a'}: no worker run folder below it of run nothing-here (a folder "
        "holding a params.json with a share)")
    (other / "params.json").write_bytes(before["c/sky-other_2-w0of2/params.json"])
    assert tree_snapshot(copies) == before
    shutil.rmtree(copies / "c")
    code, summary, _ = gather_from("--from", copies, "--project", machines[0])
    assert (code, summary["verdict"]) == (0, "pass")


def test_sigterm_to_a_nodes_process_reaches_its_workers_and_the_node_started_again_finishes(
    project: Path) -> None:
    use_oracle(project, "hangs", batch_size=2)
    sky = {"SKYPILOT_NODE_RANK": "0", "SKYPILOT_NUM_NODES": "1", "SKYPILOT_NUM_GPUS_PER_NODE": "2",
           "SKYPILOT_TASK_ID": "sky-t_1"}
    started = subprocess.Popen(["kdkit", "pilot", str(project), "--quiet"],
                               env=env(HANG_ON="doc-09", **sky),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    w0, w1 = project / "runs" / "sky-t_1-w0of2", project / "runs" / "sky-t_1-w1of2"
    wait_for_lines(w1 / "results.jsonl", 4, started)  # worker 1 hangs on doc-09
    deadline = time.monotonic() + 120
    while not (w0 / "SHA256SUMS").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    started.send_signal(signal.SIGTERM)  # as `docker stop` does to the image's PID 1
    started.communicate(timeout=120)
    assert started.returncode == 143
    stop = json.loads((w1 / "stop.json").read_text())
    assert (stop["rule"],
            stop["reason"]) == ("terminate", "terminated (SIGTERM)") and (w1
                                                                          / "SHA256SUMS").exists()
    again = run(["kdkit", "pilot", str(project), "--quiet"], **sky)
    assert again.returncode == 0, again.stderr
    assert f"kdkit: {w0} is finished: nothing to do" in again.stderr
    assert f"kdkit: {w1} exists: resuming it" in again.stderr
    code, summary, _ = gather_from("--from", project / "runs")
    assert (code, summary["verdict"]) == (0, "pass")
    exactly_once([w0, w1])
