"""Reading kdkit's hashed lock files (``requirements/<backend>.txt``), standard library only.

A kdkit lock is what ``pip-compile --generate-hashes`` writes, preceded by a
provenance header of ``# kdkit: key = value`` lines. Every requirement is an
exact pin (``name==version``, the local label included) with at least one
``--hash``; anything else is refused with the file and line, because an
unhashed, editable, URL or VCS line cannot be proved against an installed
environment (a direct URL install has no version the lock could name).

One name may be pinned more than once. The same version twice with different
markers is one pin whose marker is either of them (pip installs it when any line
applies). Different versions are allowed only under markers (what ``uv pip
compile --universal`` writes, one line per environment); each is a candidate
and the environment picks the one whose marker holds. A UTF-8 BOM and a
``--require-hashes`` line (pip's flag; every kdkit lock is hashed anyway) are
accepted.

Stable API (``kdkit check`` reads the locked torch with it)::

    lock = parse_lock(path)
    pin = lock.pins.get("torch")         # keys are PEP 503 normalized names; the first candidate
    pin.version, pin.public_version, pin.local   # "2.8.0+cu128", "2.8.0", "cu128"
    lock.pin_for("torch", markers)       # the candidate whose marker holds for that environment
    lock.every_pin()                     # each candidate of each name, in file order
    lock.header["backend"]               # the provenance written by `kdkit lock`
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import NamedTuple

from kdkit.core.errors import BadInput
from kdkit.core.jsonio import read_text_file
from kdkit.core.markers import InvalidMarker, evaluate, parse_marker
from kdkit.core.versions import InvalidVersion, Version

HEADER_PREFIX = "# kdkit:"

# Options pip-compile may emit at the top of a lock; they steer where pip looks, not what it installs.
INDEX_OPTIONS = {
    "-i": "--index-url", "--index-url": "--index-url",
    "--extra-index-url": "--extra-index-url",
    "-f": "--find-links", "--find-links": "--find-links",
    "--trusted-host": "--trusted-host",
    "--no-index": "--no-index", "--pre": "--pre", "--prefer-binary": "--prefer-binary",
    "--only-binary": "--only-binary", "--no-binary": "--no-binary",
    "--require-hashes": "--require-hashes",  # pip's own check that every line is hashed
}
_FLAG_OPTIONS = {"--no-index", "--pre", "--prefer-binary", "--require-hashes"}

_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
_PIN = re.compile(
    rf"""^(?P<name>{_NAME})\s*
        (?:\[(?P<extras>[^\]]*)\])?\s*
        (?P<op>===|==)\s*(?P<version>[^\s;]+)\s*
        (?:;\s*(?P<marker>.*?))?\s*$""",
    re.VERBOSE,
)
_HASH = re.compile(r"--hash(?:=|\s+)(?P<value>\S+)")
_HASH_VALUE = re.compile(r"^(sha256|sha384|sha512):[0-9a-fA-F]+$")
_URLISH = re.compile(r"(^|\s|@)([a-z][a-z0-9+.-]*://|git\+|hg\+|svn\+|bzr\+|file:)", re.IGNORECASE)


def normalize_name(name: str) -> str:
    """PEP 503: lower case, runs of ``-``, ``_`` and ``.`` become one ``-``."""
    return re.sub(r"[-_.]+", "-", name).lower()


# NamedTuples, not dataclasses: the dataclasses import alone would double the start-up time of
# the in-container check (see bench/bench_verify_env.py).


class Pin(NamedTuple):
    """One locked distribution."""

    name: str
    version: str
    public_version: str
    local: str | None
    marker: str | None
    hashes: list[str]
    line: int
    extras: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return normalize_name(self.name)


class Lock(NamedTuple):
    """A parsed lock: its pins by normalized name (the first candidate of each), every candidate
    by name (more than one only under markers), its provenance header and its index options."""

    path: Path
    pins: dict[str, Pin]
    header: dict[str, str]
    options: list[tuple[str, str]]
    candidates: dict[str, list[Pin]]

    def every_pin(self) -> list[Pin]:
        """Each candidate of each name, in the order of the names' first lines."""
        return [pin for pins in self.candidates.values() for pin in pins]

    def applying(self, key: str, markers: dict[str, str]) -> list[Pin]:
        """The candidates of ``key`` whose marker holds for ``markers`` (an environment's variables)."""
        env = {**markers, "extra": ""}
        return [pin for pin in self.candidates.get(key, []) if not pin.marker or evaluate(pin.marker, env)]

    def pin_for(self, key: str, markers: dict[str, str]) -> Pin | None:
        """The one candidate of ``key`` for that environment; None when no marker holds; BadInput when
        two versions both apply (the lock is ambiguous there)."""
        pins = self.applying(key, markers)
        if len(pins) > 1:
            raise BadInput(f"{self.path}:{pins[1].line}: {pins[1].name} is pinned to {pins[0].version} (line "
                           f"{pins[0].line}) and {pins[1].version} and both markers hold for this "
                           "interpreter; make the markers disjoint (regenerate with `kdkit lock`)")
        return pins[0] if pins else None

    def inputs(self) -> dict[str, str]:
        """The ``input:<path>`` header entries: input file (relative to the project) -> sha256."""
        return {k[len("input:"):]: v for k, v in self.header.items() if k.startswith("input:")}


def logical_lines(text: str) -> list[tuple[int, str]]:
    """Join backslash continuations; each logical line keeps the number of its first physical line."""
    out: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        if not pending:
            start = number
        stripped = raw.rstrip()
        if stripped.endswith("\\") and not stripped.lstrip().startswith("#"):
            pending.append(stripped[:-1])
            continue
        pending.append(raw)
        out.append((start, " ".join(pending)))
        pending = []
    if pending:
        out.append((start, " ".join(pending)))
    return out


