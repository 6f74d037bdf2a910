"""Commands that also run inside the container: forwarded to kdkit.probe.

Their options are defined once, with argparse, in the probe modules, so the
same command line works as ``kdkit diagnose ...`` on the host and inside an
image that has no click. ``kdkit diagnose --help`` shows those options.
"""

from __future__ import annotations

import click

from kdkit.cli._group import cli
from kdkit.core.commands import COMMANDS, run_command


def _forwarder(name: str, summary: str) -> click.Command:
    @click.pass_context
    def forward(ctx: click.Context) -> None:
        code = run_command(name, list(ctx.args))
        if code:
            raise click.exceptions.Exit(code)

    return click.Command(
        name,
        callback=forward,
        help=summary + f"\n\nRuns `python -m kdkit.probe {name}`; see --help for its options.",
        short_help=summary,
        add_help_option=False,
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )


for _name, (_module, _summary) in COMMANDS.items():
    cli.add_command(_forwarder(_name, _summary))
