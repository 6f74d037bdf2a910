"""Workers: each one's deterministic share of the manifest, and how its run folder is named.

An ID belongs to worker ``int.from_bytes(sha256(id)[:8], "big") % N``: the same on every
machine, in every process and under any PYTHONHASHSEED (Python's ``hash()`` of a string is
salted per process, so it would split the manifest differently in each container). Adding an
ID to the manifest never moves another one, and the shares are balanced to within sampling.

A worker's run folder is ``<run-id>-w<I>of<N>``: several workers started with one
``--run-id`` land side by side in one runs/ folder, and ``kdkit gather`` proves that together
they answered every ID exactly once. The share is recorded in params.json (key "share"),
outside the parameters' hash, so every worker of a run has the same params hash.
Standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from kdkit.core.errors import BadInput
from kdkit.core.jsonio import whole_number
from kdkit.core.pilotconfig import PilotConfig
from kdkit.core.runfolder import SHARE, WORKER, WORKERS, worker_folder

T = TypeVar("T")


def worker_of(ident: str, workers: int) -> int:
    """The worker (0..workers-1) whose share holds ``ident``; stable across processes and
    machines."""
    digest = hashlib.sha256(ident.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % workers


@dataclass(frozen=True)
class Share:
    """Worker ``worker`` of ``workers``: which IDs it answers and where its results go."""

    worker: int
    workers: int

    @property
    def suffix(self) -> str:
        return worker_folder("", self.worker, self.workers)

    @property
    def label(self) -> str:
        return f"w{self.worker}of{self.workers}"

    def holds(self, ident: str) -> bool:
        return worker_of(ident, self.workers) == self.worker

    def as_dict(self) -> dict[str, int]:
        return {WORKER: self.worker, WORKERS: self.workers}


WHOLE = Share(0, 1)  # a run without --workers answers the whole manifest: worker 0 of 1


def parse_share(worker: int | None, workers: int | None) -> Share | None:
    """``--worker I --workers N`` checked (both or neither, 0 <= I < N); None for a whole-manifest
    run."""
    if worker is None and workers is None:
        return None
    if worker is None or workers is None:
        raise BadInput(
            "--worker and --workers go together: give both (e.g. --worker 0 --workers 2) or "
            "neither")
    if workers < 1:
        raise BadInput(f"--workers {workers}: expected a whole number >= 1")
    if not 0 <= worker < workers:
        raise BadInput(
            f"--worker {worker}: expected 0..{workers - 1} for --workers {workers} (workers count "
            "from 0)")
    return Share(worker, workers)


def add_share_arguments(parser: argparse.ArgumentParser) -> None:
    """The pilot's --worker/--workers options, defined once here."""
    group = parser.add_argument_group("workers (several GPUs or machines over one manifest)")
    group.add_argument("--worker", type=whole_number("--worker"), metavar="I",
                       help="answer only worker I's share: IDs with sha256(id) mod N == I; the run "
                            "folder is <run-id>-wIofN (use the same --run-id on every worker)")
    group.add_argument("--workers", type=whole_number("--workers"), metavar="N",
                       help="how many workers share the manifest (alone: the count for a "
                            "launcher's rank, e.g. a Kubernetes Job's completions); without these, "
                            "a launcher's variables give the share")


def share_of(items: Sequence[T], share: Share | None,
             ident: Any = lambda item: item.id) -> tuple[T, ...]:
    """The items of ``share``, in manifest order; all of them without a share.

    An empty share is refused: a worker with nothing to answer cannot pass its accounting,
    and it means more workers than the manifest can feed.
    """
    if share is None:
        return tuple(items)
    mine = tuple(item for item in items if share.holds(ident(item)))
    if not mine:
        raise BadInput(f"--worker {share.worker} --workers {share.workers}: this share of the "
                       f"manifest is empty ({len(items)} IDs); use fewer workers")
    return mine


def restrict(cfg: PilotConfig, share: Share | None) -> PilotConfig:
    """The pilot config with only ``share``'s documents: the run, its progress and its accounting
    are over the share, so an ID of another share is, for this worker, an ID it was never given."""
    return cfg if share is None else replace(cfg, documents=share_of(cfg.documents, share))


def folder_name(run_id: str, share: Share | None) -> str:
    """The run folder of ``run_id`` for ``share``: ``run_id`` itself, or ``run_id-wIofN``.

    For --resume, a name already ending in this worker's suffix is taken as it is, so both the
    shared run ID and the folder name listed in runs/ work.
    """
    if share is None or run_id.endswith(share.suffix):
        return run_id
    return run_id + share.suffix


def recorded_share(params: dict[str, Any], where: Path) -> Share:
    """The share a run folder's params.json records; a run without one answered the whole
    manifest."""
    value = params.get(SHARE)
    if value is None:
        return WHOLE
    worker, workers = (value.get(k) if isinstance(value, dict) else None for k in (WORKER, WORKERS))
    if not (isinstance(worker, int) and isinstance(workers, int) and 0 <= worker < workers):
        raise BadInput(f"{where}: $.share: expected {{\"worker\": I, \"workers\": N}} with 0 <= I "
                       "< N; the file was edited or damaged")
    return Share(worker, workers)


def check_resumed_share(params: dict[str, Any], share: Share | None, where: Path) -> None:
    """A resumed run keeps its share: resuming a worker's folder as another worker (or the whole) is
    refused."""
    recorded, given = recorded_share(params, where), share or WHOLE
    if recorded != given:
        flags = (f"--worker {recorded.worker} --workers {recorded.workers}" if recorded != WHOLE
                 else "no --worker")
        raise BadInput(f"{where}: this run answers share {recorded.label} but {given.label} was "
                       f"asked; resume it with {flags}")


def share_fields(share: Share | None) -> dict[str, dict[str, int]]:
    """What params.json records about the share (nothing for a whole-manifest run)."""
    return {} if share is None else {SHARE: share.as_dict()}
