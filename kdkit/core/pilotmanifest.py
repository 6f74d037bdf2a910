"""The pilot's documents: a folder's manifest (every input, its file and what is expected of it), or
a JSONL corpus (a record per line) with an optional manifest mapping IDs to expectations.

A manifest entry: ``id``, ``file`` (a folder's inputs only), ``expect`` (accept | reject), ``label``
(the expected category, or null: none), ``expected`` (the reference output of the text, vector and
json kinds); ``sha256``, ``size``, ``line`` and ``note`` (written by `kdkit manifest`, or by hand)
are kept out of the way. Read fast: ten thousand entries cost milliseconds (no Path per entry).
Standard library only.
"""

from __future__ import annotations

import json
import math
import os
import re
from array import array
from collections.abc import Container, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple, overload

from kdkit.core.errors import BadInput
from kdkit.core.jsonlcorpus import scan_lines
from kdkit.core.pilotkeys import Output
from kdkit.core.projectfiles import (
    PATH_RULE,
    SAFE_ID_RULE,
    inside,
    is_safe_id,
    is_within,
    load_object,
    path_problem,
)

# A bare file name: no separator, no drive, cannot be "." or "..", so it stays in the manifest's
# folder without the general path check (which costs microseconds per entry, a tenth of a trivial
# app's time).
PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")  # fullmatch


class Document(NamedTuple):
    """One input. ``location`` comes from the manifest's ``file`` (or is the JSONL corpus), never
    from the ID.

    The location is kept as a string: a Path per entry costs more than reading a small file's name.
    A named tuple (immutable, compared by value): made ten times faster than a frozen dataclass,
    which matters where a corpus's documents are made as they are asked for
    (:class:`CorpusDocuments`).
    """

    id: str
    file: str  # the manifest's file name; "line N" for a record of a JSONL corpus
    location: str
    label: str | None  # the expected category; None: none expected
    expect: str  # accept | reject | any (a JSONL record no manifest entry names)
    # A record of a JSONL corpus (inputs.jsonl): where its line lies in ``location`` (offset -1: a
    # file per item).
    offset: int = -1
    length: int = 0
    # the manifest's expected output (text, vector, JSON) for the other output kinds
    expected: Any = None

    @property
    def path(self) -> Path:
        return Path(self.location)


def _at(path: Path, index: int) -> str:
    """Where an entry is, for a message: built only on error (a string per entry costs as much as
    its checks)."""
    return f"{path}: $.documents[{index}]"


def _entries(path: Path) -> list[Any]:
    data = load_object(path, "manifest")
    documents = data.get("documents")
    if not isinstance(documents, list):
        raise BadInput(f"{path}: $.documents: expected a list of entries (id, file, label, "
                       "expect); run `kdkit validate`")
    if not documents:
        raise BadInput(f"{path}: $.documents: empty; list every pilot input")
    return documents


def expected_problem(value: Any, output: Output) -> str | None:
    """Why ``value`` cannot be the reference output of ``output``'s kind, or None."""
    if output.kind == "category":
        return 'the category kind\'s expected answer is "label"; move it there'
    if output.kind == "text":  # a line break is text like any other: kept and compared exactly
        if not isinstance(value, str):
            return f"expected the reference text, got {type(value).__name__}"
        over = output.max_chars is not None and len(value) > output.max_chars
        return (
            f"{len(value)} characters, over max_chars {output.max_chars}; no answer could match it"
            if over else None)
    if output.kind == "vector":
        fits = isinstance(value, list) and len(value) == output.dim and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
            for x in value)
        return (None if fits
                else f"expected a list of {output.dim} finite numbers (the reference vector)")
    from kdkit.core.answerschema import answer_problem

    problem = answer_problem(value, output.schema)
    return None if problem is None else f"does not fit the answer schema: {problem}"


def expectation(doc: dict[str, Any], path: Path,
                index: int, output: Output) -> tuple[str | None, str, Any]:
    """(label, expect, expected) of one manifest entry, checked against the declared output."""
    expect, label = doc.get("expect"), doc.get("label")
    if expect not in ("accept", "reject"):
        raise BadInput(
            f"{_at(path, index)}.expect: {json.dumps(expect)}; use \"accept\" or \"reject\"")
    if label is not None:
        if not isinstance(label, str):
            raise BadInput(f"{_at(path, index)}.label: expected a category or null")
        if expect == "accept" and label not in output.categories:
            allowed = (", ".join(output.categories)
                       or f"none: output kind {output.kind!r} has no categories")
            raise BadInput(
                f"{_at(path, index)}.label: {json.dumps(label)} is not an allowed category "
                f"({allowed})")
    expected = doc.get("expected")
    if expected is not None and (problem := expected_problem(expected, output)) is not None:
        raise BadInput(f"{_at(path, index)}.expected: {problem}")
    return label, str(expect), expected


