"""The records of the GPU catalog (kdkit.facts.catalog): an offer as a catalog file holds it once
its schema checked it, and an offer as kdkit writes it. Types only, read by the type checker, never
imported at run time: catalog.py has no room for them (docs/architecture.md: a module fits in 400
lines)."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NotRequired, TypedDict

    class NominalFigures(TypedDict, total=False):
        """An offer's datasheet throughput (``nominal``: dense figures; null: unknown)."""

        source: str  # the schema requires it; total=False lets `nominal or {}` read as one
        tf32_dense_tflops: float | None
        fp16_dense_tflops: float | None
        bf16_dense_tflops: float | None
        memory_bandwidth_gb_s: float | None
        form_factor: str

    class OfferEntry(TypedDict):
        """One offer of a catalog file as its schema checked it (catalog.json ``offers[]``)."""

        name: str
        vendor: str
        backend: str
        memory_gb: float
        architecture: str
        cards_per_lot: int
        price_per_lot_usd: dict[str, float | None]  # "3", "7", "30" -> a lot's price, or null
        aliases: NotRequired[list[str]]
        generation: NotRequired[str]
        nominal: NotRequired[NominalFigures]
        note: NotRequired[str]
        cpu_arch: NotRequired[str]
        device_pattern: NotRequired[str]
        devices_per_card: NotRequired[int]
        figure_sources: NotRequired[dict[str, list[str]]]

    class OfferSummary(TypedDict):
        """The fields an order records about its offer (Offer.summary)."""

        name: str
        vendor: str
        backend: str
        memory_gb: float
        architecture: str
        cpu_arch: str
        cards_per_lot: int

    class OfferRow(OfferSummary):
        """An offer whole, prices as decimal strings (Offer.as_dict)."""

        generation: str
        aliases: list[str]
        price_per_lot_usd: dict[str, str | None]
        nominal: NominalFigures | None
        note: str
        origin: str
        figure_sources: dict[str, list[str]]
