"""Is a copy of a closed run folder reloadable? A file that exists but cannot be read back is not a
verified result.

``reload_problems(folder)`` reads a LOCAL copy (a pilot run folder or a gathering) the way a person
who reloads it would, beyond its SHA256SUMS (kdkit.core.runverify.verify_folder: a regenerated
SHA256SUMS hides an edit from that check, not from this one):

- summary.json, params.json, env.json and stop.json (where the kind has them) parse as JSON objects
  (the strict reader, kdkit.core.jsonio.load_json: the line and column of a malformed place);
- no file the kind requires (runfolder.REQUIRED, stop.json when the run stopped) is missing or empty
  (only whitespace counts as empty), summary.md included; a pilot's params.json names its
  ``run_id``; results.jsonl may be empty only when the summary counts nothing;
- results.jsonl, streamed a block at a time (never held whole): each line a JSON object with an
  ``id`` and an ``outcome`` (the first bad line named by number), and its IDs agree with the
  summary, counted as the pilot's accounting counts them (kdkit.probe.pilot.accounting.Tally: the
  first record of each ID decides its outcome; malformed and unrequested answers name no ID of the
  run): as many accepted and rejected as summary.json states, no more finished IDs than its total,
  and exactly its total when it says pass;
- vectors.npy and vectors.ids.jsonl, when there: a header kdkit writes and as many rows as it names,
  and one ``{"row": n, "id": ...}`` line per row, in order.

Each problem is one line naming the file and the place. Standard library only (it runs in the
container too).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.core.errors import BadInput, CheckFailed
from kdkit.core.jsonio import load_json
from kdkit.core.resultlines import FINISHED, stream_records
from kdkit.core.runfolder import (
    ACCEPTED,
    PARAMS,
    PILOT,
    REJECTED,
    REQUIRED,
    RESULTS,
    RUN_ID,
    STOP,
    STOPPED,
    SUMMARY,
    TOTAL,
    VECTOR_IDS,
    VECTORS,
    VERDICT,
    folder_kind,
)
from kdkit.core.vectorfile import FLOAT32, HEADER, read_header

if TYPE_CHECKING:
    from collections.abc import Mapping

# outcomes the accounting never counts against an ID of the run
NO_ID = frozenset({"malformed", "unrequested"})


def reload_problems(folder: Path) -> list[str]:
    """Why the local copy ``folder`` of a closed run folder cannot be reloaded as what its summary
    says (see the module's docstring); empty when it can."""
    problems: list[str] = []
    summary = _json_object(folder / SUMMARY, problems)
    kind = folder_kind(folder, summary or {})
    names = [*REQUIRED[kind],
             *([STOP] if kind == PILOT and summary and summary.get(STOPPED) else [])]
    optional = ([STOP] if kind == PILOT and STOP not in names and os.path.lexists(folder / STOP)
                else [])
    for name in [n for n in names if n.endswith(".json") and n != SUMMARY] + optional:
        data = _json_object(folder / name, problems)  # params.json, env.json, stop.json
        if name == PARAMS and data is not None and not isinstance(data.get(RUN_ID), str):
            problems.append(f"{folder / name}: $.{RUN_ID} missing (every run's {PARAMS} names its "
                            "run); the copy cannot be reloaded as a run")
    # summary.md (a JSON file that is empty does not parse)
    problems += [problem for name in names if name != RESULTS and not name.endswith(".json")
                 and (problem := _empty(folder / name))]
    if kind == PILOT and summary is not None:
        problems += results_problems(folder / RESULTS, summary)
    return problems + vector_problems(folder)


def _json_object(path: Path, problems: list[str]) -> dict[str, Any] | None:
    """``path``'s JSON object, or None with the reason added to ``problems``."""
    if not path.is_file():
        problems.append(f"{path}: missing; a closed run folder of its kind holds it")
        return None
    try:
        data = load_json(path, what="run file")
    except BadInput as exc:
        problems.append(f"{exc}; the copy cannot be reloaded")
        return None
    if not isinstance(data, dict):
        problems.append(f"{path}:1:1: not a JSON object; the copy cannot be reloaded")
        return None
    return data


def _empty(path: Path) -> str | None:
    """The problem with a required text file that is missing, empty or only whitespace (the JSON
    files are parsed apart)."""
    try:
        with path.open("rb") as handle:
            while chunk := handle.read(1 << 16):
                if chunk.strip():
                    return None
    except OSError:
        return f"{path}: missing; a closed run folder of its kind holds it"
    return f"{path}: empty (or only whitespace); a closed run folder's {path.name} is never empty"


def _count(summary: Mapping[str, Any], key: str) -> int | None:
    value = summary.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def results_problems(results: Path, summary: Mapping[str, Any]) -> list[str]:
    """results.jsonl streamed against a pilot summary's counts (see the module's docstring)."""
    counts = {key: _count(summary, key) for key in (TOTAL, ACCEPTED, REJECTED)}
    bad = [key for key, value in counts.items() if value is None]
    if bad:
        return [f"{results.parent / SUMMARY}: $.{bad[0]} is not a count ({summary.get(bad[0])!r}); "
                "the summary cannot be checked against results.jsonl"]
    if not results.is_file():
        return [f"{results}: missing; a closed pilot run folder holds it"]
    try:
        tally = _tally(results)
    except CheckFailed as exc:
        return [f"{exc}; the copy cannot be reloaded"]
    except OSError as exc:
        return [f"{results}: cannot be read ({exc.strerror or exc}); the copy cannot be reloaded"]
    if isinstance(tally, str):
        return [tally]
    lines, finished, accepted, rejected = tally
    if lines == 0 and (counts[ACCEPTED] or counts[REJECTED] or summary.get(VERDICT) == "pass"):
        return [f"{results}: empty (0 bytes), but {SUMMARY} says {summary.get(VERDICT)} with "
                f"{counts[ACCEPTED]} accepted and {counts[REJECTED]} rejected"]
    total = counts[TOTAL] or 0
    if (accepted, rejected) != (counts[ACCEPTED], counts[REJECTED]) or finished > total or (
            summary.get(VERDICT) == "pass" and finished != total):
        return [f"{results}: {lines} line(s), {finished} finished ID(s) ({accepted} accepted, "
                f"{rejected} rejected), but {SUMMARY} states {summary.get(VERDICT)} with {total} "
                f"ID(s) ({counts[ACCEPTED]} accepted, {counts[REJECTED]} rejected); an ID is "
                "missing or was added"]
    return []


def _tally(results: Path) -> tuple[int, int, int, int] | str:
    """(lines, finished IDs, accepted, rejected), the first record of each ID deciding; or the
    problem with the first line that is an object without an ``id`` or a string ``outcome``.
    CheckFailed names a line that is not JSON (kdkit.core.resultlines.stream_records)."""
    seen: set[str] = set()
    lines = finished = accepted = rejected = 0
    for lines, record in enumerate(stream_records(results), start=1):
        ident, outcome = record.get("id"), record.get("outcome")
        if "id" not in record or not isinstance(outcome, str):
            return (
                f"{results}:{lines}: a record without an \"id\" or an \"outcome\"; the file was "
                "edited or damaged")
        if not isinstance(ident, str) or outcome in NO_ID or ident in seen:
            continue
        seen.add(ident)
        finished += outcome in FINISHED
        accepted += outcome == "accepted"
        rejected += outcome == "rejected"
    return lines, finished, accepted, rejected


def vector_problems(folder: Path) -> list[str]:
    """vectors.npy and vectors.ids.jsonl, when either is there: reloadable, and one ID line per row
    in order."""
    vectors, ids = folder / VECTORS, folder / VECTOR_IDS
    present = [path for path in (vectors, ids) if os.path.lexists(path)]
    if not present:
        return []
    if len(present) == 1:
        return [f"{present[0]}: without its partner "
                f"{(ids if present[0] == vectors else vectors).name}"]
    try:
        with vectors.open("rb") as handle:
            rows, dim = read_header(handle.read(HEADER), vectors)
        size = vectors.stat().st_size
        listed = _id_rows(ids)
    except CheckFailed as exc:
        return [f"{exc}; the copy cannot be reloaded"]
    except OSError as exc:
        return (
            [f"{exc.filename or vectors}: cannot be read ({exc.strerror or exc}); the copy cannot "
             "be reloaded"])
    problems = [] if size == HEADER + rows * dim * FLOAT32 else [
        f"{vectors}: {size} bytes, not the {HEADER + rows * dim * FLOAT32} of its header's {rows} "
        f"x {dim} rows"]
    if isinstance(listed, str):
        return [*problems, listed]
    if listed != rows:
        problems.append(f"{ids}: lists {listed} row(s), but {VECTORS}'s header names {rows}")
    return problems


def _id_rows(ids: Path) -> int | str:
    """How many rows vectors.ids.jsonl lists (streamed), or the problem with its first line out of
    order."""
    count = 0
    for count, entry in enumerate(stream_records(ids), start=1):
        if entry.get("row") != count - 1 or not isinstance(entry.get("id"), str):
            return (
                f"{ids}:{count}: not the line of row {count - 1} ({{\"row\": {count - 1}, \"id\": "
                "...})")
    return count


