"""Reading kdkit's hashed lock files (``requirements/<backend>.txt``), standard library only.

A kdkit lock is what ``pip-compile --generate-hashes`` writes, preceded by a
provenance header of ``# kdkit: key = value`` lines. Every requirement is an
exact pin (``name==version``, the local label included) with at least one
``--hash``; anything else is refused with the file and line, because an
unhashed, editable, URL or VCS line cannot be proved against an installed
environment (a direct URL install has no version the lock could name).

Stable API (``kdkit check`` reads the locked torch with it)::

    lock = parse_lock(path)
    pin = lock.pins.get("torch")         # keys are PEP 503 normalized names
    pin.version, pin.public_version, pin.local   # "2.8.0+cu128", "2.8.0", "cu128"
    lock.header["backend"]               # the provenance written by `kdkit lock`
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import NamedTuple

from kdkit.core.errors import BadInput
from kdkit.core.jsonio import read_text_file
from kdkit.core.markers import InvalidMarker, parse_marker
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
}
_FLAG_OPTIONS = {"--no-index", "--pre", "--prefer-binary"}

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
    """A parsed lock: its pins by normalized name, its provenance header and its index options."""

    path: Path
    pins: dict[str, Pin]
    header: dict[str, str]
    options: list[tuple[str, str]]

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


def _add_pin(where: str, pins: dict[str, Pin], pin: Pin) -> None:
    previous = pins.get(pin.key)
    if previous is None:
        pins[pin.key] = pin
        return
    if Version.parse(previous.version) != Version.parse(pin.version):
        raise BadInput(f"{where}: {pin.name} pinned twice with different versions ({previous.version} "
                       f"at line {previous.line}, {pin.version} here); keep one "
                       "(regenerate with `kdkit lock`)")
    merged = previous.hashes + [h for h in pin.hashes if h not in previous.hashes]
    pins[pin.key] = Pin(previous.name, previous.version, previous.public_version, previous.local,
                        previous.marker, merged, previous.line, previous.extras)


def parse_lock_text(text: str, path: Path) -> Lock:
    """Parse a lock's text; ``path`` only names the file in messages."""
    lock = Lock(path, {}, {}, [])
    for number, line in logical_lines(text):
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
        _add_pin(where, lock.pins, _parse_pin(where, number, body))
    if not lock.pins:
        raise BadInput(f"{path}: no pinned requirement in it (empty, or comments only): this is not a lock, and "
                       "an empty lock would prove nothing; regenerate it with `kdkit lock`")
    return lock


def parse_lock(path: Path) -> Lock:
    """Read and parse a lock; every problem is a one-line BadInput naming ``file:line``."""
    if not os.path.lexists(path):
        raise BadInput(f"{path}: lock not found; create it with `kdkit lock`")
    return parse_lock_text(read_text_file(path, "lock"), path)
