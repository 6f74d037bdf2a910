"""The reports `kdkit resume-test` (resume.py) and `kdkit sweep` (sweep.py) build and return. Types
only, for the type checker: resume.py has no room for them (docs/architecture.md: a module fits in
400 lines), and plot.py, which draws the sweep's report, cannot import sweep.py (which imports
plot.py); nothing here runs.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at start-up (kdkit.core.commands says why)
if TYPE_CHECKING:
    from typing import Any, NotRequired, TypedDict

    from kdkit.probe.measure.cells import GroupInfo, SweepCell

    class Losses(TypedDict):
        """The resume test's losses: the uninterrupted run's and the resumed run's."""

        full: list[float]
        resumed: Any  # the resume phase's metrics.json "losses", as the loop wrote it

    class ResumeReport(TypedDict):
        """The resume test's report (resume.py ``compare``; OUT/report.json)."""

        module: str
        steps: int
        save_at: int
        device: Any  # the full phase's metrics.json "device", as the loop wrote it
        nproc_per_node: int | None
        tolerance: str | None
        checkpoint: str
        checkpoint_bytes: int
        save_seconds: Any  # the phases' metrics.json timings, as the loop wrote them
        restore_seconds: Any
        step_seconds: Any
        losses: Losses
        first_divergent_step: int | None
        missing: list[str]
        not_restored: list[str]
        not_restored_paths: dict[str, list[str]]
        final_differences: list[str]
        final_difference_paths: dict[str, list[str]]
        out: str
        ok: NotRequired[bool]  # set once the rest is known, before the report is returned
        verdict: NotRequired[str]

    class SweepReport(TypedDict):
        """The batch-size sweep's report (sweep.py ``_measure``; runs/sweep-<time>/sweep.json)."""

        device: str
        memory_kind: str
        entry: str
        batch_sizes: list[int]
        groups: list[GroupInfo]
        skipped: list[dict[str, str]]  # {"id", "reason"}: the inputs this harness cannot read
        warmup_seconds: float
        rows: list[SweepCell]
        ok: bool
        out: NotRequired[str]  # set by ``sweep`` as it keeps the report
        plot: NotRequired[str]
        report_seconds: NotRequired[float]