def _id(doc: Any, path: Path, index: int, seen: set[str]) -> str:
    if not isinstance(doc, dict):
        raise BadInput(f"{_at(path, index)}: expected an object with id, file, label, expect")
    ident = doc.get("id")
    if not is_safe_id(ident):
        raise BadInput(
            f"{_at(path, index)}.id: {json.dumps(ident)} is not a safe ID; {SAFE_ID_RULE}")
    if ident in seen:
        raise BadInput(f"{_at(path, index)}.id: duplicate ID {ident!r}; every ID must be unique")
    seen.add(ident)
    return ident


def load_manifest(path: Path, inputs: Path,
                  output: Output | tuple[str, ...]) -> tuple[Document, ...]:
    """A folder's documents from its manifest; IDs checked as data, files kept inside the inputs
    folder. ``output``: the declared output (a tuple of categories is the category kind, as
    before)."""
    out_kind = output if isinstance(output, Output) else Output("category", tuple(output))
    seen: set[str] = set()
    out = []
    folders = (str(path.parent), str(inputs))  # once: ten thousand entries must cost milliseconds
    plain_ok = is_within(folders[0], folders[1])  # a plain name then lands inside the inputs folder
    for index, doc in enumerate(_entries(path)):
        ident = _id(doc, path, index, seen)
        name = doc.get("file")
        if not isinstance(name, str):
            raise BadInput(
                f"{_at(path, index)}.file: expected the input's file name, relative to the "
                "manifest")
        plain = plain_ok and PLAIN_NAME.fullmatch(name) is not None
        if not plain and (problem := path_problem(name)) is not None:
            raise BadInput(
                f"{_at(path, index)}.file: "
                f"{problem.replace(PATH_RULE, 'a name relative to the manifest')}")
        target = folders[0].rstrip(os.sep) + os.sep + name if plain else _target(
            name, path, index, folders)
        label, expect, expected = expectation(doc, path, index, out_kind)
        out.append(Document(ident, name, target, label, expect, expected=expected))
    return tuple(out)


def _target(name: str, path: Path, index: int, folders: tuple[str, str]) -> str:
    """The input's location: inside the manifest's folder and inside the inputs folder, else
    BadInput."""
    manifest_folder, inputs = folders
    where = f"$.documents[{index}].file"
    target = os.fspath(inside(manifest_folder, name, path, where))
    if not is_within(os.path.dirname(target), inputs):
        raise BadInput(f"{path}: {where}: {name!r} is not inside the inputs folder {inputs}")
    return target


def load_expectations(path: Path, output: Output) -> dict[str, tuple[int, str | None, str, Any]]:
    """A JSONL corpus's manifest: ID -> (entry index, label, expect, expected). Entries name records
    by ID only (a ``file`` is refused: the corpus is one file)."""
    seen: set[str] = set()
    found = {}
    for index, doc in enumerate(_entries(path)):
        ident = _id(doc, path, index, seen)
        if "file" in doc:
            raise BadInput(f"{_at(path, index)}.file: the inputs are a JSONL corpus, whose records "
                           "are named by ID; remove \"file\"")
        found[ident] = (index, *expectation(doc, path, index, output))
    return found


