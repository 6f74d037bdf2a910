"""The pilot's inputs as the harness reads them, and the batches the app gets.

An input is a file per item (its UTF-8 text, or its raw bytes with ``"decode": "bytes"``) or one
record of a JSONL corpus (its line read again at the offset the pilot config's load found, parsed,
its ID checked, sent as its canonical bytes). Whatever cannot be read as it was declared (missing,
unreadable, oversized, not UTF-8, a record changed since the run started) is the harness's rejection
with its reason and never reaches the app. A corpus is read through one descriptor for the run, a
batch's consecutive records in one read; the next batch is read while the app computes this one.
Standard library only.
"""

from __future__ import annotations

import codecs
import errno
import hashlib
import json
import os
import stat
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from kdkit.core.jsonlcorpus import canonical, parse_record
from kdkit.core.pilotconfig import PilotConfig
from kdkit.core.pilotmanifest import Document
from kdkit.core.projectfiles import real_inside

T = TypeVar("T")
# what an item holds: the key of its value in the app's item
TEXT, BYTES, RECORD = "text", "bytes", "record"
# bytes of an input decoded at a time to check it is UTF-8 (no str of the whole file)
UTF8_CHECKED = 1 << 20
CHUNK = 4 << 20  # the most bytes of a JSONL corpus read at once: a batch's consecutive records
CHANGED = "the corpus changed since the run started; restore it, or start a new run on it"


@dataclass(slots=True, eq=False)
class Item:
    """One input as the harness holds it: the bytes the app gets, read once (checked, hashed, and
    sent to the app's process from these very bytes), their SHA-256 and their kind. For a text or
    bytes input they are the file's bytes; for a record, its canonical JSON
    (kdkit.core.jsonlcorpus.canonical)."""

    doc: Document
    data: bytes
    sha256: str
    kind: str = TEXT
    # the file output kind: the item's staging folder (kdkit.core.outputfiles)
    out_dir: str | None = None

    @property
    def payload(self) -> bytes | memoryview:
        """The bytes as the app gets them (a text's leading BOM left out), nothing copied."""
        if self.kind == TEXT and self.data.startswith(codecs.BOM_UTF8):
            return memoryview(self.data)[len(codecs.BOM_UTF8):]
        return self.data

    @property
    def text(self) -> str:
        """The text, decoded on demand (the app's process decodes its own copy from the payload); a
        bytes input's undecodable bytes shown as U+FFFD."""
        return str(self.payload, "utf-8", "strict" if self.kind != BYTES else "replace")

    def app_item(self) -> dict[str, Any]:
        """The item as the app gets it: its ID, its text, bytes or record, its input's sha256 (and
        its out_dir for the file output kind)."""
        value: Any = (self.text if self.kind == TEXT else self.data if self.kind == BYTES
                      else json.loads(self.data))
        item = {"id": self.doc.id, self.kind: value, "sha256": self.sha256}
        if self.out_dir is not None:
            item["out_dir"] = self.out_dir
        return item

    def excerpt(self, chars: int) -> tuple[str, bool]:
        """The first ``chars`` characters with each run of whitespace as one space, decoded from the
        start of the input only; and whether the input goes on past them."""
        payload = self.payload
        head = payload[:chars * 4 + UTF8_CHECKED]
        errors = "strict" if self.kind != BYTES else "replace"
        text = codecs.utf_8_decode(head, errors, len(head) == len(payload))[0]
        seen = " ".join(text.split())
        return seen[:chars], len(seen) > chars or len(head) < len(payload)


@dataclass(frozen=True)
class Reading:
    """How a run's inputs are read, from its pilot config: a link is followed only when it resolves
    inside ``root`` (without a root, never)."""

    max_bytes: int
    root: str | None = None
    decode: str = "utf-8"  # utf-8 | bytes, for a file per item
    id_field: str | None = None  # a JSONL corpus's ID field: a record whose ID changed is refused

    @classmethod
    def of(cls, cfg: PilotConfig, *, follow_links: bool = True) -> Reading:
        root = os.fspath(cfg.root) if follow_links else None
        return cls(cfg.max_input_bytes, root, cfg.decode, cfg.id_field)


# ---------------------------------------------------------------- a file, opened safely


