"""Names of a project's files that a copy through macOS or Windows loses or changes: `kdkit validate` warns.

Linux keeps every byte of a name; other file systems do not, and a project copied through one of them (a
laptop, a synced folder, a zip made there) silently keeps one file of two, or none:

* **case**: APFS (macOS, by default) and NTFS (Windows) are case-insensitive, so ``Data.txt`` and ``data.txt``
  are one name there;
* **Unicode normalization**: APFS is normalization-insensitive, so ``café`` written composed (NFC, U+00E9) and
  decomposed (NFD, ``e`` + U+0301) are one name there
  (https://developer.apple.com/documentation/foundation/file_system/about_apple_file_system);
* **Windows' rules** (https://learn.microsoft.com/en-us/windows/win32/fileio/naming-a-file): the device names
  CON, PRN, AUX, NUL, COM1-9 and LPT1-9 (with any extension: ``con.txt`` too) name no file; a name ending in a
  dot or a space loses it; ``< > : " | ? *`` cannot be in a name.

These are warnings, not problems: the project works here and on the rented Linux machine; each names the
file(s) so they can be renamed before the copy that would lose one.
"""

from __future__ import annotations

import fnmatch
import re
import unicodedata
from collections.abc import Iterable
from functools import cache
from pathlib import Path

from kdkit.config.schemas import Problem
from kdkit.core.credentials import NOT_SECRET_FILES, NOT_SECRET_SUFFIXES, SECRET_FILES, secret_file
from kdkit.core.projectfiles import shown

RESERVED = re.compile(r"(CON|PRN|AUX|NUL|COM[1-9\u00b9\u00b2\u00b3]|LPT[1-9\u00b9\u00b2\u00b3])(\..*)?", re.IGNORECASE)
FORBIDDEN = re.compile(r'[<>:"|?*]')
COPY = "a copy through such a file system keeps one of them; rename one"


def folded(rel: str) -> str:
    """The name macOS and Windows see: composed (NFC), then each character in lower case (one for one, as the
    file systems' case tables map characters: ``ß`` stays ``ß``)."""
    if rel.isascii():  # NFC keeps ASCII as it is, and lowers each of its letters to one
        return rel.lower()
    return "".join(c.lower() if len(c.lower()) == 1 else c for c in unicodedata.normalize("NFC", rel))


def windows_problem(part: str) -> str | None:
    """Why Windows cannot hold a file or folder named ``part``, or None."""
    if RESERVED.fullmatch(part):
        return (f"{_shown(part)} is a device name on Windows (CON, PRN, AUX, NUL, COM1-9, LPT1-9, whatever the "
                "extension), which names no file there; a copy through Windows loses it: rename it")
    if part.endswith((".", " ")):
        return f"{_shown(part)} ends with a dot or a space, which Windows drops from a name; rename it"
    if FORBIDDEN.search(part):
        return f"{_shown(part)} holds a character Windows refuses in a name (< > : \" | ? *); rename it"
    return None


def _why(first: str, rel: str) -> str:
    if unicodedata.normalize("NFC", first) == unicodedata.normalize("NFC", rel):
        return "the same letters in Unicode's composed and decomposed forms (NFC, NFD): one name on macOS"
    if first.lower() == rel.lower():
        return "the same but for case: one name on macOS and Windows"
    return "the same but for case and Unicode's form (NFC, NFD): one name on macOS"


def _shown(rel: str) -> str:
    return shown(rel, limit=1000)  # whole: two long names may differ only at their ends


def name_warnings(names: Iterable[str]) -> list[Problem]:
    """One warning per file whose path is another's on macOS or Windows (naming both), and per path holding a
    name Windows cannot hold; ``names`` are paths relative to the project root, '/' between folders."""
    names = list(names)
    if _all_fine(names):
        return []
    warnings = []
    seen: dict[str, str] = {}
    for rel in names:
        first = seen.setdefault(folded(rel), rel)
        if first != rel:
            warnings.append(Problem(Path(rel), "name", f"{_shown(first)} and {_shown(rel)} are {_why(first, rel)}; "
                                    f"{COPY}"))
        folder, _sep, name = rel.rpartition("/")
        problem = (_folder_problem(folder) if folder else None) or windows_problem(name)
        if problem is not None:
            warnings.append(Problem(Path(rel), "name", problem))
    return warnings


# What windows_problem refuses, found in paths joined by line breaks: a device name as a whole part (with any
# extension), a part ending with a dot or a space, a character Windows refuses.
WINDOWS_PARTS = re.compile(r"(?:^|[/\n])" + RESERVED.pattern + r"(?=[/\n])|[. ](?=[/\n])|" + FORBIDDEN.pattern,
                           re.IGNORECASE)


def _all_fine(names: list[str]) -> bool:
    """Whether no warning of name_warnings holds, judged at once: ASCII paths (folded: lower case), none breaking
    a line, none the same as another once folded, and no part that windows_problem refuses (WINDOWS_PARTS)."""
    joined = "\n".join(names) + "\n"
    if not joined.isascii() or joined.count("\n") != len(names):
        return False
    return len(set(joined.lower().split("\n"))) == len(names) + 1 and WINDOWS_PARTS.search(joined) is None


@cache
def _folder_problem(folder: str) -> str | None:
    """The first of the folder's parts that Windows cannot hold, why (a folder is judged once, not per file)."""
    return next((p for p in map(windows_problem, folder.split("/")) if p is not None), None)


@cache
def _secret_shaped() -> re.Pattern[str]:
    """Any of credentials.SECRET_FILES' patterns, as fnmatch.fnmatchcase matches each (a whole name)."""
    return re.compile("|".join(fnmatch.translate(pattern) for pattern, _what in SECRET_FILES))


def secret_file_warnings(names: list[str]) -> list[Problem]:
    """Files of the project (``names``, relative to its root) named like secrets: warnings, never problems.
    credentials.secret_file judges every path one of whose parts matches a pattern; none other can be one."""
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
            warnings.append(Problem(Path(rel), "name", f"named like {what}, so `kdkit bundle` leaves it out; "
                                    "secrets reach the container at run time only (`kdkit run --env-file`)"))
    return warnings


@cache
def _secret_folder(folder: str) -> bool:
    """Whether a part of ``folder`` matches a pattern of credentials.SECRET_FILES (once a folder, not per file)."""
    return any(_secret_shaped().match(part.lower()) is not None for part in folder.split("/"))


def _no_secret_names(names: list[str]) -> bool:
    """Whether no part of ``names`` (ASCII paths, none breaking a line) matches a pattern of SECRET_FILES, judged
    at once: the parts one a line, each pattern's ``*`` and ``?`` within a line (fnmatch's, for these patterns);
    a part that matches must be one credentials.secret_file passes over (NOT_SECRET_FILES, NOT_SECRET_SUFFIXES)."""
    joined = "\n".join(names)
    if not joined.isascii() or joined.count("\n") != len(names) - 1 or any("[" in p for p, _what in SECRET_FILES):
        return False
    hits = {found.group() for found in _secret_lines().finditer(joined.lower().replace("/", "\n"))}
    return all(hit in NOT_SECRET_FILES or hit.endswith(NOT_SECRET_SUFFIXES) for hit in hits)  # .env.example


@cache
def _secret_lines() -> re.Pattern[str]:
    lines = ("".join("[^\n]*" if c == "*" else "[^\n]" if c == "?" else re.escape(c) for c in pattern)
             for pattern, _what in SECRET_FILES)
    return re.compile("^(?:" + "|".join(lines) + ")$", re.MULTILINE)
