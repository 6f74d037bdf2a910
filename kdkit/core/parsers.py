"""The command line of the in-container commands, with argparse: the parser each one starts from and
the options they share, each defined once. Standard library only.

No option may be abbreviated (``allow_abbrev=False``): click refuses abbreviations on the host, and
an abbreviation that works today breaks on the day an option with the same start is added.
"""

from __future__ import annotations

import argparse


def command_parser(name: str, description: str, epilog: str, *, preformatted: bool = True) -> argparse.ArgumentParser:
    """The parser of ``kdkit NAME``; ``preformatted`` keeps the description's and epilog's own lines."""
    formatter = argparse.RawDescriptionHelpFormatter if preformatted else argparse.HelpFormatter
    return argparse.ArgumentParser(prog=f"kdkit {name}", description=description, epilog=epilog,
                                   formatter_class=formatter, allow_abbrev=False)


def add_json(parser: argparse.ArgumentParser, what: str = "one JSON document", dest: str = "json") -> None:
    """``--json``: print ``what`` on stdout instead of text (``args.<dest>``)."""
    parser.add_argument("--json", action="store_true", dest=dest, help=f"print {what} on stdout instead of text")