class CorpusDocuments(Sequence[Document]):
    """A JSONL corpus's documents, compact whatever its size: the IDs in one list, each record's
    line number, offset and length in arrays, and the manifest's few expectations by ID; a
    :class:`Document` is made when one is asked for (indexing, iterating). ``picked``: a view of
    some of them (:meth:`without`), in order."""

    __slots__ = ("expectations", "ids", "lengths", "location", "numbers", "offsets", "picked")

    def __init__(self, location: str, ids: list[str], numbers: array[int], offsets: array[int],
                 lengths: array[int],
                 expectations: dict[str, tuple[str | None, str, Any]],
                 picked: array[int] | None = None) -> None:
        self.location, self.ids, self.numbers, self.offsets, self.lengths = (
            location, ids, numbers, offsets, lengths)
        self.expectations, self.picked = expectations, picked

    def __len__(self) -> int:
        return len(self.ids) if self.picked is None else len(self.picked)

    @overload
    def __getitem__(self, at: int) -> Document: ...

    @overload
    def __getitem__(self, at: slice) -> tuple[Document, ...]: ...

    def __getitem__(self, at: int | slice) -> Document | tuple[Document, ...]:
        if isinstance(at, slice):
            return tuple(self[n] for n in range(*at.indices(len(self))))
        if at < 0:
            at += len(self)
        if not 0 <= at < len(self):
            raise IndexError("document index out of range")
        return self._document(at if self.picked is None else self.picked[at])

    def __iter__(self) -> Iterator[Document]:
        # Made here rather than through _document, and without Document's own __new__ (a Python
        # frame): every pass over a corpus makes a Document per record, and the run makes several
        # passes.
        ids, numbers, offsets, lengths, location, wanted = (self.ids, self.numbers, self.offsets,
                                                            self.lengths,
                                                            self.location, self.expectations)
        make, none = tuple.__new__, _NONE_EXPECTED
        for n in range(len(ids)) if self.picked is None else self.picked:
            ident = ids[n]
            label, expect, expected = wanted.get(ident, none) if wanted else none
            yield make(Document,
                       (ident, f"line {numbers[n]}", location, label, expect, offsets[n],
                        lengths[n],
                        expected))

    def _document(self, n: int) -> Document:
        ident = self.ids[n]
        label, expect, expected = self.expectations.get(ident, _NONE_EXPECTED)
        return Document(ident, f"line {self.numbers[n]}", self.location, label, expect,
                        self.offsets[n],
                        self.lengths[n], expected)

    def without(self, finished: Container[str]) -> CorpusDocuments:
        """The documents whose ID is not in ``finished``, in order (no Document made)."""
        ids = self.ids
        kept = array("q", (n for n in (range(len(ids)) if self.picked is None else self.picked)
                           if ids[n] not in finished))
        return CorpusDocuments(self.location, ids, self.numbers, self.offsets, self.lengths,
                               self.expectations, kept)


# a record no manifest entry names
_NONE_EXPECTED: tuple[str | None, str, Any] = (None, "any", None)


def document_ids(documents: Sequence[Document]) -> set[str]:
    """The documents' IDs (a corpus's without making a Document each)."""
    return set(documents.ids) if isinstance(documents,
                                            CorpusDocuments) and documents.picked is None else {
        doc.id for doc in documents}


def remaining(documents: Sequence[Document], finished: Container[str]) -> Sequence[Document]:
    """The documents whose ID is not in ``finished``, in order; a corpus's stay compact."""
    if isinstance(documents, CorpusDocuments):
        return documents.without(finished)
    return [doc for doc in documents if doc.id not in finished]


def corpus_documents(jsonl: Path, field: str,
                     manifest: Path | None, output: Output) -> CorpusDocuments:
    """Every record of the corpus as a Document (``file`` "line N", ``location`` the corpus, its
    offset and length), with the manifest's expectations where it names the ID (else expect "any":
    accepted or rejected with a reason, nothing expected); an ID of the manifest that the corpus
    lacks is BadInput. Held compactly (:class:`CorpusDocuments`)."""
    wanted = load_expectations(manifest, output) if manifest is not None else {}
    ids: list[str] = []
    numbers, offsets, lengths = array("q"), array("q"), array("q")
    unseen = set(wanted)
    for number, offset, length, ident in scan_lines(jsonl, field):
        ids.append(ident)
        numbers.append(number)
        offsets.append(offset)
        lengths.append(length)
        if unseen:
            unseen.discard(ident)
    missing = {ident: wanted[ident] for ident in unseen}
    if missing:
        ident, (index, *_rest) = min(missing.items(), key=lambda item: item[1][0])
        raise BadInput(f"{_at(manifest or jsonl, index)}.id: {ident!r} is not in the corpus {jsonl}"
                       f"{f' (+{len(missing) - 1} more)' if len(missing) > 1 else ''}; fix the ID "
                       "or drop the entry")
    if not ids:
        raise BadInput(f"{jsonl}: no record; a corpus holds one JSON object per line")
    expectations = {ident: (entry[1], entry[2], entry[3]) for ident, entry in wanted.items()}
    return CorpusDocuments(str(jsonl), ids, numbers, offsets, lengths, expectations)
