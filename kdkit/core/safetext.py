"""Text kdkit shows: as a terminal prints it as it is, and as Markdown shows it as it is.

What kdkit prints or writes into Markdown often carries text it did not write: an app's answers,
rejection reasons and exceptions, a folder or file name, a driver's line. None of it may move the
cursor, clear or retitle the terminal, hide a line (ESC/CSI/OSC sequences, CR, BEL, NUL, the C1
controls such as U+009B, which some terminals read as CSI) or reorder what is shown (the bidi
controls of Unicode TR #9, U+202A-U+202E and U+2066-U+2069, used to make text read other than it
is stored). The one rule, for every writer on both sides (the host's CLI and the in-container
commands): such a character is shown as a visible escape, ``\\x1b``, ``\\x9b``, ``\\u202e``, the
way Python's repr shows it; tab is kept. A one-line field (an error, a problem, a reason, a table
cell) escapes CR and LF too, so it never starts a line of its own; a text of several lines
(``lines=True``) keeps LF (a CRLF becomes LF) and escapes a lone CR.

``--json`` output escapes the same characters with JSON's own ``\\uXXXX`` (``json_text``): the
document stays valid JSON and reads back to the original string.

Markdown (``md_cell``): a table cell or a list item is one line of inline text; ``|`` and ``\\`` are
escaped, as is a leading character that would start another block (a heading's ``#``, a quote's
``>``, a list's ``-``, ``1.``, a fence), and ``<`` (raw HTML).

Standard library only.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at start-up (kdkit.core.commands says why)
if TYPE_CHECKING:
    from typing import Any

# Unicode's bidi controls (ALM, LRM, RLM, LRE..RLO, LRI..PDI) and line/paragraph separators.
_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
CONTROLS = frozenset((*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0), *_BIDI, 0x2028, 0x2029))
TAB, LF, CR = 0x09, 0x0A, 0x0D


def _shown(code: int) -> str:
    if code in (LF, CR):
        return "\\n" if code == LF else "\\r"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


_ONE_LINE = {code: _shown(code) for code in CONTROLS if code != TAB}
_LINES = {code: shown for code, shown in _ONE_LINE.items() if code != LF}
# What json.dumps leaves raw (it escapes C0 only, and with ensure_ascii=False nothing else).
_JSON = {code: f"\\u{code:04x}" for code in CONTROLS if code >= 0x7F}


def printable(value: object, lines: bool = False) -> str:
    """``value`` as text a terminal shows as it is (see the module's docstring); None is ''."""
    text = "" if value is None else str(value)
    # no control, bidi or separator character at all: the usual case, at C speed
    if text.isprintable():
        return text
    if lines:
        return text.replace("\r\n", "\n").translate(_LINES)
    return text.translate(_ONE_LINE)


def json_text(text: str) -> str:
    """A JSON document (json.dumps' output) with every character a terminal could act on escaped as
    ``\\uXXXX``: they can only stand inside its strings, so the document reads back the same."""
    return text if text.isascii() and "\x7f" not in text else text.translate(_JSON)


# What starts another block at the start of a line (CommonMark 0.31: thematic breaks, ATX headings,
# fences, block quotes, list items); its first punctuation character is escaped. Setext underlines
# need a line above.
BLOCK_START = (r"(?P<number>\d{1,9})[.)](?=\s|$)|#{1,6}(?=\s|$)|>|[-+*](?=\s)|(?:[-*_]\s*){3,}$"
               r"|`{3}|~{3}")


def md_cell(value: Any, limit: int | None = 160) -> str:
    """Text safe as one Markdown table cell or list item (IDs, reasons and names are data, shown,
    never interpreted), cut at ``limit`` characters; None is —."""
    if value is None:
        return "—"
    text = printable(str(value).replace("\\", "\\\\")).lstrip(" ")
    text = text.replace("|", "\\|").replace("<", "\\<")
    # not on the start-up path of the commands that only print (re.match caches the pattern)
    import re

    start = re.match(BLOCK_START, text)
    if start:
        at = len(start.group("number") or "")
        text = f"{text[:at]}\\{text[at:]}"
    return text if limit is None or len(text) <= limit else text[:limit] + "..."