# Opened without following a final symbolic link and without blocking (a FIFO would wait forever
# for a writer): what is opened is then checked to be a regular file before one byte is read.
OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
         (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _not_regular(name: str, mode: int) -> str:
    if stat.S_ISDIR(mode):
        return f"input file {name} unreadable: {os.strerror(errno.EISDIR)}"
    what = next((what for test, what in KINDS if test(mode)), "something else")
    return f"input file {name} is {what}, not a regular file; the harness never reads it"


def _open_input(doc: Document, root: str | None) -> tuple[int, int] | str:
    """(descriptor, size) of the input's regular file, or the reason it is refused."""
    return _open(doc.location, doc.file, "/" in doc.file or os.sep in doc.file, root)


def _open(location: str, name: str, nested: bool, root: str | None) -> tuple[int, int] | str:
    """(descriptor, size) of the regular file at ``location``, or the reason it is refused.

    A link (the file itself, or a folder of a ``nested`` name) is followed only when it resolves
    inside the project ``root`` (projectfiles.real_inside); without a root, never.
    """
    try:
        if nested and root is not None and real_inside(root, location) is None:
            return (
                f"input file {name} leads outside the project (a symbolic link); copy the file in")
        fd = os.open(location, OPEN_FLAGS)
    except FileNotFoundError:
        return f"input file {name} not found"
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            return _unopenable(location, name, exc)
        real = real_inside(root, location) if root is not None else None
        if real is None:
            return (
                f"input file {name} is a symbolic link leading outside the project; copy the file "
                "in")
        try:
            fd = os.open(real, OPEN_FLAGS)
        except OSError as again:
            return _unopenable(location, name, again)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        return _not_regular(name, info.st_mode)
    return fd, info.st_size


def _unopenable(location: str, name: str, exc: OSError) -> str:
    try:
        mode = os.lstat(location).st_mode
    except OSError:
        mode = 0
    if mode and not stat.S_ISREG(mode):
        return _not_regular(name, mode)
    return f"input file {name} unreadable: {exc.strerror or exc}"


def _read_fd(fd: int, limit: int) -> bytes:
    """Up to ``limit`` bytes (fewer at the end of the file)."""
    chunks, left = [], limit
    while left > 0:
        chunk = os.read(fd, left)
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def read_file(doc: Document, reading: Reading) -> Item | str:
    """A file per item: its bytes as text (checked to be UTF-8) or as bytes, or the reason it is
    refused."""
    opened = _open_input(doc, reading.root)
    if isinstance(opened, str):
        return opened
    fd, size = opened
    max_bytes = reading.max_bytes
    try:
        if size > max_bytes:
            return f"input file {doc.file} is {size} bytes, over max_input_bytes {max_bytes}"
        data = _read_fd(fd, min(size, max_bytes) + 1)
    except OSError as exc:
        return f"input file {doc.file} unreadable: {exc.strerror or exc}"
    finally:
        os.close(fd)
    if len(data) > max_bytes:  # it grew while being read
        return (
            f"input file {doc.file} is more than {max_bytes} bytes, over max_input_bytes "
            f"{max_bytes}")
    if reading.decode == "bytes":
        return Item(doc, data, hashlib.sha256(data).hexdigest(), BYTES)
    bad = _not_utf8(data)
    if bad is not None:
        return (f"input file {doc.file} is not valid UTF-8 (byte 0x{data[bad]:02x} at offset "
                f"{bad}); convert it to UTF-8 or keep it as a planned rejection")
    return Item(doc, data, hashlib.sha256(data).hexdigest())


def _not_utf8(data: bytes) -> int | None:
    """The offset of the first byte that is not UTF-8, or None: checked a block at a time, so the
    text is never held a second time as a str."""
    if data.isascii():
        return None
    view, start = memoryview(data), 0
    while start < len(view):
        end = min(start + UTF8_CHECKED, len(view))
        try:
            start += codecs.utf_8_decode(view[start:end], "strict", end == len(view))[1]
        except UnicodeDecodeError as exc:
            return start + exc.start
    return None


# ---------------------------------------------------------------- a JSONL corpus's records


class Reader:
    """Reads a run's inputs. Each JSONL corpus stays open for the run (one descriptor, os.pread at
    the records' offsets; a batch's consecutive records in one read); a file per item is opened per
    item."""

    def __init__(self, reading: Reading) -> None:
        self.reading = reading
        # location: its descriptor, or why it cannot be read
        self._corpora: dict[str, int | str] = {}
        self._chunk, self._chunk_at, self._chunk_of = b"", 0, ""

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        corpora, self._corpora, self._chunk = self._corpora, {}, b""
        for fd in corpora.values():
            if isinstance(fd, int):
                os.close(fd)

    def read(self, doc: Document, among: Sequence[Document] = (), at: int = 0,
             count: int = 1) -> Item | str:
        """The item, or the reason the harness refuses it (never handed to the app). A record not
        read yet is read with those that follow it in ``among[at:at + count]`` (the rest of its
        batch), in one read."""
        if doc.offset < 0:
            return read_file(doc, self.reading)
        if not self.holds(doc):
            problem = self.ahead(among, at, count) if among else self.ahead((doc,), 0, 1)
            if problem is not None:
                return problem
        start = doc.offset - self._chunk_at
        return self._record(doc, self._chunk[start:start + doc.length])

    def holds(self, doc: Document) -> bool:
        """Whether the record's line is in the bytes read last."""
        start = doc.offset - self._chunk_at
        return (doc.location == self._chunk_of and start >= 0 and start
                + doc.length <= len(self._chunk))

    def ahead(self, docs: Sequence[Document], start: int, count: int) -> str | None:
        """Read the record ``docs[start]`` and those after it in the same corpus that follow it in
        the file, up to ``count`` records and CHUNK bytes, in one read; the reason the corpus cannot
        be read, or None."""
        first = docs[start]
        fd = self._corpus(first)
        if isinstance(fd, str):
            return fd
        end = first.offset + first.length
        for doc in docs[start + 1:start + count] if count > 1 else ():
            if doc.offset < end or doc.location != first.location \
                    or doc.offset + doc.length - first.offset > CHUNK:
                break
            end = doc.offset + doc.length
        try:
            self._chunk = os.pread(fd, end - first.offset, first.offset)
        except OSError as exc:
            self._chunk = b""
            return f"input corpus {_name(first)} unreadable: {exc.strerror or exc}"
        self._chunk_at, self._chunk_of = first.offset, first.location
        return None

    def _corpus(self, doc: Document) -> int | str:
        fd = self._corpora.get(doc.location)
        if fd is None:
            opened = _open(doc.location, _name(doc), True, self.reading.root)
            fd = self._corpora[doc.location] = opened if isinstance(opened, str) else opened[0]
        return fd

    def _record(self, doc: Document, line: bytes) -> Item | str:
        """The record on ``line`` as an item: parsed, its ID the one the load found, its canonical
        bytes."""
        data = line.strip()
        if len(line) < doc.length or not data or b"\n" in data:
            return _changed(doc, "its line is no longer there")
        record = parse_record(data)
        if isinstance(record, str):
            return _changed(doc, f"its line no longer parses: {record}")
        field = self.reading.id_field
        if field is not None and record.get(field) != doc.id:
            said = (f"the ID {_short(record[field])}" if field in record
                    else f"no ID field {_short(field)}")
            return _changed(doc, f"its line now holds {said}")
        try:
            body = canonical(record)
        # a number JSON cannot carry (1e999 reads as infinity)
        except (ValueError, RecursionError) as exc:
            return f"input record {doc.id} ({_where(doc)}) cannot be sent as JSON: {exc}"
        if len(body) > self.reading.max_bytes:
            return (f"input record {doc.id} ({_where(doc)}) is {len(body)} bytes as canonical "
                    f"JSON, over max_input_bytes {self.reading.max_bytes}")
        return Item(doc, body, hashlib.sha256(body).hexdigest(), RECORD)


def _name(doc: Document) -> str:
    return os.path.basename(doc.location)


def _short(value: Any) -> str:
    """A JSON value for a one-line message: JSON in ASCII, shortened."""
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:60] + "..."


