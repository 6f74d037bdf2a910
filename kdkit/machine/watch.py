"""Runs followed from any shell: ``kdkit status``, and the run's state that ``kdkit wait`` and
``kdkit logs`` (kdkit.machine.waiting) read.

The unit that survives a lost connection is the container: it carries ``dev.kdkit.run-id``,
``dev.kdkit.project`` and ``dev.kdkit.role`` (run or worker; kdkit.machine.naming names and labels
it), so one left running is found by its run. What a run has done is read from its folder, never
from the process that started it: the heartbeat of a pilot or a training while open
(:mod:`kdkit.core.heartbeat`), summary.json and stop.json once closed (never results.jsonl).

A detached container is not removed when it ends, so its exit code is kept; ``kdkit wait`` reads it
and removes the container. The verdict is the run folder's when it has one (0 pass, 1 fail), else
the container's exit code (a run that died before its summary). A workers run (``--workers N``) is
gathered by ``kdkit wait`` once every worker has ended, as ``kdkit run --workers`` does in the
foreground (kdkit.probe.pilot.gather).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.core.errors import BadInput
from kdkit.core.heartbeat import age_seconds, process_alive, read_heartbeat
from kdkit.core.runid import RunId, as_run_id, gathered_folder  # one run-ID rule, one folder name
from kdkit.docker_adapter import Labelled, labelled_containers
from kdkit.machine.naming import LABEL_PROJECT, LABEL_ROLE, LABEL_RUN, container_name

if TYPE_CHECKING:
    from typing import Required, TypedDict

    class ContainerShown(TypedDict):
        """A run's container as a status shows it."""

        name: str
        id: str  # its first 12 characters
        state: str
        status: str
        exit_code: int | None
        labels: dict[str, str]

    class Overall(TypedDict, total=False):
        """A run's one state over its folders (:func:`_overall`)."""

        state: Required[str]
        gathered: str | None  # the gathering's folder, once it has a summary
        done: Any  # accepted + rejected, as the gathering's summary.json counts them
        total: Any  # as the gathering's summary.json says
        reason: str

# kdkit.core.runfolder's names, repeated here so that `kdkit status` does not import it (and what it
# stands on: a third of status's 150 ms); tests/core/test_heartbeat.py checks that they agree.
PARAMS, STOP, SUMMARY, KIND, TRAIN = "params.json", "stop.json", "summary.json", "kind", "train"
WORKER_FOLDER = re.compile(r"^(?P<base>.+)-w(?P<worker>\d+)of(?P<workers>\d+)$")
STALE_S = 300.0  # a heartbeat older than this, with no container and no live process, is a lost run
WAIT_POLL_S = 1.0


# ---------------------------------------------------------------- reading a run


@dataclass(frozen=True)
class Place:
    """Where a project's runs are, as the readers (status, wait, logs) need it: its root and its
    runs/."""

    root: Path
    runs: Path


def place(project_dir: Path | None) -> Place:
    """The project (PROJECT_DIR, or found upward from cwd) and its runs/ (the pilot config's
    ``runs``, links resolved inside the project; runs/ when there is no config/pilot.json and
    kdkit.json names none). Read, not validated: a reader needs one path, and answers within its 150
    ms."""
    from kdkit.core.projectfiles import MARKER, project_root, real_inside

    root = project_root(project_dir)
    config = _read_object(root / MARKER, "project file")
    pilot_path = root / str(config.get("pilot_config", "config/pilot.json"))
    pilot = (_read_object(pilot_path, "pilot config") if "pilot_config" in config
             or pilot_path.exists() else {})
    rel = str(pilot.get("runs", "runs"))
    runs = real_inside(root, root / rel)
    if runs is None:
        raise BadInput(f"{pilot_path}: runs {rel!r} leaves the project; keep it inside")
    return Place(root, runs)


