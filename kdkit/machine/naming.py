"""A run as kdkit starts it on the host: its run ID chosen there, its container's name and labels,
and ``kdkit run --detach``, which starts it under them and returns at once.

Every container kdkit starts carries ``dev.kdkit.run-id``, ``dev.kdkit.project`` and
``dev.kdkit.role`` (run or worker), so one left running is found by its run (kdkit.machine.watch
reads them for ``kdkit status``). A detached container is not removed when it ends, so that
``kdkit wait`` (kdkit.machine.waiting) can read its exit code.
"""

from __future__ import annotations

import os
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

# kdkit.probe.pilot.launchers.RUN_ID_VAR: the pilot names its folder with it
RUN_ID_VAR = "KDKIT_RUN_ID"
LABEL_RUN, LABEL_PROJECT, LABEL_ROLE = "dev.kdkit.run-id", "dev.kdkit.project", "dev.kdkit.role"


# ---------------------------------------------------------------- naming and labelling


def labels_for(project_root: Path, run_id: str | None, role: str) -> dict[str, str]:
    return {LABEL_PROJECT: str(project_root), LABEL_ROLE: role,
            **({LABEL_RUN: run_id} if run_id else {})}


def container_name(run_id: str, worker: int | None = None) -> str:
    return f"kdkit-{run_id}" + (f"-w{worker}" if worker is not None else "")


def host_run_id(project: Any, runs: Path, names: Any = None) -> str:
    """A new run ID chosen on the host, as the pilot chooses one (kdkit.core.runfolder.new_run_id
    and its one collision rule): free when none of ``names(candidate)`` (default: the folder of that
    name) exists in runs/."""
    from kdkit.core.pilotconfig import load_pilot, params_hash
    from kdkit.core.runfolder import PILOT, claim, new_run_id

    def free(candidate: str) -> str:
        if any(os.path.lexists(runs / name)
               for name in (names(candidate) if names else [candidate])):
            raise FileExistsError(candidate)
        return candidate

    return claim(new_run_id(PILOT, params_hash(load_pilot(project.root).resolved())), free)


def with_run_id(plan: Any) -> Any:
    """``plan`` (a kdkit.machine.run.RunPlan) with its run named and its container labelled: the
    image's own pilot gets the host's run ID as KDKIT_RUN_ID (a --resume names its run itself; a
    command after ``--`` is the user's, unnamed)."""
    spec = plan.spec
    run_id = resumed_id(spec.command)
    if spec.command is None:
        run_id = host_run_id(plan.project, plan.runs)
        spec = replace(spec, extra_env={**spec.extra_env, RUN_ID_VAR: run_id})
    name = container_name(run_id) if run_id and spec.command is None else None
    # a resume: the run's earlier container may still be there, ended, under its name
    if run_id and name is None:
        name = f"{container_name(run_id)}-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}"
    spec = replace(spec,
                   labels={**spec.labels, **labels_for(plan.project.root, run_id, "run")},
                   name=(name))
    return replace(plan, spec=spec, run_id=run_id)


def resumed_id(command: list[str] | None) -> str | None:
    """The run a ``--resume`` command finishes (kdkit.image.labels.resumed_command ends ``--resume
    ID``)."""
    text = " ".join(command or [])
    marker = "--resume "
    if marker not in text:
        return None
    from kdkit.core.projectfiles import is_safe_id

    words = text.rsplit(marker, 1)[1].split()
    return words[0] if words and is_safe_id(words[0]) else None


# ---------------------------------------------------------------- detach


def follow_lines(run_id: str, project_root: Path) -> list[str]:
    where = f" --project {project_root}" if Path.cwd().resolve() != project_root else ""
    return [
        f"kdkit status {run_id}{where}", f"kdkit wait {run_id}{where}",
        f"kdkit logs {run_id} -f{where}"]


def detached_lines(plan: Any) -> list[str]:
    """``--detach --print``: the host steps, then ``docker run --detach``: the container kept once
    it has ended (its exit code read, then removed, by `kdkit wait`), as :func:`detach` starts
    it."""
    from kdkit.docker_adapter import cli_arguments, shell_line

    words = cli_arguments(plan.spec)
    words[words.index("--rm")] = "--detach"
    return [step.shell for step in plan.host_steps] + [shell_line(words)]


def detach(plan: Any, engine: Any = None) -> dict[str, Any]:
    """Start the run's container and return at once: its run ID, its container and how to follow
    it."""
    from kdkit.docker_adapter import connect

    for step in plan.host_steps:
        step.action()
    container_id, name = (engine or connect()).start(plan.spec)
    return {"run_id": plan.run_id, "container": name, "container_id": container_id,
            "image": plan.image.ref,
            "backend": plan.backend,
            "follow": follow_lines(plan.run_id, plan.project.root) if plan.run_id else []}


def detach_workers(plan: Any, engine: Any = None) -> dict[str, Any]:
    """Start the N workers' containers and return at once; ``kdkit wait`` gathers them."""
    from kdkit.docker_adapter import connect

    for step in plan.base.host_steps:
        step.action()
    engine = engine or connect()
    started = [engine.start(spec) for spec in plan.specs]
    return {"run_id": plan.run_id, "containers": [name for _, name in started],
            "image": plan.base.image.ref,
            "backend": plan.base.backend,
            "follow": follow_lines(plan.run_id, plan.base.project.root)}
