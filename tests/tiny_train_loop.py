"""A tiny deterministic training loop for kdkit train's tests (standard library only): gradient descent on
(w - 3)^2 through kdkit.core.trainapi, a checkpoint folder every --save-every steps, resumed from
trainapi.latest_checkpoint(); `--reload DIR` loads a checkpoint and exits 0. The tests copy it to src/train.py."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from kdkit.core import trainapi


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--save-every", type=int, default=5)
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--nan-at", type=int, default=-1)
    parser.add_argument("--loss-scale", type=float, default=1.0)
    parser.add_argument("--accuracy", type=float, default=None)
    parser.add_argument("--break-checkpoint", action="store_true")
    parser.add_argument("--kill-self-at", type=int, default=-1)
    parser.add_argument("--hog-at", type=int, default=-1)  # take memory until the OOM killer comes
    parser.add_argument("--reload")
    return parser.parse_args()


def save(args: argparse.Namespace, step: int, w: float) -> None:
    with trainapi.checkpoint(step) as folder:
        (folder / "model.pt").write_bytes(repr(w).encode())
        if args.sleep:
            time.sleep(args.sleep)
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step, "w": w}))
    if args.break_checkpoint:
        run = trainapi.run_folder()
        assert run is not None
        os.unlink(run / "checkpoints" / trainapi.checkpoint_name(step) / "model.pt")


def main() -> int:
    args = parse()
    if args.reload:
        state = json.loads((Path(args.reload) / "trainer_state.json").read_text())
        print(f"reload OK: step {state['global_step']}")
        return 0
    if os.environ.get("TINY_PID_FILE"):
        with open(os.environ["TINY_PID_FILE"], "a") as handle:
            handle.write(f"{os.getpid()}\n")
    w, step = 0.0, 0
    latest = trainapi.latest_checkpoint()
    if latest is not None:
        state = json.loads((latest / "trainer_state.json").read_text())
        w, step = state["w"], state["global_step"]
    while step < args.steps:
        w -= args.lr * 2 * (w - 3.0)
        step += 1
        loss = float("nan") if step == args.nan_at else (w - 3.0) ** 2 * args.loss_scale
        extra = {"accuracy": args.accuracy} if args.accuracy is not None else {}
        trainapi.report(step, loss=loss, lr=args.lr, samples_per_s=1.0, **extra)
        if args.sleep:
            time.sleep(args.sleep)
        if step % args.save_every == 0 or step == args.steps:
            save(args, step, w)
        if step == args.kill_self_at:
            os.kill(os.getpid(), 9)
        if step == args.hog_at:
            # 64 GiB, page by page: the cgroup's limit comes first
            hog = [b"x" * (1 << 24) for _ in range(1 << 12)]
            print(len(hog))
    print(f"done w={w!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
