"""A short fine-tuning loop: reads the pilot documents, updates a small model, writes a checkpoint folder.

It is the scaffold's stand-in for your real training; keep its command-line contract when you
replace it. `kdkit resume-test` proves that a run stopped at any step resumes exactly, and
`kdkit train` runs it as a run of its own (metrics, checkpoints, stop rules; see kdkit.core.trainapi):

    python -m src.train [--steps N] [--lr LR] [--save-every S] [--checkpoint DIR] [--resume DIR]
                        [--metrics PATH] [--device D]
    python -m src.train --reload DIR

  --steps N          stop once the loop has done N optimizer steps in total (counted from step 0,
                     so `--resume` at step 3 with `--steps 3` restores and does no step at all)
  --lr LR            the peak learning rate (warm-up, then linear decay)
  --save-every S     also save after every S steps (default: only at the end)
  --checkpoint DIR   write the whole training state there (a folder) when the loop stops and every S steps
  --resume DIR       start from that state (a checkpoint folder, or an older single-file checkpoint)
  --metrics PATH     write {"start_step", "end_step", "losses", "device", "processes", "restart",
                     "save_seconds", "restore_seconds", "step_seconds", "stop"} there as JSON
  --device D         auto (the GPU when torch sees one), cpu, cuda or cuda:N
  --reload DIR       load that checkpoint in this fresh process: every part must load into a new model and
                     be finite; one line, exit 0 (else exit 1). `kdkit train --verify-reload` runs it.

A checkpoint is a folder in the Hugging Face Trainer layout: model.pt, optimizer.pt, scheduler.pt,
scaler.pt, rng_state.pth ({python, torch, cuda, numpy}: lists in rank order) and trainer_state.json
(global_step, data_position, and "meta": which run wrote it, not training state). Resuming needs far more
than the weights. Everything loads with ``torch.load(..., weights_only=True)``. It is written to a
temporary folder and renamed into place: a crash mid-save never leaves a torn checkpoint.

Under `kdkit train` (trainapi.active()) the loop reports step, loss, lr, samples/s and peak memory every
step, saves through trainapi.checkpoint(step) (checkpoints/step-NNNNNNNN in the run folder, hashed), and
resumes from trainapi.latest_checkpoint(). Without kdkit importable, the helper is a no-op.

A non-finite loss stops the loop at once (exit 4, one line naming the step; no checkpoint of that state).

The same loop runs data-parallel under torchrun
(https://docs.pytorch.org/docs/stable/elastic/run.html):

    torchrun --standalone --nproc-per-node 2 -m src.train --steps N --checkpoint DIR ...

  - each process joins the group from the variables torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK,
    MASTER_ADDR, MASTER_PORT): gloo on a CPU, NCCL on a GPU, where process LOCAL_RANK takes
    cuda:LOCAL_RANK (so --device cuda or auto, not cuda:N);
  - DistributedDataParallel starts every process from rank 0's weights and averages the gradients;
  - every process walks the same shuffled order (drawn from the epoch number, as DistributedSampler
    does) and takes its own BATCH documents of each global batch; each seeds its own generators
    with SEED + RANK (a process alone is rank 0: SEED);
  - rank 0 alone writes the checkpoint and the metrics; rng_state.pth holds every process's generators
    in rank order. A checkpoint resumes only with the number of processes that wrote it;
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
import hashlib
import json
import math
import os
import random
import shutil
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

try:
    from kdkit.core import trainapi
except ImportError:  # kdkit is not importable here: the loop runs alone, the helper does nothing

    class trainapi:  # type: ignore[no-redef]
        active = staticmethod(lambda: False)
        report = staticmethod(lambda step, **metrics: None)
        latest_checkpoint = staticmethod(lambda: None)

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
NONFINITE_EXIT = 4  # the loss went NaN or infinite
# The checkpoint folder's files (Hugging Face Trainer names) and the state part each holds.
PART_FILES = {"model": "model.pt", "optimizer": "optimizer.pt", "scheduler": "scheduler.pt", "scaler": "scaler.pt",
              "rng": "rng_state.pth"}
TRAINER_STATE = "trainer_state.json"
SUMS = "SHA256SUMS"


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
    """The accepted pilot documents with their label index, read as the pilot config says.

    A config without categories (an embedding or generation project: its output is a vector or a
    text) gives each document a class of its own: the loop learns to tell the pilot documents apart,
    a stand-in for your real fine-tuning that resumes just the same.
    """
    pilot = json.loads((root / "config" / "pilot.json").read_text(encoding="utf-8"))
    manifest_path = root / pilot["manifest"]
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    categories: list[str] | None = pilot.get("categories") or pilot.get("output", {}).get("categories")
    examples = []
    for doc in manifest["documents"]:
        if doc.get("expect") != "accept":
            continue  # the planned rejection is not training data
        text = (manifest_path.parent / doc["file"]).read_text(encoding="utf-8")
        examples.append((text, categories.index(doc["label"]) if categories else len(examples)))
    if not examples:
        raise SystemExit(f"{manifest_path}: no accepted document to train on")
    return examples, categories or [str(doc["id"]) for doc in manifest["documents"] if doc.get("expect") == "accept"]


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

    def __init__(self, classes: int, count: int, device: torch.device, world: World,
                 lr: float = LEARNING_RATE) -> None:
        self.device, self.world = device, world
        self.model = nn.Sequential(
            nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Dropout(0.2), nn.Linear(HIDDEN, classes)
        ).to(device)
        # What a step calls: under torchrun DDP, which averages the gradients; the checkpoint stores
        # self.model's state, so its keys are the same alone and under torchrun.
        self.network: nn.Module = self.model
        if dist.is_initialized():
            self.network = DistributedDataParallel(self.model, device_ids=[device] if device.type == "cuda" else None)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=lr)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, schedule)
        # Mixed precision needs a grad scaler on a GPU; on a CPU it is present but disabled.
        self.scaler = torch.amp.GradScaler(device.type, enabled=device.type == "cuda")
        self.position = new_position(count)
        self.step = 0
        self.saved_step: int | None = None  # the step of the last checkpoint saved or restored


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


# ---------------------------------------------------------------- the checkpoint folder


def write_folder(state: dict[str, Any], folder: Path) -> None:
    """Each part of ``state`` in its own file, fsynced (a part left out of ``state`` gets no file)."""
    for part, name in PART_FILES.items():
        if part in state:
            torch.save(state[part], folder / name)
    trainer = {("global_step" if key == "step" else key): state[key]
               for key in ("step", "data_position", "meta") if key in state}
    (folder / TRAINER_STATE).write_text(json.dumps(trainer, indent=1) + "\n", encoding="utf-8")
    for path in folder.iterdir():
        with path.open("rb") as handle:
            os.fsync(handle.fileno())


def read_folder(folder: Path, device: torch.device) -> dict[str, Any]:
    """The state a checkpoint folder holds; a file its SHA256SUMS lists but that is gone is an error."""
    if (folder / SUMS).is_file():
        listed = [line.partition("  ")[2] for line in (folder / SUMS).read_text(encoding="utf-8").splitlines()]
        gone = [name for name in listed if name and not (folder / name).is_file()]
        if gone:
            raise ValueError(f"{folder / gone[0]}: listed in {SUMS} but missing; the checkpoint is incomplete")
    state = {part: torch.load(folder / name, map_location=device, weights_only=True)
             for part, name in PART_FILES.items() if (folder / name).is_file()}
    if (folder / TRAINER_STATE).is_file():
        trainer = json.loads((folder / TRAINER_STATE).read_text(encoding="utf-8"))
        state.update({("step" if key == "global_step" else key): trainer[key]
                      for key in ("global_step", "data_position", "meta") if key in trainer})
    return state


def load_any(path: Path, device: torch.device) -> dict[str, Any]:
    """A checkpoint folder, or an older loop's single-file checkpoint (a dict of the same parts)."""
    if path.is_dir():
        return read_folder(path, device)
    saved: dict[str, Any] = torch.load(path, map_location=device, weights_only=True)
    return saved


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()


