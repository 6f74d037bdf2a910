"""How a command tells a person what it does: progress as it goes (one line at a time), and its
answer as one JSON document (``--json``) or text.

Standard library only. The output is flushed at once, so that what was printed is out before the
exit status (a caller reading a pipe, a container's log) even when the process ends abruptly after.
"""

from __future__ import annotations

import sys

from kdkit.core.safetext import json_text, printable

TYPE_CHECKING = False  # typing is not imported at start-up (kdkit.core.commands says why)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeAlias

    # Told one line of progress (the host's CLI prints it on stderr); None where nobody listens.
    Progress: TypeAlias = Callable[[str], None]
else:
    # a name for annotations, which are never evaluated here (from __future__ import annotations)
    Progress = None


def print_result(as_json: bool, data: Any, text: str | Callable[[], str], *,
                 ascii_only: bool = True,
                 default: Callable[[Any], Any] | None = None) -> None:
    """Print ``data`` as indented JSON when ``as_json``, else ``text`` (a string, or what a call of
    it returns: the text is rendered only when it is printed); then flush stdout."""
    if as_json:
        import json

        print(json_text(json.dumps(data, indent=2, ensure_ascii=ascii_only, default=default)))
    # no control character of anything the text quotes reaches the terminal (kdkit.core.safetext)
    else:
        print(printable(text if isinstance(text, str) else text(), lines=True))
    sys.stdout.flush()
