"""The run folder: its file names, the keys of its JSON files, its IDs, its kind and the files the
harness puts in it. A closed folder is verified and read by kdkit.core.runverify (read_run()).

Every new run folder, of every kind, is made by ``new_run_folder(runs, kind, what,
params_hash=None)``: ``runs/<new_run_id(kind, params_hash)>`` made atomically (mkdir without
exist_ok, in a loop); ``what`` names it in the error (kdkit.core.staging.require_writable's
wording). A command that must refuse bad input with nothing written checks ``runs /
new_run_id(kind)`` first and makes the folder last. IDs: ``<UTC %Y%m%dT%H%M%SZ>-<hash8>`` for a
pilot run (workers add ``-w<I>of<N>``, their gathering ``-gathered``); ``sweep-``, ``resume-test-``,
``train-`` and ``serve-test-`` with ``<UTC %Y%m%d-%H%M%S>``. One collision rule, ``claim(base,
take)``: ``base``, then ``base-2``... until ``take`` does not raise FileExistsError (a pilot's
``take`` is RunFolder.make: a rename).

The writers (kdkit.core.runresults.RunFolder, the summaries of kdkit.probe.pilot and
kdkit.probe.train) write the keys named here; kdkit.core.runverify.read_run() reads exactly those
keys, tolerating files that are missing or torn.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from kdkit.core.checksums import SUMS
from kdkit.core.errors import BadInput

# an open run's only: removed before it closes
from kdkit.core.heartbeat import HEARTBEAT as HEARTBEAT
from kdkit.core.outputfiles import OUTPUTS, STAGING

# the run ID's rules live in runid.py; named here too
from kdkit.core.runid import ID_SHAPES as ID_SHAPES
from kdkit.core.runid import RESUME_A_SHARE as RESUME_A_SHARE
from kdkit.core.runid import WORKER_FOLDER as WORKER_FOLDER
from kdkit.core.runid import base_id as base_id
from kdkit.core.runid import gathered_folder as gathered_folder
from kdkit.core.runid import new_run_id as new_run_id
from kdkit.core.runid import worker_folder as worker_folder

# a run's reports' cells (kdkit.probe.pilot.gathering reads it here)
from kdkit.core.safetext import md_cell as md_cell
from kdkit.core.staging import require_writable
from kdkit.core.stalestaging import staged_name
from kdkit.core.vectorfile import VECTOR_IDS as VECTOR_IDS  # a vector run's rows and their IDs
from kdkit.core.vectorfile import VECTORS as VECTORS

if TYPE_CHECKING:
    from collections.abc import Mapping

T = TypeVar("T")

# ---------------------------------------------------------------- file names

PARAMS, ENV, RESULTS, STOP = "params.json", "env.json", "results.jsonl", "stop.json"
SUMMARY, SUMMARY_MD, RELOAD, RELOAD_CHECK = ("summary.json",
                                             "summary.md", "reload.json", "reload-check.json")
# A training run's own (kdkit.probe.train): metrics, checkpoint folders and their log, output
# (reload: above)
METRICS, CHECKPOINTS, CHECKPOINT_LOG, OUTPUT_LOG = ("metrics.jsonl",
                                                    "checkpoints", "checkpoints.jsonl",
                                                    "output.log")
# What a closed run folder holds, by kind (stop.json too when its summary says it stopped)
REQUIRED = {"pilot": (PARAMS, ENV, RESULTS, SUMMARY, SUMMARY_MD), "gathered": (SUMMARY, SUMMARY_MD),
            "train": (PARAMS, METRICS, STOP, SUMMARY, SUMMARY_MD)}
# The only files the harness puts in a pilot run folder: its own, and earlier sessions' reports kept
# by number on resume. Anything else there (or any of these that is not a regular file) was put
# there by something else, and is never listed in SHA256SUMS.
HARNESS_FILES = frozenset(
    {PARAMS, ENV, RESULTS, SUMMARY, SUMMARY_MD, STOP, SUMS, VECTORS, VECTOR_IDS, HEARTBEAT})
# the file output kind's: outputs/ and its staging folder
HARNESS_FOLDERS = frozenset({OUTPUTS, STAGING})
NUMBERED = re.compile(r"(stop|env)-[0-9]{1,6}\.json")

# ---------------------------------------------------------------- keys of its JSON files

# params.json (RunFolder.make, kdkit.probe.pilot.command) and summary.json
# (kdkit.probe.pilot.report, .gather)
RUN_ID, KIND, PARAMS_HASH, SHARE, WORKER, WORKERS = ("run_id", "kind", "params_hash",
                                                     "share", "worker", "workers")
# params.json: the launcher that gave the share (kdkit.probe.pilot.launchers), outside the hash
LAUNCHER = "launcher"
VERDICT, TOTAL, ACCEPTED, REJECTED, STOPPED, FILES = ("verdict", "total", "accepted",
                                                      "rejected", "stopped", "files")
# a gathering's summary.json: rows of vectors.npy, items' folders
VECTOR_ROWS, OUTPUT_ITEMS = "vectors", "outputs"
# summary.json: {"timings": {"seconds": wall time of the session}}
TIMINGS, SECONDS = "timings", "seconds"
# summary.json: {"peak_memory": {"bytes", "device"}}
PEAK, BYTES, DEVICE = "peak_memory", "bytes", "device"
REASON = "reason"  # stop.json: why the run stopped
PILOT, GATHERED, TRAIN = "pilot", "gathered", "train"  # summary.json's kind

# ---------------------------------------------------------------- IDs and folder names

# names tried before giving up: a thousand runs of one kind in one second is no real use
MAX_CLAIMS = 1000


def claim(base: str, take: Callable[[str], T]) -> T:
    """The one collision rule: ``take(base)``, then ``take(base-2)``, ``take(base-3)``... while it
    raises FileExistsError (the name is taken); ``take`` makes the folder atomically or refuses."""
    for n in range(1, MAX_CLAIMS + 1):
        try:
            return take(base if n == 1 else f"{base}-{n}")
        except FileExistsError:
            continue
    raise BadInput(
        f"{base}: {MAX_CLAIMS} run folders of that name exist; wait a second and start again")


def new_run_folder(runs: Path, kind: str, what: str, params_hash: str | None = None) -> Path:
    """A new, empty ``runs/<run-id>`` made atomically (see the module's docstring)."""
    base = new_run_id(kind, params_hash)

    def take(name: str) -> Path:
        (runs / name).mkdir(parents=True)  # FileExistsError when another run took the name
        return runs / name

    try:
        return claim(base, take)
    except OSError as exc:
        require_writable(runs / base, what)  # the refusal in its usual words
        raise BadInput(f"{runs / base}: cannot create it ({exc.strerror or exc}); make {runs} "
                       f"writable or choose another {what}") from None


def run_folders(runs: Path) -> list[Path]:
    """Every folder under ``runs`` in ID order (IDs of one kind start with the UTC time: time
    order); staging folders (hidden) are not runs."""
    if not runs.is_dir():
        return []
    return sorted(p for p in runs.iterdir() if p.is_dir() and not p.name.startswith("."))


# ---------------------------------------------------------------- its kind, the harness's files


def folder_kind(folder: Path, summary: Mapping[str, Any]) -> str:
    """What the folder is by what it holds, never by what it says: a folder holding params.json is a
    pilot run (of a whole manifest or a worker's share), whatever its summary's ``kind``; only a
    folder without one may be a gathering (which proves nothing by itself: its workers' folders do,
    kdkit.probe.pilot.gather)."""
    if summary.get(KIND) == TRAIN and os.path.lexists(folder / METRICS) \
            and not os.path.lexists(folder / RESULTS):
        return TRAIN  # a training run (kdkit.probe.train): a metrics series, no results
    return (GATHERED if summary.get(KIND) == GATHERED and not os.path.lexists(folder / PARAMS)
            else PILOT)



def harness_file(name: str) -> bool:
    return name in HARNESS_FILES or NUMBERED.fullmatch(name) is not None


def foreign_entries(folder: Path) -> list[str]:
    """Entries of a pilot run folder the harness did not put there (kdkit.core.staging's temporary
    files of a write under way excepted), each with what it is: they are never read, followed or
    listed."""
    found = []
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        final = staged_name(entry.name)
        if final is not None and harness_file(final) and not entry.is_symlink():
            continue  # a write of the harness's under way, or left by a kill (cleaned on resume)
        if entry.name in HARNESS_FOLDERS and entry.is_dir(follow_symlinks=False):
            # the file output kind's folders (what is inside is checked: kdkit.core.outputfiles)
            continue
        regular = entry.is_file(follow_symlinks=False)
        if not (regular and harness_file(entry.name)):
            kind = "a symbolic link" if entry.is_symlink() else "a folder" if entry.is_dir() else \
                "a file" if regular else "not a regular file"
            found.append(f"{entry.name} ({kind})")
    return found


# ---------------------------------------------------------------- a summary's wall time
# (read_run, kdkit.order.worklog, kdkit.probe.pilot.gathering)


def session_seconds(summary: Mapping[str, Any] | None) -> float | None:
    """A pilot summary's wall time (timings.seconds), or None."""
    timings = (summary or {}).get(TIMINGS)
    seconds = timings.get(SECONDS) if isinstance(timings, dict) else None
    if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and seconds >= 0:
        return float(seconds)
    return None
