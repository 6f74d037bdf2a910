"""The command line of the in-container commands, with argparse: the parser each one starts from and
the options they share, each defined once. Standard library only.

No option may be abbreviated (``allow_abbrev=False``): click refuses abbreviations on the host, and
an abbreviation that works today breaks on the day an option with the same start is added.

argparse costs a command whose whole work takes a few milliseconds more than that work
(``verify-env``: bench/bench_verify_env.py). Such a command declares its options as :class:`Option`
rows: argparse is built from the same rows, and :func:`quick_parse` reads a command line made only
of those options without loading argparse, leaving everything else (``--help``, a mistake, a value
that looks like an option) to argparse, which answers it as it always did.
"""

from __future__ import annotations

from kdkit.core.record import Record

TYPE_CHECKING = False  # typing is not imported at start-up (kdkit.core.commands says why)
if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence
    from typing import Any


def command_parser(name: str, description: str, epilog: str, *,
                   preformatted: bool = True) -> argparse.ArgumentParser:
    """The parser of ``kdkit NAME``; ``preformatted`` keeps the description's and epilog's own
    lines."""
    import argparse

    formatter = argparse.RawDescriptionHelpFormatter if preformatted else argparse.HelpFormatter
    return argparse.ArgumentParser(prog=f"kdkit {name}", description=description, epilog=epilog,
                                   formatter_class=formatter, allow_abbrev=False)


def json_help(what: str) -> str:
    return f"print {what} on stdout instead of text"


def add_json(parser: argparse.ArgumentParser, what: str = "one JSON document",
             dest: str = "json") -> None:
    """``--json``: print ``what`` on stdout instead of text (``args.<dest>``)."""
    parser.add_argument("--json", action="store_true", dest=dest, help=json_help(what))


class Option(Record):
    """One option of a command: ``--flag`` (true when given) or ``--name VALUE`` (a string)."""

    __slots__ = ("name", "dest", "help", "metavar", "required")  # noqa: RUF023 (their order)

    def __init__(self, name: str, dest: str, help: str, metavar: str | None = None,
                 required: bool = False) -> None:
        self.name, self.dest, self.help, self.metavar, self.required = (
            name, dest, help, metavar, required)

    @property
    def takes_value(self) -> bool:
        return self.metavar is not None


class Parsed:
    """The options of a command line by their ``dest``, as argparse's Namespace holds them."""

    def __init__(self, values: dict[str, str | bool | None]) -> None:
        self.__dict__.update(values)

    if TYPE_CHECKING:  # as argparse.Namespace: any option's value, by name
        def __getattr__(self, name: str) -> Any: ...


def add_options(parser: argparse.ArgumentParser, options: Sequence[Option]) -> None:
    """The ``options`` rows as argparse arguments."""
    for option in options:
        if option.takes_value:
            parser.add_argument(option.name, dest=option.dest, metavar=option.metavar,
                                required=option.required,
                                default=None, help=option.help)
        else:
            parser.add_argument(option.name, dest=option.dest, action="store_true",
                                help=option.help)


def quick_parse(argv: Sequence[str], options: Sequence[Option]) -> Parsed | None:
    """``argv`` read without argparse when it holds only ``options`` (``--name VALUE``,
    ``--name=VALUE``, ``--flag``; the last of a repeated option wins, as in argparse) and every
    required one; None for anything else, which argparse then parses (and answers ``--help`` and
    every mistake)."""
    by_name = {option.name: option for option in options}
    values: dict[str, str | bool | None] = {o.dest: (None if o.takes_value else False)
                                            for o in options}
    index = 0
    while index < len(argv):
        name, equals, value = argv[index].partition("=")
        option = by_name.get(name)
        if option is None or (equals and not option.takes_value):
            return None
        if option.takes_value and not equals:
            index += 1
            if index == len(argv) or argv[index].startswith("-"):
                return None  # argparse's to say what is missing
            value = argv[index]
        values[option.dest] = value if option.takes_value else True
        index += 1
    if any(option.required and values[option.dest] is None for option in options):
        return None
    return Parsed(values)
