"""Which share of the manifest this process answers, read from the launcher that started it.

A launcher (torchrun, Slurm, a Kubernetes Indexed Job, SkyPilot, dstack) starts the same command
once per process or once per node and tells each start where it stands through environment
variables. ``LAUNCHERS`` is the one table of those variables, each row citing where the launcher
documents them; :func:`resolve` is the one function that reads them. ``kdkit pilot`` (and the
image's default command, ``kdkit pilot /app``) calls it when it starts, so the same command line
runs on every node and each worker answers its own share.

Two kinds of launcher:

* **per process** (torchrun; Slurm with more tasks than nodes; a Kubernetes Indexed Job, one pod
  per worker): the process's rank is its worker number, the size is the number of workers. A
  process that shares its node with others keeps one GPU: its local rank picks one of the devices it
  sees (kdkit.probe.pilot.launch.pin).
* **per node** (SkyPilot, dstack, Slurm with one task per node): the launcher numbers nodes. Each
  GPU of each node is one worker: ``share = node rank * GPUs per node + GPU``, out of ``nodes * GPUs
  per node``. GPUs per node are the launcher's own count (``gpus`` below), else the devices this
  process sees (CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES, else torch's device count, imported only
  then); a node with no GPU is one worker. The node's one process starts one worker per GPU
  (kdkit.probe.pilot.fanout), telling each its GPU in KDKIT_LOCAL_WORKER and the count in
  KDKIT_LOCAL_WORKERS.

Several launchers at once (torchrun started by Slurm or SkyPilot) must agree, and the per-process
one gives the share. A variable that is set must be a whole number; a rank needs its size; a rank at
or above its size, and two launchers that disagree, are refused. ``--worker I --workers N`` win over
every launcher (the line printed says so); ``--workers N`` alone gives the size to a launcher's rank
(a Kubernetes Job's ``completions`` is not in its pods' environment, so its count comes from
``--workers`` or from KDKIT_WORKERS, which the manifest sets).

The workers of one launch need one run ID: ``--run-id``, else KDKIT_RUN_ID, else the first
launcher of the table that has a job ID (schedulers before torchrun, whose ``--standalone`` gives
each node its own). Standard library only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kdkit.core.errors import BadInput
from kdkit.core.runid import RunId, check_new_run_id
from kdkit.probe.pilot.shares import Share, parse_share

RUN_ID_VAR = "KDKIT_RUN_ID"  # the run ID every worker of one launch shares (any launcher, or none)
WORKERS_VAR = "KDKIT_WORKERS"  # a Kubernetes Indexed Job's worker count: the Job's completions
# set by kdkit's fan-out
LOCAL_WORKER_VAR, LOCAL_WORKERS_VAR = "KDKIT_LOCAL_WORKER", "KDKIT_LOCAL_WORKERS"
# Which devices a process sees: CUDA's variable, and HIP's on AMD
# (https://rocm.docs.amd.com/projects/HIP/en/latest/reference/env_variables.html).
VISIBLE = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")
FLAGS = "--worker/--workers"
# torchrun's --rdzv-id defaults to the word "none" (torch/distributed/run.py): no run ID at all.
NO_RUN_ID = "none"

if TYPE_CHECKING:
    from typing import TypedDict

    # params.json's ``launcher``: what placed this process (functional form: "from" is a keyword)
    LauncherRecord = TypedDict("LauncherRecord", {
        "from": str, "variables": dict[str, str], "local_gpu": int | None,
        "visible_devices": str | None, "restarts": int})


@dataclass(frozen=True)
class Launcher:
    """One launcher's variables: what each says about this process, and where the launcher documents
    it."""

    name: str
    source: str
    rank: str = ""  # this process among all workers (per process)
    size: str = ""  # how many processes in all
    local: str = ""  # this process among those of its node: the GPU it keeps
    local_size: str = ""  # how many processes on its node
    node: str = ""  # this node among all (per node)
    nodes: str = ""  # how many nodes
    gpus: str = ""  # GPUs per node
    run_id: str = ""  # a job ID every worker of one launch shares
    restarts: str = ""  # how many times the launcher started its workers again

    @property
    def variables(self) -> tuple[str, ...]:
        """Every variable of this launcher that kdkit reads."""
        return tuple(name
                     for name in (self.rank, self.size, self.local, self.local_size, self.node,
                                  self.nodes,
                                  self.gpus, self.run_id, self.restarts) if name)


LAUNCHERS = (
    Launcher("slurm", "https://slurm.schedmd.com/srun.html#SECTION_OUTPUT-ENVIRONMENT-VARIABLES",
             rank="SLURM_PROCID", size="SLURM_NTASKS", local="SLURM_LOCALID", node="SLURM_NODEID",
             nodes="SLURM_NNODES", gpus="SLURM_GPUS_ON_NODE", run_id="SLURM_JOB_ID"),
    Launcher("kubernetes",
             "https://kubernetes.io/docs/concepts/workloads/controllers/job/#completion-mode",
             rank="JOB_COMPLETION_INDEX", size=WORKERS_VAR),
    Launcher("skypilot",
             "https://docs.skypilot.co/en/latest/running-jobs/environment-variables.html",
             node="SKYPILOT_NODE_RANK", nodes="SKYPILOT_NUM_NODES",
             gpus="SKYPILOT_NUM_GPUS_PER_NODE",
             run_id="SKYPILOT_TASK_ID"),
    Launcher("dstack", "https://dstack.ai/docs/reference/environment-variables/",
             node="DSTACK_NODE_RANK", nodes="DSTACK_NODES_NUM", gpus="DSTACK_GPUS_PER_NODE",
             run_id="DSTACK_RUN_NAME"),
    Launcher("torchrun",
             "https://docs.pytorch.org/docs/stable/elastic/run.html#environment-variables",
             rank="RANK", size="WORLD_SIZE", local="LOCAL_RANK", local_size="LOCAL_WORLD_SIZE",
             run_id="TORCHELASTIC_RUN_ID", restarts="TORCHELASTIC_RESTART_COUNT"),
)
_PLACING = ("rank", "size", "local", "local_size", "node", "nodes")
# A launcher placed this process when one of its indexes is set; a count alone is not a place
# (salloc sets SLURM_NNODES and SLURM_NTASKS in an interactive shell, where kdkit runs as a whole).
_INDEXES = ("rank", "local", "node")
_COUNTS = ("size", "local_size", "nodes")  # at least 1
_HALF = ("the launcher sets them together; unset the stray one, or start kdkit under the launcher "
         "(srun, torchrun...)")


@dataclass(frozen=True)
class Claim:
    """What one launcher's variables say about this process."""

    launcher: Launcher
    read: dict[str, str]  # each of its variables that is set, as set
    # by field name: rank, size, local, local_size, node, nodes, gpus, restarts
    numbers: dict[str, int]
    per_node: bool

    def get(self, name: str) -> int | None:
        return self.numbers.get(name)

    def shown(self, *names: str) -> str:
        return ", ".join(f"{getattr(self.launcher, n)}={self.read[getattr(self.launcher, n)]}"
                         for n in names
                         if getattr(self.launcher, n) in self.read)