def strip_comment(line: str) -> str:
    """pip's rule: a comment starts at ``#`` at the line start or after whitespace."""
    return re.sub(r"(^|\s+)#.*$", "", line).strip()


def _read_header_line(line: str, header: dict[str, str]) -> None:
    body = line[len(HEADER_PREFIX):].strip()
    key, sep, value = body.partition(" = ")
    if sep:
        header[key.strip()] = value.strip()


def _option(where: str, body: str, options: list[tuple[str, str]]) -> None:
    match = re.match(r"^(-[-A-Za-z]*)(?:=|\s+|$)(.*)$", body)
    name, value = (match.group(1), match.group(2)) if match else (body, "")
    if name in ("-e", "--editable"):
        raise BadInput(f"{where}: editable requirement {body!r} refused; kdkit locks install only "
                       "hashed, pinned releases (remove -e and pin the release, then `kdkit lock`)")
    if name in ("-r", "--requirement", "-c", "--constraint"):
        raise BadInput(f"{where}: {name} includes another file; a lock must be self-contained "
                       "(regenerate it with `kdkit lock`)")
    canonical = INDEX_OPTIONS.get(name)
    if canonical is None:
        raise BadInput(f"{where}: unknown option {name!r}; a kdkit lock holds only pins and index "
                       "options (regenerate it with `kdkit lock`)")
    value = value.strip()
    if canonical not in _FLAG_OPTIONS and not value:
        raise BadInput(f"{where}: {name} needs a value")
    options.append((canonical, value))


def _parse_pin(where: str, number: int, body: str) -> Pin:
    hashes = [m.group("value") for m in _HASH.finditer(body)]
    spec = _HASH.sub("", body).strip()
    if _URLISH.search(spec):
        raise BadInput(f"{where}: URL, path or VCS requirement {spec!r} refused; kdkit locks name "
                       "releases from an index (pin the release, then `kdkit lock`)")
    match = _PIN.match(spec)
    if match is None:
        hint = "pin it as name==version" if re.match(rf"^{_NAME}\s*([<>!~=]|$|\[|;)", spec) else \
            "expected name==version --hash=sha256:..."
        raise BadInput(f"{where}: cannot parse {spec!r}; {hint} (regenerate with `kdkit lock`)")
    if not hashes:
        raise BadInput(f"{where}: {spec!r} has no --hash; kdkit locks are always hashed "
                       "(regenerate with `kdkit lock`)")
    for value in hashes:
        if not _HASH_VALUE.fullmatch(value):
            raise BadInput(f"{where}: bad hash {value!r}; expected sha256:<hex>")
    try:
        Version.parse(match.group("version"))
    except InvalidVersion:
        raise BadInput(f"{where}: {match.group('version')!r} is not a PEP 440 version") from None
    marker = match.group("marker") or None
    if marker:
        try:
            parse_marker(marker)
        except InvalidMarker as exc:
            raise BadInput(f"{where}: {exc}") from None
    extras = tuple(e.strip() for e in (match.group("extras") or "").split(",") if e.strip())
    text = match.group("version")
    public, _plus, local = text.partition("+")
    return Pin(match.group("name"), text, public, local or None, marker, hashes, number, extras)


def _either(first: str | None, second: str | None) -> str | None:
    """The marker of a version pinned on two lines: it applies when either line does."""
    if not first or not second:
        return None  # an unmarked line applies everywhere
    return first if first == second else f"({first}) or ({second})"


def _add_pin(where: str, candidates: dict[str, list[Pin]], pin: Pin) -> None:
    pins = candidates.setdefault(pin.key, [])
    version = Version.parse(pin.version)
    for index, previous in enumerate(pins):
        if Version.parse(previous.version) == version:
            merged = previous.hashes + [h for h in pin.hashes if h not in previous.hashes]
            pins[index] = previous._replace(marker=_either(previous.marker, pin.marker), hashes=merged)
            return
    if pins and not all(p.marker for p in [*pins, pin]):
        previous = pins[0]
        raise BadInput(f"{where}: {pin.name} pinned twice with different versions ({previous.version} "
                       f"at line {previous.line}, {pin.version} here); keep one, or put each under a "
                       "marker (regenerate with `kdkit lock`)")
    pins.append(pin)


def parse_lock_text(text: str, path: Path) -> Lock:
    """Parse a lock's text; ``path`` only names the file in messages."""
    lock = Lock(path, {}, {}, [], {})
    for number, line in logical_lines(text.removeprefix("\ufeff")):  # a BOM, as Notepad writes
        stripped = line.strip()
        if stripped.startswith(HEADER_PREFIX):
            _read_header_line(stripped, lock.header)
            continue
        body = strip_comment(line)
        if not body:
            continue
        where = f"{path}:{number}"
        if body.startswith("-") and not body.startswith("--hash"):
            _option(where, body, lock.options)
            continue
        _add_pin(where, lock.candidates, _parse_pin(where, number, body))
    lock.pins.update((key, pins[0]) for key, pins in lock.candidates.items())
    if not lock.pins:
        raise BadInput(f"{path}: no pinned requirement in it (empty, or comments only): this is not a lock, and "
                       "an empty lock would prove nothing; regenerate it with `kdkit lock`")
    return lock


def parse_lock(path: Path) -> Lock:
    """Read and parse a lock; every problem is a one-line BadInput naming ``file:line``."""
    if not os.path.lexists(path):
        raise BadInput(f"{path}: lock not found; create it with `kdkit lock`")
    return parse_lock_text(read_text_file(path, "lock"), path)
