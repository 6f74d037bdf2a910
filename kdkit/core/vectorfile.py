"""vectors.npy: a vector run's rows, float32 little-endian, in a real .npy file written with the
standard library.

The file is ``numpy.load``-able in one call: the magic, version 1.0, and a header dict
``{'descr': '<f4', 'fortran_order': False, 'shape': (N, dim), }`` padded with spaces to a FIXED
length (HEADER bytes in all), so it is rewritten in place with the final N when the run closes.
While the run is open, rows are appended (and fsynced) before the results.jsonl lines that name them
(``"row": n``); a resume cuts the rows no complete batch names. Beside it, vectors.ids.jsonl pairs
each row with its ID, its input's sha256 and, when the config names a model, the model's reference
(``{"row", "id", "sha256"[, "model"]}`` per line, in row order; the reference is
:func:`model_reference`'s, the same on every row). The names are kdkit.core.runfolder's.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.core.errors import CheckFailed
from kdkit.core.outputkinds import ROW, VECTOR_DATA
from kdkit.core.resultlines import stream_records

if TYPE_CHECKING:
    from collections.abc import Mapping

VECTORS, VECTOR_IDS = "vectors.npy", "vectors.ids.jsonl"  # a vector run's rows and their IDs
# vectors.ids.jsonl: each row's model reference (model_reference); absent when no model is named
MODEL = "model"
PARAMS_FILE = "params.json"  # kdkit.core.runfolder.PARAMS (which imports this module)

MAGIC = b"\x93NUMPY\x01\x00"
# bytes before the first row: magic, version, length, the padded dict (a multiple of 64)
HEADER = 128
_DICT = re.compile(rb"\{'descr': '<f4', 'fortran_order': False, "
                   rb"'shape': \(([0-9]{1,20}), ([0-9]{1,10})\), \} *\n")
FLOAT32 = 4


def model_reference(record: Any) -> str | None:
    """The one compact reference to the model a row came from, made from params.json's record of the
    config's model (kdkit.core.pilotload.reference_record, kept as params.json's ``params.model``):
    ``org/name@<revision>`` for a hub reference; ``<path> sha256:<digest>`` for a folder (or file)
    of the project, the digest the SHA-256 of its file list (the JSON object {relative path:
    sha256}, keys sorted, no spaces); both joined by `` + `` when both are named; an adapter's base
    appended as `` base <its reference>``. None when there is no model."""
    if not isinstance(record, dict):
        return None
    parts = []
    if isinstance(record.get("hub"), str):
        parts.append(f"{record['hub']}@{record.get('revision')}")
    if isinstance(record.get("path"), str):
        listing = json.dumps(record.get("files"), sort_keys=True,
                             separators=(",", ":"), ensure_ascii=True)
        parts.append(
            f"{record['path']} sha256:{hashlib.sha256(listing.encode('ascii')).hexdigest()}")
    base = model_reference(record.get("base"))
    reference = " + ".join(parts) + (f" base {base}" if base else "")
    return reference or None


def params_model(params: Path) -> str | None:
    """:func:`model_reference` of a run folder's params.json (its ``params.model``); None when there
    is none or the file cannot be read (its other checks name that)."""
    try:
        data = json.loads(params.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    resolved = data.get("params") if isinstance(data, dict) else None
    return model_reference(resolved.get("model")) if isinstance(resolved, dict) else None


def header(rows: int, dim: int) -> bytes:
    """The .npy header of ``rows`` x ``dim`` float32, HEADER bytes long."""
    text = f"{{'descr': '<f4', 'fortran_order': False, 'shape': ({rows}, {dim}), }}".encode("ascii")
    room = HEADER - len(MAGIC) - 2
    return MAGIC + struct.pack("<H", room) + text.ljust(room - 1) + b"\n"


def read_header(data: bytes, path: Path) -> tuple[int, int]:
    """(rows, dim) of a header this module wrote; CheckFailed naming the file for anything else."""
    if len(data) < HEADER or not data.startswith(MAGIC) \
            or struct.unpack("<H", data[8:10])[0] != HEADER - 10:
        raise CheckFailed(
            f"{path}: not a vectors file of kdkit (magic, version or header length); damaged?")
    match = _DICT.fullmatch(data[10:HEADER])
    if match is None:
        raise CheckFailed(
            f"{path}: its .npy header is not the one kdkit writes ('<f4', C order, 2 dimensions)")
    rows, dim = int(match.group(1)), int(match.group(2))
    if dim < 1:
        raise CheckFailed(f"{path}: its header names {dim} columns")
    return rows, dim


class VectorWriter:
    """Appends rows to vectors.npy; knows how many rows it holds and the SHA-256 of their bytes."""

    def __init__(self, path: Path, dim: int, fd: int, rows: int, digest: Any) -> None:
        self.path, self.dim, self.fd, self.rows, self.digest = path, dim, fd, rows, digest

    @classmethod
    def create(cls, path: Path, dim: int) -> VectorWriter:
        fd = os.open(path,
                     os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            _pwrite_all(fd, header(0, dim), 0)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, dim, fd, 0, hashlib.sha256())

    @classmethod
    def resume(cls, path: Path, rows: int) -> VectorWriter:
        """The file of an earlier session, cut to its first ``rows`` rows (those the kept results
        name)."""
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            head = os.pread(fd, HEADER, 0)
            _, dim = read_header(head, path)
            size = os.fstat(fd).st_size
            have = (size - HEADER) // (dim * FLOAT32)
            if have < rows:
                raise CheckFailed(f"{path}: holds {have} whole rows, but results.jsonl names "
                                  f"{rows}; the run folder was damaged")
            os.ftruncate(fd, HEADER + rows * dim * FLOAT32)
            os.fsync(fd)
            digest = hashlib.sha256()
            for block in _blocks(fd, HEADER, rows * dim * FLOAT32):
                digest.update(block)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, dim, fd, rows, digest)

    def append(self, packed: list[bytes]) -> int:
        """Write and fsync rows (each ``dim`` float32); return the number of the first. A failed
        write is taken back (the file as it was) and raised."""
        payload = b"".join(packed)
        if len(payload) != len(packed) * self.dim * FLOAT32:
            raise ValueError(f"a row of another width than dim {self.dim}")
        first, end = self.rows, HEADER + self.rows * self.dim * FLOAT32
        try:
            _pwrite_all(self.fd, payload, end)
            os.fsync(self.fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, end)
            raise
        self.digest.update(payload)
        self.rows += len(packed)
        return first

    def finish(self) -> tuple[str, bool]:
        """Rewrite the header with the final row count; (the file's SHA-256, whether its rows are
        exactly those this writer knows), read back once from the disk."""
        _pwrite_all(self.fd, header(self.rows, self.dim), 0)
        os.fsync(self.fd)
        whole, rows = hashlib.sha256(os.pread(self.fd, HEADER, 0)), hashlib.sha256()
        size = os.fstat(self.fd).st_size
        for block in _blocks(self.fd, HEADER, size - HEADER):
            whole.update(block)
            rows.update(block)
        intact = (size == HEADER + self.rows * self.dim * FLOAT32
                  and rows.hexdigest() == self.digest.hexdigest())
        return whole.hexdigest(), intact

    def close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)


def append_rows(writer: VectorWriter | None, path: Path,
                records: list[dict[str, Any]]) -> VectorWriter:
    """Append the rows of a batch's records (VECTOR_DATA, packed) in their order; each record's
    packed row becomes its ``"row"`` number. The first rows of a run make the file."""
    rows = [record for record in records if VECTOR_DATA in record]
    if writer is None:
        writer = VectorWriter.create(path, len(rows[0][VECTOR_DATA]) // FLOAT32)
    first = writer.append([record[VECTOR_DATA] for record in rows])
    for number, record in enumerate(rows, first):
        del record[VECTOR_DATA]
        record[ROW] = number
    return writer


def resumed_rows(path: Path, data: bytes, cut: int) -> VectorWriter | None:
    """An earlier session's vectors.npy cut to the rows results.jsonl's kept bytes ``data[:cut]``
    name (rows are fsynced before their lines, so a kill between the two leaves rows no line names);
    None when there is none."""
    if not path.is_file() or path.is_symlink():
        return None
    rows = data.count(b',"row":', 0, cut)
    if rows == 0:
        # nothing kept names a row: a session killed before its first vector batch was written
        path.unlink()
        return None
    return VectorWriter.resume(path, rows)


def finish(writer: VectorWriter, records: Iterable[Mapping[str, Any]],
           model: str | None = None) -> tuple[str, bytes, list[str]]:
    """Close a run's vectors: (vectors.npy's SHA-256 with its final header, vectors.ids.jsonl's
    bytes (each row with the ``model`` reference, model_reference's), the problems: rows not named
    once each, or rows other than those the writer appended)."""
    try:
        digest, intact = writer.finish()
    finally:
        writer.close()
    try:
        listed, problems = ids_lines(records, model)
    except CheckFailed as exc:  # results.jsonl damaged: the run fails for it anyway
        listed, problems = b"", [str(exc)]
    problems = [f"{writer.path.name}: {p}" for p in problems]
    if not intact:
        problems.append(f"{writer.path.name}: not the rows the harness appended (changed by "
                        "something else while the run was open); the run cannot pass")
    return digest, listed, problems


def ids_lines(records: Iterable[Mapping[str, Any]],
              model: str | None = None) -> tuple[bytes, list[str]]:
    """vectors.ids.jsonl's bytes from the run's records (each line with the ``model`` reference when
    there is one), and the problems (rows not 0..N-1 once each)."""
    rows: dict[int, tuple[str, str]] = {}
    problems = []
    for record in records:
        row = record.get("row")
        if row is None or record.get("outcome") != "accepted":
            continue
        if not isinstance(row, int) or isinstance(row, bool) or row < 0 or row in rows:
            problems.append(f"{record.get('id')!r}: row {row!r} is not a new row number")
            continue
        rows[row] = (str(record.get("id")), str(record.get("sha256")))
    if sorted(rows) != list(range(len(rows))):
        problems.append(f"the rows named in results.jsonl are not 0..{len(rows) - 1}, each once")
    named = {} if model is None else {MODEL: model}
    lines = [json.dumps({"row": row, "id": rows[row][0], "sha256": rows[row][1], **named},
                        separators=(",", ":"))
             for row in sorted(rows)]
    return "".join(line + "\n" for line in lines).encode("ascii"), problems


def folder_problems(vectors: Path, ids: Path, records: Iterable[Mapping[str, Any]],
                    model: str | None = None) -> list[str]:
    """A closed folder's vectors.npy and vectors.ids.jsonl against its results: the header's N rows
    of dim float32 and nothing more, and the ID list exactly the rows results.jsonl names, each with
    the ``model`` reference of its params.json."""
    try:
        with vectors.open("rb") as handle:
            rows, dim = read_header(handle.read(HEADER), vectors)
        size = vectors.stat().st_size
        expected, problems = ids_lines(records, model)
        listed = ids.read_bytes()
    except (OSError, CheckFailed) as exc:
        return [f"{vectors}: cannot be checked ({exc})"]
    if size != HEADER + rows * dim * FLOAT32:
        problems.append(f"{vectors}: {size} bytes, not the {HEADER + rows * dim * FLOAT32} of its "
                        f"header's {rows} x {dim} rows")
    if listed != expected:
        problems.append(f"{ids}: not the rows, IDs and input hashes results.jsonl names"
                        + (f", each with the model reference {model!r} of {PARAMS_FILE}" if model
                           else ""))
    named = expected.count(b"\n")
    if named != rows:
        problems.append(f"{vectors}: holds {rows} rows, but results.jsonl names {named}")
    return problems


def gather_vectors(folders: list[tuple[int, Path, Path]], vectors: Path, ids: Path) -> int:
    """One array from the workers' verified vectors, in worker order: ``vectors`` (their rows, one
    header) and ``ids`` (``{"row", "id", "sha256", "worker", "worker_row"}`` per row, and the
    worker's ``"model"`` reference where it has one); ``folders`` holds (worker, its vectors.npy,
    its vectors.ids.jsonl). Returns the rows; CheckFailed when the workers' widths differ."""
    shapes = []
    for _, npy, _ in folders:
        with npy.open("rb") as handle:
            shapes.append(read_header(handle.read(HEADER), npy))
    if len({dim for _, dim in shapes}) > 1:
        raise CheckFailed(
            f"{vectors}: the workers' vectors differ in width ({sorted({d for _, d in shapes})})")
    total, row = sum(rows for rows, _ in shapes), 0
    with vectors.open("wb") as out, ids.open("wb") as listed:
        out.write(header(total, shapes[0][1] if shapes else 1))
        for worker, npy, named in folders:
            with npy.open("rb") as handle:
                handle.seek(HEADER)
                while block := handle.read(1 << 20):
                    out.write(block)
            for line in named.read_bytes().splitlines():
                entry = json.loads(line)
                model = {MODEL: entry[MODEL]} if MODEL in entry else {}
                listed.write((json.dumps({"row": row, "id": entry["id"], "sha256": entry["sha256"],
                                          **model,
                                          "worker": worker, "worker_row": entry["row"]},
                                         separators=(",", ":"))
                              + "\n").encode("ascii"))
                row += 1
        out.flush()
        os.fsync(out.fileno())
        listed.flush()
        os.fsync(listed.fileno())
    return total


