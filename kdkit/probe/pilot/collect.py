"""Which worker folders a gathering counts: the RUN_DIRs given, and every worker folder below
``--from DIR``.

The workers of one run may come back from several machines in any layout (``node0/runs/R-w0of8``,
``copies/R-w5of8``...): ``--from`` searches each DIR, links not followed, hidden (staging) folders
skipped, for folders holding a params.json with a share (kdkit.probe.pilot.shares); a run folder
holds no other, so the search does not go below one. ``--run-id`` keeps the workers of that run.

Before anything is counted or written, the folders must be the workers of one run, each share once.
Each of these is bad input (one line, exit 2, nothing written):

* a folder of another run (its params.json's run ID), of another manifest, or of another pilot
  config;
* a folder of another world size (one of 3 workers among folders of 2);
* two folders for one share with different content: two machines were given the same rank.

Two copies of one folder (the same bytes, e.g. the machine's copy and an earlier copy-out) are one:
the first is counted and the line on stderr says so. A missing share is not bad input but a failed
proof: the gathering names it (kdkit.probe.pilot.gather). Standard library only.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kdkit.core import runfolder as rf
from kdkit.core.errors import BadInput
from kdkit.core.jsonio import sha256_file
from kdkit.core.projectfiles import SAFE_ID_RULE, is_safe_id, load_object
from kdkit.probe.pilot.shares import Share, recorded_share


@dataclass
class Worker:
    """One worker's run folder as gathering sees it."""

    path: Path
    params: dict[str, Any]
    share: Share
    summary: dict[str, Any] | None
    answered: int = 0
    outside: list[str] = field(default_factory=list)  # finished IDs its share does not hold

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def run(self) -> str:
        """The run it belongs to: its params.json's run ID without the worker's suffix (the folder's
        name for an older folder without one)."""
        recorded = self.params.get(rf.RUN_ID)
        return rf.base_id(recorded if isinstance(recorded, str) else self.name)

    def param(self, key: str) -> str:
        return str(self.params.get("params", {}).get(key) if key == "manifest_sha256"
                   else self.params.get(key))


def load_worker(path: Path) -> Worker:
    """A worker's folder: BadInput unless it is a pilot run folder (params.json present)."""
    if not path.is_dir():
        raise BadInput(f"{path}: not a folder; give the workers' run folders (runs/<run-id>-wIofN)")
    params_file = path / rf.PARAMS
    if not params_file.is_file():
        raise BadInput(f"{params_file}: not found; {path} is not a pilot run folder")
    params = load_object(params_file, "run parameters")
    recorded = params.get(rf.RUN_ID)
    # it names the output
    if recorded is not None and not (isinstance(recorded, str) and is_safe_id(recorded)):
        raise BadInput(f"{params_file}: $.run_id {str(recorded)[:60]!r} is not a run ID "
                       f"({SAFE_ID_RULE}); the file was edited or damaged")
    summary_file = path / rf.SUMMARY
    summary = load_object(summary_file, "run summary") if summary_file.is_file() else None
    return Worker(path.resolve(), params, recorded_share(params, params_file), summary)


def search(root: Path) -> list[Worker]:
    """Every worker folder below ``root`` (root itself included), in path order."""
    if not root.is_dir():
        raise BadInput(
            f"--from {root}: not a folder; give the folder the workers' folders were copied into")
    found = []
    for current, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        if rf.PARAMS in files:
            try:
                params = load_object(Path(current) / rf.PARAMS, "run parameters")
            except BadInput:
                # a run folder's own params.json, damaged: named, never skipped
                if rf.RESULTS in files:
                    raise
                continue  # another tool's params.json (a model's, a sweep's): not a run folder
            if rf.SHARE in params:
                dirs[:] = []  # a worker's folder holds no other run
                found.append(load_worker(Path(current)))
    return found


