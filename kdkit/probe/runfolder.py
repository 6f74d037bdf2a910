"""One folder per pilot run: its ID, its append-only results, and the checksums that close it.

results.jsonl gets one line per finished item, written a batch at a time. A
finished batch is appended and fsynced by a helper thread while the app computes
the next batch (both release the GIL), and that must complete before the next
batch is handed over: at most the last batch is not yet on disk, and the disk's
latency hides behind the app's work. Each line carries its batch
number and the batch's line count, so a crash in the middle of a write is
recognized on resume: the incomplete last batch is cut off and redone, never
counted twice.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
import operator
import os
import re
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kdkit.errors import BadInput, CheckFailed, KdkitError
from kdkit.jsonio import atomic_write_json, atomic_write_text, sha256_file
from kdkit.probe.projectfiles import SAFE_ID

RESULTS = "results.jsonl"
SUMS = "SHA256SUMS"
CHUNK_LINES = 50_000  # lines parsed per json.loads call when scanning: fast, with bounded memory
FINISHED = frozenset({"accepted", "rejected", "invalid", "unanswered"})
_ID, _OUTCOME = operator.methodcaller("get", "id"), operator.methodcaller("get", "outcome")


def new_run_id(params_hash: str, now: datetime | None = None) -> str:
    """UTC time plus a short hash of the resolved parameters: a changed config gives a new ID."""
    moment = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
    return f"{moment:%Y%m%dT%H%M%SZ}-{params_hash[:8]}"


def check_run_id(run_id: str, option: str) -> str:
    if not SAFE_ID.match(run_id) or run_id in (".", ".."):
        raise BadInput(f"{option} {run_id!r}: not a valid run ID; use letters, digits, '.', '_' and '-' "
                       "(first a letter or digit)")
    return run_id


@dataclass
class Scan:
    """What results.jsonl already holds, as far as resuming needs it."""

    finished: set[str] = field(default_factory=set)
    rejected: int = 0
    lines: int = 0
    next_batch: int = 0
    dropped_lines: int = 0


class RunFolder:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.results = path / RESULTS
        self._pool: ThreadPoolExecutor | None = None
        self._syncing: Future[None] | None = None

    @property
    def run_id(self) -> str:
        return self.path.name

    @classmethod
    def create(cls, runs_dir: Path, run_id: str) -> RunFolder:
        path = runs_dir / run_id
        try:
            runs_dir.mkdir(parents=True, exist_ok=True)
            path.mkdir()
        except FileExistsError:
            raise BadInput(f"{path}: run folder exists; resume it with --resume {run_id} or choose "
                           "another --run-id") from None
        except OSError as exc:
            raise BadInput(f"{path}: cannot create the run folder ({exc.strerror}); make {runs_dir} "
                           "writable (in a container: mount runs/ read-write)") from None
        return cls(path)

    @classmethod
    def existing(cls, runs_dir: Path, run_id: str) -> RunFolder:
        path = runs_dir / run_id
        if not (path / "params.json").is_file():
            raise BadInput(f"{path}: no such run (params.json missing); list {runs_dir} for run IDs")
        return cls(path)

    def write_json(self, name: str, data: Any) -> None:
        atomic_write_json(self.path / name, data)

    def write_text(self, name: str, text: str) -> None:
        atomic_write_text(self.path / name, text)

    def append(self, records: list[dict[str, Any]]) -> None:
        """Hand one batch's lines to the helper thread once the previous batch is on disk."""
        if not records:
            return
        count = len(records)
        payload = "".join(json.dumps({**r, "lines": count}, ensure_ascii=False, separators=(",", ":")) + "\n"
                          for r in records).encode("utf-8")
        self.wait_synced()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kdkit-fsync")
        self._syncing = self._pool.submit(_append_synced, self.results, payload)

    def wait_synced(self) -> None:
        """Block until the last appended batch is on disk; a failed fsync is raised here."""
        syncing, self._syncing = self._syncing, None
        if syncing is not None:
            syncing.result()

    def close(self) -> None:
        """Wait for the last fsync and stop the helper thread."""
        try:
            self.wait_synced()
        finally:
            if self._pool is not None:
                self._pool.shutdown()
                self._pool = None

    # ------------------------------------------------------------ resume

    def scan(self) -> Scan:
        """Read results.jsonl for resuming; cut off a torn or incomplete last batch first."""
        scan = Scan()
        if not self.results.exists():
            return scan
        lines, scan.dropped_lines = self._complete_lines()
        scan.lines = len(lines)
        with _no_gc():
            for first in range(0, len(lines), CHUNK_LINES):
                records = _parse_lines(lines[first:first + CHUNK_LINES], first + 1, self.results)
                outcomes = list(map(_OUTCOME, records))  # map + methodcaller: the loop runs in C
                scan.rejected += outcomes.count("rejected")
                scan.finished.update(itertools.compress(map(_ID, records), map(FINISHED.__contains__, outcomes)))
                scan.next_batch = int(records[-1].get("batch", -1)) + 1  # batches are appended in order
        return scan

    def _complete_lines(self) -> tuple[list[bytes], int]:
        """The lines up to the last complete batch, truncating the file there; and how many were dropped."""
        data = self.results.read_bytes()
        end = data.rfind(b"\n") + 1
        lines = data.split(b"\n")
        dropped = 1 if lines.pop() else 0  # after the last newline: b"", or a torn line cut mid-write
        tail = _incomplete_tail(lines, self.results)
        if tail:
            end -= sum(len(line) + 1 for line in lines[-tail:])
            lines, dropped = lines[:-tail], dropped + tail
        if end != len(data):
            with self.results.open("r+b") as handle:
                handle.truncate(end)
                os.fsync(handle.fileno())
        return lines, dropped

    def records(self) -> Iterator[dict[str, Any]]:
        """Every record of results.jsonl, streamed; a damaged line in the middle is CheckFailed."""
        if not self.results.exists():
            return
        with self.results.open("rb") as handle:
            chunk: list[bytes] = []
            first = 1
            for line in handle:
                chunk.append(line.rstrip(b"\n"))
                if len(chunk) == CHUNK_LINES:
                    yield from _parse_lines(chunk, first, self.results)
                    first += len(chunk)
                    chunk = []
            if chunk:
                yield from _parse_lines(chunk, first, self.results)

    # ------------------------------------------------------------ closing

    def write_sums(self) -> None:
        """SHA256SUMS over every other file of the folder (sha256sum's format), written last."""
        lines = [f"{sha256_file(path)}  {rel}" for rel, path in self.files()]
        atomic_write_text(self.path / SUMS, "\n".join(lines) + "\n")

    def files(self) -> Iterable[tuple[str, Path]]:
        for path in sorted(self.path.rglob("*")):
            rel = path.relative_to(self.path).as_posix()
            if path.is_file() and rel != SUMS and not path.name.startswith("."):
                yield rel, path

    def next_free(self, stem: str, suffix: str) -> str:
        """``stem.suffix`` if free, else ``stem-2.suffix``, ``stem-3.suffix``..."""
        name, n = f"{stem}{suffix}", 1
        while (self.path / name).exists():
            n += 1
            name = f"{stem}-{n}{suffix}"
        return name


