"""The lock model: a pinned distribution (:class:`Pin`) and a lock (:class:`Lock`), the candidates
of each name and the rule that merges or keeps them. kdkit.core.lockfile reads requirements locks
and PEP 751 locks into it; kdkit.core.lockfile's docstring says the rules, and re-exports these
names.

Standard library only, and light: the in-container verify-env imports it at every start-up
(bench/bench_verify_env.py); markers and PEP 440 versions are loaded only when a lock needs them.
"""

from __future__ import annotations

import os

from kdkit.core.errors import BadInput
from kdkit.core.record import Record

TYPE_CHECKING = False  # typing is not imported at start-up (kdkit.core.commands says why)
if TYPE_CHECKING:
    from os import PathLike

    from kdkit.core.pylock import Source

_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")


def normalize_name(name: str) -> str:
    """PEP 503: lower case, runs of ``-``, ``_`` and ``.`` become one ``-``."""
    text = name.lower().replace("_", "-").replace(".", "-")
    while "--" in text:
        text = text.replace("--", "-")
    return text


def is_name(text: str) -> bool:
    """A valid project name (PEP 508): ASCII letters and digits at both ends, ``.``, ``_``, ``-``
    between."""
    return (bool(text) and text[0].isalnum() and text[-1].isalnum() and text.isascii()
            and set(text) <= _NAME_CHARS)


def _same_version(a: str, b: str) -> bool:
    if a == b:
        return True
    from kdkit.core.versions import Version

    return Version.parse(a) == Version.parse(b)


class Pin(Record):
    """One locked distribution."""

    # the fields in their order (kdkit.core.record)
    __slots__ = ("name", "version", "public_version", "local", "marker", "hashes",  # noqa: RUF023
                 "line", "extras", "source", "requires_python")

    def __init__(self, name: str, version: str, public_version: str, local: str | None,
                 marker: str | None,
                 hashes: list[str], line: int, extras: tuple[str, ...] = (),
                 source: Source | None = None,
                 requires_python: str | None = None) -> None:
        self.name, self.version, self.public_version, self.local = (
            name, version, public_version, local)
        self.marker, self.hashes, self.line, self.extras = marker, hashes, line, extras
        self.source = source  # a PEP 751 vcs, directory or archive entry (then version may be "")
        self.requires_python = requires_python  # a PEP 751 package's own requires-python

    @property
    def key(self) -> str:
        return normalize_name(self.name)


class Lock(Record):
    """A parsed lock: its pins by normalized name (the first candidate of each), every candidate
    by name (more than one only under markers), its provenance header and its index options."""

    # the fields in their order
    __slots__ = ("path", "pins", "header", "options", "candidates", "format",  # noqa: RUF023
                 "environments", "requires_python", "default_groups", "warnings")

    def __init__(self, path: str | PathLike[str], pins: dict[str, Pin], header: dict[str, str],
                 options: list[tuple[str, str]], candidates: dict[str, list[Pin]],
                 format: str = "requirements",
                 environments: tuple[str, ...] = (), requires_python: str | None = None,
                 default_groups: tuple[str, ...] = (), warnings: tuple[str, ...] = ()) -> None:
        self.path, self.pins, self.header, self.options, self.candidates = (
            path, pins, header, options, candidates)
        self.format = format  # or "pylock" (PEP 751)
        self.environments = environments  # PEP 751: markers of which one must hold
        self.requires_python = requires_python  # PEP 751: the interpreter's version must meet it
        self.default_groups = default_groups  # PEP 751: dependency_groups when none is selected
        self.warnings = warnings  # what was read but deserves a word (a newer minor lock-version)

    @property
    def name(self) -> str:
        """The lock's file name (``cpu.txt``, ``pylock.cpu.toml``)."""
        return os.path.basename(self.path)

    def every_pin(self) -> list[Pin]:
        """Each candidate of each name, in the order of the names' first lines."""
        return [pin for pins in self.candidates.values() for pin in pins]

    def applying(self, key: str, markers: dict[str, str]) -> list[Pin]:
        """The candidates of ``key`` whose marker holds for ``markers`` (an environment's
        variables)."""
        candidates = self.candidates.get(key, [])
        if not any(pin.marker for pin in candidates):
            return list(candidates)
        env: dict[str, str | frozenset[str]] = {**markers, "extra": ""}
        if self.format == "pylock":  # PEP 751: no extra selected, the default groups
            env.update(extras=frozenset(), dependency_groups=frozenset(self.default_groups))
        return [pin for pin in candidates if not pin.marker or self._holds(pin, env)]

    def _holds(self, pin: Pin, env: dict[str, str | frozenset[str]]) -> bool:
        """Whether ``pin``'s marker holds in ``env``; BadInput naming the line when it cannot be
        evaluated (a ``~=`` on a value that is no version: PEP 508 gives it no meaning)."""
        from kdkit.core.markers import InvalidMarker, evaluate

        try:
            return evaluate(pin.marker or "", env)
        except InvalidMarker as exc:
            raise BadInput(f"{self.path}:{pin.line}: the marker of {pin.name} cannot be evaluated "
                           f"for this interpreter ({exc}); fix the marker or relock") from None

    def pin_for(self, key: str, markers: dict[str, str]) -> Pin | None:
        """The one candidate of ``key`` for that environment; None when no marker holds; BadInput
        when two versions both apply (the lock is ambiguous there)."""
        pins = self.applying(key, markers)
        if len(pins) > 1:
            raise BadInput(f"{self.path}:{pins[1].line}: {pins[1].name} is pinned to "
                           f"{pins[0].version} (line {pins[0].line}) and {pins[1].version} and "
                           "both markers hold for this interpreter; make the markers disjoint "
                           "(regenerate with `kdkit lock`)")
        return pins[0] if pins else None

    def inputs(self) -> dict[str, str]:
        """The ``input:<path>`` header entries: input file (relative to the project) -> sha256."""
        return {k[len("input:"):]: v for k, v in self.header.items() if k.startswith("input:")}

def _either(first: str | None, second: str | None) -> str | None:
    """The marker of a version pinned on two lines: it applies when either line does."""
    if not first or not second:
        return None  # an unmarked line applies everywhere
    return first if first == second else f"({first}) or ({second})"


def add_pin(where: str, candidates: dict[str, list[Pin]], pin: Pin) -> None:
    pins = candidates.setdefault(pin.key, [])
    for index, previous in enumerate(pins):
        same = previous.version == pin.version or (bool(previous.version) and bool(pin.version)
                                                   and _same_version(previous.version, pin.version))
        if same and previous.source == pin.source:
            merged = previous.hashes + [h for h in pin.hashes if h not in previous.hashes]
            pins[index] = previous._replace(
                marker=_either(previous.marker, pin.marker), hashes=merged)
            return
    if pins and not all(p.marker for p in [*pins, pin]):
        previous = pins[0]
        first, then = previous.version or previous.source, pin.version or pin.source
        raise BadInput(f"{where}: {pin.name} pinned twice with different versions ({first} "
                       f"at line {previous.line}, {then} here); keep one, or put each under a "
                       "marker (regenerate with `kdkit lock`)")
    pins.append(pin)