def gathered_problems(vectors: Path, ids: Path) -> list[str]:
    """A gathering's vectors.npy against its own ID list (the workers' folders proved each row): N
    rows of dim float32 and nothing more, rows 0..N-1 listed in order, one model reference (or none)
    on every row."""
    try:
        with vectors.open("rb") as handle:
            rows, dim = read_header(handle.read(HEADER), vectors)
        size = vectors.stat().st_size
        entries = [json.loads(line) for line in ids.read_bytes().splitlines()]
        listed = [entry.get("row") for entry in entries]
        models = {json.dumps(entry.get(MODEL)) for entry in entries}
    except (OSError, ValueError, AttributeError, CheckFailed) as exc:
        return [f"{vectors}: cannot be checked ({exc})"]
    problems = [] if size == HEADER + rows * dim * FLOAT32 else [
        f"{vectors}: {size} bytes, not the {HEADER + rows * dim * FLOAT32} of its header's {rows} "
        f"x {dim} rows"]
    if listed != list(range(rows)):
        problems.append(f"{ids}: does not list the rows 0..{rows - 1} of {vectors.name} in order")
    if len(models) > 1 or not all(isinstance(json.loads(m), (str, type(None))) for m in models):
        problems.append(
            f"{ids}: its rows do not all name one model reference (the workers ran one config)")
    return problems


