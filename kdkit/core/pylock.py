"""Reading PEP 751 lock files (``pylock.toml``, ``pylock.<name>.toml``), standard library only.

The specification: https://packaging.python.org/en/latest/specifications/pylock-toml/ (its source:
pypa/packaging.python.org, source/specifications/pylock-toml.rst). Two tools kdkit's users have
write such files: ``uv pip compile --format pylock.toml``, since uv 0.6.15, which also reads them
back with ``uv pip sync pylock.toml`` (https://github.com/astral-sh/uv/pull/13019,
https://docs.astral.sh/uv/reference/cli/#uv-pip-compile), and ``pip lock``, experimental since pip
25.1 (https://pip.pypa.io/en/stable/cli/pip_lock/).

This module checks the file and returns its facts as plain records (:class:`Pylock`, one
:class:`Entry` per ``[[packages]]`` table); :mod:`kdkit.core.lockfile` turns them into its lock
model, with the same candidate rules as a requirements lock (lockfile loads this module for a file
of a pylock name, so this one imports nothing of lockfile: tests/test_architecture.py refuses an
import circle). What it refuses, each with the file and
the line of the ``[[packages]]`` header (``tomllib`` gives no line numbers, so the headers are found
in the text):

* a file that is not TOML, a TOML file with no ``lock-version`` (a ``pyproject.toml``), a
  ``lock-version`` whose major is not 1 (the specification: a tool MUST raise an error); a newer
  minor is read, with a warning naming the keys kdkit does not know (it SHOULD warn);
* no ``packages`` array (``packages = []``, which uv writes for a project without dependencies, is
  read);
* a package without a name, with a version that is not PEP 440, an invalid marker or
  ``requires-python``, no source or two exclusive ones (``vcs``, ``directory``, ``archive``, and
  ``wheels``/``sdist``: the specification makes them mutually exclusive), a file without hashes or
  with a hash that is not hex of its algorithm's length.

``tomllib`` is new in Python 3.11 and imported only when a pylock is read: on 3.10 reading one is
``Unavailable`` (the requirements lock kdkit writes beside it works there).
"""

from __future__ import annotations

import os
import re
from os import PathLike
from typing import Any, NamedTuple

from kdkit.core.errors import BadInput, Unavailable
from kdkit.core.markers import InvalidMarker, parse_marker
from kdkit.core.versions import InvalidVersion, Version, specifier_clauses

# The specification's file name rule: pylock.toml, or pylock.<name>.toml with no dot in the name.
FILE_NAME = re.compile(r"^pylock\.([^.]+\.)?toml$")
MAJOR, MINOR = 1, 0  # the lock-version kdkit reads
_TOP_KEYS = frozenset({"lock-version", "environments", "requires-python", "extras",
                       "dependency-groups",
                       "default-groups", "created-by", "packages", "tool"})
_PACKAGE_KEYS = frozenset({"name", "version", "marker", "requires-python", "dependencies", "vcs",
                           "directory",
                           "archive", "index", "sdist", "wheels", "attestation-identities", "tool"})
# each excludes every other source, wheels and sdist included
_EXCLUSIVE = ("vcs", "directory", "archive")
_HEADER = re.compile(
    r"""^[ \t]*\[\[[ \t]*(packages|"packages"|'packages')[ \t]*\]\]""", re.MULTILINE)
_AT = re.compile(r"\(at line (\d+), column (\d+)\)")
_HEX = re.compile(r"^[0-9a-fA-F]+$")


class Source(NamedTuple):
    """Where a package's code comes from when no index file is named: ``vcs``, ``directory`` or
    ``archive``. ``path`` is as written: relative paths are relative to the lock's folder."""

    kind: str
    url: str | None = None
    path: str | None = None
    vcs: str | None = None  # git, hg, svn, bzr
    commit: str | None = None  # vcs commit-id
    subdirectory: str | None = None
    editable: bool = False

    def __str__(self) -> str:
        where = self.url or self.path or ""
        return f"{self.vcs} {where}@{self.commit}" if self.kind == "vcs" else f"{self.kind} {where}"


class Entry(NamedTuple):
    """One ``[[packages]]`` table; ``version`` is "" where the lock gives none (a source tree)."""

    name: str
    version: str
    marker: str | None
    hashes: list[str]
    line: int
    source: Source | None
    requires_python: str | None


class Pylock(NamedTuple):
    """A checked PEP 751 lock: its packages and the lock-level keys verify-env needs."""

    entries: list[Entry]
    environments: tuple[str, ...]
    requires_python: str | None
    default_groups: tuple[str, ...]
    warnings: tuple[str, ...]


