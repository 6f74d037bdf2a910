"""The training loop's helper: what a loop run by ``kdkit train`` says to it (standard library
only).

A loop imports this module and calls four functions; each is a cheap no-op (or None) when the loop
runs without ``kdkit train``, so one loop runs both ways::

    from kdkit.core import trainapi
    trainapi.active() -> bool        # under `kdkit train` (env KDKIT_TRAIN_RUN is set)
    trainapi.report(step, loss=...)  # one logging step (any finite or non-finite number)
    with trainapi.checkpoint(step) as folder:  # a staging folder: write the files in it
        torch.save(model.state_dict(), folder / "model.pt")
    trainapi.latest_checkpoint() -> Path|None  # the complete checkpoint to resume from

The channel: ``kdkit train`` opens a pipe and hands its write end to the loop (env KDKIT_TRAIN_FD);
``report`` writes one JSON line there (a few microseconds: the loop never waits for a disk), and the
supervisor appends it to ``metrics.jsonl`` and fsyncs it, judging the stop rules as it goes. A line
carries ``"at"`` (time.time() of the report); non-finite numbers are written as JSON's NaN/Infinity
and the supervisor judges them (a NaN loss stops the run).

``checkpoint(step)`` stages ``checkpoints/.step-%08d.partial-PID`` in the run folder
(KDKIT_TRAIN_RUN), its owner's lock held (kdkit.core.staging); on a clean exit of the block every
file is hashed and fsynced, its ``SHA256SUMS`` written, the folder renamed to
``checkpoints/step-%08d`` without ever replacing anything (kdkit.core.noreplace), the
``checkpoints/`` folder fsynced, and one ``checkpoint`` line goes to the supervisor; on an exception
the staging is removed. A kill at any instant leaves either the staging (never chosen; removed on
resume) or a complete folder.

Environment (set by ``kdkit train``): KDKIT_TRAIN_RUN (the run folder, absolute),
KDKIT_TRAIN_RUN_ID, KDKIT_TRAIN_FD (the channel's descriptor), KDKIT_TRAIN_RESUME (the checkpoint
folder to resume from; unset on a first session), KDKIT_TRAIN_LOG_EVERY (config/train.json
"log_every").
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing import TypedDict

    class ReportLine(TypedDict):
        """A report on the channel: the loop's metrics with its ``step`` and ``at``."""

        report: dict[str, object]

    class CheckpointSaved(TypedDict):
        """A published checkpoint: its name, step, files ({name: sha256}), save time, ``at``."""

        name: str
        step: int
        files: dict[str, str]
        save_seconds: float
        at: float

    class CheckpointLine(TypedDict):
        """A checkpoint on the channel."""

        checkpoint: CheckpointSaved

RUN_ENV, RUN_ID_ENV = "KDKIT_TRAIN_RUN", "KDKIT_TRAIN_RUN_ID"
FD_ENV, RESUME_ENV = "KDKIT_TRAIN_FD", "KDKIT_TRAIN_RESUME"
CHECKPOINTS = "checkpoints"
CHECKPOINT_NAME = "step-%08d"

LOG_EVERY_ENV = "KDKIT_TRAIN_LOG_EVERY"

_fd: int | None = None
_every: int | None = None


def active() -> bool:
    """Whether the loop runs under ``kdkit train``."""
    return bool(os.environ.get(RUN_ENV))


def run_folder() -> Path | None:
    folder = os.environ.get(RUN_ENV)
    return Path(folder) if folder else None


def _channel() -> int | None:
    global _fd
    if _fd is None:
        value = os.environ.get(FD_ENV, "")
        _fd = int(value) if value.isdigit() else -1
    return _fd if _fd >= 0 else None


def _send(record: ReportLine | CheckpointLine) -> None:
    fd = _channel()
    if fd is None:
        return
    view = memoryview((json.dumps(record, separators=(",", ":")) + "\n").encode("utf-8"))
    while view:
        view = view[os.write(fd, view):]


def _log_every() -> int:
    global _every
    if _every is None:
        value = os.environ.get(LOG_EVERY_ENV, "")
        _every = int(value) if value.isdigit() and int(value) > 0 else 1
    return _every


def report(step: int, **metrics: Any) -> None:
    """One logging step: ``step`` and any metric (loss, lr, samples_per_s, peak_memory_bytes, an
    eval metric). With config/train.json "log_every" N, only every N-th step is sent, and any step
    whose loss is not finite."""
    if _channel() is None:
        return
    if step % _log_every():
        loss = metrics.get("loss")
        # finite (inf - inf and nan - nan are nan)
        if not isinstance(loss, float) or loss - loss == 0.0:
            return
    metrics["step"] = int(step)
    metrics["at"] = time.time()
    _send({"report": metrics})


def checkpoint_name(step: int) -> str:
    return CHECKPOINT_NAME % int(step)


@contextlib.contextmanager
def checkpoint(step: int) -> Iterator[Path]:
    """A staging folder for the checkpoint of ``step``, published complete as
    ``checkpoints/step-%08d``. Report a step before you save it: a resume after ``kdkit train`` was
    killed trusts a checkpoint once the reports due before it were read."""
    folder = run_folder()
    if folder is None:
        raise RuntimeError("trainapi.checkpoint: not running under `kdkit train` (KDKIT_TRAIN_RUN "
                           "is not set); save the checkpoint yourself when trainapi.active() is "
                           "False")
    from kdkit.core.checkpoints import publish_checkpoint  # loaded at the first save only

    started = time.monotonic()
    with publish_checkpoint(folder / CHECKPOINTS, checkpoint_name(step)) as staged:
        yield staged.path
    files = staged.files
    _send({"checkpoint": {"name": checkpoint_name(step), "step": int(step), "files": files,
                          "save_seconds": round(time.monotonic() - started, 6), "at": time.time()}})


def latest_checkpoint() -> Path | None:
    """The complete checkpoint folder to resume from (chosen and verified by ``kdkit train
    --resume``), or None."""
    value = os.environ.get(RESUME_ENV)
    return Path(value) if value else None
