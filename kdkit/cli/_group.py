"""The click group: help layout, version, and the one place errors become exit codes."""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any

import click

from kdkit import __version__
from kdkit.core.commands import excepthook, redact
from kdkit.core.errors import KdkitError

# Commands are listed in --help under these headings, in this order.
SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Project", ("init", "validate")),
    ("Dependencies", ("lock", "verify-env", "wheelhouse")),
    ("Images (before ordering)", ("build", "inspect", "run")),
    ("On the rented machine", ("diagnose", "pilot", "gather", "copy-out", "sweep", "resume-test")),
    ("Order and campaign", ("check", "plan", "estimate-memory", "close")),
    ("Transfer", ("bundle", "verify-bundle", "load")),
)

EPILOG = """\b
Exit codes:
  0  ok
  1  a check ran and failed (the report says which)
  2  bad input: usage, an invalid config, a refused overwrite
  3  a needed component is unavailable: Docker engine, image, GPU runtime
Set KDKIT_DEBUG=1 to see tracebacks."""


def debug_enabled() -> bool:
    return os.environ.get("KDKIT_DEBUG", "") not in ("", "0")


class KdkitGroup(click.Group):
    """A group that lists commands by section and maps KdkitError to its exit code."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        listed: set[str] = set()
        for title, names in SECTIONS:
            rows = []
            for name in names:
                cmd = self.get_command(ctx, name)
                if cmd is None or cmd.hidden:
                    continue
                rows.append((name, cmd.get_short_help_str(limit=70)))
                listed.add(name)
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)
        rest = [
            (name, cmd.get_short_help_str(limit=70))
            for name in self.list_commands(ctx)
            if name not in listed and (cmd := self.get_command(ctx, name)) is not None and not cmd.hidden
        ]
        if rest:
            with formatter.section("Other"):
                formatter.write_dl(rest)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KdkitError as exc:
            if debug_enabled():
                click.echo(redact(traceback.format_exc()), err=True, nl=False)
            click.echo(f"Error: {redact(str(exc))}", err=True)
            raise click.exceptions.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            click.echo("Interrupted.", err=True)
            raise click.exceptions.Exit(130) from None


@click.group(cls=KdkitGroup, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="kdkit")
def cli() -> None:
    """kdkit: check a GPU project before you rent the machine, and prove it on the one you get.

    \b
    Typical path:
      kdkit init myproj && cd myproj
      kdkit validate && kdkit lock --backend cuda && kdkit build --backend cuda
      kdkit check --gpu "RTX 4090" && kdkit plan --gpu "RTX 4090" --days 3 --lots 1
      # on the rented machine:
      kdkit run --backend cuda --env-file .env
    """


def main() -> None:
    """Console entry point."""
    sys.excepthook = excepthook  # a crash's traceback is redacted too
    sys.exit(cli.main(prog_name="kdkit"))
