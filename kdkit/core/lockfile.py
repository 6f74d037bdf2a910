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

A PEP 751 lock (a file named ``pylock.toml`` or ``pylock.<name>.toml``) is read into the same model
by :func:`parse_pylock_text`, with the same candidate rules, after :mod:`kdkit.core.pylock` has
checked it: its pins may name a ``source`` (vcs, directory, archive) and carry no version, and the
lock its ``environments``, ``requires-python``, ``default-groups`` and ``warnings`` (a newer minor
``lock-version``). Its package markers may test ``extras`` (empty) and ``dependency_groups`` (the
lock's default groups), as the specification's installation steps say.

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

from kdkit.core.errors import BadInput
from kdkit.core.lockmodel import Lock as Lock
from kdkit.core.lockmodel import Pin as Pin
from kdkit.core.lockmodel import add_pin, is_name
from kdkit.core.lockmodel import normalize_name as normalize_name
from kdkit.core.textfile import read_text_file

# What the in-container verify-env imports at start-up is most of its time
# (bench/bench_verify_env.py): a lock as pip-compile writes it is read with string methods alone,
# and ``re`` (with ``enum``), the marker and PEP 440 modules are loaded only for a line that needs
# them: a marker, an option or a version outside the plain forms, or an error to explain. typing is
# for the type checker only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from os import PathLike
    from types import ModuleType

HEADER_PREFIX = "# kdkit:"
# The largest file read as a lock: PyPI's own application lock, hashes and all, is 190 KB
# (tests/data/locks/warehouse-main.txt); a file a hundred times larger is not a lock, and is not
# read.
LOCK_LIMIT = 32 << 20

# Options pip-compile may emit at the top of a lock; they steer where pip looks, not what it
# installs.
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
_PIN = rf"""^(?P<name>{_NAME})\s*
        (?:\[(?P<extras>[^\]]*)\])?\s*
        (?P<op>===|==)\s*(?P<version>[^\s;]+)\s*
        (?:;\s*(?P<marker>.*?))?\s*$"""
_HASH = r"--hash(?:=|\s+)(?P<value>\S+)"
_URLISH = r"(^|\s|@)([a-z][a-z0-9+.-]*://|git\+|hg\+|svn\+|bzr\+|file:)"
_HASH_LENGTHS = {"sha256": 64, "sha384": 96, "sha512": 128}
_HEX = frozenset("0123456789abcdefABCDEF")
_PLAIN_VERSION_CHARS = frozenset("0123456789.abcdefghijklmnopqrstuvwxyz+")


def _re() -> ModuleType:
    """The re module, loaded the first time a line needs it."""
    import re

    return re


def _plain_version(text: str) -> bool:
    """Whether ``text`` is a version in the forms pip-compile and uv write (``2.13.0``,
    ``2.13.0+cu130``, ``1.0rc1``, ``1.0.post2``, ``25.1.dev0``): a strict subset of PEP 440 checked
    without ``re``. Anything else is left to kdkit.core.versions, which knows every form."""
    if not set(text) <= _PLAIN_VERSION_CHARS:
        return False
    public, plus, local = text.partition("+")
    if plus and not (local and all(part.isalnum() for part in local.split("."))):
        return False
    cut = len(public) - len(public.lstrip("0123456789."))
    release, rest = public[:cut], public[cut:]
    if rest and release.endswith("."):
        release, rest = release[:-1], "." + rest  # the dot of ".post1" / ".dev0"
    if not all(part.isdigit() for part in release.split(".")):
        return False
    # PEP 440's order, each segment at most once
    for labels in (("a", "b", "rc"), (".post",), (".dev",)):
        for label in labels:
            if rest.startswith(label) and rest[len(label):len(label) + 1].isdigit():
                rest = rest[len(label):].lstrip("0123456789")
                break
    return not rest


def _check_version(where: str, text: str) -> None:
    if _plain_version(text):
        return
    from kdkit.core.versions import InvalidVersion, Version

    try:
        Version.parse(text)
    except InvalidVersion:
        raise BadInput(f"{where}: {text!r} is not a PEP 440 version") from None


def logical_lines(text: str) -> list[tuple[int, str]]:
    """Join backslash continuations as pip does (a line that ends with ``\\`` and is no comment goes
    on in the next; pip joins the pieces as they are, src/pip/_internal/req/req_file.py
    ``join_lines``); each logical line keeps the number of its first physical line."""
    out: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        if not pending:
            start = number
        if raw.endswith("\\") and not raw.lstrip().startswith("#"):
            pending.append(raw[:-1])
            continue
        pending.append(raw)
        out.append((start, "".join(pending)))
        pending = []
    if pending:
        out.append((start, "".join(pending)))
    return out


def strip_comment(line: str) -> str:
    """pip's rule: a comment starts at ``#`` at the line start or after whitespace."""
    if "#" not in line:
        return line.strip()
    if line.lstrip().startswith("#"):
        return ""
    return str(_re().sub(r"(^|\s+)#.*$", "", line)).strip()


def _read_header_line(line: str, header: dict[str, str]) -> None:
    body = line[len(HEADER_PREFIX):].strip()
    key, sep, value = body.partition(" = ")
    if sep:
        header[key.strip()] = value.strip()


def _option_name(body: str) -> tuple[str, str]:
    r"""(option, value) of an option line, as ``^(-[-A-Za-z]*)(?:=|\s+|$)(.*)$`` splits it; the
    whole line and no value when it does not match."""
    end = 1
    while end < len(body) and (body[end] == "-" or (body[end].isascii() and body[end].isalpha())):
        end += 1
    rest = body[end:]
    if not rest:
        return body, ""
    if rest[0] == "=":
        return body[:end], rest[1:]
    if rest[0].isspace():
        return body[:end], rest.lstrip()
    return body, ""


def _option(where: str, body: str, options: list[tuple[str, str]]) -> None:
    name, value = _option_name(body)
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


def _plain_pin(number: int, body: str) -> Pin | None:
    """The pin of a line as pip-compile and uv write it (``name==version --hash=...``, no marker, no
    extras, no URL), read with string methods; None for any other line, which :func:`_parse_pin`
    reads with the full rules. Whatever this accepts, those rules accept the same way."""
    if not body.isascii():
        return None  # the full rules say which character
    words = body.split()
    spec, hashes, index = words[0], [], 1
    while index < len(words):
        word = words[index]
        if word.startswith("--hash="):
            hashes.append(word[7:])
        elif word == "--hash" and index + 1 < len(words):
            index += 1
            hashes.append(words[index])
        else:
            return None
        index += 1
    name, op, version = spec.partition("==")
    # pip-compile without --strip-extras: celery[redis]==5.6.3
    name, bracket, extras = name.partition("[")
    if bracket \
            and (not extras.endswith("]") or not all(is_name(e) for e in extras[:-1].split(","))):
        return None
    if not op or not hashes or not is_name(name) or not _plain_version(version):
        return None
    for value in hashes:
        algorithm, _colon, digest = value.partition(":")
        if len(digest) != _HASH_LENGTHS.get(algorithm) or not set(digest) <= _HEX:
            return None
    public, _plus, local = version.partition("+")
    named = tuple(e for e in extras[:-1].split(",") if e)
    return Pin(name, version, public, local or None, None, hashes, number, named)


def _parse_pin(where: str, number: int, body: str) -> Pin:
    plain = _plain_pin(number, body)
    return plain if plain is not None else _full_pin(where, number, body)


def _full_pin(where: str, number: int, body: str) -> Pin:
    """Any requirement line by the full rules (regular expressions, PEP 440, PEP 508 markers): the
    pin, or BadInput saying what is wrong with the line."""
    if not body.isascii():
        at = next(i for i, char in enumerate(body) if not char.isascii())
        raise BadInput(f"{where}: character U+{ord(body[at]):04X} at column {at + 1} is not ASCII; "
                       "a lock line is (pip and uv refuse it): write it again, or regenerate with "
                       "`kdkit lock`")
    re = _re()
    hashes = [m.group("value") for m in re.finditer(_HASH, body)]
    spec = re.sub(_HASH, "", body).strip()
    if re.search(_URLISH, spec, re.IGNORECASE):
        raise BadInput(f"{where}: URL, path or VCS requirement {spec!r} refused; kdkit locks name "
                       "releases from an index (pin the release, then `kdkit lock`)")
    match = re.match(_PIN, spec, re.VERBOSE)
    if match is None:
        hint = "pin it as name==version" if re.match(rf"^{_NAME}\s*([<>!~=]|$|\[|;)", spec) else \
            "expected name==version --hash=sha256:..."
        raise BadInput(f"{where}: cannot parse {spec!r}; {hint} (regenerate with `kdkit lock`)")
    if not hashes:
        raise BadInput(f"{where}: {spec!r} has no --hash; kdkit locks are always hashed "
                       "(regenerate with `kdkit lock`)")
    for value in hashes:
        algorithm, _colon, digest = value.partition(":")
        if len(digest) != _HASH_LENGTHS.get(algorithm) or not set(digest) <= _HEX:
            raise BadInput(
                f"{where}: bad hash {value!r}; expected sha256:<64 hex digits> (or sha384, sha512)")
    _check_version(where, match.group("version"))
    marker = match.group("marker") or None
    if marker:
        from kdkit.core.markers import InvalidMarker, parse_marker

        try:
            parse_marker(marker)
        except InvalidMarker as exc:
            raise BadInput(f"{where}: {exc}") from None
    extras = tuple(e.strip() for e in (match.group("extras") or "").split(",") if e.strip())
    if not all(is_name(extra) for extra in extras):
        raise BadInput(f"{where}: extras [{match.group('extras')}] are not names (PEP 508); fix "
                       "the line or regenerate with `kdkit lock`")
    text = match.group("version")
    public, _plus, local = text.partition("+")
    return Pin(match.group("name"), text, public, local or None, marker, hashes, number, extras)


def parse_lock_text(text: str, path: str | PathLike[str]) -> Lock:
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
        add_pin(where, lock.candidates, _parse_pin(where, number, body))
    lock.pins.update((key, pins[0]) for key, pins in lock.candidates.items())
    if not lock.pins:
        raise BadInput(f"{path}: no pinned requirement in it (empty, or comments only): this is "
                       "not a lock, and an empty lock would prove nothing; regenerate it with "
                       "`kdkit lock`")
    return lock


def parse_pylock_text(text: str, path: str | PathLike[str]) -> Lock:
    """Parse a PEP 751 lock's text into the lock model; ``path`` names the file in messages."""
    from kdkit.core.pylock import read_pylock  # and tomllib: only when a pylock is read

    read = read_pylock(text, path)
    lock = Lock(path, {}, {}, [], {}, "pylock", read.environments, read.requires_python,
                read.default_groups,
                read.warnings)
    # kdkit's provenance: comment lines at the top
    for line in text.removeprefix("\ufeff").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            break
        if line.strip().startswith(HEADER_PREFIX):
            _read_header_line(line.strip(), lock.header)
    for entry in read.entries:
        where = f"{path}:{entry.line}"
        if not is_name(entry.name):
            raise BadInput(
                f"{where}: {entry.name!r} is not a package name (PEP 508); fix it or relock")
        public, _plus, local = entry.version.partition("+")
        add_pin(where, lock.candidates,
                Pin(entry.name, entry.version, public, local or None, entry.marker,
                     entry.hashes, entry.line, (), entry.source, entry.requires_python))
    lock.pins.update((key, pins[0]) for key, pins in lock.candidates.items())
    return lock


def parse_lock(path: str | PathLike[str]) -> Lock:
    """Read and parse a lock, a PEP 751 one when its name says so; every problem is a one-line
    BadInput naming ``file:line``."""
    if not os.path.lexists(path):
        raise BadInput(f"{path}: lock not found; create it with `kdkit lock`")
    return parse_lock_content(read_text_file(path, "lock", limit=LOCK_LIMIT), path)


def parse_lock_content(text: str, path: str | PathLike[str]) -> Lock:
    """Parse a lock's text read from ``path`` (read once by the caller: ``kdkit build`` hashes and
    sends the same bytes), a PEP 751 one when the path's name says so; ``path`` names the file in
    messages."""
    if "\x00" in text:
        raise BadInput(f"{path}: a binary file (NUL bytes), not a lock; give "
                       "requirements/<backend>.txt or a pylock.toml")
    name = os.path.basename(path)
    # the exact rule is kdkit.core.pylock's, loaded only for such a name
    if name.startswith("pylock."):
        from kdkit.core.pylock import is_pylock_name

        if is_pylock_name(name):
            return parse_pylock_text(text, path)
    try:
        return parse_lock_text(text, path)
    except BadInput:
        from kdkit.core.pylock import toml_hint

        if (hint := toml_hint(text, path)) is None:
            raise
        raise BadInput(hint) from None


def machine_local(lock: Lock) -> list[str]:
    """The pins the lock's header names as found on the locking machine only (``machine-local``,
    written by `kdkit lock` when a file came from a folder of that machine): no index serves
    them."""
    said = lock.header.get("machine-local", "none")
    return [name for name in said.split(", ") if name and name != "none"]