def _blocks(fd: int, start: int, length: int) -> Iterable[bytes]:
    offset, end = start, start + length
    while offset < end:
        block = os.pread(fd, min(1 << 20, end - offset), offset)
        if not block:
            return
        yield block
        offset += len(block)


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def run_problems(folder: Path, results: Path, params: Path) -> list[str]:
    """A verified folder's vectors.npy and its ID list against its ``results`` (a pilot run folder,
    where ``params`` is), or as a gathering's one array (neither is there); one file without the
    other is a problem."""
    has = [name for name in (VECTORS, VECTOR_IDS) if (folder / name).is_file()]
    if not has:
        return []
    if len(has) == 1:
        return [f"{folder / has[0]}: without its partner "
                f"{VECTOR_IDS if has[0] == VECTORS else VECTORS}"]
    if not os.path.lexists(params) and not os.path.lexists(results):  # a gathering's one array
        return gathered_problems(folder / VECTORS, folder / VECTOR_IDS)
    try:
        if not results.is_file():
            raise OSError(f"{results.name} is missing")
        records = list(stream_records(results))
    except (OSError, CheckFailed) as exc:
        return [f"{results}: cannot be read back ({exc}); the vectors cannot be checked"]
    return folder_problems(folder / VECTORS, folder / VECTOR_IDS, records, params_model(params))
