"""A short fine-tuning loop: reads the pilot documents, updates a small model, writes a checkpoint.

It is the scaffold's stand-in for your real training; keep its command-line contract when you
replace it, and `kdkit resume-test` proves that a run stopped at any step resumes exactly:

    python -m src.train --steps N --checkpoint PATH [--resume PATH] [--metrics PATH] [--device D]
                        [--save-every S]

  --steps N          stop once the loop has done N optimizer steps in total (counted from step 0,
                     so `--resume` at step 3 with `--steps 3` restores and does no step at all)
  --checkpoint PATH  write the whole training state there when the loop stops (and every S steps)
  --resume PATH      start from that state instead of from scratch
  --metrics PATH     write {"start_step", "end_step", "losses", "device", "processes", "restart",
                     "save_seconds", "restore_seconds", "step_seconds"} there as JSON
  --device D         auto (the GPU when torch sees one), cpu, cuda or cuda:N
  --save-every S     also write the checkpoint after every S steps (default: only at the end)

The checkpoint is a dict with the keys step, data_position, model, optimizer, scheduler, scaler
and rng {python, torch, cuda, numpy}: resuming needs far more than the weights. A key whose part
your loop does not have is stored as None rather than left out. Everything in it loads with
``torch.load(..., weights_only=True)``. Its "meta" says which run wrote it; it is not training state.

The same loop runs data-parallel under torchrun
(https://docs.pytorch.org/docs/stable/elastic/run.html):

    torchrun --standalone --nproc-per-node 2 -m src.train --steps N --checkpoint PATH ...

  - each process joins the group from the variables torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK,
    MASTER_ADDR, MASTER_PORT): gloo on a CPU, NCCL on a GPU, where process LOCAL_RANK takes
    cuda:LOCAL_RANK (so --device cuda or auto, not cuda:N);
  - DistributedDataParallel starts every process from rank 0's weights and averages the gradients;
  - every process walks the same shuffled order (drawn from the epoch number, as DistributedSampler
    does) and takes its own BATCH documents of each global batch; each seeds its own generators
    with SEED + RANK (a process alone is rank 0: SEED);
  - rank 0 alone writes the checkpoint and the metrics. The checkpoint holds what is the same in
    every process once, and every process's random generators as lists in rank order: rng.torch[r]
    is rank r's. A checkpoint resumes only with the number of processes that wrote it;
  - an elastic restart (torchrun --max-restarts M; TORCHELASTIC_RESTART_COUNT > 0 after a worker
    died) resumes from the checkpoint this run last wrote at --checkpoint, so pass --save-every; a
    checkpoint there from another run (its meta.run_id is not TORCHELASTIC_RUN_ID) is ignored, so
    give each run its own --rdzv-id (--standalone draws one). Start such a torchrun with
    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: since torch 2.5 the restarted workers otherwise share the
    rendezvous store with the dead ones, read their addresses and wait (pytorch/pytorch#135712).

For tests only, KDKIT_TEST_CRASH_AT_STEP=K makes the last rank kill itself (SIGKILL, no cleanup)
right after step K and any checkpoint due then, on the first attempt only: a lost worker.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import sys
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

ROOT = Path.cwd()
SEED = 1234
FEATURES = 512  # hashed character trigrams
HIDDEN = 64
BATCH = 4  # documents per process and step
WINDOW = 1500  # characters read from a random place in each document (python RNG)
LEARNING_RATE = 3e-3
WARMUP_STEPS = 3
SCHEDULE_STEPS = 200  # the schedule's length is fixed: it must not depend on where a run stops
CRASH_AT = "KDKIT_TEST_CRASH_AT_STEP"


# ---------------------------------------------------------------- the processes


@dataclass(frozen=True)
class World:
    """This process among the training processes: rank 0 of 1 when it runs alone."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    run_id: str | None = None  # TORCHELASTIC_RUN_ID: the same in every attempt of one torchrun
    restart: int = 0  # TORCHELASTIC_RESTART_COUNT: 0 on the first attempt


def this_world() -> World:
    """The variables torchrun sets for each worker; none of them when the loop runs alone."""
    if "WORLD_SIZE" not in os.environ:
        return World()
    env = os.environ
    return World(int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", "0")),
                 env.get("TORCHELASTIC_RUN_ID"), int(env.get("TORCHELASTIC_RESTART_COUNT", "0")))


