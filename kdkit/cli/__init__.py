"""kdkit's command line. The only package that imports click.

The commands are those of kdkit.core.commands.COMMANDS that run on the host; the group loads each
one's module when it is asked for. Commands parse, call one domain function, and print.
"""

from __future__ import annotations

from kdkit.cli._group import cli, main

__all__ = ["cli", "main"]