def write_in_place(state: dict[str, Any], path: Path) -> None:
    """--checkpoint: written to a temporary folder, then renamed over the last one (kept as .NAME.old until the
    new one is in place, so an elastic restart finds one of them)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging, old = path.with_name(f".{path.name}.tmp"), path.with_name(f".{path.name}.old")
    _remove(staging)
    staging.mkdir()
    write_folder(state, staging)
    if os.path.lexists(path):
        _remove(old)
        os.replace(path, old)
    os.replace(staging, path)
    _remove(old)
    directory = os.open(path.parent, os.O_RDONLY)  # the rename itself survives a power cut
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def save_checkpoint(loop: Loop, path: Path | None) -> float | None:
    """Rank 0 writes (through kdkit train's helper when it runs under it, and at --checkpoint when given); the
    others wait for it, so once any process goes on the checkpoint is there. None: nothing to save to."""
    helper = trainapi.active() and loop.saved_step != loop.step  # kdkit train's folder of this step exists
    if not helper and path is None:
        return None
    started = time.perf_counter()
    state = checkpoint_state(loop)
    if loop.world.rank == 0 and helper:
        with trainapi.checkpoint(loop.step) as folder:
            write_folder(state, folder)
    if loop.world.rank == 0 and path is not None:
        write_in_place(state, path)
    loop.saved_step = loop.step
    if dist.is_initialized():
        dist.barrier()
    return time.perf_counter() - started


def load_checkpoint(loop: Loop, path: Path) -> float:
    started = time.perf_counter()
    restore(loop, load_any(path, loop.device))
    loop.saved_step = loop.step
    return time.perf_counter() - started


def written_by_this_run(path: Path, world: World) -> bool:
    if path.is_dir():
        meta = json.loads((path / TRAINER_STATE).read_text(encoding="utf-8")).get("meta") or {}
    else:
        meta = torch.load(path, map_location="cpu", weights_only=True).get("meta") or {}
    return bool(meta.get("run_id") == world.run_id)


def resume_from(args: argparse.Namespace, world: World) -> Path | None:
    """Where the state comes from: after an elastic restart, the checkpoint this run last wrote (the
    steps since are done again); else the one kdkit train chose; else --resume; else a fresh start."""
    if world.restart > 0 and args.checkpoint is not None:
        for candidate in (args.checkpoint, args.checkpoint.with_name(f".{args.checkpoint.name}.old")):
            if candidate.exists() and written_by_this_run(candidate, world):
                return Path(candidate)
    latest = trainapi.latest_checkpoint()
    if latest is not None and Path(latest).is_dir():
        return Path(latest)
    return Path(args.resume) if args.resume else None


# ---------------------------------------------------------------- reloading in a new process


def nonfinite(value: Any, path: str = "") -> list[str]:
    """Dotted paths of the NaN or infinite numbers in a state."""
    if isinstance(value, dict):
        return [bad for key, sub in value.items() for bad in nonfinite(sub, f"{path}.{key}".lstrip("."))]
    if isinstance(value, (list, tuple)):
        return [bad for index, sub in enumerate(value) for bad in nonfinite(sub, f"{path}.{index}".lstrip("."))]
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return [] if bool(torch.isfinite(value).all()) else [path]
    return [path] if isinstance(value, float) and not math.isfinite(value) else []


def reload_into_new_loop(state: dict[str, Any]) -> list[str]:
    """Load every part into a new model, optimizer, scheduler, scaler and the generators; the parts loaded."""
    missing = [part for part in ("step", "data_position", *PART_FILES) if part not in state]
    if missing:
        raise ValueError("the checkpoint lacks " + ", ".join(missing))
    if bad := nonfinite(state):
        raise ValueError("not finite: " + ", ".join(bad[:3]))
    classes = list(state["model"].values())[-1].shape[0]  # the output layer's bias
    loop = Loop(classes, len(state["data_position"]["order"]), torch.device("cpu"), World())
    loop.model.load_state_dict(state["model"])
    loop.optimizer.load_state_dict(state["optimizer"])
    loop.scheduler.load_state_dict(state["scheduler"])
    loop.scaler.load_state_dict(state["scaler"])
    restore_rng({name: states[0] for name, states in state["rng"].items()})
    return list(PART_FILES)


def reload_check(path: Path) -> int:
    """--reload: one line; 0 when every part loads into a new loop and is finite, else 1."""
    try:
        if path.is_dir() and (path / SUMS).is_file():
            for line in (path / SUMS).read_text(encoding="utf-8").splitlines():
                digest, _, name = line.partition("  ")
                if (path / name).is_file() and hashlib.sha256((path / name).read_bytes()).hexdigest() != digest:
                    raise ValueError(f"{name}: SHA-256 differs from {SUMS}")
        state = load_any(path, torch.device("cpu"))
        parts = reload_into_new_loop(state)
    except Exception as exc:  # torch raises many types (pickle, zip, unsupported global, size mismatch)
        cause = str(exc).splitlines()[0] if str(exc) else ""
        print(f"reload FAILED: {path}: {type(exc).__name__}: {cause}", file=sys.stderr)
        return 1
    print(f"reload OK: {path}: step {state['step']}, {', '.join(parts)} loaded into a new model; every number finite")
    return 0


# ---------------------------------------------------------------- training


def train_step(loop: Loop, examples: list[tuple[str, int]]) -> tuple[float, float]:
    """One optimizer step on the next batch; returns this process's loss and the learning rate it used."""
    batch = next_batch(loop.position, len(examples), loop.world)
    inputs = torch.stack([featurize(examples[i][0]) for i in batch]).to(loop.device)
    labels = torch.tensor([examples[i][1] for i in batch], device=loop.device)
    lr = float(loop.optimizer.param_groups[0]["lr"])
    loop.network.train()
    with torch.autocast(loop.device.type, dtype=torch.float16, enabled=loop.device.type == "cuda"):
        loss = nn.functional.cross_entropy(loop.network(inputs), labels)
    loop.optimizer.zero_grad(set_to_none=True)
    loop.scaler.scale(loss).backward()
    loop.scaler.step(loop.optimizer)
    loop.scaler.update()
    loop.scheduler.step()
    loop.step += 1
    return float(loss.detach().cpu()), lr


def mean_loss(loss: float, device: torch.device) -> float:
    """The step's loss over every process (NaN anywhere is NaN everywhere: all stop together)."""
    if not dist.is_initialized():
        return loss
    total = torch.tensor([loss], dtype=torch.float64, device=device if device.type == "cuda" else "cpu")
    dist.all_reduce(total)
    return float(total.item()) / dist.get_world_size()


def peak_memory(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux: KiB


def report_step(loop: Loop, loss: float, lr: float, seconds: float) -> None:
    """Under kdkit train, rank 0 reports the step (the supervisor also stops on a non-finite loss)."""
    if loop.world.rank == 0 and trainapi.active():
        trainapi.report(loop.step, loss=loss, lr=lr, samples_per_s=BATCH * loop.world.size / max(seconds, 1e-9),
                        peak_memory_bytes=peak_memory(loop.device))


def crash_if_asked(loop: Loop) -> None:
    """KDKIT_TEST_CRASH_AT_STEP (tests only): the last rank dies at that step, on the first attempt."""
    at = os.environ.get(CRASH_AT)
    world = loop.world
    if at and int(at) == loop.step and world.restart == 0 and world.rank == world.size - 1:
        os.kill(os.getpid(), signal.SIGKILL)


def positive_finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: not a positive finite number")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m src.train", description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="stop after this many steps in total (default: 20)")
    parser.add_argument("--lr", type=positive_finite, default=LEARNING_RATE, help="peak learning rate")
    parser.add_argument("--save-every", type=int, default=0, metavar="S",
                        help="also save after every S steps (default: only at the end)")
    parser.add_argument("--checkpoint", type=Path, metavar="DIR", help="write the state to this folder at the end "
                        "(and every --save-every steps)")
    parser.add_argument("--resume", type=Path, metavar="DIR", help="start from this checkpoint (folder or file)")
    parser.add_argument("--metrics", type=Path, help="write losses and timings here (JSON)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    parser.add_argument("--reload", type=Path, metavar="DIR", help="only load this checkpoint into a new model and "
                        "check it is finite (exit 0) or not (exit 1)")
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
    if args.reload is not None:
        return reload_check(args.reload)
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


def run_steps(loop: Loop, args: argparse.Namespace, examples: list[tuple[str, int]]) -> tuple[list[float],
                                                                                             list[float], str | None]:
    """Steps until --steps, saving every --save-every; (losses, step seconds, why it stopped early or None)."""
    losses, step_seconds = [], []
    while loop.step < args.steps:
        started = time.perf_counter()
        loss, lr = train_step(loop, examples)
        step_seconds.append(time.perf_counter() - started)
        losses.append(loss)
        everywhere = mean_loss(loss, loop.device)
        report_step(loop, everywhere, lr, step_seconds[-1])
        if not math.isfinite(everywhere):
            return losses, step_seconds, (f"the loss is {everywhere} at step {loop.step} (non-finite): stopped; "
                                          "no checkpoint of this state is written, resume from an earlier one "
                                          "with a lower --lr")
        if args.save_every > 0 and loop.step % args.save_every == 0 and loop.step < args.steps:
            save_checkpoint(loop, args.checkpoint)
        crash_if_asked(loop)
    return losses, step_seconds, None


def train(args: argparse.Namespace, world: World, device: torch.device) -> int:
    examples, categories = load_examples(ROOT)
    loop = Loop(len(categories), len(examples), device, world, args.lr)
    source = resume_from(args, world)
    restore_seconds = load_checkpoint(loop, source) if source else None
    start_step = loop.step
    losses, step_seconds, stopped = run_steps(loop, args, examples)
    save_seconds = save_checkpoint(loop, args.checkpoint) if stopped is None else None
    # The loss of a step is the mean over the processes, as DDP's gradient is (rank order: exact).
    losses = [sum(column) / len(column) for column in zip(*everyone(losses), strict=True)]
    if args.metrics and world.rank == 0:
        metrics = {
            "start_step": start_step, "end_step": loop.step, "losses": losses, "device": str(device),
            "processes": world.size, "restart": world.restart,
            "save_seconds": save_seconds, "restore_seconds": restore_seconds,
            "step_seconds": statistics.median(step_seconds) if step_seconds else None,
            "stop": "nonfinite_loss" if stopped else None,
        }
        args.metrics.parent.mkdir(parents=True, exist_ok=True)
        args.metrics.write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
    if stopped:
        print(f"src.train: {stopped}", file=sys.stderr)
        return NONFINITE_EXIT
    return 0


if __name__ == "__main__":
    sys.exit(main())
