"""The files a lock is made from: the requirements input and what it includes, and their paths
relative to the project as the lock's header records them."""

from __future__ import annotations

import re
from pathlib import Path

from kdkit.core.errors import BadInput

_INCLUDE = re.compile(r"^\s*(-r|--requirement|-c|--constraint)(?:\s+|=)(\S+)")


def input_files(requirements: Path) -> list[Path]:
    """The .in file and every file it includes with -r / -c, recursively, in order."""
    if not requirements.is_file():
        raise BadInput(f"{requirements}: requirements input not found; create it (one requirement "
                       "a line, e.g. torch==2.13.0) or fix $.requirements in kdkit.json")
    seen: list[Path] = []
    pending = [requirements.resolve()]
    while pending:
        path = pending.pop(0)
        if path in seen:
            continue
        seen.append(path)
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            match = _INCLUDE.match(line)
            if match:
                included = (path.parent / match.group(2)).resolve()
                if not included.is_file():
                    raise BadInput(
                        f"{path}:{number}: includes {match.group(2)}, which does not exist")
                pending.append(included)
    return seen


def relative(root: Path, path: Path) -> str:
    """``path`` relative to ``root`` (POSIX), or as given when it lies outside."""
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)
