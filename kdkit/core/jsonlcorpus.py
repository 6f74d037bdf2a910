"""A corpus kept as one JSONL file: one record (a JSON object) per line, its ID in a named field.

Read streaming (one line at a time, whatever the file's size) by the pilot, which keeps only where
each record lies (:class:`Line`), and by `kdkit manifest`. A record is identified by the sha256 of
its canonical bytes (:func:`canonical`): keys sorted, no spaces, UTF-8; so reformatting the file
(spaces, key order) is not a different input, and a changed value is.

Standard library only: it runs in the container.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kdkit.core.errors import BadInput
from kdkit.core.projectfiles import SAFE_ID_RULE, is_safe_id, shown

READ_BUFFER = 1 << 20


@dataclass(frozen=True, slots=True)
class Line:
    """Where one record lies in the file (its line number counts from 1), and its ID."""

    number: int
    offset: int
    length: int
    id: str


def canonical(record: Any) -> bytes:
    """The record's canonical bytes: what is hashed, and what the app's process decodes."""
    return _ENCODER.encode(record).encode("utf-8")


def parse_record(data: bytes) -> dict[str, Any] | str:
    """The record on one line, or why the line is not one (a JSON object, finite numbers)."""
    try:
        # What json.loads does, without a decoder made per call (it costs as much as a small
        # record's parse): UTF-8 as json.loads reads it; a BOM or a NUL among the first two bytes
        # (UTF-16, UTF-32) goes to json.loads.
        if data[:1] in (b"\xef", b"\xfe", b"\xff", b"\x00") or data[1:2] == b"\x00":
            record = json.loads(data, parse_constant=_refuse_constant)
        else:
            record = _DECODER.decode(data.decode("utf-8", "surrogatepass"))
    except (ValueError, RecursionError) as exc:
        return f"not valid JSON ({exc})" if not isinstance(exc, _NonFinite) else str(exc)
    if not isinstance(record, dict):
        return f"expected a JSON object, got {type(record).__name__}"
    return record


class _NonFinite(ValueError):
    pass


def _refuse_constant(token: str) -> Any:
    raise _NonFinite(f"{token} is not a JSON number; write a finite number or null")


# made once: stateless, as json.loads's own
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"),
                            ensure_ascii=False, allow_nan=False)


def record_id(record: dict[str, Any], field: str) -> str | None:
    """The record's ID under ``field`` when it is a safe ID string, else None."""
    value = record.get(field)
    return value if is_safe_id(value) else None


def id_problem(record: dict[str, Any], field: str) -> str:
    """Why ``record`` has no usable ID under ``field`` (for a message)."""
    if field not in record:
        return f"no ID field {field!r}; every record needs one"
    value = record[field]
    if not isinstance(value, str):
        text = json.dumps(value)
        text = text if len(text) <= 40 else text[:40] + "..."
        return f"the ID field {field!r} holds {type(value).__name__} {text}, not a string"
    return f"the ID {shown(value)} is not a safe ID; {SAFE_ID_RULE}"


def scan(path: Path, field: str) -> Iterator[tuple[Line, dict[str, Any]]]:
    """Every record of the file with where it lies, in order; BadInput (exit 2) names the first
    broken line (its number), a record without a usable ID, or a duplicate ID. Blank lines are
    skipped."""
    for number, start, length, ident, record in _records(path, field):
        yield Line(number, start, length, ident), record


def scan_lines(path: Path, field: str) -> Iterator[tuple[int, int, int, str]]:
    """:func:`scan` without the records: (line number, offset, length, ID) of each, checked
    alike."""
    for number, start, length, ident, _record in _records(path, field):
        yield number, start, length, ident


def _records(path: Path, field: str) -> Iterator[tuple[int, int, int, str, dict[str, Any]]]:
    seen: set[str] = set()
    try:
        handle = open(path, "rb", buffering=READ_BUFFER)  # noqa: SIM115  closed below
    except OSError as exc:
        raise BadInput(f"{path}: cannot read the JSONL corpus: {exc.strerror or exc}") from None
    with handle:
        offset = 0
        for number, raw in enumerate(handle, 1):
            start, offset = offset, offset + len(raw)
            data = raw.strip()
            if not data:
                continue
            record = parse_record(data)
            if isinstance(record, str):
                raise BadInput(f"{path}: line {number}: {record}; fix or remove that line")
            ident = record.get(field)
            if not is_safe_id(ident):
                raise BadInput(f"{path}: line {number}: {id_problem(record, field)}")
            if ident in seen:
                raise BadInput(
                    f"{path}: line {number}: duplicate ID {ident!r}; every ID must be unique")
            seen.add(ident)
            yield number, start, len(raw), ident, record


def read_line(path: str, line: Line) -> bytes:
    """The raw bytes of one record's line, read again from the file (for the harness)."""
    with open(path, "rb") as handle:
        handle.seek(line.offset)
        return handle.read(line.length)


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