def pick_device(wanted: str, world: World) -> torch.device:
    if wanted == "auto":
        wanted = "cuda" if torch.cuda.is_available() else "cpu"
    if "WORLD_SIZE" in os.environ and wanted.startswith("cuda"):
        if wanted != "cuda" and world.size > 1:
            raise SystemExit(f"--device {wanted}: under torchrun each process takes cuda:LOCAL_RANK; "
                             "pass --device cuda or auto")
        return torch.device(wanted if wanted != "cuda" else f"cuda:{world.local_rank}")
    return torch.device(wanted)


def join(world: World, device: torch.device) -> None:
    """Join torchrun's group (env:// reads MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE)."""
    if "WORLD_SIZE" not in os.environ:
        return
    if device.type == "cuda":
        torch.cuda.set_device(device)  # NCCL and the object collectives use the current device
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")


def everyone(value: Any) -> list[Any]:
    """Every process's ``value`` in rank order, on every process; ``[value]`` when alone."""
    if not dist.is_initialized():
        return [value]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, value)
    return gathered


# ---------------------------------------------------------------- data


def load_examples(root: Path) -> tuple[list[tuple[str, int]], list[str]]:
    """The accepted pilot documents with their label index, read as the pilot config says."""
    pilot = json.loads((root / "config" / "pilot.json").read_text(encoding="utf-8"))
    manifest_path = root / pilot["manifest"]
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    categories: list[str] = pilot["categories"]
    examples = []
    for doc in manifest["documents"]:
        if doc.get("expect") != "accept":
            continue  # the planned rejection is not training data
        text = (manifest_path.parent / doc["file"]).read_text(encoding="utf-8")
        examples.append((text, categories.index(doc["label"])))
    if not examples:
        raise SystemExit(f"{manifest_path}: no accepted document to train on")
    return examples, categories


def featurize(text: str) -> torch.Tensor:
    """Counts of hashed trigrams of a random window. crc32, not hash(): str hashes change per process."""
    start = random.randrange(max(1, len(text) - WINDOW + 1))
    window = text[start:start + WINDOW].lower()
    vector = torch.zeros(FEATURES)
    for i in range(len(window) - 2):
        vector[zlib.crc32(window[i:i + 3].encode("utf-8")) % FEATURES] += 1.0
    return vector / max(1.0, float(vector.sum()))


def new_position(count: int) -> dict[str, Any]:
    return {"epoch": -1, "index": count, "order": list(range(count))}


def epoch_order(count: int, epoch: int) -> list[int]:
    """One epoch's order, the same in every process: shuffled by a generator seeded from the epoch, as
    DistributedSampler does (torch/utils/data/distributed.py), never by a process's own generator."""
    order = list(range(count))
    random.Random(SEED + epoch).shuffle(order)
    return order


def next_batch(position: dict[str, Any], count: int, world: World) -> list[int]:
    """This process's share of the next global batch (BATCH documents each). Mutates position."""
    batch = []
    while len(batch) < BATCH * world.size:
        if position["index"] >= len(position["order"]):
            epoch = position["epoch"] + 1
            position.update(epoch=epoch, index=0, order=epoch_order(count, epoch))
        batch.append(position["order"][position["index"]])
        position["index"] += 1
    return batch[world.rank * BATCH:(world.rank + 1) * BATCH]


# ---------------------------------------------------------------- the loop's state


class Loop:
    """Everything a step changes: weights, optimizer, scheduler, scaler, data position, step."""

    def __init__(self, classes: int, count: int, device: torch.device, world: World) -> None:
        self.device, self.world = device, world
        self.model = nn.Sequential(
            nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Dropout(0.2), nn.Linear(HIDDEN, classes)
        ).to(device)
        # What a step calls: under torchrun DDP, which averages the gradients; the checkpoint stores
        # self.model's state, so its keys are the same alone and under torchrun.
        self.network: nn.Module = self.model
        if dist.is_initialized():
            self.network = DistributedDataParallel(self.model, device_ids=[device] if device.type == "cuda" else None)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=LEARNING_RATE)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, schedule)
        # Mixed precision needs a grad scaler on a GPU; on a CPU it is present but disabled.
        self.scaler = torch.amp.GradScaler(device.type, enabled=device.type == "cuda")
        self.position = new_position(count)
        self.step = 0