def _number(launcher: Launcher, attr: str, read: Mapping[str, str]) -> int | None:
    name = getattr(launcher, attr)
    if not name or name not in read:
        return None
    text = read[name].strip()
    # a billion workers is no launcher's
    if not (text.isascii() and text.isdigit()) or len(text) > 9:
        raise BadInput(f"{name}={read[name][:20]!r} ({launcher.name}): not a whole number below a "
                       "billion; the launcher sets one here: fix or unset it")
    value = int(text)
    if attr in _COUNTS and value < 1:
        raise BadInput(f"{name}={value} ({launcher.name}): expected a count >= 1")
    return value


def _partial(launcher: Launcher, present: str, missing: str, read: Mapping[str, str]) -> BadInput:
    if missing == WORKERS_VAR:
        return BadInput(f"{present}={read[present]} ({launcher.name}) without a worker count: a "
                        f"Job's completions are not in its pods' environment; set {WORKERS_VAR} to "
                        "the Job's completions in the manifest, or pass --workers N")
    return BadInput(f"{present}={read[present]} ({launcher.name}) without {missing}: {_HALF}")


def read_claim(launcher: Launcher, env: Mapping[str, str],
               size_given: bool = False) -> Claim | None:
    """This launcher's claim on this process, checked on its own; None when none of its placing
    variables is set."""
    read = {name: env[name] for name in launcher.variables if name in env}
    placing = [getattr(launcher, attr) for attr in _INDEXES if getattr(launcher, attr) in read]
    if not placing:
        return None
    numbers = {attr: value for attr in (*_PLACING, "gpus", "restarts")
               if (value := _number(launcher, attr, read)) is not None}
    per_node = _per_node(launcher, numbers)
    index, count = ("node", "nodes") if per_node else ("rank", "size")
    if index not in numbers:
        raise _partial(launcher, placing[0], getattr(launcher, index), read)
    if count not in numbers and not (count == "size" and size_given):
        raise _partial(launcher, getattr(launcher, index), getattr(launcher, count), read)
    for first, second in ((index, count), ("local", "local_size")):
        if first in numbers and second in numbers and numbers[first] >= numbers[second]:
            raise BadInput(f"{getattr(launcher, first)}={numbers[first]} >= "
                           f"{getattr(launcher, second)}={numbers[second]} ({launcher.name}): it "
                           "counts from 0 and must be below the count")
    return Claim(launcher, read, numbers, per_node)


