"""`kdkit resume-test`: the project side of the resume test (the phases run in kdkit.probe.measure.resume).

It reads which module is the project's training loop (``"train"`` in kdkit.json, default
``src.train``), gives the test a new folder under the project's ``runs/``, and hands over to the
probe, which runs each phase in a fresh interpreter. The same probe runs inside the image as
``python -m kdkit.probe.measure.resume``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from kdkit.core.errors import BadInput
from kdkit.probe.measure.resume import Plan, Progress, run_resume_test
from kdkit.project import Project, load_project

DEFAULT_MODULE = "src.train"


def new_run_folder(runs: Path, prefix: str) -> Path:
    """``runs/<prefix>-<UTC time>``, with a counter when two tests start in the same second."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    candidate = runs / f"{prefix}-{stamp}"
    counter = 1
    while candidate.exists():
        counter += 1
        candidate = runs / f"{prefix}-{stamp}-{counter}"
    return candidate


def runs_dir(project: Project) -> Path:
    """The pilot config's runs folder, held to the one containment rule (inside the project, links resolved)."""
    from kdkit.core.projectfiles import inside, require_real_inside

    config = project.pilot_config_path
    relative = project.pilot_config().get("runs", "runs")
    if not isinstance(relative, str):
        raise BadInput(f"{config}: $.runs: expected a folder path inside the project; run `kdkit validate`")
    return require_real_inside(project.root, inside(project.root, relative, config, "$.runs"), config, "$.runs")


def resume_test(
    project_dir: Path | None,
    *,
    steps: int = 8,
    save_at: int = 3,
    module: str | None = None,
    device: str = "auto",
    python: str | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Run the resume test of a project; return the report (``ok`` says whether it was exact)."""
    project = load_project(project_dir)
    chosen = module or str(project.config.get("train", DEFAULT_MODULE))
    if not all(part.isidentifier() for part in chosen.split(".")):
        raise BadInput(f"--module {chosen!r}: not a dotted module name (e.g. src.train)")
    plan = Plan(project.root, chosen, steps, save_at, new_run_folder(runs_dir(project), "resume-test"),
                python or sys.executable, device)
    return run_resume_test(plan, progress)
