"""A short fine-tuning loop: reads the pilot documents, updates a small model, writes a checkpoint.

It is the scaffold's stand-in for your real training; keep its command-line contract when you
replace it, and `kdkit resume-test` proves that a run stopped at any step resumes exactly:

    python -m src.train --steps N --checkpoint PATH [--resume PATH] [--metrics PATH] [--device D]

  --steps N          stop once the loop has done N optimizer steps in total (counted from step 0,
                     so `--resume` at step 3 with `--steps 3` restores and does no step at all)
  --checkpoint PATH  write the whole training state there when the loop stops
  --resume PATH      start from that state instead of from scratch
  --metrics PATH     write {"start_step", "end_step", "losses", "device", "save_seconds",
                     "restore_seconds", "step_seconds"} there as JSON
  --device D         auto (the GPU when torch sees one), cpu, cuda or cuda:N

The checkpoint is a dict with the keys step, data_position, model, optimizer, scheduler, scaler
and rng {python, torch, cuda, numpy}: resuming needs far more than the weights. A key whose part
your loop does not have is stored as None rather than left out. Everything in it loads with
``torch.load(..., weights_only=True)``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import torch
from torch import nn

ROOT = Path.cwd()
SEED = 1234
FEATURES = 512  # hashed character trigrams
HIDDEN = 64
BATCH = 4
WINDOW = 1500  # characters read from a random place in each document (python RNG)
LEARNING_RATE = 3e-3
WARMUP_STEPS = 3
SCHEDULE_STEPS = 200  # the schedule's length is fixed: it must not depend on where a run stops


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


def next_batch(position: dict[str, Any], count: int) -> list[int]:
    """Indices of the next batch; a new epoch reshuffles with the python RNG. Mutates position."""
    batch = []
    while len(batch) < BATCH:
        if position["index"] >= len(position["order"]):
            order = list(range(count))
            random.shuffle(order)
            position.update(epoch=position["epoch"] + 1, index=0, order=order)
        batch.append(position["order"][position["index"]])
        position["index"] += 1
    return batch


# ---------------------------------------------------------------- the loop's state


class Loop:
    """Everything a step changes: weights, optimizer, scheduler, scaler, data position, step."""

    def __init__(self, classes: int, count: int, device: torch.device) -> None:
        self.device = device
        self.model = nn.Sequential(
            nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Dropout(0.2), nn.Linear(HIDDEN, classes)
        ).to(device)
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
    """The whole state, as the checkpoint stores it."""
    return {
        "step": loop.step,
        "data_position": {**loop.position, "order": list(loop.position["order"])},
        "model": loop.model.state_dict(),
        "optimizer": loop.optimizer.state_dict(),
        "scheduler": loop.scheduler.state_dict(),
        "scaler": loop.scaler.state_dict(),
        "rng": capture_rng(),
    }


def restore(loop: Loop, saved: dict[str, Any]) -> None:
    """Put every part of ``saved`` back; a part left out here is what resume-test names."""
    loop.model.load_state_dict(saved["model"])
    loop.optimizer.load_state_dict(saved["optimizer"])
    loop.scheduler.load_state_dict(saved["scheduler"])
    loop.scaler.load_state_dict(saved["scaler"])
    loop.position = dict(saved["data_position"])
    loop.step = int(saved["step"])
    restore_rng(saved["rng"])


def save_checkpoint(loop: Loop, path: Path) -> float:
    """Write to a temporary name, then rename: a crash mid-save never leaves a torn checkpoint."""
    started = time.perf_counter()
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    torch.save(checkpoint_state(loop), temporary)
    os.replace(temporary, path)
    return time.perf_counter() - started


def load_checkpoint(loop: Loop, path: Path) -> float:
    started = time.perf_counter()
    restore(loop, torch.load(path, map_location=loop.device, weights_only=True))
    return time.perf_counter() - started


# ---------------------------------------------------------------- training


def train_step(loop: Loop, examples: list[tuple[str, int]]) -> float:
    """One optimizer step on the next batch; returns the loss."""
    batch = next_batch(loop.position, len(examples))
    inputs = torch.stack([featurize(examples[i][0]) for i in batch]).to(loop.device)
    labels = torch.tensor([examples[i][1] for i in batch], device=loop.device)
    loop.model.train()
    with torch.autocast(loop.device.type, dtype=torch.float16, enabled=loop.device.type == "cuda"):
        loss = nn.functional.cross_entropy(loop.model(inputs), labels)
    loop.optimizer.zero_grad(set_to_none=True)
    loop.scaler.scale(loss).backward()
    loop.scaler.step(loop.optimizer)
    loop.scaler.update()
    loop.scheduler.step()
    loop.step += 1
    return float(loss.detach().cpu())


def pick_device(wanted: str) -> torch.device:
    if wanted == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(wanted)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m src.train", description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, required=True, help="stop after this many steps in total")
    parser.add_argument("--checkpoint", type=Path, required=True, help="write the state here at the end")
    parser.add_argument("--resume", type=Path, help="start from this checkpoint")
    parser.add_argument("--metrics", type=Path, help="write losses and timings here (JSON)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # Same seed, same algorithms in every process: the reference run and the resumed one must agree.
    random.seed(SEED)
    torch.manual_seed(SEED)  # seeds the CUDA generators too
    numpy = sys.modules.get("numpy")
    if numpy is not None:  # unseeded, numpy starts from OS entropy: no two runs would agree
        numpy.random.seed(SEED)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    device = pick_device(args.device)
    examples, categories = load_examples(ROOT)
    loop = Loop(len(categories), len(examples), device)
    restore_seconds = load_checkpoint(loop, args.resume) if args.resume else None
    start_step = loop.step
    losses, step_seconds = [], []
    while loop.step < args.steps:
        started = time.perf_counter()
        losses.append(train_step(loop, examples))
        step_seconds.append(time.perf_counter() - started)
    save_seconds = save_checkpoint(loop, args.checkpoint)
    if args.metrics:
        metrics = {
            "start_step": start_step, "end_step": loop.step, "losses": losses, "device": str(device),
            "save_seconds": save_seconds, "restore_seconds": restore_seconds,
            "step_seconds": statistics.median(step_seconds) if step_seconds else None,
        }
        args.metrics.parent.mkdir(parents=True, exist_ok=True)
        args.metrics.write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
