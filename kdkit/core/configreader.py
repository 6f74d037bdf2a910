"""One reader for kdkit's small JSON configs (config/train.json, config/service.json): each value
checked where it is read, a bad one BadInput (exit 2) naming the file, the JSON path and what to
give instead.

Standard library only (the in-container side reads these configs).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from kdkit.core.errors import BadInput
from kdkit.core.projectfiles import CONTROL_CHARACTER

HUGE = 10**18  # no count, size or seed of a config goes past this


class ConfigReader:
    """Reads one JSON config's values, each checked where it is read; a bad one is BadInput naming
    the file, the JSON path and what to do."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def bad(self, where: str, what: str) -> BadInput:
        return BadInput(f"{self.path}: {where}: {what}")

    def keys(self, data: Any, where: str, allowed: set[str]) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise self.bad(where, "must be an object")
        for key in data:
            if key not in allowed:
                raise self.bad(
                    f"{where}.{key}"[:120], f"unknown key; use one of {', '.join(sorted(allowed))}")
        return data

    def number(self, data: dict[str, Any], key: str, where: str, *, minimum: float = 0.0,
               whole: bool = False, above: bool = False) -> float | None:
        """``data[key]`` checked (None when absent): a finite number at least (or ``above``)
        ``minimum``."""
        value = data.get(key)
        if value is None:
            return None
        return self.checked(value, f"{where}.{key}", minimum=minimum, whole=whole, above=above)

    def checked(self, value: Any, where: str, *, minimum: float = 0.0, whole: bool = False,
                above: bool = False) -> float:
        """One value at ``where``: a finite number (whole when asked) at least (or ``above``)
        ``minimum``."""
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or (whole and not isinstance(value, int)):
            raise self.bad(where, f"must be {'a whole number' if whole else 'a number'}")
        # math.isfinite of a 400-digit int raises OverflowError
        if isinstance(value, int) and abs(value) > HUGE:
            raise self.bad(where, f"must be a number of at most {len(str(HUGE))} digits")
        if not math.isfinite(value) or value < minimum or (above and value == minimum):
            raise self.bad(where,
                           f"must be a finite number {'above' if above else 'at least'} "
                           f"{minimum:g}")
        return value

    def text(self, data: dict[str, Any], key: str, where: str) -> str:
        value = data.get(key)
        if not isinstance(value, str) or not value.strip() or CONTROL_CHARACTER.search(value) \
                or len(value) > 300:
            raise self.bad(f"{where}.{key}",
                           "must be a non-empty string without control characters (300 at most)")
        return value
