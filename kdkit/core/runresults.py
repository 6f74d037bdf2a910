"""A run folder's writer: params.json first, then results.jsonl appended, then the checksums that
close it.

The names and keys of what it writes are kdkit.core.runfolder's, the one reader
kdkit.core.runverify's. results.jsonl's SHA-256 as the harness knows it (checked before SHA256SUMS
lists it) is kdkit.core.resultdigest's; its complete batches read back on resume are
kdkit.core.runresume's.
results.jsonl gets one line per finished item, written a batch at a time. A
finished batch is appended and fsynced by a helper thread while the app computes
the next batch (both release the GIL), and that must complete before the next
batch is handed over: at most the last batch is not yet on disk, and the disk's
latency hides behind the app's work. Each line carries its batch number and the
batch's line count, so a crash in the middle of a write is recognized on resume:
the incomplete last batch is cut off and redone, never counted twice.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.core import outputfiles
from kdkit.core.checksums import SUMS, write_digests
from kdkit.core.errors import BadInput
from kdkit.core.jsonio import atomic_write_bytes, atomic_write_json, dumps, sha256_file
from kdkit.core.outputkinds import VECTOR_DATA
from kdkit.core.resultdigest import ResultDigest
from kdkit.core.resultlines import Scan, encode_batch, stream_records, write_all
from kdkit.core.runfolder import (
    PARAMS,
    RESULTS,
    RUN_ID,
    STOP,
    VECTOR_IDS,
    VECTORS,
    foreign_entries,
    harness_file,
)
from kdkit.core.runresume import batch_records, complete_prefix, scan_batches
from kdkit.core.staging import hold, release, staged_beside
from kdkit.core.stoproom import RESERVED as RESERVED
from kdkit.core.stoproom import STOP_RESERVED, StopRoom
from kdkit.core.stoproom import disk_full as disk_full
from kdkit.core.vectorfile import VectorWriter, append_rows, finish, resumed_rows

if TYPE_CHECKING:
    from collections.abc import Mapping


class RunFolder:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.results = path / RESULTS
        self._pool: ThreadPoolExecutor | None = None
        self._syncing: Future[None] | None = None
        self._fd: int | None = None  # results.jsonl, open for appending while the run goes on
        self._digest = ResultDigest(self.results)  # results.jsonl as it must be
        # name -> sha256 of each other file as the harness wrote or kept it
        self._vouched: dict[str, str] = {}
        # the folder's owner lock, held while this session writes it (own())
        self._owner: int | None = None
        self._reserve: StopRoom | None = None  # stop.json's room (reserve_stop)
        self._vectors: VectorWriter | None = None  # vectors.npy, open while a vector run writes it
        self._vector_problems: list[str] = []
        # a resumed file-kind run's outputs/ cut back to its complete lines
        self._outputs_cut = False
        # take_over() was called: earlier sessions' files are this session's to vouch for
        self._resumed = False

    @property
    def run_id(self) -> str:
        return self.path.name

    @classmethod
    def create(cls, runs_dir: Path, run_id: str, params: Mapping[str, Any]) -> RunFolder:
        """The new run folder ``runs_dir/run_id`` (a name chosen with --run-id): one already there
        is BadInput."""
        try:
            return cls.make(runs_dir / run_id, params)
        except FileExistsError:
            raise BadInput(f"{runs_dir / run_id}: run folder exists; resume it with --resume "
                           f"{run_id} or choose another --run-id") from None

    @classmethod
    def make(cls, path: Path, params: Mapping[str, Any]) -> RunFolder:
        """The new run folder, whole from its first moment: params.json and an empty results file
        are written in a staging folder beside it (kdkit.core.staging), which is then renamed into
        place. FileExistsError when the name is taken (kdkit.core.runfolder.claim then tries the
        next one)."""
        if os.path.lexists(path):
            raise FileExistsError(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # Nothing half-made is left, and no lock held, whatever stops it (a killed run's:
            # clean_stale_in).
            with staged_beside(path, clean=False) as staged:
                (staged.path / RESULTS).touch()
                atomic_write_json(staged.path / PARAMS, {RUN_ID: path.name, **params})
                digest = sha256_file(staged.path / PARAMS)
                # fails if another run took the name meanwhile (its folder is not empty)
                staged.publish()
                lock = staged.take_lock()
        except OSError as exc:
            if os.path.lexists(path):
                raise FileExistsError(path) from None
            fix = (f"free space on {path.parent}" if disk_full(exc) else
                   f"make {path.parent} writable (in a container: mount runs/ read-write)")
            raise BadInput(
                f"{path}: cannot create the run folder ({exc.strerror}); {fix}") from None
        run = cls(path)
        run._vouched[PARAMS] = digest
        # the staging folder's lock is the run folder's now: renamed, the same folder
        run._owner = lock
        return run

    @classmethod
    def existing(cls, runs_dir: Path, run_id: str) -> RunFolder:
        path = runs_dir / run_id
        if not (path / PARAMS).is_file():
            raise BadInput(
                f"{path}: no such run (params.json missing); list {runs_dir} for run IDs")
        return cls(path)

    def write_json(self, name: str, data: Any) -> None:
        self._write(name, (dumps(data) + "\n").encode("utf-8", "backslashreplace"))

    def write_text(self, name: str, text: str) -> None:
        self._write(name, text.encode("utf-8", "backslashreplace"))

    def _write(self, name: str, data: bytes) -> None:
        with _naming(self.path / name):
            atomic_write_bytes(self.path / name, data, replace_any=True)
        self._vouched[name] = hashlib.sha256(data).hexdigest()

    def reserve_stop(self) -> None:
        """Set aside stop.json's room now (kdkit.core.stoproom), so that a run the disk fills under
        can still say where it stopped."""
        self._reserve = StopRoom.reserve(self.path / STOP)

    def write_stop(self, data: Any) -> None:
        """stop.json, written into its reserved room when there is one (no new space needed), else
        as any file."""
        payload = (dumps(data) + "\n").encode("utf-8", "backslashreplace")
        room, self._reserve = self._reserve, None
        if room is None or len(payload) > STOP_RESERVED:
            if room is not None:
                room.drop()
            self._write(STOP, payload)
            return
        try:
            with _naming(self.path / STOP):
                room.fill(payload, self.path / STOP)
        except BaseException:
            self._reserve = room if os.path.exists(room.path) else None
            raise
        self._vouched[STOP] = hashlib.sha256(payload).hexdigest()

    def drop_reserve(self) -> None:
        """Give stop.json's room back (the run closes without a stop, or this session ends)."""
        room, self._reserve = self._reserve, None
        if room is not None:
            room.drop()

    def take_over(self) -> None:
        """A resumed run: vouch for the files the earlier sessions left (as they are now, after
        --resume checked them), so that SHA256SUMS can list them and a change during this session is
        seen."""
        self._resumed = True
        for entry in os.scandir(self.path):
            if entry.is_file(follow_symlinks=False) and harness_file(entry.name) and \
                    entry.name not in (RESULTS, SUMS, VECTORS):
                self._vouched.setdefault(entry.name, sha256_file(Path(entry.path)))

    def append(self, records: list[dict[str, Any]]) -> None:
        """Write one batch's lines once the previous batch is on disk, and start their fsync."""
        if not records:
            return
        # a vector batch's rows, fsynced before its lines
        if any(VECTOR_DATA in record for record in records):
            with _naming(self.path / VECTORS):
                self._vectors = append_rows(self._vectors, self.path / VECTORS, records)
        kept: dict[str, str] = {}
        # a file batch's folders, moved before its lines
        if any(outputfiles.FOLDER in record for record in records):
            with _naming(self.path / outputfiles.OUTPUTS):
                kept = outputfiles.keep(self.path, records)
        payload = encode_batch(records)
        self.wait_synced()
        if self._fd is None:
            self._fd = os.open(self.results, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        end = os.lseek(self._fd, 0, os.SEEK_END)
        try:
            with _naming(self.results):
                write_all(self._fd, payload)
        # a full disk: the part written is taken back (the batch is redone on resume)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, end)
            raise
        self._digest.add(payload)
        self._vouched.update(kept)  # the folders' files, part of the run once their lines are
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kdkit-fsync")
        self._syncing = self._pool.submit(os.fsync, self._fd)

    def _cut_outputs(self, data: bytes, cut: int) -> None:
        """A resumed file-kind run: the staging folder and every outputs/<name> no complete line
        names go (kdkit.core.outputfiles.cut_back); the files the lines name are vouched for as the
        lines hash them."""
        if self._outputs_cut or not any(os.path.lexists(self.path / name)
                                        for name in (outputfiles.OUTPUTS, outputfiles.STAGING)):
            return
        records = batch_records(data, cut, self.results)
        with _naming(self.path / outputfiles.OUTPUTS):
            self._vouched.update(outputfiles.cut_back(self.path, records))
        self._outputs_cut = True

    def finish_outputs(self) -> None:
        """At close: a resumed file-kind run stopped before its scan is cut back as a scan would
        (against its complete batches, the file left as it is), and the staging folder goes."""
        if self._resumed and not self._outputs_cut and self.results.is_file():
            data, cut, _ = complete_prefix(self.results, repair=False)
            self._cut_outputs(data, cut)
        with _naming(self.path / outputfiles.STAGING):
            outputfiles.close_staging(self.path)

    def finish_vectors(self, model: str | None = None) -> None:
        """At close: vectors.npy's header rewritten with its final row count and vouched for,
        vectors.ids.jsonl written from the results, each row with the ``model`` reference
        (kdkit.core.vectorfile.finish, .model_reference); what does not add up is a problem of the
        run."""
        # resumed, stopped before its scan
        if self._vectors is None and (self.path / VECTORS).is_file():
            data = self.results.read_bytes() if self.results.is_file() else b""
            self._vectors = resumed_rows(self.path / VECTORS, data, len(data))
        if self._vectors is not None:
            with _naming(self.path / VECTORS):
                self._vouched[VECTORS], listed, self._vector_problems = finish(
                    self._vectors, self.records(), model)
            self._write(VECTOR_IDS, listed)

    def wait_synced(self) -> None:
        """Block until the last appended batch is on disk; a failed fsync is raised here."""
        syncing, self._syncing = self._syncing, None
        if syncing is not None:
            with _naming(self.results):
                syncing.result()

    def own(self) -> None:
        """Hold the folder's owner lock while this session writes it (kdkit.core.staging.hold; the
        kernel drops it when the process ends, however it ends): a second pilot that would resume
        the folder meanwhile (a second launch with the same run ID, a pod started while the old one
        still runs) is refused."""
        if self._owner is not None:
            return
        try:
            self._owner = hold(self.path)
        except BlockingIOError:
            raise BadInput(f"{self.path}: another pilot is writing this run folder right now; wait "
                           "for it to end, or give this launch another run ID") from None
        except OSError as exc:
            raise BadInput(
                f"{self.path}: cannot open the run folder ({exc.strerror or exc})") from None

    def disown(self) -> None:
        """Let the owner lock go: the session is over, its files written (the summary and SHA256SUMS
        too)."""
        self.drop_reserve()
        if self._vectors is not None:
            self._vectors.close()
        release(self._owner)
        self._owner = None

    def close(self) -> None:
        """Wait for the last fsync and stop the helper thread."""
        try:
            self.wait_synced()
        finally:
            if self._pool is not None:
                self._pool.shutdown()
                self._pool = None
            if self._fd is not None:
                fd, self._fd = self._fd, None
                os.close(fd)

    # ------------------------------------------------------------ resume

    def scan(self) -> Scan:
        """Read results.jsonl for resuming; cut off a torn or incomplete last batch first."""
        scan = Scan()
        if not self.results.exists():
            return scan
        data, cut, scan.dropped_lines = complete_prefix(self.results)
        self._digest.hash_prefix(data, cut)
        self._cut_outputs(data, cut)
        if cut == 0:
            return scan
        if self._vectors is None:
            self._vectors = resumed_rows(self.path / VECTORS, data, cut)
        scan_batches(scan, data, cut, self.results)
        return scan

    def complete_records(self) -> list[dict[str, Any]]:
        """The records of every complete batch, read without changing the file (what a resume
        keeps)."""
        if not self.results.exists():
            return []
        data, cut, _ = complete_prefix(self.results, repair=False)
        return list(batch_records(data, cut, self.results))

    def holds_only_appended(self) -> bool:
        """Whether results.jsonl is exactly what the harness appended (ResultDigest)."""
        return self._digest.holds_only_appended()

    def integrity_problems(self, intact: bool | None = None) -> list[str]:
        """What something other than the harness did to the run folder while it was open: a file of
        the harness changed or gone, results.jsonl not what was appended, entries the harness never
        made. Each is a problem of the run (it cannot pass), and none of it reaches SHA256SUMS."""
        problems = list(self._vector_problems)
        for name, digest in sorted(self._vouched.items()):
            path = self.path / name
            if path.is_symlink() or not path.is_file() or sha256_file(path) != digest:
                problems.append(f"{name}: changed by something other than the harness while the "
                                "run was open; the run cannot pass (was the app writing into its "
                                "run folder?)")
        if not (self.holds_only_appended() if intact is None else intact):
            problems.append(f"{RESULTS}: not the results the harness appended (changed by "
                            "something else while the run was open); the run cannot pass")
        problems += [f"{entry}: in the run folder but not put there by the harness; it is not part "
                     "of the run"
                     for entry in foreign_entries(self.path)]
        problems += [f"{entry}: in {outputfiles.OUTPUTS}/ but not kept there by the harness; the "
                     "run cannot pass"
                     for entry in outputfiles.unvouched(self.path, self._vouched)]
        return problems

    def files_listed(self) -> list[str]:
        """What SHA256SUMS will list: every file the harness vouches for, and the results."""
        return sorted({*self._vouched, RESULTS})

    def records(self) -> Iterator[dict[str, Any]]:
        """Every record of results.jsonl, streamed a block at a time; a damaged line is
        CheckFailed."""
        return stream_records(self.results)

    # ------------------------------------------------------------ closing

    def write_sums(self) -> None:
        """SHA256SUMS, written last, from what the harness knows it wrote (never by re-reading the
        folder, so a file changed behind its back fails every later check instead of being
        blessed)."""
        digest = self._digest.sealed()
        self.drop_reserve()  # closed without a stop: its room is SHA256SUMS's now
        with _naming(self.path / SUMS):
            write_digests(self.path, {**self._vouched, RESULTS: digest})

    def numbered(self, stem: str, suffix: str) -> str:
        """The first free name of ``stem-1.suffix``, ``stem-2.suffix``... (earlier sessions'
        reports)."""
        n = 1
        while (self.path / f"{stem}-{n}{suffix}").exists():
            n += 1
        return f"{stem}-{n}{suffix}"


@contextlib.contextmanager
def _naming(path: Path) -> Iterator[None]:
    """An OSError raised inside names ``path`` when it names no file of its own (a refused write
    does not)."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None:
            exc.filename = os.fspath(path)
        raise
