"""Run IDs: their shapes per kind, a new one, a worker's and a gathering's folder names, and the one
rule an ID given by a person (an option) or a launcher (a variable) must meet. An ID given on a
command line is checked by its parser (:func:`run_id_type`, the option's type) and travels inward
as a :class:`RunId`, never checked again. Standard library only."""

from __future__ import annotations

import re
from datetime import datetime, timezone

from kdkit.core.errors import BadInput
from kdkit.core.projectfiles import SAFE_ID_RULE, is_safe_id

TYPE_CHECKING = False  # typing is not imported at start-up (kdkit.core.commands says why)
if TYPE_CHECKING:
    from collections.abc import Callable

ID_SHAPES = {"pilot": ("", "%Y%m%dT%H%M%SZ"), "sweep": ("sweep-", "%Y%m%d-%H%M%S"),
             "resume-test": ("resume-test-", "%Y%m%d-%H%M%S"), "train": ("train-", "%Y%m%d-%H%M%S"),
             "serve-test": ("serve-test-", "%Y%m%d-%H%M%S")}
WORKER_FOLDER = re.compile(r"^(?P<base>.+)-w(?P<worker>\d+)of(?P<workers>\d+)$")


def new_run_id(kind: str, params_hash: str | None = None, now: datetime | None = None) -> str:
    """The kind's prefix, the UTC time and a short hash of the resolved parameters (a changed config
    gives a new ID)."""
    prefix, stamp = ID_SHAPES[kind]
    moment = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
    return f"{prefix}{moment.strftime(stamp)}" + (f"-{params_hash[:8]}" if params_hash else "")


def worker_folder(run_id: str, worker: int, workers: int) -> str:
    return f"{run_id}-w{worker}of{workers}"


def gathered_folder(run_id: str) -> str:
    return f"{run_id}-gathered"


def base_id(folder: str) -> str:
    """The shared run ID of a worker folder (``X-w0of2`` -> ``X``); a whole-manifest run is its
    own."""
    match = WORKER_FOLDER.match(folder)
    return match.group("base") if match else folder


def check_run_id(run_id: str, option: str, fix: str = "") -> str:
    """``run_id`` as a run ID, else BadInput naming ``option`` (``--run-id`` or ``NAME=`` for a
    variable)."""
    if not is_safe_id(run_id):
        raise BadInput(f"{option}{run_id!r}: not a valid run ID; {SAFE_ID_RULE}{fix}")
    return run_id


RESUME_A_SHARE = "; choose an ID without it (to resume a worker's folder, use --resume)"


def check_new_run_id(run_id: str, option: str, fix: str = "") -> str:
    """A run ID for a new run: a safe ID that does not end like a worker's folder (``-wIofN``, which
    kdkit adds itself), so a folder's name always tells its run and share apart. The one rule of a
    new run's ID, for an option (``--run-id ``) and for a variable (``KDKIT_RUN_ID=``, with ``fix``
    saying what to set instead)."""
    check_run_id(run_id, option, fix)
    if WORKER_FOLDER.match(run_id):
        raise BadInput(f"{option}{run_id!r}: ends like a worker's folder (-wIofN), which kdkit "
                       f"adds to the run ID itself{fix or RESUME_A_SHARE}")
    return run_id


class RunId(str):
    """A run ID that met the rule: made by :func:`run_id_type` (a command line's), by a launcher's
    variable (kdkit.probe.pilot.launchers) or by :func:`new_run_id`'s caller; a function given one
    takes it as checked."""

    __slots__ = ()


def as_run_id(name: str) -> RunId | None:
    """A name read from the machine (a run folder's, a container label's) as a RunId; None when it
    is not one, so a reader skips a folder someone else named."""
    return RunId(name) if is_safe_id(name) else None


def run_id_type(option: str, *, new: bool = False) -> Callable[[str], RunId]:
    """The parser's type of a run ID option or argument (argparse's ``type=``, kdkit.cli's RUN_ID):
    the value checked by :func:`check_new_run_id` (``new``: an ID for a new run) or
    :func:`check_run_id`, its BadInput naming ``option``; argparse and click let a BadInput pass, so
    it ends the command as one line, exit 2, like every other bad input."""
    check = check_new_run_id if new else check_run_id

    def parse(value: str) -> RunId:
        return RunId(check(value, f"{option} "))

    parse.__name__ = "run ID"  # argparse names the type by it
    return parse
