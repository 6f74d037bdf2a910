"""Commands registered by this module (being written)."""

from __future__ import annotations

from kdkit.cli._group import cli  # noqa: F401
