"""The save interval, measured: the median save cost, the share of the time spent saving, the
interval (in steps, from the measured step rate) that meets max_lost_minutes, and a checkpoint's
transfer time to
--copy-to.

Standard library only.
"""

from __future__ import annotations

import itertools
import math
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.core.errors import KdkitError
from kdkit.core.trainconfig import TrainConfig

if TYPE_CHECKING:
    from typing import NotRequired, TypedDict

    class CheckpointTransfer(TypedDict):
        """A checkpoint copied to --copy-to, verified there: its seconds, or the error."""

        checkpoint: str
        dest: str
        copy: NotRequired[str]  # where the copy is, once made
        seconds: float | None
        error: str | None

    class SavePolicy(TypedDict):
        """summary.json's "save": the measured save cost and share, the recommended interval."""

        saves: int
        seconds_median: float | None
        share: float | None
        steps_per_second: float | None
        recommended_every_steps: int | None
        warning: str | None
        transfer: NotRequired[CheckpointTransfer]  # with --copy-to


def step_rate(reports: list[dict[str, Any]]) -> float | None:
    """Steps per second between the session's first and latest reports."""
    if len(reports) < 2:
        return None
    first, last = reports[0], reports[-1]
    seconds = last["mono"] - first["mono"]
    return (last["step"]
            - first["step"]) / seconds if seconds > 0 and last["step"] > first["step"] else None


def save_policy(cfg: TrainConfig, saves: list[dict[str, Any]], reports: list[dict[str, Any]],
                seconds: float) -> SavePolicy:
    """summary.json's "save": measured cost and share, the recommended interval, and a warning or
    None."""
    costs = [s["save_seconds"] for s in saves if isinstance(s.get("save_seconds"), (int, float))]
    median = statistics.median(costs) if costs else None
    share = sum(costs) / seconds if costs and seconds > 0 else None
    rate = step_rate(reports)
    every, warnings = None, []
    if median is not None and rate is not None and cfg.max_lost_minutes is not None:
        budget = cfg.max_lost_minutes * 60 - median
        every = max(1, math.floor(budget * rate)) if budget > 0 else None
        if every is None:
            warnings.append(f"one save takes {median:.3g} s, more than max_lost_minutes allows")
        steps = [s["step"] for s in saves if isinstance(s.get("step"), int)]
        gaps = [b - a for a, b in itertools.pairwise(steps)]
        if every is not None and gaps and statistics.median(gaps) > every:
            warnings.append(f"the loop saves every {statistics.median(gaps):g} steps: too rarely "
                            f"for max_lost_minutes {cfg.max_lost_minutes:g}; save every {every} "
                            "steps")
    if share is not None and share > cfg.max_save_share:
        warnings.append(
            f"saving took {share:.1%} of the time, above max_save_share {cfg.max_save_share:g}")
    return {"saves": len(costs), "seconds_median": median, "share": share, "steps_per_second": rate,
            "recommended_every_steps": every, "warning": "; ".join(warnings) or None}


def transfer(folder: Path, dest: str) -> CheckpointTransfer:
    """Copy ``folder`` (a checkpoint) to ``dest`` with copy-out's copy, verified there; its seconds,
    or the error."""
    from kdkit.probe.results.copyout import copy_run

    started = time.monotonic()
    try:
        where = copy_run(folder, dest)
    except KdkitError as exc:
        return {"checkpoint": folder.name, "dest": dest, "seconds": None, "error": str(exc)[:300]}
    seconds = round(time.monotonic() - started, 3)
    return {"checkpoint": folder.name, "dest": dest, "copy": str(where),
            "seconds": seconds, "error": None}