def is_pylock_name(name: str) -> bool:
    """Whether a file name is one the specification gives a PEP 751 lock."""
    return FILE_NAME.match(name) is not None


def _load(text: str, path: str | PathLike[str]) -> dict[str, Any]:
    try:
        import tomllib
    except ImportError:
        raise Unavailable(f"{path}: reading a pylock.toml needs Python 3.11 or newer (tomllib); on "
                          "this Python use the requirements lock kdkit writes beside it "
                          "(requirements/<backend>.txt)") from None
    try:
        return tomllib.loads(text)
    except RecursionError:  # tomllib recurses once per level of nesting
        raise BadInput(f"{path}: its tables or arrays nest too deep to be a lock; write it again "
                       "with the tool that made it") from None
    except tomllib.TOMLDecodeError as exc:
        said = str(exc)
        at = _AT.search(said)
        place = f"{path}:{at.group(1)}:{at.group(2)}" if at else str(path)
        reason = _AT.sub("", said).strip()
        raise BadInput(f"{place}: not valid TOML ({reason}); fix the file or write it again with "
                       "the tool that made it") from None


def _lock_version(data: dict[str, Any], path: str | PathLike[str]) -> list[str]:
    """Refuse a file that is no PEP 751 lock or one of an unknown major; warn for a newer minor."""
    if "lock-version" not in data:
        known = ("a pyproject.toml (project metadata)" if {"project", "build-system"} & data.keys()
                 else "TOML")
        raise BadInput(f"{path}: this is {known}, not a PEP 751 lock: it has no lock-version key; "
                       "give the lock (pylock.toml, or requirements/<backend>.txt)")
    value = data["lock-version"]
    match = re.fullmatch(r"(\d+)\.(\d+)", value) if isinstance(value, str) else None
    if match is None:
        raise BadInput(f"{path}: lock-version {value!r} is not a \"MAJOR.MINOR\" string; write "
                       "lock-version = \"1.0\", or relock")
    if int(match.group(1)) != MAJOR:
        raise BadInput(f"{path}: lock-version {value!r} is not one kdkit reads (major {MAJOR}, "
                       f"{MAJOR}.x); write the lock with a tool that writes lock-version 1.0, or "
                       "use a kdkit that knows it")
    if int(match.group(2)) <= MINOR:
        return []
    unknown = sorted(data.keys() - _TOP_KEYS)
    packages = data["packages"] if isinstance(data.get("packages"), list) else []
    unknown += sorted(
        {f"packages.{key}" for p in packages if isinstance(p, dict) for key in p.keys()
         - _PACKAGE_KEYS})
    ignored = (f"keys it does not know were ignored: {', '.join(unknown)}" if unknown
               else "it has no key kdkit "
               "does not know")
    return (
        [f"{path}: lock-version {value} is newer than the {MAJOR}.{MINOR} kdkit knows; {ignored}"])


