"""A resumed run's results.jsonl read back (kdkit.core.runresults.RunFolder.scan and
.complete_records): where its last complete batch ends, the file cut there, the records of its
complete batches, and what they count.

A batch is complete when all its lines are there (each carries its batch number and line count:
kdkit.core.resultlines.incomplete_tail); a torn last line or an incomplete last batch is what a
crash in the middle of a write leaves, cut off and redone, never counted twice.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kdkit.core.resultlines import (
    Scan,
    blocks,
    incomplete_tail,
    line_number,
    no_gc,
    parse_block,
    parse_line,
    scan_block,
)


def complete_prefix(results: Path, repair: bool = True) -> tuple[bytes, int, int]:
    """(the file's bytes, where its last complete batch ends, lines dropped); the file is cut there
    unless ``repair`` is False."""
    data = results.read_bytes()
    end = data.rfind(b"\n") + 1
    dropped = 1 if end < len(data) else 0  # a torn last line, cut mid-write
    cut, tail = incomplete_tail(data, end, results)
    if cut != len(data) and repair:
        with results.open("r+b") as handle:
            handle.truncate(cut)
            os.fsync(handle.fileno())
    return data, cut, dropped + tail


def batch_records(data: bytes, cut: int, results: Path) -> Iterator[dict[str, Any]]:
    """The records of the complete batches in ``data[:cut]``, one at a time (``results`` names the
    file in a damaged line's error)."""
    return (record for first,
            block in blocks(data, cut) for record in parse_block(block, first, results))


def scan_batches(scan: Scan, data: bytes, cut: int, results: Path) -> None:
    """Count the complete batches in ``data[:cut]`` (``cut`` > 0) into ``scan``, and set the batch
    that comes next."""
    with no_gc():
        for first, block in blocks(data, cut):
            scan_block(scan, block, first, results)
    last = data.rfind(b"\n", 0, cut - 1) + 1
    record = parse_line(data[last:cut - 1], functools.partial(line_number, data, last), results)
    scan.next_batch = int(record.get("batch", -1)) + 1  # batches are appended in order
