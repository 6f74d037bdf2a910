"""Reading JSON with precise errors, and writing files atomically.

JSON that kdkit reads means one thing: finite numbers only (``NaN``, ``Infinity`` and literals that
overflow a float, ``1e999``, are refused with the file, line and column, so no rule can be disabled
by a number that compares false with everything), no key twice in one object (a reader would see
the first, Python takes the last), no string holding a lone surrogate (it is not text). Files are
read only when they are regular files (a FIFO or /dev/zero would never end). What kdkit writes is
strict JSON (``allow_nan=False``), written atomically over a regular file or nothing (never over a
link, a device or a FIFO). Numeric command-line values go through :func:`finite_number`.

Standard library only (the in-container side uses it).
"""

from __future__ import annotations

import contextlib
import fcntl
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

from kdkit.core.errors import BadInput
from kdkit.core.staging import release, temp_prefix
from kdkit.core.textfile import read_text_file as read_text_file  # its home; kept here for callers

# A JSON string, or a bare token that may be a number or constant: to place a non-finite number.
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|-?Infinity|NaN|-?[0-9][0-9.eE+-]*')


class _Duplicate(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):  # rare: find which key came twice
        seen: set[str] = set()
        for key, _value in pairs:
            if key in seen:
                raise _Duplicate(key)
            seen.add(key)
    return result


def lone_surrogate(value: Any, where: str = "$") -> str | None:
    """The JSON path of the first string (key or value) holding a lone surrogate, or None."""
    if isinstance(value, str):
        return where if any("\ud800" <= c <= "\udfff" for c in value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            found = (lone_surrogate(key, f"{where}.{key!r}")
                     or lone_surrogate(item, f"{where}.{key}"))
            if found:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            if found := lone_surrogate(item, f"{where}[{index}]"):
                return found
    return None


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
        data = json.loads(text, parse_constant=_constant,
                          parse_float=_float, object_pairs_hook=_pairs)
    except _Duplicate as exc:
        line, column = _place_key(text, exc.key)
        raise BadInput(f"{source}:{line}:{column}: key {json.dumps(exc.key)[:60]} appears twice in "
                       "one object; keep one (a reader sees the first, kdkit would take the "
                       "last)") from None
    except _NonFinite as exc:
        line, column = _place(text, exc.token)
        raise BadInput(f"{source}:{line}:{column}: {exc.token[:40]} is not a finite number; JSON "
                       "numbers here must be finite (write a number, or null where the key allows "
                       "it)") from None
    except json.JSONDecodeError as exc:
        raise BadInput(
            f"{source}:{exc.lineno}:{exc.colno}: malformed JSON ({exc.msg}); fix the syntax there"
        ) from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise BadInput(f"{source}: unreadable number ({exc}); shorten it") from None
    except RecursionError:
        raise BadInput(f"{source}: JSON nested too deeply to read; simplify the file") from None
    if re.search(r"\\u[dD][89a-fA-F]", text):  # only an escape makes one
        where = lone_surrogate(data)
        if where is not None:
            raise BadInput(f"{source}: {where}: a string holds a lone surrogate (\\udXXX escape), "
                           "which is not text; write the character itself or remove it")
    return data


def _place_key(text: str, key: str) -> tuple[int, int]:
    """Line and column of the second ``"key":`` in ``text`` (1-based), near enough to find it."""
    token = json.dumps(key)
    starts = [m.start() for m in re.finditer(re.escape(token) + r"\s*:", text)]
    at = starts[1] if len(starts) > 1 else (starts[0] if starts else 0)
    return text.count("\n", 0, at) + 1, at - (text.rfind("\n", 0, at) + 1) + 1


def load_json(path: Path, *, what: str = "file") -> Any:
    """Parse a JSON file; a missing, unreadable or malformed file, a non-finite number, a key given
    twice or a lone surrogate is BadInput naming the place."""
    return parse_json(read_text_file(path, what), str(path))


def object_or_empty(path: Path) -> dict[str, Any]:
    """A file's JSON object, or {} when it is missing, unreadable, not JSON or not an object: for
    reading what a run left behind, where a lost or torn file is a state to report, not an
    error."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def finite_number(text: str, option: str, *, minimum: float | None = None,
                  integral: bool = False) -> float:
    """A numeric command-line value: finite, at least ``minimum``, whole when ``integral``; else
    BadInput."""
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


def require_replaceable(path: Path) -> None:
    """BadInput when ``path`` exists and is not a regular file: kdkit never replaces a link, a
    device, a FIFO or a socket (as root, `--out /dev/null` would otherwise replace the machine's
    /dev/null)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise BadInput(
            f"{path}: cannot look at it ({exc.strerror or exc}); choose another path") from None
    if not stat.S_ISREG(mode):
        what = "a symbolic link" if stat.S_ISLNK(mode) else "a folder" if stat.S_ISDIR(mode) else \
            "a device, FIFO or socket"
        raise BadInput(
            f"{path}: exists and is {what}; kdkit writes over regular files only: choose another "
            "path")


def atomic_write_chunks(path: Path, chunks: Iterable[bytes], *, replace_any: bool = False) -> int:
    """Write ``chunks`` to a temporary name beside ``path``, fsync, then rename over it.

    Readers see the old file or the whole new one, never a part; a failure leaves no
    temporary file behind. Streams, so an image archive of many GB is never held. Returns the size.
    What it replaces must be a regular file (:func:`require_replaceable`) unless ``replace_any``:
    the harness, in a run folder it owns, replaces whatever something else put at its names.
    """
    if not replace_any:
        require_replaceable(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=temp_prefix(path), suffix=".tmp", dir=path.parent)
    # the owner's lock (kdkit.core.staging): a cleaner sees it alive until the rename
    fcntl.flock(fd, fcntl.LOCK_EX)
    lock = os.dup(fd)
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
    finally:
        release(lock)
    return size


def atomic_write_bytes(path: Path, data: bytes, *, replace_any: bool = False) -> None:
    atomic_write_chunks(path, (data,), replace_any=replace_any)


def atomic_write_text(path: Path, text: str) -> None:
    """UTF-8; a lone surrogate (never text) is written as its escape, so a write never fails on
    one."""
    atomic_write_bytes(path, text.encode("utf-8", "backslashreplace"))


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
    infinities, 1e999, a word or "" raise BadInput (one line, exit 2 through
    probe.commands.call)."""

    def convert(text: str) -> int:
        number = finite_number(text, option, integral=True)
        try:
            return int(text)
        except ValueError:
            return int(number)

    return convert


def drop_cached_pages(path: Path) -> None:
    """Ask the kernel to forget the file's cached pages, so the next read comes from the disk."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:
        return
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            advise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    except OSError:
        pass