def _per_node(launcher: Launcher, numbers: Mapping[str, int]) -> bool:
    """Whether the launcher numbers nodes here: a launcher of nodes only, or Slurm with one task per
    node."""
    if "node" not in numbers and "nodes" not in numbers:
        return False
    if not launcher.rank:
        return True
    return numbers.get("size") is not None and numbers.get("size") == numbers.get("nodes")


# ---------------------------------------------------------------- the placement


@dataclass(frozen=True)
class Placement:
    """Where this process stands: its share, or the shares of its node's GPUs; and what said so."""

    # None: the whole manifest, or a node whose process starts one worker per GPU
    share: Share | None
    source: str = ""  # the launcher(s) that gave the share, FLAGS, or "" (none)
    read: dict[str, str] = field(default_factory=dict)  # the launchers' variables, as set
    shown: str = ""  # the variables the share was computed from, for the line on stderr
    run_id: RunId | None = None
    # this process's GPU among its node's devices (None: leave them as they are)
    local: int | None = None
    local_size: int | None = None
    node_shares: tuple[Share, ...] = ()  # a node's one process: one worker per GPU
    restarts: int = 0
    note: str = ""
    device: str | None = None  # the GPU this process kept (NAME=device, from pin)

    @property
    def launched(self) -> bool:
        """The share came from a launcher (which may start the same worker again)."""
        return bool(self.source) and self.source != FLAGS

    def line(self) -> str:
        """What kdkit says on stderr about where the share came from."""
        if self.node_shares:
            first, last = self.node_shares[0], self.node_shares[-1]
            what = (f"shares {first.worker}..{last.worker} of {first.workers} from {self.source} "
                    f"({self.shown}): one worker per GPU, share = node rank x "
                    f"{len(self.node_shares)} + GPU")
        elif self.share is not None:
            what = f"share {self.share.worker} of {self.share.workers} from {self.source}" + (
                f" ({self.shown})" if self.shown else "")
        else:
            return ""
        return what + (f"; {self.note}" if self.note else "")

    def record(self) -> LauncherRecord:
        """params.json's ``launcher`` (outside the parameters' hash, like ``share``)."""
        return {"from": self.source, "variables": dict(sorted(self.read.items())),
                "local_gpu": self.local,
                "visible_devices": self.device, "restarts": self.restarts}


