"""`kdkit sweep`: the project side of the batch-size sweep (measurements in kdkit.probe.measure.sweep).

It checks every option and input before anything runs or is written (batch sizes, groups, device,
the plot's path, the pilot config and its inputs, a runs folder that can be written), runs the
sweep in this interpreter (the app is imported as the pilot imports it), keeps the measurements in
``runs/sweep-<time>/sweep.json`` and draws the plot when asked.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kdkit.core.errors import BadInput, Unavailable
from kdkit.core.jsonio import atomic_write_json
from kdkit.core.pilotconfig import check_device
from kdkit.core.staging import require_writable
from kdkit.probe.measure.sweep import Progress, measure, parse_batch_sizes, prepare_sweep
from kdkit.project import load_project
from kdkit.resume import new_run_folder


def check_plot_path(plot: Path | None, force: bool = False) -> Path | None:
    """A .png path in a folder that exists and can be written, not over a file unless ``force``;
    matplotlib importable. Refused before any work is done."""
    if plot is None:
        return None
    if plot.suffix.lower() != ".png":
        raise BadInput(f"--plot {plot}: the plot is a PNG; give a path ending in .png")
    path = plot.resolve()
    if not path.parent.is_dir():
        raise BadInput(f"--plot {plot}: folder {path.parent} does not exist; create it first")
    if path.is_dir():
        raise BadInput(f"--plot {plot}: is a folder; give a file name ending in .png")
    if path.exists() and not force:
        raise BadInput(f"--plot {plot}: already exists; pass --force to replace it, or choose another name")
    require_writable(path.parent, "folder for --plot")
    if importlib.util.find_spec("matplotlib") is None:
        raise Unavailable("matplotlib: not installed; `pip install 'kdkit[plot]'` or drop --plot")
    return path


def sweep(project_dir: Path | None, *, batch_sizes: str = "1,2,4", groups: int = 3, device: str | None = None,
          plot: Path | None = None, force: bool = False, progress: Progress | None = None) -> dict[str, Any]:
    """Run the sweep; return the report with ``out`` (the saved JSON) and ``plot`` (when drawn)."""
    sizes = parse_batch_sizes(batch_sizes)
    if groups < 1:
        raise BadInput(f"--groups {groups}: must be a positive integer")
    if device is not None:
        check_device(device)
    plot_path = check_plot_path(plot, force)
    project = load_project(project_dir)
    prepared = prepare_sweep(project.root, sizes, groups, device=device)
    out = new_run_folder(prepared.config.runs_dir, "sweep") / "sweep.json"
    require_writable(out.parent, "runs folder (pilot config's runs)")
    report = measure(prepared, progress)
    started = time.perf_counter()
    report["out"] = str(out)
    _written(out, lambda: atomic_write_json(out, report))
    if plot_path is not None:
        from kdkit.plot import sweep_plot

        _written(plot_path, lambda: sweep_plot(report, plot_path))
        report["plot"] = str(plot_path)
    report["report_seconds"] = round(time.perf_counter() - started, 3)
    return report


def _written(path: Path, write: Callable[[], None]) -> None:
    """Do ``write``; a filesystem that refuses it after the checks (full, gone read-only) is one line."""
    try:
        write()
    except OSError as exc:
        raise BadInput(f"{path}: cannot write it ({exc.strerror or exc}); free space or make the folder "
                       "writable and run the sweep again") from None
