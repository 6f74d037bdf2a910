"""Printing helpers for commands. rich is imported only when a person is shown a table."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from rich.console import Console


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))


def console(stderr: bool = False) -> Console:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=True)


def warn(message: str) -> None:
    click.echo(f"Warning: {message}", err=True)


def is_tty() -> bool:
    return sys.stdout.isatty()
