"""The pilot harness between the inputs and the application's ``predict(items) -> results``.

The harness reads every file itself (missing, unreadable, oversized or non-UTF-8
inputs are rejected here and never reach the app), calls the app one batch at a
time, retries a batch that raised item by item to isolate the culprit, and turns
each answer into one record for results.jsonl. It records what the app said;
accounting.py judges it.
"""

from __future__ import annotations

import codecs
import errno
import hashlib
import importlib
import json
import os
import re
import stat
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from kdkit.core.credentials import REDACT_MARGIN, redact_head
from kdkit.core.errors import KdkitError
from kdkit.core.pilotconfig import Document
from kdkit.core.projectfiles import real_inside

Predict = Callable[[list[dict[str, Any]]], Any]
T = TypeVar("T")
ANSWER_SHOWN = 120  # characters of an odd answer kept in the record
REASON_KEPT = 500  # characters of a rejection reason kept (a traceback-sized message is cut)
ANSWERED = frozenset({"accepted", "rejected", "invalid"})  # outcomes that answer an asked ID
_LEADING_SPACE = re.compile(r"\s*")
UTF8_CHECKED = 1 << 20  # bytes of an input decoded at a time to check it is UTF-8 (no str of the whole file)


@dataclass(frozen=True)
class Item:
    """One input as the harness holds it: the file's bytes, once (checked to be UTF-8, hashed, and sent
    to the app's process from these very bytes), and their SHA-256."""

    doc: Document
    data: bytes
    sha256: str

    @property
    def payload(self) -> memoryview:
        """The text's UTF-8 bytes as the app gets them: a leading BOM left out, nothing copied."""
        view = memoryview(self.data)
        return view[len(codecs.BOM_UTF8):] if self.data.startswith(codecs.BOM_UTF8) else view

    @property
    def text(self) -> str:
        """The text, decoded on demand (the app's process decodes its own copy from the payload)."""
        return str(self.payload, "utf-8")

    def excerpt(self, chars: int) -> tuple[str, bool]:
        """The first ``chars`` characters with each run of whitespace as one space, decoded from the start of
        the file only; and whether the text goes on past them."""
        head = self.payload[:chars * 4 + UTF8_CHECKED]
        text = codecs.utf_8_decode(head, "strict", len(head) == len(self.payload))[0]
        shown = " ".join(text.split())
        return shown[:chars], len(shown) > chars or len(head) < len(self.payload)


Call = Callable[[Sequence[Item]], Any]


class EntryError(KdkitError):
    """The application's entry point cannot be imported or is not callable."""


class NotAList(TypeError):
    """predict returned something other than a list: the batch is retried item by item, like a raise."""


class AppRaised(Exception):
    """The app raised an exception in its own process (kdkit/probe/pilot/supervisor.py); its type is the app's."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(message)
        self.type_name = type_name


# ---------------------------------------------------------------- inputs


# Opened without following a final symbolic link and without blocking (a FIFO would wait forever
# for a writer): what is opened is then checked to be a regular file before one byte is read.
OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
         (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _not_regular(doc: Document, mode: int) -> str:
    if stat.S_ISDIR(mode):
        return f"input file {doc.file} unreadable: {os.strerror(errno.EISDIR)}"
    what = next((what for test, what in KINDS if test(mode)), "something else")
    return f"input file {doc.file} is {what}, not a regular file; the harness never reads it"


def _open_input(doc: Document, root: str | None) -> tuple[int, int] | str:
    """(descriptor, size) of the input's regular file, or the reason it is refused.

    A link (the file itself, or a folder of a name with a separator) is followed only when it
    resolves inside the project ``root`` (projectfiles.real_inside); without a root, never.
    """
    location = doc.location
    nested = "/" in doc.file or os.sep in doc.file
    try:
        if nested and root is not None and real_inside(root, location) is None:
            return f"input file {doc.file} leads outside the project (a symbolic link); copy the file in"
        fd = os.open(location, OPEN_FLAGS)
    except FileNotFoundError:
        return f"input file {doc.file} not found"
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            return _unopenable(doc, exc)
        real = real_inside(root, location) if root is not None else None
        if real is None:
            return f"input file {doc.file} is a symbolic link leading outside the project; copy the file in"
        try:
            fd = os.open(real, OPEN_FLAGS)
        except OSError as again:
            return _unopenable(doc, again)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        return _not_regular(doc, info.st_mode)
    return fd, info.st_size


def _unopenable(doc: Document, exc: OSError) -> str:
    try:
        mode = os.lstat(doc.location).st_mode
    except OSError:
        mode = 0
    if mode and not stat.S_ISREG(mode):
        return _not_regular(doc, mode)
    return f"input file {doc.file} unreadable: {exc.strerror or exc}"


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


def read_input(doc: Document, max_bytes: int, root: str | None = None) -> Item | str:
    """The decoded input, or the reason the harness rejects it (never handed to the app)."""
    opened = _open_input(doc, root)
    if isinstance(opened, str):
        return opened
    fd, size = opened
    try:
        if size > max_bytes:
            return f"input file {doc.file} is {size} bytes, over max_input_bytes {max_bytes}"
        data = _read_fd(fd, min(size, max_bytes) + 1)
    except OSError as exc:
        return f"input file {doc.file} unreadable: {exc.strerror or exc}"
    finally:
        os.close(fd)
    if len(data) > max_bytes:  # it grew while being read
        return f"input file {doc.file} is more than {max_bytes} bytes, over max_input_bytes {max_bytes}"
    bad = _not_utf8(data)
    if bad is not None:
        return (f"input file {doc.file} is not valid UTF-8 (byte 0x{data[bad]:02x} at offset {bad}); "
                "convert it to UTF-8 or keep it as a planned rejection")
    return Item(doc, data, hashlib.sha256(data).hexdigest())


def _not_utf8(data: bytes) -> int | None:
    """The offset of the first byte that is not UTF-8, or None: checked a block at a time, so the text is
    never held a second time as a str."""
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


# ---------------------------------------------------------------- records


def harness_rejection(doc: Document, reason: str, batch: int) -> dict[str, Any]:
    return {"id": doc.id, "outcome": "rejected", "by": "harness", "reason": reason, "batch": batch}


def short_text(value: Any, limit: int | None = ANSWER_SHOWN) -> str:
    """A string as it is, anything else as its repr (one that raises is named), cut to ``limit``:
    how an odd answer is kept, here and in the app's process (appchild)."""
    try:
        text = value if isinstance(value, str) else repr(value)
    except Exception as exc:
        text = f"<{type(value).__name__}: repr raised {type(exc).__name__}>"
    return text if limit is None or len(text) <= limit else text[:limit] + "..."


