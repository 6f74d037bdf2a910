"""The launchers' variables (kdkit/probe/pilot/launchers.py): each launcher's table, the node rule,
the GPU a process keeps, the run ID, and every refusal, one line with exit 2 and nothing written.

Real runs under torchrun, a node's fan-out and the gathering of folders copied back are in
tests/probe/pilot/test_launcher_runs.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kdkit.core.errors import BadInput
from kdkit.probe.pilot.launch import local_gpus, pin
from kdkit.probe.pilot.launchers import LAUNCHERS, Placement, resolve
from kdkit.probe.pilot.shares import Share
from tests.conftest import invoke, tree_snapshot
from tests.machine.test_workers import use_oracle

TORCHRUN = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
            "MASTER_ADDR": "10.0.0.1",
            "MASTER_PORT": "29500",
            "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_RUN_ID": "3f2a-77"}
SLURM_TASKS = {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_NODEID": "1",
               "SLURM_NNODES": "2", "SLURM_JOB_ID": "4242"}
SLURM_NODES = {"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", "SLURM_NODEID": "1",
               "SLURM_NNODES": "2", "SLURM_GPUS_ON_NODE": "4", "SLURM_JOB_ID": "4242"}
KUBERNETES = {"JOB_COMPLETION_INDEX": "2", "KDKIT_WORKERS": "5", "KDKIT_RUN_ID": "kdkit-pilot"}
SKYPILOT = {"SKYPILOT_NODE_RANK": "1", "SKYPILOT_NUM_NODES": "2", "SKYPILOT_NUM_GPUS_PER_NODE": "4",
            "SKYPILOT_NODE_IPS": "10.0.0.1\n10.0.0.2",
            "SKYPILOT_TASK_ID": "sky-2026-03-01-10-00-00-000001_c_1"}
DSTACK = {"DSTACK_NODE_RANK": "1", "DSTACK_NODES_NUM": "3", "DSTACK_GPUS_PER_NODE": "2",
          "DSTACK_MASTER_NODE_IP": "10.0.0.1", "DSTACK_RUN_NAME": "kdkit-pilot"}


def placed(env: dict[str, str], worker: int | None = None, workers: int | None = None,
           gpus: int = 0,
           named: bool = False) -> Placement:
    return resolve(env, worker, workers, named=named, count_gpus=lambda: gpus)


# ---------------------------------------------------------------- the table


def test_every_launcher_cites_its_documentation_and_no_variable_is_read_twice() -> None:
    names = [name for launcher in LAUNCHERS for name in launcher.variables]
    assert len(names) == len(set(names))
    assert [launcher.name
            for launcher in LAUNCHERS] == ["slurm", "kubernetes", "skypilot", "dstack", "torchrun"]
    assert all(launcher.source.startswith("https://") for launcher in LAUNCHERS)
    by_name = {launcher.name: set(launcher.variables) for launcher in LAUNCHERS}
    assert by_name["torchrun"] == {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                   "TORCHELASTIC_RUN_ID",
                                   "TORCHELASTIC_RESTART_COUNT"}
    assert by_name["kubernetes"] == {"JOB_COMPLETION_INDEX", "KDKIT_WORKERS"}


@pytest.mark.parametrize(("env", "share", "line", "run_id"), [
    (TORCHRUN, Share(3, 8), "share 3 of 8 from torchrun (RANK=3, WORLD_SIZE=8)", "3f2a-77"),
    (SLURM_TASKS, Share(5, 8), "share 5 of 8 from slurm (SLURM_PROCID=5, SLURM_NTASKS=8)", "4242"),
    (KUBERNETES, Share(2, 5),
     "share 2 of 5 from kubernetes (JOB_COMPLETION_INDEX=2, KDKIT_WORKERS=5)",
     "kdkit-pilot"),
    ({**SKYPILOT, "SKYPILOT_NUM_GPUS_PER_NODE": "1"}, Share(1, 2),
     "share 1 of 2 from skypilot (SKYPILOT_NODE_RANK=1, SKYPILOT_NUM_NODES=2, "
     "SKYPILOT_NUM_GPUS_PER_NODE=1)",
     "sky-2026-03-01-10-00-00-000001_c_1"),
    ({**DSTACK, "DSTACK_GPUS_PER_NODE": "0"}, Share(1, 3),
     "share 1 of 3 from dstack (DSTACK_NODE_RANK=1, DSTACK_NODES_NUM=3, DSTACK_GPUS_PER_NODE=0)",
     "kdkit-pilot"),
    ({**SLURM_NODES, "KDKIT_LOCAL_WORKER": "3", "KDKIT_LOCAL_WORKERS": "4"}, Share(7, 8),
     "share 7 of 8 from slurm (SLURM_NODEID=1, SLURM_NNODES=2, KDKIT_LOCAL_WORKER=3, "
     "KDKIT_LOCAL_WORKERS=4)", "4242"),
    ({**DSTACK, "KDKIT_LOCAL_WORKER": "0", "KDKIT_LOCAL_WORKERS": "2"}, Share(2, 6),
     "share 2 of 6 from dstack (DSTACK_NODE_RANK=1, DSTACK_NODES_NUM=3, KDKIT_LOCAL_WORKER=0, "
     "KDKIT_LOCAL_WORKERS=2)",
     "kdkit-pilot"),
], ids=["torchrun", "slurm-tasks", "kubernetes", "skypilot-1-gpu", "dstack-cpu-nodes",
        "slurm-node-worker",
        "dstack-node-worker"])
def test_each_launcher_gives_this_process_its_share(env: dict[str, str], share: Share, line: str,
                                                    run_id: str) -> None:
    placement = placed(env)
    assert (placement.share, placement.line(), placement.run_id) == (share, line, run_id)
    assert placement.launched and not placement.node_shares
    read = {n for la in LAUNCHERS
            for n in la.variables} | {"KDKIT_RUN_ID", "KDKIT_LOCAL_WORKER", "KDKIT_LOCAL_WORKERS"}
    assert placement.record()["variables"] == {k: v for k, v in env.items() if k in read}


@pytest.mark.parametrize(("env", "gpus_seen", "shares"), [
    (SKYPILOT, 0, [Share(4, 8), Share(5, 8), Share(6, 8), Share(7, 8)]),
    (DSTACK, 0, [Share(2, 6), Share(3, 6)]),
    (SLURM_NODES, 0, [Share(4, 8), Share(5, 8), Share(6, 8), Share(7, 8)]),
    ({k: v for k, v in SLURM_NODES.items() if k != "SLURM_GPUS_ON_NODE"}, 3,
     [Share(3, 6), Share(4, 6), Share(5, 6)]),
], ids=["skypilot", "dstack", "slurm-one-task-per-node", "slurm-gpus-seen"])
def test_a_node_of_g_gpus_holds_shares_node_times_g_plus_gpu(env: dict[str, str], gpus_seen: int,
                                                            shares: list[Share]) -> None:
    placement = placed(env, gpus=gpus_seen)
    assert placement.share is None and list(placement.node_shares) == shares
    assert f"one worker per GPU, share = node rank x {len(shares)} + GPU" in placement.line()


def test_the_node_rule_covers_every_share_once() -> None:
    nodes, per = 3, 4
    shares = [s for node in range(nodes)
              for s in placed({"SKYPILOT_NODE_RANK": str(node), "SKYPILOT_NUM_NODES": str(nodes),
                               "SKYPILOT_NUM_GPUS_PER_NODE": str(per),
                               "KDKIT_RUN_ID": "R"}).node_shares]
    assert sorted(s.worker for s in shares) == list(range(nodes * per))
    assert {s.workers for s in shares} == {nodes * per}


def test_torchrun_under_a_node_launcher_must_follow_the_node_rule() -> None:
    agreeing = {**SLURM_NODES, "RANK": "6", "WORLD_SIZE": "8",
                "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "4"}
    placement = placed(agreeing)
    assert (placement.share,
            placement.source, placement.local) == (Share(6, 8), "slurm and torchrun", 2)
    assert placement.run_id == "4242"  # the scheduler's job ID, not each node's torchrun's
    standalone = {**SKYPILOT, "RANK": "2", "WORLD_SIZE": "4",
                  "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "4"}
    with pytest.raises(BadInput) as caught:
        placed(standalone)
    assert str(caught.value) == (
        "torchrun (RANK=2, WORLD_SIZE=4, LOCAL_WORLD_SIZE=4) and skypilot (SKYPILOT_NODE_RANK=1, "
        "SKYPILOT_NUM_NODES=2, SKYPILOT_NUM_GPUS_PER_NODE=4) disagree: node 1 of 2 holds ranks "
        "4..7 of 8; give torchrun --nnodes, --node-rank and --nproc-per-node from the node "
        "launcher's variables")


def test_flags_win_and_say_so() -> None:
    placement = placed(TORCHRUN, 0, 2)
    assert placement.share == Share(0, 2) and not placement.launched
    assert placement.line().startswith(
        "share 0 of 2 from --worker/--workers; RANK=3, WORLD_SIZE=8, ")
    assert placement.line().endswith(" ignored")
    counted = placed({"JOB_COMPLETION_INDEX": "2"}, workers=5, named=True)
    assert (counted.share,
            counted.line()) == (Share(2, 5),
                                "share 2 of 5 from kubernetes (JOB_COMPLETION_INDEX=2; "
                                               "--workers 5)")
    wins = placed(TORCHRUN, workers=16)
    assert wins.share == Share(3,
                               16) and wins.line().endswith("; --workers 16 wins over WORLD_SIZE=8")


def test_no_launcher_and_counts_alone_place_nothing() -> None:
    assert placed({}).share is None and placed({}).line() == ""
    salloc = placed(
        {"SLURM_NNODES": "2", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "9", "WORLD_SIZE": "4"})
    assert salloc.share is None and not salloc.launched
    assert placed({"KDKIT_RUN_ID": "mine"}).run_id == "mine"


def test_the_run_id_kdkit_run_id_first_then_schedulers_then_torchrun() -> None:
    assert placed({**TORCHRUN, "KDKIT_RUN_ID": "pilot-1"}).run_id == "pilot-1"
    assert placed({**TORCHRUN, "TORCHELASTIC_RUN_ID": "none"}, named=True).run_id is None
    assert placed({**KUBERNETES, "KDKIT_RUN_ID": "x"}).run_id == "x"


@pytest.mark.parametrize(("env", "args", "message"), [
    ({"RANK": "3"},
     {},
     "RANK=3 (torchrun) without WORLD_SIZE: the launcher sets them together; unset the stray one, "
     "or start kdkit under the launcher (srun, torchrun...)"),
    ({"RANK": "8", "WORLD_SIZE": "8"},
     {}, "RANK=8 >= WORLD_SIZE=8 (torchrun): it counts from 0 and must be below "
         "the count"),
    ({"RANK": "one", "WORLD_SIZE": "8"},
     {}, "RANK='one' (torchrun): not a whole number below a billion; the "
         "launcher sets one here: fix or unset it"),
    ({"RANK": "-1", "WORLD_SIZE": "8"},
     {}, "RANK='-1' (torchrun): not a whole number below a billion; the "
         "launcher sets one here: fix or unset it"),
    ({"RANK": "0", "WORLD_SIZE": "9" * 5000},
     {}, "WORLD_SIZE='99999999999999999999' (torchrun): not a whole number "
         "below a billion; the launcher sets one here: fix or unset it"),
    ({"RANK": "0", "WORLD_SIZE": "0"}, {}, "WORLD_SIZE=0 (torchrun): expected a count >= 1"),
    ({"LOCAL_RANK": "1"},
     {}, "LOCAL_RANK=1 (torchrun) without RANK: the launcher sets them together; unset the stray "
         "one, or start kdkit under the launcher (srun, torchrun...)"),
    ({"JOB_COMPLETION_INDEX": "2"}, {},
     "JOB_COMPLETION_INDEX=2 (kubernetes) without a worker count: a Job's "
     "completions are not in its pods' environment; set KDKIT_WORKERS to the Job's "
     "completions in the manifest, or pass --workers N"),
    ({"JOB_COMPLETION_INDEX": "5", "KDKIT_WORKERS": "5"}, {},
     "JOB_COMPLETION_INDEX=5 >= KDKIT_WORKERS=5 "
     "(kubernetes): it counts from 0 and must be below the "
     "count"),
    ({"SKYPILOT_NODE_RANK": "0"}, {},
     "SKYPILOT_NODE_RANK=0 (skypilot) without SKYPILOT_NUM_NODES: the launcher sets "
     "them together; unset the stray one, or start kdkit under the launcher (srun, "
     "torchrun...)"),
    ({"DSTACK_NODE_RANK": "2", "DSTACK_NODES_NUM": "2"},
     {}, "DSTACK_NODE_RANK=2 >= DSTACK_NODES_NUM=2 (dstack): it "
         "counts from 0 and must be below the count"),
    ({"SLURM_PROCID": "0", "SLURM_NODEID": "0", "SLURM_NNODES": "2"}, {},
     "SLURM_PROCID=0 (slurm) without SLURM_NTASKS: the launcher sets them together; unset the "
     "stray one, or start kdkit under the launcher (srun, torchrun...)"),
    ({**KUBERNETES, "RANK": "1", "WORLD_SIZE": "5", "TORCHELASTIC_RUN_ID": "x"}, {},
     "kubernetes (JOB_COMPLETION_INDEX=2, KDKIT_WORKERS=5) and torchrun (RANK=1, WORLD_SIZE=5) "
     "disagree about this process; start kdkit under one launcher, or make them agree"),
    ({**SKYPILOT, "DSTACK_NODE_RANK": "0", "DSTACK_NODES_NUM": "2"}, {},
     "skypilot (SKYPILOT_NODE_RANK=1, SKYPILOT_NUM_NODES=2) and dstack (DSTACK_NODE_RANK=0, "
     "DSTACK_NODES_NUM=2) disagree about this process; start kdkit under one launcher, or make "
     "them agree"),
    ({"KDKIT_LOCAL_WORKER": "1", "KDKIT_LOCAL_WORKERS": "2"}, {},
     "KDKIT_LOCAL_WORKER=1: kdkit sets it for the workers it starts on a node of SkyPilot, dstack "
     "or Slurm (one task per node), and none of them placed this process; unset it"),
    ({**SKYPILOT, "KDKIT_LOCAL_WORKER": "4", "KDKIT_LOCAL_WORKERS": "4"}, {},
     "KDKIT_LOCAL_WORKER=4 >= KDKIT_LOCAL_WORKERS=4 (kdkit): it counts from 0 and must be below "
     "the count"),
    ({"JOB_COMPLETION_INDEX": "1", "KDKIT_WORKERS": "2"}, {},
     "kubernetes gives no run ID that every worker shares: set KDKIT_RUN_ID (the same on every "
     "node) or pass --run-id ID"),
    ({"SLURM_PROCID": "1", "SLURM_NTASKS": "4", "SLURM_JOB_ID": "12 3"}, {},
     "SLURM_JOB_ID='12 3': not a valid run ID; use letters, digits, '.', '_' and '-' (first a "
     "letter or digit), at most 128; set KDKIT_RUN_ID to another, or pass --run-id"),
    (TORCHRUN,
     {"workers": 3},
     "RANK=3 (torchrun) >= --workers 3: the rank must be below the number of workers"),
    (TORCHRUN,
     {"worker": 1},
     "--worker and --workers go together: give both (e.g. --worker 0 --workers 2) or "
     "neither"),
], ids=["rank-without-size", "rank-at-size", "rank-a-word", "rank-negative", "size-5000-digits",
        "size-zero",
        "local-rank-alone",
        "index-without-count", "index-at-count", "node-without-nodes", "node-at-nodes",
        "slurm-batch-step",
        "two-disagree", "two-node-launchers-disagree", "stray-local-worker",
        "local-worker-at-count",
        "no-run-id", "job-id-not-a-run-id", "rank-above-workers", "worker-alone"])
def test_contradictory_or_partial_settings_are_refused(env: dict[str, str], args: dict[str, Any],
                                                       message: str) -> None:
    with pytest.raises(BadInput) as caught:
        resolve(env, args.get("worker"), args.get("workers"), count_gpus=lambda: 0)
    assert str(caught.value) == message


@pytest.mark.parametrize("env", [
    {"RANK": "3"},
    {"RANK": "2", "WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "x"},
    {"JOB_COMPLETION_INDEX": "0"},
    {"JOB_COMPLETION_INDEX": "0", "KDKIT_WORKERS": "2"},
    {**TORCHRUN, "SLURM_PROCID": "0", "SLURM_NTASKS": "8", "SLURM_JOB_ID": "1"},
], ids=["partial", "rank-at-size", "no-count", "no-run-id", "disagree"])
def test_the_pilot_refuses_them_in_one_line_and_writes_nothing(project: Path,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                              env: dict[str, str]) -> None:
    use_oracle(project)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    before = tree_snapshot(project)
    result = invoke("pilot", project, "--quiet")
    assert result.exit_code == 2
    assert not result.stdout
    assert len(result.stderr.strip().splitlines()) == 1 and result.stderr.startswith("Error: ")
    assert tree_snapshot(project) == before


def test_the_pilot_under_a_launcher_says_where_its_share_came_from(project: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    use_oracle(project)
    for name, value in KUBERNETES.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("KDKIT_WORKERS", "3")
    result = invoke("pilot", project, "--quiet", "--json")
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[0] == ("kdkit: share 2 of 3 from kubernetes "
                                             "(JOB_COMPLETION_INDEX=2, KDKIT_WORKERS=3)")
    folder = project / "runs" / "kdkit-pilot-w2of3"
    params = json.loads((folder / "params.json").read_text())
    assert params["share"] == {"worker": 2, "workers": 3}
    assert params["launcher"] == {"from": "kubernetes", "variables": {"JOB_COMPLETION_INDEX": "2",
                                                                      "KDKIT_RUN_ID": "kdkit-pilot",
                                                                      "KDKIT_WORKERS": "3"},
                                  "local_gpu": None, "visible_devices": None, "restarts": 0}
    flags = invoke("pilot", project, "--quiet", "--run-id", "F", "--worker", "0", "--workers", "3")
    assert flags.exit_code == 0
    assert flags.stderr.splitlines()[0] == ("kdkit: share 0 of 3 from --worker/--workers; "
                                            "JOB_COMPLETION_INDEX=2, KDKIT_WORKERS=3 ignored")
    assert json.loads(
        (project / "runs" / "F-w0of3" / "params.json").read_text())["launcher"]["from"] == \
        "--worker/--workers"


# ---------------------------------------------------------------- one GPU per process


@pytest.mark.parametrize(("local", "env", "local_size", "amd", "kept"), [
    (1, {}, 4, False, ("CUDA_VISIBLE_DEVICES", "1")),
    (1, {}, 4, True, ("HIP_VISIBLE_DEVICES", "1")),
    (0, {}, 1, False, None),  # alone on its node: left as it is
    (2, {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}, None, False, ("CUDA_VISIBLE_DEVICES", "6")),
    (2, {"CUDA_VISIBLE_DEVICES": "GPU-aa,GPU-bb,GPU-cc"}, 3, False,
     ("CUDA_VISIBLE_DEVICES", "GPU-cc")),
    (3, {"CUDA_VISIBLE_DEVICES": "5"}, 4, False, None),  # the launcher already gave it one GPU
    (1, {"HIP_VISIBLE_DEVICES": "2,3"}, 2, True, ("HIP_VISIBLE_DEVICES", "3")),
])
def test_a_process_keeps_one_gpu(local: int, env: dict[str, str], local_size: int | None, amd: bool,
                                 kept: tuple[str, str] | None) -> None:
    assert pin(local, env, local_size, amd=amd) == kept


def test_fewer_devices_than_local_processes_is_refused() -> None:
    with pytest.raises(BadInput) as caught:
        pin(2, {"CUDA_VISIBLE_DEVICES": "0,1"}, 4)
    assert str(
        caught.value) == ("CUDA_VISIBLE_DEVICES=0,1 lists 2 GPUs for the processes of this node, "
                                 "but this one is local worker 2; start one process per listed GPU")


def test_gpus_are_counted_without_torch_when_the_devices_are_listed_or_the_pilot_is_cpu() -> None:
    import sys

    had_torch = "torch" in sys.modules
    assert local_gpus({"CUDA_VISIBLE_DEVICES": "0,1,2"}, "cuda") == 3
    assert local_gpus({"CUDA_VISIBLE_DEVICES": ""}, "cuda") == 0
    assert local_gpus({}, "cpu") == 0
    assert ("torch" in sys.modules) == had_torch
    assert local_gpus({}, "cuda") == 0  # torch on this CPU machine: no CUDA device
