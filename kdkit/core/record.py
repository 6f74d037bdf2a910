"""Plain records for what the in-container commands read and report: a pin, a lock, an installed
distribution, a finding.

``typing.NamedTuple`` would be the usual way, but importing ``typing`` (which imports ``re``) costs
an in-container ``verify-env`` more than its whole work on fifty distributions
(bench/bench_verify_env.py; ``dataclasses`` costs more still). A record here is a class with
``__slots__`` and its own ``__init__``; this base gives it what NamedTuple gives: equality and a
repr by its fields, ``_replace`` and ``_asdict``. Standard library only, and imports nothing.
"""

from __future__ import annotations

TYPE_CHECKING = False  # the type checker reads this as true (kdkit.core.commands says why)
if TYPE_CHECKING:
    from typing import Any, Self


class Record:
    """A record whose fields are its ``__slots__``, in order."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        fields: tuple[str, ...] = self.__slots__
        return type(other) is type(self) and all(getattr(self, n) == getattr(other, n)
                                                 for n in fields)

    # mutable fields (lists, dicts): as for a NamedTuple holding them
    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self._asdict().items())})")

    def _replace(self, **changes: Any) -> Self:
        """A copy with ``changes`` applied, as NamedTuple._replace."""
        return type(self)(**{**self._asdict(), **changes})

    def _asdict(self) -> dict[str, Any]:
        """The fields by name, in order, as NamedTuple._asdict."""
        fields: tuple[str, ...] = self.__slots__
        return {name: getattr(self, name) for name in fields}