def fingerprint(path: Path) -> str:
    """One digest over a folder's regular files, names and bytes: two copies of one folder have the
    same."""
    digest = hashlib.sha256()
    for entry in sorted(os.scandir(path), key=lambda e: e.name):
        if entry.is_file(follow_symlinks=False):
            digest.update(
                f"{entry.name}\0{sha256_file(Path(entry.path))}\n".encode("utf-8",
                                                                          "surrogateescape"))
    return digest.hexdigest()


def collect(run_dirs: Sequence[Path], roots: Sequence[Path] = (),
            run_id: str | None = None) -> list[Worker]:
    """The workers to gather, in share order: given and found, copies counted once, checked to be
    one run's."""
    given = [load_worker(path) for path in run_dirs]
    found = [worker for root in roots for worker in search(root) if run_id is None
             or worker.run == run_id]
    if roots and not found:
        where = ", ".join(str(root) for root in roots)
        raise BadInput(f"--from {where}: no worker run folder below it"
                       + (f" of run {run_id}" if run_id else "")
                       + " (a folder holding a params.json with a share)")
    if not given and not found:
        raise BadInput(
            "give the workers' run folders (RUN_DIR...) or --from DIR (e.g. runs/R-w0of2 "
            "runs/R-w1of2)")
    workers = _once(given + found)
    _one_run(workers, run_id, several=bool(roots) and run_id is None)
    return sorted(workers, key=lambda worker: worker.share.worker)


def _once(workers: list[Worker]) -> list[Worker]:
    """The workers with each folder once: the same path given twice, or a byte-for-byte copy of one
    kept.

    Only folders of one share of one run are compared, and each folder is hashed at most once."""
    kept: list[Worker] = []
    paths: set[Path] = set()
    same_share: dict[tuple[Share, str], list[Worker]] = {}
    prints: dict[Path, str] = {}

    def print_of(worker: Worker) -> str:
        if worker.path not in prints:
            prints[worker.path] = fingerprint(worker.path)
        return prints[worker.path]

    for worker in workers:
        if worker.path in paths:
            continue
        others = same_share.setdefault((worker.share, worker.run), [])
        twin = next((other for other in others if print_of(other) == print_of(worker)), None)
        if twin is None:
            kept.append(worker)
            others.append(worker)
            paths.add(worker.path)
        else:
            print(f"gather: {worker.path} is a copy of {twin.path} (the same files, byte for "
                  "byte); counted once",
                  file=sys.stderr)
    return kept


def _one_run(workers: list[Worker], run_id: str | None, several: bool) -> None:
    """BadInput unless the folders are the workers of one run, each share once (the module's
    docstring)."""
    first = workers[0]
    for worker in workers:
        if run_id is not None and worker.run != run_id:
            raise BadInput(f"{worker.path}: a worker of run {worker.run}, not of --run-id "
                           f"{run_id}; give the folders of that run")
        if worker.run != first.run:
            pick = "; pick one with --run-id" if several else ""
            raise BadInput(f"{worker.path}: a worker of run {worker.run}, not of run {first.run} "
                           f"({first.path}); gather the folders of one run{pick}")
    for worker in workers[1:]:
        for key, what in (("manifest_sha256", "manifest sha256"), (rf.PARAMS_HASH, "params hash")):
            if worker.param(key) != first.param(key):
                reads = ("read the same manifest" if key == "manifest_sha256"
                         else "run the same pilot config")
                raise BadInput(f"{worker.path}: {what} {worker.param(key)[:12]} differs from "
                               f"{first.path}'s {first.param(key)[:12]}; every worker of a run "
                               f"must {reads}")
        if worker.share.workers != first.share.workers:
            raise BadInput(f"{worker.path}: one of {worker.share.workers} workers, but "
                           f"{first.path} is one of {first.share.workers}: another world size; "
                           "gather the folders of one launch")
    by_share: dict[int, Worker] = {}
    for worker in workers:
        other = by_share.setdefault(worker.share.worker, worker)
        if other is not worker:
            raise BadInput(f"worker {worker.share.worker} of {worker.share.workers}: two different "
                           f"folders ({other.path}, {worker.path}): two machines ran the same "
                           "share (given the same rank?); keep the one to count and move the other "
                           "out of the way")
