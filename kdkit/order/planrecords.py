"""The records of a plan that kdkit.order.plan builds (its schedule, the stages placed, the longer
plan, the lots that would let the stages spread, the cost per accepted output): types only, read
by the type checker, never imported at run time."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any, NotRequired, TypedDict

    from kdkit.order.reportread import ReportRecord
    from kdkit.order.schedule import CutPlan, GpuBusy, PlacedStage, SpreadPlan

    class LongerPlan(TypedDict):
        """The next longer plan: its days, its total and what it costs more (None: unknown)."""

        days: int
        total_usd: str | None
        difference_usd: str | None

    class LotsPrice(TypedDict):
        """What a number of lots costs in total and more than the lots ordered."""

        total_usd: str | None
        difference_usd: str | None

    class MoreLots(SpreadPlan, LotsPrice):
        """The lots that would let the stages spread, with their price."""

    class StagesSection(TypedDict):
        """The stages of ``--schedule`` placed against the window (stage_schedule)."""

        file: str
        rule: str
        last_end_hours: float
        critical_chain: list[str]
        gpus: list[GpuBusy]
        human_hours: float
        stages: list[PlacedStage]
        cut: CutPlan | None
        more_lots: MoreLots | None

    class ScheduleSection(TypedDict):
        """An order's schedule: booked machine-busy hours against the window."""

        window_hours: int
        booked_hours: float | None
        left_hours: float | None
        over_hours: float | None
        fits: bool | None
        longer_plan: LongerPlan | None
        suggestions: list[str]
        stages: NotRequired[StagesSection]
        from_report: NotRequired[ReportRecord]

    class CostPerAccepted(TypedDict):
        """What each accepted output cost (None: undefined, with the reason)."""

        accepted: int
        per_output_usd: str | None
        cost_incurred_usd: str
        reason: str | None

    class OrderPlan(TypedDict):
        """The plan that make_plan returns and ``kdkit plan --save`` writes (the order file's
        content when made)."""

        kdkit_order: int
        created: str
        kdkit_version: str
        project: str | None
        offer: Mapping[str, Any]  # kdkit.facts.catalog Offer.summary()
        days: int
        lots: int
        cards: int
        preparation: str
        price_per_lot_usd: str
        price_source: str
        total_usd: str
        schedule: ScheduleSection
        cost_per_accepted: CostPerAccepted | None
        order_number: str | None
        order_status: str | None
