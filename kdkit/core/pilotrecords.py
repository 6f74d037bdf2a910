"""The records of the pilot config model (kdkit.core.pilotconfig) that params.json keeps: types
only, read by the type checker, never imported at run time."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import NotRequired, TypedDict

    class OutputRecord(TypedDict):
        """The declared output as params.json keeps it: its kind and that kind's settings."""

        kind: str
        max_chars: NotRequired[int | None]  # text
        dim: NotRequired[int | None]  # vector
        max_bytes: NotRequired[int]  # file, where declared
        schema: NotRequired[str]  # json, where declared: the schema file as the config names it
        schema_sha256: NotRequired[str]
