"""The records the torch steps of `kdkit diagnose` (steps.py) put in the context's facts: each
device as torch sees it, and each compute and memory check. Types only, for the type checker:
steps.py has no room for them (docs/architecture.md: a module fits in 400 lines), and nothing here
runs.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at start-up (kdkit.core.commands says why)
if TYPE_CHECKING:
    from typing import TypedDict

    class DeviceFacts(TypedDict):
        """One device as torch sees it (the devices step's, ``facts["devices"]``)."""

        index: int
        name: str
        total_memory: int
        capability: list[int]
        gcn_arch: str | None
        arch: str
        multiprocessors: int

    class ComputeCheck(TypedDict):
        """One matmul checked against the float64 reference (``facts["compute"]``)."""

        device: str
        dtype: str
        relative_error: float

    class MemoryCheck(TypedDict):
        """One card's memory allocated, written and read back (``facts["memory"]``)."""

        device: str
        allocated: int
        peak: int
        total: int
