"""The click group: help layout, version, and the one place errors become exit codes."""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from typing import Any

import click

from kdkit import __version__
from kdkit.cli._output import say
from kdkit.cli.machine import forwarder
from kdkit.core.commands import COMMANDS, HOST, SECTIONS, excepthook, forwarded, redact, runs_in
from kdkit.core.errors import KdkitError
from kdkit.core.safetext import printable

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
    """The commands of kdkit.core.commands.COMMANDS that run on the host, loaded when one is asked
    for (``kdkit --help`` imports none of them), listed by section; KdkitError becomes its exit
    code."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*runs_in(HOST), *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None or HOST not in entry[3]:
            return super().get_command(ctx, cmd_name)
        if cmd_name not in self.commands:
            self.add_command(_load(cmd_name, entry[0], entry[2], forwarded(cmd_name)))
        return self.commands[cmd_name]

    def resolve_command(self, ctx: click.Context,
                        args: list[str]) -> tuple[str | None, click.Command | None,
                                                                            list[str]]:
        if args and not args[0].startswith("-") and self.get_command(ctx, args[0]) is None:
            # a name of no command: all are loaded, so click says which was meant
            for name in runs_in(HOST):
                self.get_command(ctx, name)
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        host = runs_in(HOST)
        for title in SECTIONS:
            rows = [(name, COMMANDS[name][2]) for name in host if COMMANDS[name][1] == title]
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KdkitError as exc:
            if debug_enabled():
                say(printable(redact(traceback.format_exc()), lines=True), err=True, nl=False)
            say(f"Error: {printable(redact(str(exc)))}", err=True)
            raise click.exceptions.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            say("Interrupted.", err=True)
            raise click.exceptions.Exit(130) from None


@click.group(cls=KdkitGroup, epilog=EPILOG,
             context_settings={"help_option_names": ["-h", "--help"]})
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


def _load(name: str, module: str, summary: str, forwarded: bool) -> click.Command:
    """The click command of ``name``: a forwarder to its argparse module, or the one its kdkit.cli
    module defines."""
    if forwarded:
        return forwarder(name, summary)
    found = [value for value in vars(importlib.import_module(module)).values()
             if isinstance(value, click.Command) and value.name == name]
    if len(found) != 1:
        raise LookupError(f"{module}: defines {len(found)} click commands named {name!r}, not one")
    return found[0]


def main() -> None:
    """Console entry point."""
    sys.excepthook = excepthook  # a crash's traceback is redacted too
    sys.exit(cli.main(prog_name="kdkit"))
