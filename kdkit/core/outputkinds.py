"""The one table of output kinds: for each kind, what an answer's value must be, what the record
keeps of it, how one answer scores against the manifest's expected value, and how the kind is
described.

An answer is ``{"id", "output": value}`` for every kind (``{"id", "category"}`` stays valid for the
category kind) or ``{"id", "error": reason}``. ``check(output, value)`` gives the fields an accepted
record keeps, or the problem that makes the answer invalid (one line naming the reason).
``score(output, value, expected)`` is a number in [0, 1], or NaN when the score is undefined (NaN is
that item's rejection, never a pass):

- category: 1 when the category is the expected one (today's accuracy against the manifest's
  labels);
- text: exact match, 1 or 0 (the whole text, character for character);
- vector: the cosine of the angle between the answer and the expected vector, negative cosines
  clamped to 0 (opposite or orthogonal vectors both score 0); NaN for a zero vector or an expected
  vector that is not ``dim`` finite numbers;
- json: strict equality, 1 or 0 (objects by keys, arrays in order, numbers by value, booleans never
  numbers);
- file: strict equality of the answer's ``output`` value with the expected one, as json (the files
  themselves are kept and hashed, never scored here).

The file kind: the app writes each item's artifact(s) into ``item["out_dir"]`` and answers
``{"id", "output": value}`` with ``value`` null (nothing more to say) or any JSON data (kept as the
record's ``output``), or ``{"id", "error": reason}``. The files in ``out_dir`` are the output: an
accepted answer whose ``out_dir`` holds no file, a link, something other than regular files and
folders, or more than ``max_bytes`` bytes is that item's rejection by the harness with the reason
(kdkit.core.outputfiles, which also keeps them).

A vector is kept as ``dim`` float32 numbers, little-endian (VECTOR_DATA holds the packed row until
the run folder's writer appends it to vectors.npy and writes its ``"row"`` number in its place).
Standard library only.
"""

from __future__ import annotations

import array
import json
import math
import sys
from collections.abc import Callable
from typing import Any

from kdkit.core.answerschema import answer_problem
from kdkit.core.pilotkeys import Output

# a record's packed float32 row while in memory; never written to results.jsonl
VECTOR_DATA = "vector"
ROW = "row"  # the accepted record's row of vectors.npy
SCORE = "score"  # the accepted record's quality score, where the manifest gives an expected value
FLOAT32_MAX = 3.4028234663852886e38
SHOWN = 80  # characters of a value shown in a problem
ANSWER_ROOM = 64 << 10  # bytes of one answer on the wire besides its declared output
Shown = Callable[[Any], Any]


def value_keys(output: Output) -> tuple[str, ...]:
    """The keys an answer may carry its value under."""
    return ("category", "output") if output.kind == "category" else ("output",)


def answer_bytes(output: Output) -> int:
    """The room one answer may take on the wire from the app's process: 64 KiB, plus the declared
    text's or vector's worst case as JSON (a character as a surrogate pair's escapes, 12 bytes; a
    float's repr, 32)."""
    if output.kind == "text" and output.max_chars:
        return ANSWER_ROOM + 12 * output.max_chars
    if output.kind == "vector" and output.dim:
        return ANSWER_ROOM + 32 * output.dim
    return ANSWER_ROOM


def describe(output: Output) -> str:
    """The kind in words, for messages and summaries."""
    if output.kind == "text":
        return f"text of at most {output.max_chars} characters" if output.max_chars else "text"
    if output.kind == "vector":
        return f"a vector of {output.dim} numbers"
    if output.kind == "file":
        return "files written into out_dir" + (f" (at most {output.max_bytes} bytes)"
                                               if output.max_bytes else "")
    if output.kind == "json":
        return f"JSON valid against {output.schema_file}" if output.schema_file else "JSON"
    return f"a category ({', '.join(output.categories)})"


def _brief(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=True)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return text if len(text) <= SHOWN else text[:SHOWN] + "..."


# ---------------------------------------------------------------- checks


def check(output: Output, value: Any, shown: Shown) -> dict[str, Any] | str:
    """The fields an accepted record keeps of ``value``, or the problem (``shown`` renders an odd
    value)."""
    return CHECKS[output.kind](output, value, shown)


def _check_category(output: Output, value: Any, shown: Shown) -> dict[str, Any] | str:
    if isinstance(value, str) and value in output.categories:
        return {"category": value}
    return f"category {json.dumps(shown(value))} is not one of {', '.join(output.categories)}"


