"""results.jsonl's lines: how the harness encodes a batch of them, and how they are read back fast.

The writer is kdkit.core.runresults.RunFolder; each line is one record with its batch number and the
batch's line count, so a batch written only in part is recognized (incomplete_tail) and redone.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import itertools
import json
import operator
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kdkit.core.errors import CheckFailed

BLOCK_BYTES = 8 << 20  # bytes parsed per json.loads call when scanning: fast, with bounded memory
FINISHED = frozenset({"accepted", "rejected", "invalid", "unanswered"})
_FINISHED_BYTES = frozenset(name.encode() for name in FINISHED)
# The harness's usual line, as written by encode_batch: a plain ID (no escape) and its outcome
# first, ending with "}". One regex over a block finds them all, about five times faster than
# parsing.
_USUAL = re.compile(rb'^\{"id":"([^"\\\n]*)","outcome":"([a-z]+)"[^\n]*\}$', re.MULTILINE)
_ID, _OUTCOME = operator.methodcaller("get", "id"), operator.methodcaller("get", "outcome")


@dataclass
class Scan:
    """What results.jsonl already holds, as far as resuming needs it."""

    finished: set[str] = field(default_factory=set)
    rejected: int = 0
    lines: int = 0
    next_batch: int = 0
    dropped_lines: int = 0


_ENCODE = json.JSONEncoder(separators=(",", ":")).encode  # built once; ASCII escapes (ensure_ascii)


def encode_batch(records: list[dict[str, Any]]) -> bytes:
    """One batch's lines, each record followed by the batch's line count (how resume spots a torn
    batch).

    ASCII escapes: whatever string an app returns (even a lone surrogate) stays valid JSON and
    UTF-8. The count is spliced in before each record's closing brace rather than copied into a new
    dict.
    """
    tail = f',"lines":{len(records)}}}\n'
    lines = [_ENCODE(record)[:-1] + (tail if record else tail[1:]) for record in records]
    return "".join(lines).encode("ascii")


def incomplete_tail(data: bytes, end: int, path: Path) -> tuple[int, int]:
    """(where the complete lines end, how many to drop): a last batch written only in part is
    dropped.

    Walks back from ``end`` over the lines of the last batch only, so it costs one batch, not the
    file.
    """
    batch, count, tail, start = None, None, 0, end
    while start > 0:
        previous = data.rfind(b"\n", 0, start - 1) + 1
        record = parse_line(data[previous:start - 1],
                            functools.partial(line_number, data, previous), path)
        if tail == 0:
            batch, count = record.get("batch"), record.get("lines")
        elif record.get("batch") != batch:
            break
        tail, start = tail + 1, previous
    return (start, tail) if isinstance(count, int) and tail < count else (end, 0)


def scan_block(scan: Scan, block: bytes, first: int, path: Path) -> None:
    """Count one block's lines into ``scan``.

    When every line has the usual shape (one regex match per newline: each match is one whole
    line), only the ID and outcome are taken, no JSON is parsed; a block with any other line is
    parsed whole, and a damaged line is named. The run's accounting parses every line anyway.
    """
    lines = block.count(b"\n")
    pairs = _USUAL.findall(block) if block.isascii() else []
    if pairs and len(pairs) == lines:
        ids, outcomes = zip(*pairs, strict=True)
        finished = itertools.compress(ids, map(_FINISHED_BYTES.__contains__, outcomes))
        scan.finished.update(map(bytes.decode, finished))
        scan.rejected += outcomes.count(b"rejected")
    else:
        records = parse_block(block, first, path)
        texts = list(map(_OUTCOME, records))  # map + methodcaller: the loop runs in C
        scan.rejected += texts.count("rejected")
        scan.finished.update(
            itertools.compress(map(_ID, records), map(FINISHED.__contains__, texts)))
    scan.lines += lines


def line_number(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def blocks(data: bytes, cut: int) -> Iterator[tuple[int, bytes]]:
    """(number of its first line, block) for blocks of about BLOCK_BYTES, each ending with a
    newline."""
    start, line = 0, 1
    while start < cut:
        stop = data.find(b"\n", min(start + BLOCK_BYTES, cut) - 1) + 1
        block = data[start:stop]
        yield line, block
        line += block.count(b"\n")
        start = stop


def parse_block(block: bytes, first: int, path: Path) -> list[dict[str, Any]]:
    """Every line of a block in one json.loads call (fast); on any doubt, line by line to name the
    bad one."""
    lines = block.count(b"\n")
    try:
        records = json.loads(b"[" + block[:-1].replace(b"\n", b",") + b"]")
    except json.JSONDecodeError:
        records = None
    if records is None or len(records) != lines or set(map(type, records)) != {dict}:
        records = [parse_line(text, first + i, path) for i,
                   text in enumerate(block[:-1].split(b"\n"))]
    return records  # type: ignore[no-any-return]


def parse_line(line: bytes, number: int | Callable[[], int], path: Path) -> dict[str, Any]:
    """One record; ``number`` (or a function computing it, only on error) names the line."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        record = None
    if not isinstance(record, dict):
        where = number if isinstance(number, int) else number()
        raise CheckFailed(f"{path}:{where}: not valid JSON; the file was edited or damaged (only a "
                          "torn last line is repaired)")
    return record


def write_all(fd: int, payload: bytes) -> None:
    """os.write until every byte is written (a regular file may take a write in parts)."""
    view = memoryview(payload)
    while view:
        view = view[os.write(fd, view):]


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector: a million fresh dicts (no cycles) would trigger it
    hundreds of times, each pass walking every object made so far."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def stream_records(path: Path) -> Iterator[dict[str, Any]]:
    """Every record of the results file ``path`` (none when it is missing), streamed a block at a
    time; a damaged line is CheckFailed."""
    if not path.exists():
        return
    with path.open("rb") as handle:
        rest, line = b"", 1
        while block := handle.read(BLOCK_BYTES):
            block = rest + block
            cut = block.rfind(b"\n") + 1
            rest = block[cut:]
            if cut:
                yield from parse_block(block[:cut], line, path)
                line += block.count(b"\n", 0, cut)
        if rest:
            yield from parse_block(rest + b"\n", line, path)
