"""Reading JSON with precise errors, and writing files atomically.

JSON that kdkit reads holds finite numbers only: ``NaN``, ``Infinity`` and literals that
overflow a float (``1e999``) are refused where they are read, with the file, line and column, so
no rule can be disabled by a number that compares false with everything. What kdkit writes is
strict JSON (``allow_nan=False``). Numeric command-line values go through :func:`finite_number`.

Standard library only (the in-container side uses it).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from kdkit.errors import BadInput
from kdkit.staging import temp_prefix

# A JSON string, or a bare token that may be a number or constant: to place a non-finite number.
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|-?Infinity|NaN|-?[0-9][0-9.eE+-]*')


class _NonFinite(ValueError):
    def __init__(self, token: str) -> None:
        super().__init__(token)
        self.token = token


def _constant(token: str) -> Any:
    raise _NonFinite(token)


def _float(token: str) -> float:
    value = float(token)
    if not math.isfinite(value):
        raise _NonFinite(token)
    return value


def _place(text: str, token: str) -> tuple[int, int]:
    """Line and column of the first ``token`` outside a string (1-based)."""
    for match in _TOKENS.finditer(text):
        if match.group() == token:
            line = text.count("\n", 0, match.start()) + 1
            return line, match.start() - (text.rfind("\n", 0, match.start()) + 1) + 1
    return 1, 1


def parse_json(text: str, source: str) -> Any:
    """``text`` as JSON with finite numbers only; BadInput naming ``source``, line and column."""
    try:
        return json.loads(text, parse_constant=_constant, parse_float=_float)
    except _NonFinite as exc:
        line, column = _place(text, exc.token)
        raise BadInput(f"{source}:{line}:{column}: {exc.token[:40]} is not a finite number; JSON numbers "
                       "here must be finite (write a number, or null where the key allows it)") from None
    except json.JSONDecodeError as exc:
        raise BadInput(
            f"{source}:{exc.lineno}:{exc.colno}: malformed JSON ({exc.msg}); fix the syntax there"
        ) from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise BadInput(f"{source}: unreadable number ({exc}); shorten it") from None
    except RecursionError:
        raise BadInput(f"{source}: JSON nested too deeply to read; simplify the file") from None


def load_json(path: Path, *, what: str = "file") -> Any:
    """Parse a JSON file; a missing, unreadable or malformed file, or a non-finite number, is BadInput
    naming the place."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode) and not path.is_dir():  # a FIFO would wait forever
            raise BadInput(f"{path}: {what} is not a regular file (a FIFO, socket or device?); give the JSON file")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput(f"{path}: {what} not found; create it or pass the right path") from None
    except IsADirectoryError:
        raise BadInput(f"{path}: {what} is a folder, not a file; give the JSON file") from None
    except UnicodeDecodeError as exc:
        raise BadInput(f"{path}: {what} is not UTF-8 (byte at offset {exc.start}); save it as UTF-8") from None
    except OSError as exc:
        raise BadInput(f"{path}: cannot read {what} ({exc.strerror or exc}); check the file") from None
    return parse_json(text, str(path))


def finite_number(text: str, option: str, *, minimum: float | None = None, integral: bool = False) -> float:
    """A numeric command-line value: finite, at least ``minimum``, whole when ``integral``; else BadInput."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise BadInput(f"{option} {text!r}: not a number") from None
    if not math.isfinite(value):
        raise BadInput(f"{option} {text!r}: not a finite number; give a real figure")
    if integral and not value.is_integer():
        raise BadInput(f"{option} {text!r}: expected a whole number")
    if minimum is not None and value < minimum:
        raise BadInput(f"{option} {text!r}: must be at least {minimum:g}")
    return value


def atomic_write_chunks(path: Path, chunks: Iterable[bytes]) -> int:
    """Write ``chunks`` to a temporary name beside ``path``, fsync, then rename over it.

    Readers see the old file or the whole new one, never a part; a failure leaves no
    temporary file behind. Streams, so an image archive of many GB is never held. Returns the size.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=temp_prefix(path), suffix=".tmp", dir=path.parent)
    size = 0
    try:
        with os.fdopen(fd, "wb") as handle:
            for chunk in chunks:
                handle.write(chunk)
                size += len(chunk)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return size


def atomic_write_bytes(path: Path, data: bytes) -> None:
    atomic_write_chunks(path, (data,))


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def dumps(data: Any, *, indent: int | None = 2) -> str:
    """Strict JSON: a non-finite number is a bug of kdkit's, raised here rather than written."""
    return json.dumps(data, indent=indent, sort_keys=False, ensure_ascii=False, allow_nan=False)


def atomic_write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, dumps(data) + "\n")


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def whole_number(option: str) -> Callable[[str], int]:
    """An argparse ``type`` for a count, read by jsonio.finite_number like the host's options: NaN,
    infinities, 1e999, a word or "" raise BadInput (one line, exit 2 through probe.commands.call)."""

    def convert(text: str) -> int:
        number = finite_number(text, option, integral=True)
        try:
            return int(text)
        except ValueError:
            return int(number)

    return convert
