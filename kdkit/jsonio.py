"""Reading JSON with precise errors, and writing files atomically.

Standard library only (the in-container side uses it).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kdkit.errors import BadInput


def load_json(path: Path, *, what: str = "file") -> Any:
    """Parse a JSON file; a missing or malformed file is BadInput naming line and column."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput(f"{path}: {what} not found; create it or pass the right path") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{path}: cannot read {what} ({exc}); check the file") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(
            f"{path}:{exc.lineno}:{exc.colno}: malformed JSON ({exc.msg}); fix the syntax there"
        ) from None


def atomic_write_chunks(path: Path, chunks: Iterable[bytes]) -> int:
    """Write ``chunks`` to a temporary name beside ``path``, fsync, then rename over it.

    Readers see the old file or the whole new one, never a part; a failure leaves no
    temporary file behind. Streams, so an image archive of many GB is never held. Returns the size.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
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


def atomic_write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False, ensure_ascii=False) + "\n")


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()
