"""The report that kdkit.order.check's ``check_order`` returns (`kdkit check`): types only, read by
the type checker, never imported at run time (check.py has no room for them: a module fits in 400
lines)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any, TypedDict

    class CheckReport(TypedDict):
        """Every point that must hold before ordering a card for this project."""

        project: str
        gpu: Mapping[str, Any]  # kdkit.facts.catalog Offer.summary()
        backend: str
        lock: str
        image: str | None
        ok: bool
        points: Sequence[Mapping[str, Any]]  # kdkit.core.finding.finding_json of each point
