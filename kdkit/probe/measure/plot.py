"""The sweep's plot, drawn with matplotlib: an optional package (``pip install kdkit[plot]``),
imported only when a plot is asked for, like torch (kdkit.core.layout.OPTIONAL)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.core.errors import BadInput, Unavailable
from kdkit.core.jsonio import atomic_write_bytes
from kdkit.core.staging import require_writable

if TYPE_CHECKING:
    from kdkit.probe.measure.records import SweepReport

NO_MATPLOTLIB = "matplotlib: not installed; `pip install 'kdkit[plot]'` or drop --plot"


def check_plot_path(plot: Path | None, force: bool = False) -> Path | None:
    """A .png path in a folder that exists and can be written, not over a file unless ``force``;
    matplotlib importable. Refused before any work is done."""
    if plot is None:
        return None
    if plot.suffix.lower() != ".png":
        raise BadInput(f"--plot {plot}: the plot is a PNG; give a path ending in .png")
    # resolved, it would write (or --force replace) whatever the link points at
    if plot.is_symlink():
        raise BadInput(f"--plot {plot}: is a symbolic link; give the path of the file itself")
    path = plot.resolve()
    if not path.parent.is_dir():
        raise BadInput(f"--plot {plot}: folder {path.parent} does not exist; create it first")
    if path.is_dir():
        raise BadInput(f"--plot {plot}: is a folder; give a file name ending in .png")
    if path.exists() and not force:
        raise BadInput(
            f"--plot {plot}: already exists; pass --force to replace it, or choose another name")
    require_writable(path.parent, "folder for --plot")
    if importlib.util.find_spec("matplotlib") is None:
        raise Unavailable(NO_MATPLOTLIB)
    return path


def written(path: Path, write: Callable[[], None]) -> None:
    """Do ``write``; a filesystem that refuses it after the checks (full, gone read-only) is one
    line."""
    try:
        write()
    except OSError as exc:
        raise BadInput(f"{path}: cannot write it ({exc.strerror or exc}); free space or make the "
                       "folder writable and run the sweep again") from None


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (no display on a rented machine); Unavailable without
    matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise Unavailable(NO_MATPLOTLIB) from None
    return plt


def save_png(plt: Any, figure: Any, out: Path) -> None:
    """The figure laid out, drawn as a PNG at 110 dpi, written atomically to ``out`` and closed."""
    import io

    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110)
    plt.close(figure)
    atomic_write_bytes(out, buffer.getvalue())


def sweep_plot(report: SweepReport, out: Path) -> None:
    """Throughput and peak memory against batch size, one line per length group; limits marked with
    x."""
    plt = pyplot()
    figure, (speed, memory) = plt.subplots(1, 2, figsize=(11, 4.2))
    for group in report["groups"]:
        rows = [r for r in report["rows"] if r["group"] == group["name"]]
        done = [r for r in rows if not r["limit"]]
        label = f"{group['name']} ({group['min_bytes']}-{group['max_bytes']} B)"
        line, = speed.plot([r["batch_size"] for r in done], [r["items_per_second"] for r in done],
                           marker="o",
                           label=label)
        memory.plot([r["batch_size"] for r in done], [r["peak_memory_bytes"] / 2**20 for r in done],
                    marker="o",
                    color=line.get_color(), label=label)
        for row in rows:
            if row["limit"] or row["errors"] or row["same_as_batch_1"] is False:
                # A failure is drawn where it happened, never folded into a line.
                speed.scatter([row["batch_size"]], [0], marker="x", s=80, color=line.get_color())
    for axes, title in ((speed, "completed inputs / s"),
                        (memory, f"peak memory, MiB\n{report['memory_kind']}")):
        axes.set_xscale("log", base=2)
        axes.set_xticks(report["batch_sizes"], [str(b) for b in report["batch_sizes"]])
        axes.set_xlabel("batch size")
        axes.set_title(title, fontsize=10)
        axes.grid(True, alpha=0.3)
    speed.legend(fontsize=8)
    figure.suptitle(
        f"kdkit sweep: {report['entry']} on {report['device']} (x: limit or error)", fontsize=11)
    save_png(plt, figure, out)
