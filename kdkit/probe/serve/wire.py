"""HTTP/1.1 on the wire for ``kdkit serve-test --url``: keep-alive connections to one host, a
response read piece by piece as it arrives (Content-Length, chunked or up to the close), and the
times of a stream's token chunks (server-sent events, ``data: ...`` lines up to ``data: [DONE]``).
Standard library only (asyncio).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

HEAD_LIMIT = 1 << 16  # bytes a response's status line and headers may take
KEPT = 200  # bytes of a refused or failed response's body kept for its error text
PIECE = 1 << 16


class Stale(Exception):
    """A kept-alive connection the server closed while idle: nothing of the response came back."""


class Connection:
    """One keep-alive connection; ``used`` counts the exchanges it carried."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.used = reader, writer, 0

    def close(self) -> None:
        with contextlib.suppress(OSError, RuntimeError):  # already gone, or the loop is closing
            self.writer.close()


async def connect(host: str, port: int, context: ssl.SSLContext | None) -> Connection:
    reader, writer = await asyncio.open_connection(host, port, ssl=context, limit=HEAD_LIMIT,
                                                   server_hostname=host if context is not None
                                                   else None)
    return Connection(reader, writer)


class Pool:
    """Connections to the one host of the URL, opened on demand up to ``limit`` at once; idle ones
    reused last-in first-out (the warmest first)."""

    def __init__(self, host: str, port: int, context: ssl.SSLContext | None, limit: int) -> None:
        self.host, self.port, self.context = host, port, context
        self.slots = asyncio.Semaphore(limit)
        self.idle: list[Connection] = []
        self.opened = 0

    async def take(self, fresh: bool = False) -> Connection:
        """An idle connection, or a new one (always a new one when ``fresh``)."""
        while self.idle and not fresh:
            conn = self.idle.pop()
            if not conn.reader.at_eof():
                return conn
            conn.close()  # closed by the server while idle
        self.opened += 1
        return await connect(self.host, self.port, self.context)

    def give(self, conn: Connection, keep: bool) -> None:
        if keep:
            self.idle.append(conn)
        else:
            conn.close()

    def close(self) -> None:
        while self.idle:
            self.idle.pop().close()


class StreamTimes:
    """A server-sent-events body fed as it arrives: when each token chunk came, whether ``[DONE]``
    came and the error a ``data:`` object reported, if any."""

    def __init__(self) -> None:
        self.buffer = b""
        self.tokens: list[float] = []
        self.done = False
        self.error: str | None = None

    def feed(self, data: bytes) -> bool:
        """Take a piece of the body; True once ``data: [DONE]`` has come."""
        now = time.perf_counter()
        *lines, self.buffer = (self.buffer + data).split(b"\n")
        for line in lines:
            if self.done or not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                self.done = True
            elif self._token(payload):
                self.tokens.append(now)
        return self.done

    def _token(self, payload: bytes) -> bool:
        try:
            event = json.loads(payload)
        except ValueError:
            return bool(payload)  # not JSON: a chunk of text all the same
        if not isinstance(event, dict):
            return True
        if "error" in event:
            self.error = self.error or _one_line(str(event["error"]))
            return False
        choices = event.get("choices")
        if not isinstance(choices, list):
            return True
        return any(_choice_text(choice) for choice in choices)


def _choice_text(choice: Any) -> bool:
    """Whether a completions (``text``) or chat (``delta.content``) choice carries any text."""
    if not isinstance(choice, dict):
        return False
    delta = choice.get("delta")
    if isinstance(delta, dict):
        return bool(delta.get("content") or delta.get("reasoning_content"))
    return bool(choice.get("text"))


def _one_line(text: str, limit: int = 120) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


async def read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bool]:
    """The final response's status, its headers (names lowercase) and whether the connection stays
    open after it; interim 1xx responses skipped."""
    while True:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise ValueError(f"not an HTTP response: {_one_line(lines[0], 60)!r}")
        status = int(parts[1])
        if 100 <= status < 200 and status != 101:
            continue
        headers = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        connection = headers.get("connection", "").lower()
        keep = "close" not in connection and (parts[0] != "HTTP/1.0" or "keep-alive" in connection)
        return status, headers, keep


async def _chunked(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    while True:
        line = await reader.readuntil(b"\r\n")
        size = int(line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers
                pass
            return
        data = await reader.readexactly(size)
        await reader.readexactly(2)
        yield data


async def _sized(reader: asyncio.StreamReader, length: int) -> AsyncIterator[bytes]:
    while length > 0:
        piece = await reader.read(min(length, PIECE))
        if not piece:
            raise asyncio.IncompleteReadError(b"", length)
        length -= len(piece)
        yield piece


async def _to_close(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    while piece := await reader.read(PIECE):
        yield piece


def body_of(reader: asyncio.StreamReader, status: int,
            headers: dict[str, str]) -> AsyncIterator[bytes] | None:
    """The body's pieces as they arrive; None when the body runs to the close (no length, not
    chunked)."""
    if status in (204, 304):
        return _sized(reader, 0)
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return _chunked(reader)
    if "content-length" in headers:
        return _sized(reader, int(headers["content-length"]))
    return None


async def exchange(conn: Connection, request: bytes, sink: Callable[[bytes], bool] | None,
                   sent: Callable[[], None]) -> tuple[int, bool, str]:
    """Write ``request``, read the response: its status, whether the connection may carry another,
    and the start of its body when it is not a 2xx (for the error text). A 2xx body goes to ``sink``
    piece by piece (True from it: the stream is over). ``sent`` is called as the request is
    written."""
    conn.used += 1
    sent()
    conn.writer.write(request)
    # refused mid-body (a 413 before the body was read): read it
    with contextlib.suppress(ConnectionError):
        await conn.writer.drain()
    try:
        status, headers, keep = await read_head(conn.reader)
    except (asyncio.IncompleteReadError, ConnectionError) as exc:
        empty = not isinstance(exc, asyncio.IncompleteReadError) or not exc.partial
        if conn.used > 1 and empty:
            # an idle connection the server had closed: send again on a new one
            raise Stale from exc
        raise
    pieces = body_of(conn.reader, status, headers)
    if pieces is None:
        keep, pieces = False, _to_close(conn.reader)
    kept = b""
    async for piece in pieces:
        if sink is not None and 200 <= status < 300:
            if sink(piece) and not keep:
                break  # a stream that runs to the close: [DONE] ends it
        elif len(kept) < KEPT:
            kept += piece[: KEPT - len(kept)]
    return status, keep, _one_line(kept.decode("utf-8", "replace"))
