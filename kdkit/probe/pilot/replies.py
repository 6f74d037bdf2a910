"""The app process's replies as the harness reads them (kdkit/probe/pilot/supervisor.py): how many
bytes one may take, and its answers decoded from the tagged JSON that kdkit/probe/pilot/appchild.py
writes, a value JSON could not carry kept as the app's repr (Opaque) and every lone surrogate in a
string written as its escape.

Standard library only.
"""

from __future__ import annotations

from typing import Any

from kdkit.probe.pilot.harness import NotAList

# The most bytes one reply of the app's process may take, read from its length header before any of
# its body: a diagnose report, an error or the answers of a batch. kdkit keeps an ID, a category and
# 500 characters of a reason per answer, so an answer has 64 KiB on the wire (room for an app's own
# extra keys); a bigger reply is the app-protocol stop, never read (reply_limit).
ANSWER_BYTES = 64 << 10
REPLY_BYTES = 1 << 20  # any reply's room besides its answers
REPLY_CEILING = 256 << 20  # whatever the batch size


class Opaque:
    """An answer value JSON could not carry: shown as the app's repr, never equal to a category."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def escape_surrogates(value: Any) -> Any:
    """``value`` with every lone surrogate in its strings written as its escape (``\\udc80``)."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, list):
        return [escape_surrogates(item) for item in value]
    if isinstance(value, dict):
        return {escape_surrogates(key): escape_surrogates(item) for key, item in value.items()}
    return value


def _decode(value: Any) -> Any:
    tag, body = value
    if tag in ("v", "j"):
        return body
    if tag == "d":
        return {str(key): _decode(item) for key, item in body.items()}
    if tag == "r":
        return Opaque(str(body))
    if tag == "l":
        return [_decode(item) for item in body]
    if tag == "f" and body in ("nan", "inf", "-inf"):
        return float(body)
    raise ValueError(f"unknown tag {tag!r}")


def decode_answers(header: dict[str, Any]) -> Any:
    """The answers as the harness classifies them; NotAList is retried item by item, like a
    raise."""
    if "not_list" in header:
        raise NotAList(f"predict returned {header['not_list']}, expected a list of results")
    if "plain" in header:
        return header["plain"]
    return [_decode(value) for value in header["tagged"]]


def reply_limit(batch_size: int, answer_bytes: int = ANSWER_BYTES) -> int:
    """The bytes one reply may take for batches of ``batch_size``: 1 MiB + ``answer_bytes`` per item
    (64 KiB, or what the declared output needs: kdkit.core.outputkinds.answer_bytes), at most 256
    MiB."""
    return min(REPLY_BYTES + batch_size * max(answer_bytes, ANSWER_BYTES), REPLY_CEILING)
