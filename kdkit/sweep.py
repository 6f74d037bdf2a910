"""`kdkit sweep`: the project side of the batch-size sweep (measurements in kdkit.probe.sweep).

It checks every option before anything runs, runs the sweep in this interpreter (the app is
imported as the pilot imports it), keeps the measurements in ``runs/sweep-<time>/sweep.json``
and draws the plot when asked.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from kdkit.errors import BadInput
from kdkit.jsonio import atomic_write_json
from kdkit.probe.sweep import Progress, parse_batch_sizes, run_sweep
from kdkit.project import load_project
from kdkit.resume import new_run_folder


def check_plot_path(plot: Path | None) -> Path | None:
    """A .png path whose folder exists; refused before any work is done."""
    if plot is None:
        return None
    if plot.suffix.lower() != ".png":
        raise BadInput(f"--plot {plot}: the plot is a PNG; give a path ending in .png")
    if not plot.resolve().parent.is_dir():
        raise BadInput(f"--plot {plot}: folder {plot.resolve().parent} does not exist; create it first")
    return plot.resolve()


def sweep(project_dir: Path | None, *, batch_sizes: str = "1,2,4", groups: int = 3, device: str | None = None,
          plot: Path | None = None, progress: Progress | None = None) -> dict[str, Any]:
    """Run the sweep; return the report with ``out`` (the saved JSON) and ``plot`` (when drawn)."""
    sizes = parse_batch_sizes(batch_sizes)
    if groups < 1:
        raise BadInput(f"--groups {groups}: must be a positive integer")
    plot_path = check_plot_path(plot)
    project = load_project(project_dir)
    report = run_sweep(project.root, sizes, groups, device=device, progress=progress)
    started = time.perf_counter()
    runs = project.root / str(project.pilot_config().get("runs", "runs"))
    out = new_run_folder(runs, "sweep") / "sweep.json"
    report["out"] = str(out)
    atomic_write_json(out, report)
    if plot_path is not None:
        from kdkit.plot import sweep_plot

        sweep_plot(report, plot_path)
        report["plot"] = str(plot_path)
    report["report_seconds"] = round(time.perf_counter() - started, 3)
    return report