def _append_synced(path: Path, payload: bytes) -> None:
    """Append and fsync, in the helper thread: a write can wait on the disk too, not only fsync."""
    with path.open("ab") as handle:
        handle.write(payload)
        handle.flush()
        os.fsync(handle.fileno())


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector: a million fresh dicts (no cycles) would trigger it
    hundreds of times, each pass walking every object made so far."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _incomplete_tail(lines: list[bytes], path: Path) -> int:
    """How many last lines belong to a batch written only in part (0 when it is complete)."""
    if not lines:
        return 0
    last = _parse_line(lines[-1], len(lines), path)
    batch, count = last.get("batch"), last.get("lines")
    tail = 1
    while tail < len(lines) and _parse_line(lines[-1 - tail], len(lines) - tail, path).get("batch") == batch:
        tail += 1
    return tail if isinstance(count, int) and tail < count else 0


def _parse_lines(lines: list[bytes], first: int, path: Path) -> list[dict[str, Any]]:
    """Parse many lines in one json.loads call (fast); on any doubt, line by line to name the bad one."""
    try:
        records = json.loads(b"[" + b",".join(lines) + b"]")
    except json.JSONDecodeError:
        records = None
    if records is None or len(records) != len(lines) or set(map(type, records)) != {dict}:
        records = [_parse_line(line, first + i, path) for i, line in enumerate(lines)]
    return records  # type: ignore[no-any-return]


def _parse_line(line: bytes, number: int, path: Path) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        raise CheckFailed(f"{path}:{number}: not valid JSON; the file was edited or damaged (only a torn "
                          "last line is repaired)") from None
    if not isinstance(record, dict):
        raise CheckFailed(f"{path}:{number}: not a result record; the file was edited or damaged")
    return record


def git_state(root: Path) -> dict[str, Any]:
    """The code revision and whether the tree is dirty; None with a note where git cannot tell."""
    from kdkit.proc import run

    try:
        head = run(["git", "-C", str(root), "rev-parse", "HEAD"], timeout=30)
        if not head.ok:
            return {"revision": None, "dirty": None, "note": head.first_error_line()}
        status = run(["git", "-C", str(root), "status", "--porcelain"], timeout=60)
    except KdkitError as exc:
        return {"revision": None, "dirty": None, "note": str(exc)}
    revision = head.stdout.strip()
    if not re.fullmatch(r"[0-9a-f]{40,64}", revision):
        return {"revision": None, "dirty": None, "note": f"unexpected git output {revision[:60]!r}"}
    return {"revision": revision, "dirty": bool(status.stdout.strip()) if status.ok else None,
            "note": None if status.ok else status.first_error_line()}
