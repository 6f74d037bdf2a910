"""How an in-container command prints its answer: one JSON document (``--json``) or text for a person.

Standard library only. The output is flushed at once, so that what was printed is out before the exit
status (a caller reading a pipe, a container's log) even when the process ends abruptly after.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any


def print_result(as_json: bool, data: Any, text: str | Callable[[], str], *, ascii_only: bool = True,
                 default: Callable[[Any], Any] | None = None) -> None:
    """Print ``data`` as indented JSON when ``as_json``, else ``text`` (a string, or what a call of it returns:
    the text is rendered only when it is printed); then flush stdout."""
    if as_json:
        print(json.dumps(data, indent=2, ensure_ascii=ascii_only, default=default))
    else:
        print(text if isinstance(text, str) else text())
    sys.stdout.flush()
