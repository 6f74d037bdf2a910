"""Names of a project's files that a copy through macOS or Windows loses or changes: `kdkit
validate` warns.

Linux keeps every byte of a name; other file systems do not, and a project copied through one of
them (a laptop, a synced folder, a zip made there) silently keeps one file of two, or none:

* **case**: APFS (macOS, by default) and NTFS (Windows) are case-insensitive, so ``Data.txt`` and
  ``data.txt`` are one name there;
* **Unicode normalization**: APFS is normalization-insensitive, so ``café`` written composed (NFC,
  U+00E9) and decomposed (NFD, ``e`` + U+0301) are one name there
  (https://developer.apple.com/documentation/foundation/file_system/about_apple_file_system);
* **Windows' rules** (https://learn.microsoft.com/en-us/windows/win32/fileio/naming-a-file): the
  device names CON, PRN, AUX, NUL, COM1-9 and LPT1-9 (with any extension: ``con.txt`` too) name no
  file; a name ending in a dot or a space loses it; ``< > : " | ? *`` cannot be in a name.

These are warnings, not problems: the project works here and on the rented Linux machine; each names
the file(s) so they can be renamed before the copy that would lose one.
"""

from __future__ import annotations

import fnmatch
import re
import unicodedata
from collections.abc import Iterable, Iterator
from functools import cache
from pathlib import Path

from kdkit.config.schemas import config_warning
from kdkit.core.finding import Finding
from kdkit.core.projectfiles import shown
from kdkit.core.secretnames import NOT_SECRET_FILES, NOT_SECRET_SUFFIXES, SECRET_FILES, secret_file

RESERVED = re.compile(
    r"(CON|PRN|AUX|NUL|COM[1-9\u00b9\u00b2\u00b3]|LPT[1-9\u00b9\u00b2\u00b3])(\..*)?",
    re.IGNORECASE)
FORBIDDEN = re.compile(r'[<>:"|?*]')
COPY = "a copy through such a file system keeps one of them; rename one"


def folded(rel: str) -> str:
    """The name macOS and Windows see: composed (NFC), then each character in lower case (one for
    one, as the file systems' case tables map characters: ``ß`` stays ``ß``)."""
    if rel.isascii():  # NFC keeps ASCII as it is, and lowers each of its letters to one
        return rel.lower()
    return "".join(c.lower() if len(c.lower()) == 1 else c
                   for c in unicodedata.normalize("NFC", rel))


def windows_problem(part: str) -> str | None:
    """Why Windows cannot hold a file or folder named ``part``, or None."""
    if RESERVED.fullmatch(part):
        return (f"{_shown(part)} is a device name on Windows (CON, PRN, AUX, NUL, COM1-9, LPT1-9, "
                "whatever the extension), which names no file there; a copy through Windows loses "
                "it: rename it")
    if part.endswith((".", " ")):
        return (
            f"{_shown(part)} ends with a dot or a space, which Windows drops from a name; rename "
            "it")
    if FORBIDDEN.search(part):
        return (
            f"{_shown(part)} holds a character Windows refuses in a name (< > : \" | ? *); rename "
            "it")
    return None


def _why(first: str, rel: str) -> str:
    if unicodedata.normalize("NFC", first) == unicodedata.normalize("NFC", rel):
        return (
            "the same letters in Unicode's composed and decomposed forms (NFC, NFD): one name on "
            "macOS")
    if first.lower() == rel.lower():
        return "the same but for case: one name on macOS and Windows"
    return "the same but for case and Unicode's form (NFC, NFD): one name on macOS"


def _shown(rel: str) -> str:
    return shown(rel, limit=1000)  # whole: two long names may differ only at their ends


def name_warnings(names: Iterable[str]) -> list[Finding]:
    """One warning per file whose path is another's on macOS or Windows (naming both), and per path
    holding a name Windows cannot hold; ``names`` are paths relative to the project root, '/'
    between folders."""
    names = list(names)
    if _all_fine(names):
        return []
    warnings = []
    seen: dict[str, str] = {}
    for rel in names:
        first = seen.setdefault(folded(rel), rel)
        if first != rel:
            warnings.append(config_warning(Path(rel), "name",
                                           f"{_shown(first)} and {_shown(rel)} are "
                                           f"{_why(first, rel)}; {COPY}"))
        folder, _sep, name = rel.rpartition("/")
        problem = (_folder_problem(folder) if folder else None) or windows_problem(name)
        if problem is not None:
            warnings.append(config_warning(Path(rel), "name", problem))
    return warnings


# What windows_problem refuses, found in lower-case ASCII paths joined by line breaks: a device name
# as a whole part, with any extension (the match must start a part: the character before it is '/'
# or a line break), a part ending with a dot or a space, a character Windows refuses. Three
# searches: one pattern of the three, tried at every character, took three times as long over
# 100,000 paths.
DEVICE_PARTS = re.compile(RESERVED.pattern.lower().replace(r"(\..*)?", r"(?:\.[^/\n]*)?")
                          + r"(?=[/\n])")