def resolve(env: Mapping[str, str], worker: int | None, workers: int | None, *, named: bool = False,
            count_gpus: Callable[[], int] = lambda: 0) -> Placement:
    """This process's place, from ``--worker``/``--workers`` and the launchers' variables (the
    module's docstring); ``named``: --run-id or --resume was given; ``count_gpus``: the devices this
    process sees, asked only for a node whose launcher does not count its GPUs. BadInput for what
    cannot be trusted."""
    present = {name: env[name] for launcher in LAUNCHERS for name in launcher.variables
               if name in env}
    if worker is not None:
        share = parse_share(worker, workers)
        ignored = ", ".join(f"{k}={v}" for k, v in present.items())
        present.update((name, env[name]) for name in (RUN_ID_VAR,) if name in env)
        return Placement(share, FLAGS, present, run_id=None if named else _run_id(env, []),
                         note=f"{ignored} ignored" if ignored else "")
    present.update((name, env[name]) for name in (RUN_ID_VAR, LOCAL_WORKER_VAR, LOCAL_WORKERS_VAR)
                   if name in env)
    claims = [claim for launcher in LAUNCHERS
              if (claim := read_claim(launcher, env, workers is not None))]
    local_vars = [name for name in (LOCAL_WORKER_VAR, LOCAL_WORKERS_VAR) if name in env]
    if local_vars and not any(claim.per_node for claim in claims):
        raise BadInput(f"{local_vars[0]}={env[local_vars[0]]}: kdkit sets it for the workers it "
                       "starts on a node of SkyPilot, dstack or Slurm (one task per node), and "
                       "none of them placed this process; unset it")
    if not claims:
        return Placement(parse_share(None, workers), run_id=None if named else _run_id(env, []))
    placed = _placed(claims, env, workers, count_gpus)
    # --run-id wins: the environment's is not even read
    run_id = None if named else _run_id(env, claims)
    if run_id is None and not named and (placed.share or placed.node_shares):
        names = ", ".join(claim.launcher.name for claim in claims)
        raise BadInput(f"{names} gives no run ID that every worker shares: set {RUN_ID_VAR} (the "
                       "same on every node) or pass --run-id ID")
    restarts = max((claim.get("restarts") or 0 for claim in claims), default=0)
    return Placement(placed.share, placed.source, present, placed.shown, run_id, placed.local,
                     placed.local_size,
                     placed.node_shares, restarts, placed.note)


def _run_id(env: Mapping[str, str], claims: list[Claim]) -> RunId | None:
    """KDKIT_RUN_ID, else the first launcher's job ID (the table's order); checked as a run ID."""
    found = [(RUN_ID_VAR, env[RUN_ID_VAR])] if RUN_ID_VAR in env else []
    found += [(c.launcher.run_id, c.read[c.launcher.run_id]) for c in claims
              if c.read.get(c.launcher.run_id, NO_RUN_ID) != NO_RUN_ID]
    if not found:
        return None
    name, value = found[0]
    return RunId(
        check_new_run_id(value, f"{name}=", f"; set {RUN_ID_VAR} to another, or pass --run-id"))


def _placed(claims: list[Claim], env: Mapping[str, str], workers: int | None,
            count_gpus: Callable[[], int]) -> Placement:
    per_process = [claim for claim in claims if not claim.per_node]
    per_node = [claim for claim in claims if claim.per_node]
    _agree(per_process, ("rank", "size"))
    _agree(per_node, ("node", "nodes"))
    if per_process and per_node:
        _nested(per_process[0], per_node[0])
    if per_process:
        return _per_process(per_process[0], workers, [c.launcher.name for c in claims])
    return _per_node_place(per_node[0], env, workers, count_gpus)


def _agree(claims: list[Claim], fields: tuple[str, ...]) -> None:
    for other in claims[1:]:
        if any(other.get(f) != claims[0].get(f) for f in fields):
            first = claims[0]
            raise BadInput(f"{first.launcher.name} ({first.shown(*fields)}) and "
                           f"{other.launcher.name} ({other.shown(*fields)}) disagree about this "
                           "process; start kdkit under one launcher, or make them agree")


