"""The requests the supervisor (kdkit/probe/pilot/supervisor.py) sends to the app's process
(kdkit/probe/pilot/appchild.py): types for the type checker only, imported under TYPE_CHECKING.
Standard library only; nothing here runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any, Literal, NotRequired, TypedDict

    class DiagnoseRequest(TypedDict):
        """Asks the app's process for the diagnose's report."""

        op: Literal["diagnose"]
        expect: str
        project: str

    class LoadRequest(TypedDict):
        """Asks the app's process to import the entry, with the run's params."""

        op: Literal["load"]
        root: str
        entry: str
        device: str
        params: dict[str, Any] | None

    class PredictRequest(TypedDict):
        """One batch for predict: its IDs, their sizes and kind (the bytes follow as payload)."""

        op: Literal["predict"]
        ids: list[str]
        sizes: list[int]
        kind: str
        sha256: str
        out_dirs: NotRequired[list[str | None]]

    class BareRequest(TypedDict):
        """A request that is its op alone: the peak memory report, or leaving."""

        op: Literal["peak", "exit"]

    Request = DiagnoseRequest | LoadRequest | PredictRequest | BareRequest
