"""kdkit's command line. The only package that imports click.

Each module registers its commands on the group; commands parse, call one
domain function, and print.
"""

from __future__ import annotations

# Importing a module registers its commands on the group.
from kdkit.cli import deps, images, machine, order, project, tools  # noqa: F401
from kdkit.cli._group import cli, main

__all__ = ["cli", "main"]