def _check_text(output: Output, value: Any, shown: Shown) -> dict[str, Any] | str:
    if not isinstance(value, str):
        return f"the output is {type(value).__name__} {json.dumps(shown(value))}, not text"
    if output.max_chars is not None and len(value) > output.max_chars:
        return f"the output is {len(value)} characters, over max_chars {output.max_chars}"
    return {"output": value}


def vector_values(output: Output, value: Any) -> list[float] | str:
    """``value`` as ``dim`` finite float32-range floats, or the reason it is not."""
    if not isinstance(value, (list, tuple)):
        return f"the output is {type(value).__name__}, not a list of {output.dim} numbers"
    if len(value) != output.dim:
        return f"the vector has {len(value)} numbers, not dim {output.dim}"
    for index, number in enumerate(value):
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            return (
                f"the vector's number {index} is {type(number).__name__} {_brief(number)}, not a "
                "number")
        if not math.isfinite(number):
            return (
                f"the vector's number {index} is {number!r} (NaN and infinities are not numbers of "
                "a vector)")
        if abs(number) > FLOAT32_MAX:
            return f"the vector's number {index} ({number:g}) is beyond float32's range"
    return [float(n) for n in value]


def pack(values: list[float]) -> bytes:
    """The row as vectors.npy keeps it: float32, little-endian."""
    row = array.array("f", values)
    if sys.byteorder != "little":
        row.byteswap()
    return row.tobytes()


def _check_vector(output: Output, value: Any, shown: Shown) -> dict[str, Any] | str:
    values = vector_values(output, value)
    return values if isinstance(values, str) else {VECTOR_DATA: pack(values)}


def _check_json(output: Output, value: Any, shown: Shown) -> dict[str, Any] | str:
    if not _is_json(value):
        return (
            "the output is not JSON data (NaN, an infinity or a value JSON cannot hold): "
            f"{_brief(shown(value))}")
    if output.schema is not None:
        problem = answer_problem(value, output.schema)
        if problem is not None:
            return f"the output does not match {output.schema_file or 'the schema'}: {problem}"
    return {"output": value}


def _is_json(value: Any, depth: int = 0) -> bool:
    if depth > 100:
        return False
    if value is None or isinstance(value, (bool, int, str)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_is_json(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json(v, depth + 1) for k, v in value.items())
    return False


def _check_file(output: Output, value: Any, shown: Shown) -> dict[str, Any] | str:
    """The answer's value (null, or JSON data kept as ``output``); its files are judged by
    kdkit.core.outputfiles."""
    if value is None:
        return {}
    if not _is_json(value):
        return (
            "the output is not JSON data (NaN, an infinity or a value JSON cannot hold): "
            f"{_brief(shown(value))}")
    return {"output": value}


CHECKS: dict[str, Callable[[Output, Any, Shown], dict[str, Any] | str]] = {
    "category": _check_category, "text": _check_text, "vector": _check_vector, "json": _check_json,
    "file": _check_file}


# ---------------------------------------------------------------- scores


def score(output: Output, value: Any, expected: Any) -> float:
    """One accepted answer's score against the manifest's expected value: in [0, 1], or NaN
    (undefined)."""
    return SCORES[output.kind](output, value, expected)


def _score_equal(output: Output, value: Any, expected: Any) -> float:
    return 1.0 if same_json(value, expected) else 0.0


def _score_vector(output: Output, value: Any, expected: Any) -> float:
    answer, reference = vector_values(output, value), vector_values(output, expected)
    if isinstance(answer, str) or isinstance(reference, str):
        return math.nan
    return cosine(answer, reference)


def cosine(a: list[float], b: list[float]) -> float:
    """The cosine of two finite vectors clamped to [0, 1]; NaN when either is zero (no
    direction)."""
    norm_a, norm_b = math.hypot(*a), math.hypot(*b)
    if norm_a == 0 or norm_b == 0 or not math.isfinite(norm_a * norm_b):
        return math.nan
    dot = math.fsum((x / norm_a) * (y / norm_b) for x, y in zip(a, b, strict=True))
    return min(1.0, max(0.0, dot))


def same_json(a: Any, b: Any) -> bool:
    """JSON equality: booleans are never numbers, numbers equal by value, objects by keys, arrays in
    order."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


SCORES: dict[str, Callable[[Output, Any, Any], float]] = {
    "category": _score_equal, "text": _score_equal, "vector": _score_vector, "json": _score_equal,
    "file": _score_equal}
