"""kdkit's command line. The only package that imports click.

Each module registers its commands on the group; commands parse, call one
domain function, and print.
"""

from __future__ import annotations

from kdkit.cli import project as _project  # noqa: F401  (registers commands)
from kdkit.cli._group import cli, main

__all__ = ["cli", "main"]
