"""Printing helpers for commands. rich is imported only when a person is shown a table."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

# C0 and C1 control characters but tab and newline: an image label or a file name must not move the
# cursor, retitle the terminal or clear it.
_CONTROL = {code: "\ufffd" for code in (*range(0x00, 0x09), *range(0x0b, 0x20), 0x7f, *range(0x80, 0xa0))}


def printable(value: object) -> str:
    """``value`` as text a terminal shows as it is: control characters (ESC ...) become U+FFFD."""
    return ("" if value is None else str(value)).translate(_CONTROL)


def plain(value: object) -> Text:
    """A table cell of plain text: rich never reads markup in it ("[bold]", "[link=...]") and no control
    character reaches the terminal. A rich Text passes as it is (kdkit's own styling)."""
    from rich.text import Text

    return value if isinstance(value, Text) else Text(printable(value))


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))


def console(stderr: bool = False) -> Console:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=True)


def warn(message: str) -> None:
    click.echo(f"Warning: {message}", err=True)


def size_text(n: int) -> str:
    """A size in bytes as a person reads it: GB from a gigabyte on, MB below."""
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"