def _strings(value: Any, where: str, key: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise BadInput(f"{where}: {key} must be an array of strings")
    return tuple(value)


def _marker(value: Any, where: str, key: str, lock_file: bool) -> str:
    if not isinstance(value, str):
        raise BadInput(f"{where}: {key} must be a string (a PEP 508 marker)")
    try:
        parse_marker(value, lock_file=lock_file)
    except InvalidMarker as exc:
        raise BadInput(f"{where}: {key}: {exc}; fix the marker or relock") from None
    return value


def _specifiers(value: Any, where: str, key: str) -> str:
    try:
        if not isinstance(value, str):
            raise InvalidVersion(f"{value!r} is not a string")
        specifier_clauses(value)
    except InvalidVersion as exc:
        raise BadInput(
            f"{where}: {key} {value!r} is not a version specifier set ({exc}); fix it or "
            "relock") from None
    return value


def _hashes(value: Any, where: str, what: str) -> list[str]:
    """``{sha256 = "..."}`` as ``["sha256:..."]``; at least one, each hex of its algorithm's
    length."""
    if not isinstance(value, dict) or not value:
        raise BadInput(f"{where}: {what} has no hashes; a PEP 751 lock hashes every file (relock "
                       "with `uv pip compile --generate-hashes` or `pip lock`)")
    import hashlib

    found = []
    for algorithm, digest in value.items():
        known = (algorithm.lower() in hashlib.algorithms_guaranteed
                 and not algorithm.lower().startswith("shake"))
        size = hashlib.new(algorithm.lower()).digest_size if known else None
        if not isinstance(digest, str) or not _HEX.match(digest) \
                or (size and len(digest) != 2 * size):
            raise BadInput(f"{where}: {what} has a bad {algorithm} hash {digest!r}; expected "
                           f"{2 * size if size else 'the'} hex digits")
        found.append(f"{algorithm.lower()}:{digest.lower()}")
    return found


def _located(table: Any, where: str, what: str) -> dict[str, Any]:
    """A file or tree table: a table with a string url or path."""
    if not isinstance(table, dict):
        raise BadInput(f"{where}: {what} must be a table")
    if not isinstance(table.get("url"), str) and not isinstance(table.get("path"), str):
        raise BadInput(f"{where}: {what} has neither url nor path; name where it is")
    return table


def _file_version(table: dict[str, Any], sdist: bool) -> str | None:
    """The version a wheel's or sdist's file name carries (``name``, else the last part of its url
    or path): ``{name}-{version}(-{build})?-{python}-{abi}-{platform}.whl`` (PEP 427),
    ``{name}-{version}.tar.gz`` (PEP 625); None for a name of neither form."""
    name = table.get("name")
    if not name:
        from urllib.parse import unquote  # a URL's "+" is "%2B" (torch-2.13.0%2Bcpu-...whl)

        name = unquote(
            str(table.get("url") or table.get("path") or "").rstrip("/").rsplit("/", 1)[-1])
    if not isinstance(name, str):
        return None
    if sdist:
        stem = name.removesuffix(".tar.gz").removesuffix(".zip")
        return stem.rsplit("-", 1)[1] if stem != name and "-" in stem else None
    parts = name.removesuffix(".whl").split("-")
    return parts[1] if name.endswith(".whl") and len(parts) in (5, 6) else None


def _files(table: dict[str, Any], where: str) -> tuple[list[str], list[str]]:
    """Every hash of the package's wheels and sdist, and the versions their file names carry."""
    wheels = table.get("wheels", [])
    if not isinstance(wheels, list):
        raise BadInput(f"{where}: wheels must be an array of tables")
    if not wheels and "sdist" not in table:
        raise BadInput(
            f"{where}: no file (wheels is empty and there is no sdist); name where the package "
            "comes from")
    hashes: list[str] = []
    versions: list[str] = []
    for number, wheel in enumerate(wheels, start=1):
        what = f"wheel {number}" + (f" ({wheel['name']})" if isinstance(wheel, dict)
                                    and "name" in wheel else "")
        hashes += _hashes(_located(wheel, where, what).get("hashes"), where, what)
        versions.append(_file_version(wheel, sdist=False) or "")
    if "sdist" in table:
        hashes += _hashes(_located(table["sdist"], where, "sdist").get("hashes"), where, "sdist")
        versions.append(_file_version(table["sdist"], sdist=True) or "")
    return hashes, versions


def _version_of_files(version: str, versions: list[str], where: str) -> str:
    """The package's version, held to the versions its files' names carry (uv refuses a wheel whose
    name says another version); taken from them when the lock gives none (PEP 751: it SHOULD)."""
    named = {v for v in versions if v}
    parsed = {}
    for text in named | ({version} if version else set()):
        try:
            parsed[text] = Version.parse(text)
        except InvalidVersion:
            raise BadInput(
                f"{where}: a file named with version {text!r}, which is not PEP 440; "
                "relock") from None
    if len(set(parsed.values())) > 1:
        raise BadInput(f"{where}: version {version or '(none)'} and files named "
                       f"{', '.join(sorted(named))} disagree; relock")
    if not version and (not named or "" in versions):
        raise BadInput(f"{where}: no version, and not every file's name says one; add version = "
                       "\"...\" (PEP 751) or relock")
    return version or sorted(named)[0]


def _source(table: dict[str, Any], kind: str, where: str) -> tuple[Source, list[str]]:
    """A vcs, directory or archive table as a Source, and the archive's hashes."""
    data = table[kind]
    if kind == "directory":
        if not isinstance(data, dict) or not isinstance(data.get("path"), str):
            raise BadInput(f"{where}: directory needs a path (the source tree's folder)")
        return Source(kind, path=data["path"], subdirectory=_text(data, "subdirectory", where),
                      editable=data.get("editable") is True), []
    data = _located(data, where, kind)
    url, at, sub = _text(data, "url", where), _text(data, "path", where), _text(
        data, "subdirectory", where)
    if kind == "archive":
        return Source(kind, url,
                      at, subdirectory=sub), _hashes(data.get("hashes"), where, "archive")
    if not isinstance(data.get("type"), str) or not isinstance(data.get("commit-id"), str):
        raise BadInput(
            f"{where}: vcs needs a type (git, hg, svn, bzr) and a commit-id (the exact revision)")
    return Source(kind, url, at, data["type"], data["commit-id"], sub), []


def _sources(table: dict[str, Any], where: str) -> tuple[Source | None, list[str]]:
    given = [key for key in (*_EXCLUSIVE, "wheels", "sdist") if key in table]
    exclusive = [key for key in given if key in _EXCLUSIVE]
    if not given:
        raise BadInput(f"{where}: no source (wheels, sdist, vcs, directory or archive); name where "
                       "the package comes from")
    if exclusive and len(given) > 1:
        raise BadInput(f"{where}: two sources ({' and '.join(given)}); {exclusive[0]} excludes "
                       "every other, keep one")
    if exclusive:
        return _source(table, exclusive[0], where)
    hashes, versions = _files(table, where)
    table["version"] = _version_of_files(table.get("version", ""), versions, where)
    return None, hashes


def _is_version(value: Any) -> bool:
    try:
        return isinstance(value, str) and Version.parse(value) is not None
    except InvalidVersion:
        return False


def _text(data: dict[str, Any], key: str, where: str) -> str | None:
    """An optional string key of a source table."""
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise BadInput(f"{where}: {key} must be a string")
    return value


def _entry(table: Any, path: str | PathLike[str], line: int) -> Entry:
    where = f"{path}:{line}"
    if not isinstance(table, dict):
        raise BadInput(f"{where}: a [[packages]] entry must be a table")
    name = table.get("name")
    if not isinstance(name, str) or not name:
        raise BadInput(
            f"{where}: package without a name; every [[packages]] entry needs name = \"...\"")
    where = f"{where}: {name}"
    version = table.get("version", "")
    if "version" in table and not _is_version(version):
        raise BadInput(f"{where}: version {version!r} is not a PEP 440 version; fix it or relock")
    marker = _marker(table["marker"], where, "marker", True) if "marker" in table else None
    python = _specifiers(
        table["requires-python"], where, "requires-python") if "requires-python" in table else None
    source, hashes = _sources(table, where)  # index files: the version checked against their names
    return Entry(name, table.get("version", ""), marker, hashes, line, source, python)


def _package_lines(text: str, count: int) -> list[int]:
    """The line of each ``[[packages]]`` header; for an inline ``packages = [...]``, the line of
    that key."""
    lines = [text.count("\n", 0, match.start()) + 1 for match in _HEADER.finditer(text)]
    if len(lines) == count:
        return lines
    inline = re.search(r"""^[ \t]*("packages"|'packages'|packages)[ \t]*=""", text, re.MULTILINE)
    return [text.count("\n", 0, inline.start()) + 1 if inline else 1] * count


def read_pylock(text: str, path: str | PathLike[str]) -> Pylock:
    """Check a PEP 751 lock's text and return its facts; ``path`` only names the file in
    messages."""
    data = _load(text, path)
    warnings = _lock_version(data, path)
    if not isinstance(data.get("created-by"), str) or not data["created-by"].strip():
        raise BadInput(f"{path}: no created-by; PEP 751 requires the name of the tool that wrote "
                       "the lock (write it again with that tool)")
    packages = data.get("packages")
    # `packages = []` is valid: uv writes it for a project without dependencies
    if not isinstance(packages, list):
        raise BadInput(f"{path}: no packages array in it; PEP 751 requires one ([[packages]] "
                       "tables, or packages = [] for no dependencies): write it again with the "
                       "tool that made it")
    environments = _strings(data.get("environments", []), str(path), "environments")
    for marker in environments:
        _marker(marker, str(path), "environments", False)
    python = _specifiers(data["requires-python"],
                         str(path), "requires-python") if "requires-python" in data \
        else None
    groups = _strings(data.get("default-groups", []), str(path), "default-groups")
    lines = _package_lines(text, len(packages))
    entries = [_entry(table, path, line) for table, line in zip(packages, lines, strict=True)]
    return Pylock(entries, environments, python, groups, tuple(warnings))


def toml_hint(text: str, path: str | PathLike[str]) -> str | None:
    """For a file read as a requirements lock that failed: the one line to say instead when it is
    TOML."""
    first = next((line.strip() for line in text.removeprefix("\ufeff").splitlines()
                  if line.strip() and not line.lstrip().startswith("#")), "")
    if not re.match(r"""^(\[.*\]|[A-Za-z0-9_"'][A-Za-z0-9_."'-]*[ \t]*=([^=]|$))""", first):
        return None
    if os.path.basename(path) == "pyproject.toml" \
            or re.match(r"^\[(project|build-system|tool\b)", first):
        return (f"{path}: this is a pyproject.toml (project metadata), not a lock; give the lock: "
                "requirements/<backend>.txt, or a PEP 751 pylock.toml")
    return (f"{path}: looks like TOML, not a requirements lock; a PEP 751 lock must be named "
            "pylock.toml or pylock.<name>.toml")
