"""SHA256SUMS, the one checksum file of kdkit's closed folders (run folders, gatherings, bundles).

The format is ``sha256sum``'s: ``<64 lowercase hex>  <relative path>`` per line, sorted, so
``sha256sum -c SHA256SUMS`` checks a copy without kdkit. A name is a relative POSIX path that
stays inside its folder; a line that is not of that form, a name listed twice or a file that is
not UTF-8 is a damaged file (CheckFailed, one line naming it).

Standard library only (the in-container side closes and copies run folders).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from kdkit.core.errors import BadInput, CheckFailed
from kdkit.core.jsonio import atomic_write_text, sha256_file

SUMS = "SHA256SUMS"
_DIGEST = re.compile(r"[0-9a-f]{64}")


def safe_name(name: object) -> bool:
    """Whether ``name`` is a relative POSIX path that stays inside its folder: no '..', '.', empty
    parts, backslash or control character."""
    if not isinstance(name, str) or not name or name.startswith("/"):
        return False
    if any(ord(c) < 32 or ord(c) == 127 or c == "\\" for c in name):
        return False
    return all(part not in ("", ".", "..") for part in name.split("/"))


def read_sums(folder: Path, what: str, absent: str) -> dict[str, str]:
    """``folder``'s SHA256SUMS as {name: sha256}; BadInput with ``absent`` (what the folder should
    be) when there is none, CheckFailed naming the line when it is damaged (``what``: "bundle", "run
    folder")."""
    sums = folder / SUMS
    if not sums.is_file():
        raise BadInput(f"{sums}: not found; {absent}")
    try:
        text = sums.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CheckFailed(f"{sums}: not UTF-8 (byte at offset {exc.start}); the {what} is damaged, "
                          "copy it again") from None
    except OSError as exc:
        raise CheckFailed(f"{sums}: cannot read ({exc.strerror or exc}); check the copy") from None
    listed: dict[str, str] = {}
    lines = text.split("\n")
    for number, line in enumerate(lines, start=1):
        if not line and number == len(lines):
            continue  # after the final newline
        digest, sep, name = line.partition("  ")
        if not sep or not _DIGEST.fullmatch(digest) or not safe_name(name) or name in listed:
            raise CheckFailed(f"{sums}:{number}: malformed line (not '<sha256>  <relative path>', "
                              f"or a name listed twice); the {what} is damaged, copy it again")
        listed[name] = digest
    return listed


def write_sums(folder: Path, files: Iterable[tuple[str, Path]]) -> int:
    """SHA256SUMS over ``files`` ((name, path), any order), written last and atomically; returns the
    count."""
    return write_digests(folder, {name: sha256_file(path) for name, path in files})


def write_digests(folder: Path, digests: dict[str, str]) -> int:
    """SHA256SUMS from digests already known ({name: sha256}); returns the count."""
    lines = [f"{digest}  {name}" for name, digest in sorted(digests.items())]
    atomic_write_text(folder / SUMS, "".join(line + "\n" for line in lines))
    return len(lines)
