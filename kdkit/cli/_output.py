"""Printing helpers for commands. rich is imported only when a person is shown a table."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from kdkit.core.safetext import json_text

# the one rule, kdkit.core.safetext's, for every CLI module
from kdkit.core.safetext import printable as printable

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text


def plain(value: object) -> Text:
    """A table cell of plain text: rich never reads markup in it ("[bold]", "[link=...]") and no
    control character reaches the terminal. A rich Text passes as it is (kdkit's own styling)."""
    from rich.text import Text

    return value if isinstance(value, Text) else Text(printable(value, lines=True))


def say(text: object = "", err: bool = False, nl: bool = True) -> None:
    """The one way the CLI prints a text line (stdout, or stderr with ``err``): every control
    character in it is shown escaped (``printable``: a path, a name, an app's reason holds ESC, CR
    or U+009B), kdkit's own newlines between lines kept. tests/cli/test_cli_printing.py holds every
    other CLI module to it."""
    click.echo(printable(text, lines=True), err=err, nl=nl)


def emit_json(data: Any) -> None:
    click.echo(json_text(json.dumps(data, indent=2, ensure_ascii=False, default=str)))


def console(stderr: bool = False) -> Console:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=True)


def warn(message: str) -> None:
    say(f"Warning: {printable(message)}", err=True)


def size_text(n: int) -> str:
    """A size in bytes as a person reads it: GB from a gigabyte on, MB below."""
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


def container_output(as_json: bool) -> Callable[[bytes], None]:
    """Where the containers' output goes as it comes: stdout, or stderr when stdout is the JSON
    document; what reaches the terminal is escaped (kdkit.core.safetext: what runs in a container
    can write to its output without the pilot, and none of it moves the cursor or hides a line)."""
    import codecs

    stream = sys.stderr.buffer if as_json else sys.stdout.buffer
    # a character split between chunks is whole
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def show(chunk: bytes) -> None:
        stream.write(printable(decoder.decode(chunk), lines=True).encode("utf-8"))
        stream.flush()

    return show
