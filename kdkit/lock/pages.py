"""What pip reads before it installs anything, as kdkit reads it: PEP 503 project pages (the files
they link to, their sha256 fragments, Requires-Python and PEP 592 yanking), distribution file names
and whether a wheel's tags fit the image, and what the requirement files ask of torch.

No click, no network here (:mod:`kdkit.lock.fetch` fetches the pages).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit
from urllib.request import url2pathname

from kdkit.core.lockfile import logical_lines, normalize_name, strip_comment
from kdkit.core.markers import InvalidMarker, evaluate
from kdkit.core.versions import InvalidVersion, compare

_CLAUSE = re.compile(r"^\s*(===|==|!=|~=|<=|>=|<|>)\s*(\S+)\s*$")
_REQUIREMENT = re.compile(r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?"
                          r"\s*(?P<rest>[^;]*?)\s*(?:;\s*(?P<marker>.*))?$")


@dataclass(frozen=True)
class IndexFile:
    """One anchor of a PEP 503 project page."""

    filename: str
    url: str
    sha256: str | None
    requires_python: str | None = None
    yanked: bool = False  # PEP 592 data-yanked: pip takes it only for a requirement pinned with ==


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.found.append(dict(attrs))


def parse_page(text: str, page_url: str) -> list[IndexFile]:
    """The files a PEP 503 page links to, with their sha256 fragments (``#sha256=HEX``) where
    given."""
    parser = _Anchors()
    # html.parser on a malformed declaration (`<![ x`): links before it
    with contextlib.suppress(AssertionError):
        parser.feed(text)
    files = []
    for attrs in parser.found:
        href = attrs.get("href")
        if not href:
            continue
        url = urljoin(page_url, href)
        parts = urlsplit(url)
        name = unquote(parts.path.rsplit("/", 1)[-1])
        digest = (parts.fragment[len("sha256="):].lower() if parts.fragment.startswith("sha256=")
                  else None)
        if name and parse_filename(name) is not None:
            files.append(IndexFile(name, url.split("#", 1)[0], digest,
                                   attrs.get("data-requires-python"),
                                   "data-yanked" in attrs))
    return files


def parse_filename(filename: str) -> tuple[str, str, tuple[str, str, str] | None] | None:
    """(normalized name, version, wheel tags or None for an sdist) of a distribution file name."""
    if filename.endswith(".whl"):
        parts = filename[:-4].split("-")
        if len(parts) not in (5, 6):
            return None
        return normalize_name(parts[0]), parts[1], (parts[-3], parts[-2], parts[-1])
    for ext in (".tar.gz", ".zip", ".tar.bz2", ".tgz"):
        if filename.endswith(ext):
            name, _sep, version = filename[: -len(ext)].rpartition("-")
            return (normalize_name(name), version, None) if name and version else None
    return None


def fits(tags: tuple[str, str, str], python: str, target: tuple[str, str]) -> bool:
    """Whether a wheel with ``tags`` installs on CPython ``python`` (``"3.11"``) on ``target``
    (linux, x86_64)."""
    major, minor = [*python.split("."), "0"][:2]
    pythons = {f"cp{major}{minor}", f"py{major}{minor}", f"py{major}", f"cp{major}"}
    abis = {f"cp{major}{minor}", "abi3", "none"}
    system, machine = target
    platforms = (
        re.compile(rf"any|(?:many)?{re.escape(system)}(?:\d+|_\d+_\d+)?_{re.escape(machine)}"))
    python_tags, abi_tags, platform_tags = (tag.split(".") for tag in tags)
    if "abi3" in abi_tags:  # the stable ABI of CPython 3.N holds for every later 3.x
        pythons |= {f"cp{major}{n}" for n in range(2, int(minor) + 1)} if minor.isdigit() else set()
    return (any(t in pythons for t in python_tags) and any(t in abis for t in abi_tags)
            and any(platforms.fullmatch(t) for t in platform_tags))


def wheel_fits(filename: str, python: str, target: tuple[str, str]) -> bool:
    """Whether ``filename`` is a wheel that installs on CPython ``python`` on ``target``."""
    parsed = parse_filename(filename)
    return bool(parsed and parsed[2] and fits(parsed[2], python, target))


def python_allows(requires_python: str | None, python: str) -> bool:
    """Whether a file's Requires-Python (``>=3.12``) admits CPython ``python`` (``3.11``: some
    3.11.x does); a specifier kdkit cannot read admits it (pip will say)."""
    clauses = [_CLAUSE.match(piece) for piece in (requires_python or "").split(",")
               if piece.strip()]
    if not all(clauses):
        return True
    try:
        return any(all(compare(full, c.group(1), c.group(2)) for c in clauses if c)
                   for full in (f"{python}.0", f"{python}.999"))
    except InvalidVersion:
        return True


def local_path(value: str) -> str:
    """The path a pip option value names on this machine: a ``file:`` URL's path, percent-decoded as
    pip reads it, or the value itself (a plain path)."""
    return url2pathname(urlsplit(value).path) if value.startswith("file:") else value


def and_list(items: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``: how messages name several files, builds or sources."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


# ---------------------------------------------------------------- what the inputs ask of torch


@dataclass(frozen=True)
class Requirement:
    """The clauses the input files put on torch (``==2.13.0``, ``>=2.12,<2.14``); none means any
    release."""

    clauses: tuple[tuple[str, str], ...]

    def allows(self, version: str) -> bool:
        try:
            return all(compare(version, op, spec) for op, spec in self.clauses)
        except InvalidVersion:
            return False

    def pinned(self) -> bool:
        """One ``==`` (or ``===``) clause without a wildcard: pip then takes a yanked file too (PEP
        592)."""
        return (len(self.clauses) == 1 and self.clauses[0][0] in ("==", "===")
                and "*" not in self.clauses[0][1])

    def text(self) -> str:
        """``torch 2.13.0`` for one exact pin, ``torch>=2.12,<2.14`` otherwise."""
        if len(self.clauses) == 1 and self.clauses[0][0] == "==" \
                and not self.clauses[0][1].endswith("*"):
            return f"torch {self.clauses[0][1]}"
        return "torch" + ",".join(op + spec for op,
                                  spec in self.clauses) if self.clauses else "torch"


def torch_requirement(files: Sequence[Path], python: str,
                      target: tuple[str, str]) -> Requirement | None:
    """What the input files (``kdkit.lock.inputs.input_files``) require of torch for the image
    (markers evaluated for it); None when they do not name torch, or name it by URL (``torch @
    https://...``, no index needed)."""
    environment = {"python_version": python, "python_full_version": f"{python}.0",
                   "sys_platform": target[0],
                   "platform_system": target[0].capitalize(), "platform_machine": target[1],
                   "os_name": "posix",
                   "implementation_name": "cpython",
                   "platform_python_implementation": "CPython", "extra": ""}
    clauses: list[tuple[str, str]] = []
    named = False
    for path in files:
        for _number, line in logical_lines(path.read_text(encoding="utf-8")):
            rest = _torch_clauses(strip_comment(line), environment)
            if rest is None:
                continue
            if rest.startswith("@"):
                return None
            named = True
            for piece in filter(None, (p.strip() for p in rest.strip("()").split(","))):
                clause = _CLAUSE.match(piece)
                if clause:
                    clauses.append((clause.group(1), clause.group(2)))
    return Requirement(tuple(clauses)) if named else None


def _torch_clauses(line: str, environment: dict[str, str]) -> str | None:
    """What follows ``torch`` on a requirement line whose marker holds in ``environment``
    (``>=2.12,<2.14``, ``@ URL``, or empty); None for another line."""
    if not line or line.startswith("-"):
        return None
    match = _REQUIREMENT.match(line)
    if match is None or normalize_name(match.group("name")) != "torch":
        return None
    marker = match.group("marker")
    try:
        if marker and not evaluate(marker, environment):
            return None
    except InvalidMarker:
        pass  # pip-compile will say what is wrong with it
    return match.group("rest").strip()