def _shown(value: Any) -> Any:
    """An answer's value kept as data: JSON scalars as they are, anything else as short text; a
    credential shape in it is redacted (kdkit.core.credentials): what the app said may travel and be shown.
    Only what is kept is redacted (redact_head), so a huge value costs no more than a short one."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return redact_head(short_text(value, limit=None), ANSWER_SHOWN)


def classify_answers(items: Sequence[Item], answers: Any, categories: Sequence[str],
                     batch: int) -> list[dict[str, Any]]:
    """One record per answer, plus one per item the app left unanswered.

    Raises NotAList when ``answers`` is not a list: the caller treats that as the
    app failing on the batch.
    """
    if not isinstance(answers, list):
        raise NotAList(f"predict returned {type(answers).__name__}, expected a list of results")
    asked = {item.doc.id: item for item in items}
    records, answered = [], set()
    for answer in answers:
        record = _accepted(answer, asked, categories, batch) or _record(answer, asked, categories, batch)
        records.append(record)
        if record["outcome"] in ANSWERED:
            answered.add(record["id"])
    for ident, item in asked.items():
        if ident not in answered:
            records.append({"id": ident, "outcome": "unanswered", "batch": batch, "sha256": item.sha256})
    return records


def _accepted(answer: Any, asked: dict[str, Item], categories: Sequence[str], batch: int) -> dict[str, Any] | None:
    """The record of the usual answer, exactly {"id": <asked ID>, "category": <allowed>}, checked in one
    expression; None for anything else, which _record then judges rule by rule (and names)."""
    if type(answer) is dict and len(answer) == 2:
        ident, category = answer.get("id"), answer.get("category")
        if type(ident) is str and type(category) is str and ident in asked and category in categories:
            return {"id": ident, "outcome": "accepted", "category": category, "batch": batch,
                    "sha256": asked[ident].sha256}
    return None


def _record(answer: Any, asked: dict[str, Item], categories: Sequence[str], batch: int) -> dict[str, Any]:
    if not isinstance(answer, dict) or not isinstance(answer.get("id"), str):
        return {"id": None, "outcome": "malformed", "answer": _shown(answer), "batch": batch}
    ident: str = answer["id"]
    has_cat, has_err = "category" in answer, "error" in answer
    shown = {k: _shown(answer[k]) for k in ("category", "error") if k in answer}
    if ident not in asked:
        return {"id": _shown(ident), "outcome": "unrequested", **shown, "batch": batch}
    where = {"batch": batch, "sha256": asked[ident].sha256}
    category, error = answer.get("category"), answer.get("error")
    if has_cat == has_err:
        problem = "both a category and an error" if has_cat else "neither a category nor an error"
        return {"id": ident, "outcome": "invalid", **shown, "problem": f"the result has {problem}", **where}
    if has_cat and not (isinstance(category, str) and category in categories):
        return {"id": ident, "outcome": "invalid", **shown, **where,
                "problem": f"category {json.dumps(_shown(category))} is not one of {', '.join(categories)}"}
    if has_cat:
        return {"id": ident, "outcome": "accepted", "category": category, **where}
    if not (isinstance(error, str) and error.strip()):
        return {"id": ident, "outcome": "invalid", **shown, "problem": "rejected without a reason (empty error)",
                **where}
    return {"id": ident, "outcome": "rejected", "by": "app", "reason": _reason(error), **where}


def _reason(text: str) -> str:
    return redact_head(text, REASON_KEPT)


def first_line(text: str, limit: int) -> str:
    """The first line of ``text`` (leading space left out) for a reason kept to ``limit`` characters: looked
    for only in twice the redaction margin past the limit, so a huge message is never split or copied whole
    (and a line cut there is still longer than redact_head's window: it knows the line was cut)."""
    space = _LEADING_SPACE.match(text)
    start = space.end() if space else 0
    window = text[start:start + limit + 2 * REDACT_MARGIN]
    line = window.splitlines()[0] if window else ""
    return line.rstrip() if len(line) <= limit else line


def exception_rejection(item: Item, exc: BaseException, batch: int) -> dict[str, Any]:
    """The record of an item whose single-item call still failed: the exception is its reason."""
    said = first_line(str(exc), REASON_KEPT)
    if isinstance(exc, NotAList):
        by, reason = "harness", said
    else:
        name = exc.type_name if isinstance(exc, AppRaised) else type(exc).__name__
        by, reason = "app-exception", f"the app raised {name}" + (f": {said}" if said else "")
    return {"id": item.doc.id, "outcome": "rejected", "by": by, "reason": _reason(reason), "batch": batch,
            "sha256": item.sha256}


# ---------------------------------------------------------------- calling the app


def run_batch(call: Call, items: Sequence[Item], categories: Sequence[str], batch: int) -> list[dict[str, Any]]:
    """Records for one batch; a batch that raises is retried one item at a time.

    ``call`` hands the items to the app and returns its answers: the app's own process
    (supervisor.AppProcess) in the pilot, or :func:`in_process` around a predict function.
    """
    try:
        answers = call(items)
        return classify_answers(items, answers, categories, batch)
    except Exception as exc:
        if len(items) == 1:
            return [exception_rejection(items[0], exc, batch)]
    return [record for item in items for record in run_batch(call, [item], categories, batch)]


def in_process(predict: Predict) -> Call:
    """A predict function called in this interpreter, as run_batch calls the app."""
    return lambda items: predict([{"id": item.doc.id, "text": item.text} for item in items])


def load_entry(root: Path, entry: str) -> Predict:
    """Import ``module:function`` from the project root, fresh (never a same-named module cached earlier)."""
    module_name, function = entry.split(":", 1)
    top = module_name.split(".")[0]
    if (root / top).is_dir() or (root / f"{top}.py").is_file():
        for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
            del sys.modules[name]
    if str(root) in sys.path:  # first on the path, ahead of any other project imported earlier
        sys.path.remove(str(root))
    sys.path.insert(0, str(root))
    importlib.invalidate_caches()
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise EntryError(f"cannot import {module_name} (entry {entry}) from {root}: {type(exc).__name__}: "
                         f"{exc}") from exc
    where = getattr(module, "__file__", None)
    if not where or real_inside(os.path.realpath(root), where) is None:
        raise EntryError(f"{module_name} (entry {entry}) was imported from {where or 'no file'}, not from the project "
                         f"{root}; the app must be the project's own code")
    predict = getattr(module, function, None)
    if not callable(predict):
        raise EntryError(f"{module_name} has no function {function!r} (entry {entry}); define "
                         f"{function}(items) -> results")
    result: Predict = predict
    return result


def batches(pending: Sequence[Document], size: int, max_bytes: int, first_batch: int,
            root: str | None = None) -> Iterator[tuple[int, list[Item], list[dict[str, Any]]]]:
    """(batch number, items for the app, harness rejections), filling each app batch to ``size``.

    Files are read lazily, just before their batch, so a long run holds one batch in memory.
    """
    number, items, rejected = first_batch, [], []
    for doc in pending:
        got = read_input(doc, max_bytes, root)
        if isinstance(got, str):
            rejected.append(harness_rejection(doc, got, number))
        else:
            items.append(got)
        if len(items) == size:
            yield number, items, rejected
            number, items, rejected = number + 1, [], []
    if items or rejected:
        yield number, items, rejected


@contextmanager
def prefetching(source: Iterator[T]) -> Iterator[Iterator[T]]:
    """``source`` advanced one element ahead in a helper thread: the next batch's files are read
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


def set_device(device: str) -> None:
    """Tell the app which device the pilot config chose (KDKIT_DEVICE; the app may read it)."""
    os.environ["KDKIT_DEVICE"] = device