def _read_object(path: Path, what: str) -> dict[str, Any]:
    """A JSON object the reader needs (json alone: kdkit.core.jsonio's strict reader costs status 30
    ms)."""
    import json

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BadInput(f"{path}: cannot read the {what} ({exc}); run `kdkit validate`") from None
    if not isinstance(data, dict):
        raise BadInput(f"{path}: $: expected an object; run `kdkit validate`")
    return data


def _object(path: Path) -> dict[str, Any]:
    import json

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def folders_of(runs: Path, run_id: str) -> list[Path]:
    """The run's own folder, or its workers' folders (``<id>-w<i>of<N>``), in worker order."""
    if (runs / run_id).is_dir():
        return [runs / run_id]
    found = []
    for path in runs.glob(f"{run_id}-w*of*"):
        match = WORKER_FOLDER.match(path.name)
        if match and match.group("base") == run_id and path.is_dir():
            found.append((int(match.group("worker")), path))
    return [path for _, path in sorted(found)]


def _seconds_between(start: Any, end: Any) -> float | None:
    try:
        return (datetime.fromisoformat(str(end))
                - datetime.fromisoformat(str(start))).total_seconds()
    except ValueError:
        return None


def _closed(summary: dict[str, Any], stop: dict[str, Any], limit: Any) -> dict[str, Any]:
    # a training run always writes stop.json: its verdict says how it ended
    if summary.get(KIND) == TRAIN:
        return _closed_training(summary, stop)
    stopped = stop or summary.get("stopped")
    state = "stopped" if stopped else "passed" if summary.get("verdict") == "pass" else "failed"
    accepted, rejected = summary.get("accepted"), summary.get("rejected")
    done = accepted + rejected if isinstance(accepted, int) and isinstance(rejected, int) else None
    timings = summary.get("timings") if isinstance(summary.get("timings"), dict) else {}
    seconds = timings.get("seconds") if isinstance(timings, dict) else None
    return {"state": state, "verdict": summary.get("verdict"),
            "reason": (stopped or {}).get("reason")
            if isinstance(stopped, dict) else None,
            "rule": (stopped or {}).get("rule") if isinstance(stopped, dict)
            else None, "done": done, "total": summary.get("total"), "accepted": accepted,
            "rejected": rejected,
            "rejection_limit": limit, "elapsed_seconds": seconds,
            "rate": round(done / seconds, 3) if done and isinstance(seconds, (int, float))
            and seconds > 0 else None}


def _closed_training(summary: dict[str, Any], stop: dict[str, Any]) -> dict[str, Any]:
    verdict = summary.get("verdict")
    timings = summary.get("timings")
    return {"state": {"pass": "passed", "fail": "failed"}.get(str(verdict), "stopped"),
            "verdict": verdict,
            "kind": TRAIN, "reason": None if verdict == "pass" else stop.get("reason"),
            "step": summary.get("steps"),
            "elapsed_seconds": timings.get("seconds") if isinstance(timings, dict) else None}


