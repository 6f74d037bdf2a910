"""Options and arguments shared by several commands, defined once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from kdkit.core.builds import BACKENDS

if TYPE_CHECKING:  # click >= 8.2 makes ParamType generic; older releases do not subscript
    from kdkit.core.runid import RunId

    _NumberType = click.ParamType[int | float, object]
    _RunIdType = click.ParamType[RunId, object]
else:
    _NumberType = _RunIdType = click.ParamType

F = TypeVar("F", bound=Callable[..., Any])

json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON document on stdout instead of text."
)

project_argument = click.argument(
    "project_dir",
    required=False,
    type=click.Path(file_okay=False, path_type=Path),
)
"""PROJECT_DIR: defaults to the project root found upward from the current folder."""

def force_option(help: str) -> Callable[[F], F]:
    """``--force``: replace what is there; ``help`` says what that is for the command."""
    return click.option("--force", is_flag=True, help=help)


def ca_bundle_option(help: str) -> Callable[[F], F]:
    """``--ca-bundle FILE``: a PEM bundle of CA certificates for a TLS-intercepting proxy; ``help``
    says where the command uses it."""
    return click.option("--ca-bundle", type=click.Path(dir_okay=False, path_type=Path),
                        default=None,
                        metavar="FILE", help=help)


backend_option = click.option(
    "--backend",
    type=click.Choice(BACKENDS),
    default=None,
    help="Backend to act on (default: default_backend in kdkit.json).",
)


class FiniteNumber(_NumberType):
    """A numeric option, read by :func:`kdkit.core.jsonio.finite_number`: NaN, infinities, a literal
    that overflows (1e999), a word or "" is one line and exit 2 (BadInput), never a traceback.
    Ranges stay with the domain function that owns them."""

    def __init__(self, example: str, *, integral: bool = False) -> None:
        self.example, self.integral = example, integral
        self.name = "integer" if integral else "number"

    def convert(self, value: object, param: click.Parameter | None,
                ctx: click.Context | None) -> int | float:
        from kdkit.core.errors import BadInput
        from kdkit.core.jsonio import finite_number

        option = param.opts[0] if param is not None and param.opts else "value"
        text = str(value)
        try:
            number = finite_number(text, option, integral=self.integral)
        except BadInput as exc:
            raise BadInput(f"{exc}; e.g. {option} {self.example}") from None
        if not self.integral:
            return number
        try:
            return int(text)  # exact beyond 2^53, where the float is not
        except ValueError:
            return int(number)  # 3.0, 1e3


class RunIdType(_RunIdType):
    """A run ID argument or option, checked by kdkit.core.runid.run_id_type (the in-container
    commands' type too): the command gets a RunId; a bad ID is one line naming ``label``, exit 2."""

    name = "run_id"

    def __init__(self, label: str) -> None:
        self.label = label

    def convert(self, value: object, param: click.Parameter | None,
                ctx: click.Context | None) -> RunId:
        from kdkit.core.runid import RunId, run_id_type

        return value if isinstance(value, RunId) else run_id_type(self.label)(str(value))


def whole(example: str) -> FiniteNumber:
    """A whole-number option (counts, days, steps): "3" and "3.0" are 3, "3.5" is refused."""
    return FiniteNumber(example, integral=True)