def _nested(inner: Claim, outer: Claim) -> None:
    """A per-process launcher inside a per-node one: its ranks must number the nodes' GPUs by the
    node rule."""
    rank, size = inner.get("rank"), inner.get("size")
    node, nodes = outer.get("node"), outer.get("nodes")
    per = inner.get("local_size") or max(1, outer.get("gpus") or 0)
    if rank is None or size is None or node is None or nodes is None:
        return
    if size != nodes * per or rank // per != node:
        raise BadInput(f"{inner.launcher.name} ({inner.shown('rank', 'size', 'local_size')}) and "
                       f"{outer.launcher.name} ({outer.shown('node', 'nodes', 'gpus')}) disagree: "
                       f"node {node} of {nodes} holds ranks {node * per}..{node * per + per - 1} "
                       f"of {nodes * per}; give torchrun --nnodes, --node-rank and "
                       "--nproc-per-node from the node launcher's variables")


def _per_process(claim: Claim, workers: int | None, names: list[str]) -> Placement:
    rank, size = claim.get("rank"), claim.get("size")
    assert rank is not None
    note = ""
    if workers is not None:
        if size is not None and size != workers:
            note = f"--workers {workers} wins over {claim.shown('size')}"
        size = workers
    assert size is not None
    if rank >= size:
        raise BadInput(f"{claim.shown('rank')} ({claim.launcher.name}) >= --workers {size}: the "
                       "rank must be below the number of workers")
    shown = claim.shown("rank") + (f", {claim.shown('size')}" if workers is None
                                   else f"; --workers {workers}")
    return Placement(Share(rank, size), " and ".join(names), shown=shown, local=claim.get("local"),
                     local_size=claim.get("local_size"), note=note)


def _per_node_place(claim: Claim, env: Mapping[str, str], workers: int | None,
                    count_gpus: Callable[[], int]) -> Placement:
    node, nodes = claim.get("node"), claim.get("nodes")
    assert node is not None and nodes is not None
    given = read_claim(_LOCAL_ROW, env)
    if given is not None:  # a worker that kdkit's fan-out started: its GPU, and the node's count
        local, per = given.get("rank"), given.get("size")
        assert local is not None and per is not None
        if claim.get("gpus") is not None and max(1, claim.get("gpus") or 0) != per:
            raise BadInput(f"{LOCAL_WORKERS_VAR}={per} but {claim.shown('gpus')} "
                           f"({claim.launcher.name}): the node's GPU count differs between the "
                           "node's process and its workers")
        shown = f"{claim.shown('node', 'nodes')}, {given.shown('rank', 'size')}"
        share, note = _within(claim, node * per + local, nodes * per, workers, shown)
        return Placement(share, claim.launcher.name, shown=shown, local=local,
                         local_size=per, note=note)
    gpus = claim.get("gpus")
    per = max(1, count_gpus() if gpus is None else gpus)
    shown = claim.shown("node", "nodes", "gpus") + ("" if gpus is not None
                                                    else f"; {per} GPU(s) seen here")
    placed = [_within(claim, node * per + i, nodes * per, workers, shown) for i in range(per)]
    if per == 1:
        return Placement(placed[0][0], claim.launcher.name, shown=shown, note=placed[0][1])
    return Placement(None, claim.launcher.name, shown=shown,
                     node_shares=tuple(s for s, _ in placed),
                     note=placed[0][1])


_LOCAL_ROW = Launcher("kdkit", "kdkit.probe.pilot.fanout",
                      rank=LOCAL_WORKER_VAR, size=LOCAL_WORKERS_VAR)


def _within(claim: Claim, worker: int, count: int,
            workers: int | None, shown: str) -> tuple[Share, str]:
    """Share ``worker`` of ``count``, or of ``--workers`` when given (it wins; the note says so)."""
    if workers is None:
        return Share(worker, count), ""
    if worker >= workers:
        raise BadInput(f"{claim.launcher.name} ({shown}) places this worker at {worker}, not below "
                       f"--workers {workers}")
    return Share(worker, workers), (f"--workers {workers} wins over {count}" if count != workers
                                    else "")
