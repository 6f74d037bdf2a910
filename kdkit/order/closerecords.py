"""The records of the campaign report that kdkit.order.closework writes (machine time, stages,
trainings, the campaign, other expenses, the order's status): types only, read by the type checker,
never imported at run time."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any, NotRequired, TypedDict

    class Expense(TypedDict):
        """Another expense: a label, an amount (a decimal string), a currency; its source."""

        what: str
        amount: str
        currency: str
        source: NotRequired[str]  # "campaign.json" when declared there

    class ExpensesSection(TypedDict):
        """The other expenses and their totals per currency."""

        items: list[Expense]
        totals: dict[str, str]

    class TrainingRow(TypedDict):
        """One `kdkit train` run: its variant, verdict, stop reason and observed hours."""

        run_id: str
        variant: str | None
        verdict: str | None
        stop_reason: str | None
        hours: float

    class IntervalRow(TypedDict):
        """One interval of recorded work as the report lists it."""

        kind: str
        name: str
        start: str
        end: str
        hours: float
        open: bool
        variant: str | None
        source: str

    class TimeSpan(TypedDict):
        """A span of time: the whole work's, or an idle gap's."""

        start: str
        end: str
        hours: float

    class WorkSection(TypedDict):
        """Observed machine time: the union, the sum, the span, per kind, the idle gaps."""

        observed_hours: float
        summed_hours: float
        span: TimeSpan | None
        by_kind: dict[str, float]
        gaps: list[TimeSpan]
        idle_hours: float
        intervals: list[IntervalRow]
        unread: list[str]

    class StageHours(TypedDict):
        """One stage (or kind of work): booked against observed hours."""

        stage: str
        booked_hours: Any  # the order's schedule's machine_hours, as saved (a number or None)
        observed_hours: float
        observed_minus_booked: float | None
        intervals: int

    class MeasuredDurations(TypedDict):
        """The measured machine hours per kind and per stage the next plan starts from."""

        unit: str
        observed_hours: float
        by_kind: dict[str, float]
        by_stage: dict[str, float]

    class OrderStatus(TypedDict):
        """The provider's order number and the order's status, as declared, with the updates."""

        order_number: str | None
        status: str | None
        updates: list[dict[str, Any]]

    class CampaignSection(TypedDict):
        """The campaign's variants against its threshold, the conclusion and the decisions."""

        question: str
        metric: str
        threshold: float
        higher_is_better: bool
        control: str
        variants: list[dict[str, Any]]
        conclusion: str
        decisions: list[dict[str, Any]]

    class ReportSections(TypedDict):
        """The sections of the campaign report this module writes (kdkit.order.close)."""

        work: WorkSection
        stages: list[StageHours]
        trainings: list[TrainingRow]
        campaign: CampaignSection | None
        expenses: ExpensesSection
