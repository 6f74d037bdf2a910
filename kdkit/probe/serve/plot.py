"""The serve test's plot, drawn with matplotlib (optional, imported only when a plot is asked for):
latency percentiles against the arrival rate, one line per batching policy and percentile."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kdkit.probe.measure.plot import pyplot, save_png

STYLES = {"p50": ":", "p95": "-", "p99": "--"}


def latency_plot(report: dict[str, Any], out: Path) -> None:
    """p50/p95/p99 latency (ms) against requests/s per policy; the objectives as grey lines."""
    plt = pyplot()
    figure, axes = plt.subplots(figsize=(8, 4.5))
    for name in dict.fromkeys(r["policy"]["name"] for r in report["results"]):
        results = sorted((r for r in report["results"] if r["policy"]["name"] == name),
                         key=lambda r: r["rate"])
        colour = None
        for key, style in STYLES.items():
            points = [(r["rate"], r["summary"]["latency_ms"][key]) for r in results
                      if r["summary"]["latency_ms"][key] is not None]
            if points:
                line, = axes.plot(*zip(*points, strict=True), style, marker="o",
                                  color=colour, label=f"{name} {key}")
                colour = line.get_color()
    for objective in report["results"][0]["summary"]["objectives"] if report["results"] else []:
        axes.axhline(objective["objective_ms"], color="grey", linewidth=0.8)
    axes.set_xlabel("arrival rate, requests/s")
    axes.set_ylabel("latency from scheduled arrival, ms")
    axes.set_yscale("log")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=7)
    axes.set_title(
        f"kdkit serve-test: {report.get('url') or report.get('entry')} (grey: objectives)",
        fontsize=(10))
    save_png(plt, figure, out)