def _open(beat: dict[str, Any], container: Labelled | None, now: datetime) -> dict[str, Any]:
    """A run whose folder is open: its heartbeat's counts, and whether it still runs (container,
    process, age)."""
    age = age_seconds(beat, now)
    alive = process_alive(beat)
    if container is not None:
        running = not container.ended
    else:
        running = bool(alive) or (alive is None and age is not None and age < STALE_S)
    if beat.get(KIND) == TRAIN:  # a training run's: its step and steps per second
        return {"state": "running" if running else "lost", "verdict": None, "kind": TRAIN,
                "reason": None if running
                else "no heartbeat for a while and its process is gone; `kdkit train --resume` "
                "goes on from its newest checkpoint", "step": beat.get("done"),
                "rate": beat.get("rate"),
                "elapsed_seconds": _seconds_between(beat.get("started"), now.isoformat()),
                "heartbeat_age_seconds": round(age, 1) if age is not None else None}
    done, total, rate = beat.get("done"), beat.get("total"), beat.get("rate")
    eta = None
    if isinstance(done, (int, float)) and isinstance(total, (int, float)) \
            and isinstance(rate, (int, float)):
        eta = round((total - done) / rate, 1) if running and rate > 0 else None
    elapsed = _seconds_between(beat.get("started"), now.isoformat())
    limit = beat.get("max_seconds")
    return {"state": "running" if running else "lost", "verdict": None,
            "reason": None if running else
            "no container and no heartbeat for a while: the process that ran it is gone; resume it",
            "done": done, "total": total, "accepted": beat.get("accepted"),
            "rejected": beat.get("rejected"),
            "rejection_limit": beat.get("rejection_limit"), "last_error": beat.get("last_error"),
            "rate": rate,
            "eta_seconds": eta,
            "elapsed_seconds": round(elapsed, 1) if elapsed is not None else None,
            "max_seconds": limit,
            "remaining_seconds": round(limit - elapsed, 1) if isinstance(limit, (int, float))
            and elapsed is not None
            and running else None,
            "heartbeat_age_seconds": round(age, 1) if age is not None else None}


def folder_status(folder: Path, container: Labelled | None, now: datetime | None = None,
                  engine: bool = False) -> dict[str, Any]:
    """One run folder's state from its summary, stop.json or heartbeat (never results.jsonl), and
    its container; ``engine``: the engine answered, so a run `kdkit run` started (params.json's
    ``launch``) whose labelled container is not there is lost at once, whatever the age of its
    heartbeat."""
    now = now or datetime.now(timezone.utc)
    summary, stop = _object(folder / SUMMARY), _object(folder / STOP)
    if summary:
        rules = _object(folder / PARAMS).get("params", {})
        state = _closed(summary, stop,
                        (rules.get("stop") or {}).get("max_rejected") if isinstance(rules, dict)
                        else None)
    elif (beat := read_heartbeat(folder)) is not None:
        state = _open(beat, container, now)
        if state["state"] == "running" and container is None and engine \
                and "launch" in _object(folder / PARAMS):
            state.update(state="lost", eta_seconds=None, remaining_seconds=None,
                         reason=(
                             "its container is gone and it wrote no summary; `kdkit run --resume` "
                             "finishes it"))
    elif container is not None and not container.ended:
        state = {"state": "running", "reason": "starting (diagnose, verify-env)"}
    elif stop:
        state = {"state": "stopped", "reason": stop.get("reason"), "rule": stop.get("rule")}
    else:
        state = {"state": "lost", "reason": "no summary, no heartbeat and no container running"}
    if state["state"] != "running" and container is not None and container.ended and not summary:
        state.update(
            state="failed",
            reason=(f"its container exited with {container.exit_code} before the summary"))
    return {"folder": str(folder), **state, "container": _shown(container)}


def _shown(container: Labelled | None) -> ContainerShown | None:
    if container is None:
        return None
    return {"name": container.name, "id": container.id[:12], "state": container.state,
            "status": container.status,
            "exit_code": container.exit_code, "labels": container.labels}


def _container_for(containers: list[Labelled], folder: Path, run_id: str) -> Labelled | None:
    """The container of one folder: a worker's by its name; a run's own, the one running (a
    resume's), else any."""
    match = WORKER_FOLDER.match(folder.name)
    if match and folder.name != run_id:
        return next(
            (c for c in containers if c.name == container_name(run_id, int(match.group("worker")))),
            None)
    own = sorted((c for c in containers if c.labels.get(LABEL_ROLE) == "run"),
                 key=lambda c: c.ended)
    return own[0] if own else None


def _engine_containers(project: Place, run_id: str | None) -> list[Labelled] | None:
    wanted = {LABEL_PROJECT: str(project.root), **({LABEL_RUN: run_id} if run_id else {})}
    return labelled_containers(wanted)