def _where(doc: Document) -> str:
    """The corpus and the line the load found the record on (the Document's ``file``: "line N")."""
    return f"{_name(doc)} {doc.file}"


def _changed(doc: Document, what: str) -> str:
    return f"input record {doc.id} ({_where(doc)}): {what}; {CHANGED}"


def read_input(doc: Document, max_bytes: int, root: str | None = None, *, decode: str = "utf-8",
               id_field: str | None = None) -> Item | str:
    """One input read on its own (a JSONL corpus opened for it), or the reason the harness rejects
    it."""
    with Reader(Reading(max_bytes, root, decode, id_field)) as reader:
        return reader.read(doc)


# ---------------------------------------------------------------- reading ahead


@contextmanager
def prefetching(source: Iterator[T]) -> Iterator[Iterator[T]]:
    """``source`` advanced one element ahead in a helper thread: the next batch's inputs are read
    while the app computes this one (reads release the GIL; a GPU app waits without it)."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kdkit-read")
    end = object()

    def ahead() -> Iterator[T]:
        future = pool.submit(next, source, end)
        while (item := future.result()) is not end:
            future = pool.submit(next, source, end)
            yield item  # type: ignore[misc]

    try:
        yield ahead()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        close = getattr(source, "close", None)
        if close is not None:
            close()  # a generator stopped early lets go of what it holds (an open corpus) now