DOT_OR_SPACE_ENDS = (".\n", "./", " \n", " /")


def _all_fine(names: list[str]) -> bool:
    """Whether no warning of name_warnings holds, judged at once: ASCII paths (folded: lower case),
    none breaking a line, none the same as another once folded, and no part that windows_problem
    refuses."""
    joined = "\n".join(names) + "\n"
    if not joined.isascii() or joined.count("\n") != len(names):
        return False
    low = joined.lower()
    if len(set(low.split("\n"))) != len(names) + 1 or FORBIDDEN.search(joined) is not None:
        return False
    if any(end in joined for end in DOT_OR_SPACE_ENDS):
        return False
    return all(found.start() > 0 and low[found.start() - 1] not in "/\n"
               for found in DEVICE_PARTS.finditer(low))


@cache
def _folder_problem(folder: str) -> str | None:
    """The first of the folder's parts that Windows cannot hold, why (a folder is judged once, not
    per file)."""
    return next((p for p in map(windows_problem, folder.split("/")) if p is not None), None)


@cache
def _secret_shaped() -> re.Pattern[str]:
    """Any of secretnames.SECRET_FILES' patterns, as fnmatch.fnmatchcase matches each (a whole
    name)."""
    return re.compile("|".join(fnmatch.translate(pattern) for pattern, _what in SECRET_FILES))


def secret_file_warnings(names: list[str]) -> list[Finding]:
    """Files of the project (``names``, relative to its root) named like secrets: warnings, never
    problems. secretnames.secret_file judges every path one of whose parts matches a pattern; none
    other can be one."""
    if not names or _no_secret_names(names):
        return []
    match = _secret_shaped().match
    warnings = []
    for rel in names:
        folder, _sep, name = rel.rpartition("/")
        if match(name.lower()) is None and not (folder and _secret_folder(folder)):
            continue
        what = secret_file(rel)
        if what is not None:
            warnings.append(config_warning(Path(rel),
                                           "name",
                                           f"named like {what}, so `kdkit bundle` leaves it out; "
                                           "secrets reach the container at run time only (`kdkit "
                                           "run --env-file`)"))
    return warnings


@cache
def _secret_folder(folder: str) -> bool:
    """Whether a part of ``folder`` matches a pattern of secretnames.SECRET_FILES (once a folder,
    not per file)."""
    return any(_secret_shaped().match(part.lower()) is not None for part in folder.split("/"))


def _no_secret_names(names: list[str]) -> bool:
    """Whether no part of ``names`` (ASCII paths, none breaking a line) matches a pattern of
    SECRET_FILES, judged at once: the parts one a line, a pattern's literal (_probes) looked for in
    the whole text, and only the lines holding it matched by the pattern; a part that matches must
    be one secretnames.secret_file passes over (NOT_SECRET_FILES, NOT_SECRET_SUFFIXES)."""
    joined = "\n".join(names)
    if not joined.isascii() or joined.count("\n") != len(names) - 1 \
            or any("[" in p for p, _what in SECRET_FILES):
        return False
    text = "\n" + joined.lower().replace("/", "\n") + "\n"
    hits = {line for probe, at, pattern in _probes() for line in _lines_holding(text, probe, at)
            if pattern.fullmatch(line)}
    # .env.example
    return all(hit in NOT_SECRET_FILES or hit.endswith(NOT_SECRET_SUFFIXES) for hit in hits)


@cache
def _probes() -> tuple[tuple[str, int, re.Pattern[str]], ...]:
    """For each pattern of SECRET_FILES: its longest literal run, with a line break before it when
    the pattern starts with it and after it when the pattern ends with it (every line the pattern
    matches holds the probe); where the run starts within the probe; and the pattern as fnmatch
    matches a whole name."""
    probes = []
    for pattern, _what in SECRET_FILES:
        runs = re.split(r"[*?]", pattern)
        at = max(range(len(runs)), key=lambda n: len(runs[n]))
        # the first run starts the pattern
        run, lead, trail = runs[at], at == 0, at == len(runs) - 1
        probe = ("\n" if lead else "") + run + ("\n" if trail else "")
        probes.append((probe, int(lead), re.compile(fnmatch.translate(pattern))))
    return tuple(probes)


def _lines_holding(text: str, probe: str, at: int) -> Iterator[str]:
    """Each line of ``text`` (parts between line breaks) holding ``probe``; its literal run starts
    ``at`` into it."""
    found = text.find(probe)
    while found != -1:
        start = text.rfind("\n", 0, found + at) + 1
        yield text[start:text.find("\n", found + at)]
        found = text.find(probe, found + 1)