def run_status(project: Place, run_id: RunId,
               containers: list[Labelled] | None = None) -> dict[str, Any]:
    """Where run ``run_id`` stands: its folders' states (a workers run: each worker's, and its
    gathering's) and its containers; BadInput when neither a folder nor a container of this project
    names it."""
    runs = project.runs
    if containers is None:
        containers = _engine_containers(project, run_id)
    mine = [c for c in containers or [] if c.labels.get(LABEL_RUN) == run_id]
    folders = folders_of(runs, run_id)
    gathered = runs / gathered_folder(run_id)
    if not folders and not mine and not gathered.is_dir():
        raise BadInput(f"run {run_id}: no run folder in {runs} and no container of this project "
                       "labelled with it; see `kdkit status` for the runs there are")
    parts = [folder_status(folder, _container_for(mine, folder, run_id),
                           engine=containers is not None)
             for folder in folders]
    if not parts:
        parts = [{"folder": None, "state": "running" if any(not c.ended for c in mine) else "lost",
                  "reason": "starting (diagnose, verify-env)", "container": _shown(c)}
                 for c in mine]
    report = {"run_id": run_id, "runs": str(runs), "engine": containers is not None,
              **_overall(parts, gathered),
              "workers": parts if len(folders) > 1
              or WORKER_FOLDER.match(folders[0].name if folders else "")
              else None}
    if report["workers"] is None and parts:
        report.update({k: v for k, v in parts[0].items() if k not in report})
    return report


def _overall(parts: list[dict[str, Any]], gathered: Path) -> Overall:
    """A run's one state: its only folder's; for workers, the gathering's verdict, else running
    while any runs."""
    summary = _object(gathered / SUMMARY)
    if summary:
        return {"state": "passed" if summary.get("verdict") == "pass" else "failed",
                "gathered": str(gathered),
                "done": (summary.get("accepted") or 0) + (summary.get("rejected") or 0),
                "total": summary.get("total")}
    states = [part["state"] for part in parts]
    if len(parts) == 1:
        return {"state": states[0]}
    if "running" in states:
        return {"state": "running", "gathered": None}
    return {"state": "ended",
            "gathered": None, "reason": "every worker has ended; `kdkit wait` gathers them"}


def recent_runs(runs: Path, containers: list[Labelled] | None) -> list[RunId]:
    """The runs `kdkit status` shows without an ID: those with a container or a running heartbeat,
    and the most recent folder; a name that is no run ID is none of them."""
    ids = {c.labels[LABEL_RUN] for c in containers or [] if c.labels.get(LABEL_RUN)}
    newest: tuple[float, str] | None = None
    with os.scandir(runs) if runs.is_dir() else _nothing() as entries:
        for entry in entries:
            if not entry.is_dir() or entry.name.endswith("-gathered") or entry.name.startswith("."):
                continue
            beat = read_heartbeat(Path(entry.path))
            if beat is not None and beat.get("state") == "running":
                ids.add(_base_id(entry.name))
            mtime = entry.stat().st_mtime
            if newest is None or mtime > newest[0]:
                newest = (mtime, _base_id(entry.name))
    if newest is not None:
        ids.add(newest[1])
    return sorted(run_id for run_id in map(as_run_id, ids) if run_id is not None)


def _base_id(folder: str) -> str:
    match = WORKER_FOLDER.match(folder)
    return match.group("base") if match else folder


class _nothing:
    def __enter__(self) -> list[os.DirEntry[str]]:
        return []

    def __exit__(self, *exc: object) -> None:
        return None


def project_status(project: Place) -> dict[str, Any]:
    """Every run of the project still followed (a container, a running heartbeat) and the most
    recent one."""
    runs = project.runs
    containers = _engine_containers(project, None)
    found = []
    for run_id in recent_runs(runs, containers):
        try:
            found.append(run_status(project, run_id, containers))
        except BadInput:
            continue
    return {"project": str(project.root), "runs_folder": str(runs),
            "engine": containers is not None, "runs": found}