def schedule(step: int) -> float:
    """Linear warm-up, then linear decay over SCHEDULE_STEPS."""
    if step < WARMUP_STEPS:
        return (step + 1) / WARMUP_STEPS
    return max(0.05, 1.0 - (step - WARMUP_STEPS) / SCHEDULE_STEPS)


def capture_rng() -> dict[str, Any]:
    """Every random generator the loop (or a library it calls) draws from."""
    numpy = sys.modules.get("numpy")  # torch imports numpy when it is installed; augmentations use it
    numpy_state = None
    if numpy is not None:
        name, keys, pos, has_gauss, cached = numpy.random.get_state()
        numpy_state = [name, [int(k) for k in keys], pos, has_gauss, cached]
    return {
        "python": random.getstate(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        "numpy": numpy_state,
    }


def restore_rng(saved: dict[str, Any]) -> None:
    random.setstate(saved["python"])
    torch.set_rng_state(saved["torch"])
    if saved.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(saved["cuda"])
    numpy = sys.modules.get("numpy")
    if saved.get("numpy") is not None and numpy is not None:
        name, keys, pos, has_gauss, cached = saved["numpy"]
        numpy.random.set_state((name, numpy.array(keys, dtype=numpy.uint32), pos, has_gauss, cached))


def checkpoint_state(loop: Loop) -> dict[str, Any]:
    """The whole state, as the checkpoint stores it (every process calls it: it gathers their generators)."""
    generators = everyone(capture_rng())
    return {
        "step": loop.step,
        "data_position": {**loop.position, "order": list(loop.position["order"])},
        "model": loop.model.state_dict(),
        "optimizer": loop.optimizer.state_dict(),
        "scheduler": loop.scheduler.state_dict(),
        "scaler": loop.scaler.state_dict(),
        "rng": {name: [own[name] for own in generators] for name in generators[0]},
        "meta": {"run_id": loop.world.run_id, "processes": loop.world.size},
    }


def restore(loop: Loop, saved: dict[str, Any]) -> None:
    """Put every part of ``saved`` back; a part left out here is what resume-test names."""
    written_by = len(saved["rng"]["python"])
    if written_by != loop.world.size:
        raise SystemExit(f"the checkpoint was written by {written_by} process(es), this run has {loop.world.size}: "
                         f"resume it with --nproc-per-node {written_by}")
    loop.model.load_state_dict(saved["model"])
    loop.optimizer.load_state_dict(saved["optimizer"])
    loop.scheduler.load_state_dict(saved["scheduler"])
    loop.scaler.load_state_dict(saved["scaler"])
    loop.position = dict(saved["data_position"])
    loop.step = int(saved["step"])
    restore_rng({name: states[loop.world.rank] for name, states in saved["rng"].items()})


def save_checkpoint(loop: Loop, path: Path) -> float:
    """Rank 0 writes to a temporary name, then renames: a crash mid-save never leaves a torn checkpoint.
    The others wait for it, so once any process goes on the checkpoint is there."""
    started = time.perf_counter()
    state = checkpoint_state(loop)
    if loop.world.rank == 0:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.tmp")
        torch.save(state, temporary)
        os.replace(temporary, path)
    if dist.is_initialized():
        dist.barrier()
    return time.perf_counter() - started


def load_checkpoint(loop: Loop, path: Path) -> float:
    started = time.perf_counter()
    restore(loop, torch.load(path, map_location=loop.device, weights_only=True))
    return time.perf_counter() - started


def resume_from(args: argparse.Namespace, world: World) -> Path | None:
    """Where the state comes from: after an elastic restart, the checkpoint this run last wrote (the
    steps since are done again); else --resume; else nothing, a fresh start."""
    if world.restart > 0 and args.checkpoint.is_file():
        saved = torch.load(args.checkpoint, map_location="cpu", weights_only=True)
        if saved.get("meta", {}).get("run_id") == world.run_id:
            return Path(args.checkpoint)
    return Path(args.resume) if args.resume else None


# ---------------------------------------------------------------- training


def train_step(loop: Loop, examples: list[tuple[str, int]]) -> float:
    """One optimizer step on the next batch; returns this process's loss."""
    batch = next_batch(loop.position, len(examples), loop.world)
    inputs = torch.stack([featurize(examples[i][0]) for i in batch]).to(loop.device)
    labels = torch.tensor([examples[i][1] for i in batch], device=loop.device)
    loop.network.train()
    with torch.autocast(loop.device.type, dtype=torch.float16, enabled=loop.device.type == "cuda"):
        loss = nn.functional.cross_entropy(loop.network(inputs), labels)
    loop.optimizer.zero_grad(set_to_none=True)
    loop.scaler.scale(loss).backward()
    loop.scaler.step(loop.optimizer)
    loop.scaler.update()
    loop.scheduler.step()
    loop.step += 1
    return float(loss.detach().cpu())


def crash_if_asked(loop: Loop) -> None:
    """KDKIT_TEST_CRASH_AT_STEP (tests only): the last rank dies at that step, on the first attempt."""
    at = os.environ.get(CRASH_AT)
    world = loop.world
    if at and int(at) == loop.step and world.restart == 0 and world.rank == world.size - 1:
        os.kill(os.getpid(), signal.SIGKILL)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m src.train", description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, required=True, help="stop after this many steps in total")
    parser.add_argument("--checkpoint", type=Path, required=True, help="write the state here at the end (and "
                        "every --save-every steps)")
    parser.add_argument("--resume", type=Path, help="start from this checkpoint")
    parser.add_argument("--metrics", type=Path, help="write losses and timings here (JSON)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    parser.add_argument("--save-every", type=int, default=0, metavar="S",
                        help="also write the checkpoint after every S steps (default: only at the end)")
    return parser.parse_args(argv)


def seed_everything(world: World) -> None:
    """Same seeds, same algorithms in every run: the reference run and the resumed one must agree.
    Each process has its own seed (SEED + RANK); a process alone is rank 0."""
    random.seed(SEED + world.rank)
    torch.manual_seed(SEED + world.rank)  # seeds the CUDA generators too
    numpy = sys.modules.get("numpy")
    if numpy is not None:  # unseeded, numpy starts from OS entropy: no two runs would agree
        numpy.random.seed(SEED + world.rank)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    world = this_world()
    device = pick_device(args.device, world)
    join(world, device)
    try:
        seed_everything(world)
        code = train(args, world, device)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    if "WORLD_SIZE" in os.environ:
        leave(code)
    return code


def leave(code: int) -> NoReturn:
    """End a torchrun worker without Python's teardown, once everything is written. DDP keeps its process
    group alive past destroy_process_group (torch 2.13), so gloo's threads still run while the interpreter
    is torn down, and one letting go of a tensor then aborts the finished process with SIGABRT, now and
    then (pytorch/pytorch#190489)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def train(args: argparse.Namespace, world: World, device: torch.device) -> int:
    examples, categories = load_examples(ROOT)
    loop = Loop(len(categories), len(examples), device, world)
    source = resume_from(args, world)
    restore_seconds = load_checkpoint(loop, source) if source else None
    start_step = loop.step
    losses, step_seconds = [], []
    while loop.step < args.steps:
        started = time.perf_counter()
        losses.append(train_step(loop, examples))
        step_seconds.append(time.perf_counter() - started)
        if args.save_every > 0 and loop.step % args.save_every == 0 and loop.step < args.steps:
            save_checkpoint(loop, args.checkpoint)
        crash_if_asked(loop)
    save_seconds = save_checkpoint(loop, args.checkpoint)
    # The loss of a step is the mean over the processes, as DDP's gradient is (rank order: exact).
    losses = [sum(column) / len(column) for column in zip(*everyone(losses))]
    if args.metrics and world.rank == 0:
        metrics = {
            "start_step": start_step, "end_step": loop.step, "losses": losses, "device": str(device),
            "processes": world.size, "restart": world.restart,
            "save_seconds": save_seconds, "restore_seconds": restore_seconds,
            "step_seconds": statistics.median(step_seconds) if step_seconds else None,
        }
        args.metrics.parent.mkdir(parents=True, exist_ok=True)
        args.metrics.write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
