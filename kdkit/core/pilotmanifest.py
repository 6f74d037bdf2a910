"""The pilot's documents: a folder's manifest (every input, its file and what is expected of it), or a JSONL
corpus (a record per line) with an optional manifest mapping IDs to expectations.

A manifest entry: ``id``, ``file`` (a folder's inputs only), ``expect`` (accept | reject), ``label`` (the
expected category, or null: none), ``expected`` (the reference output of the text, vector and json kinds);
``sha256``, ``size``, ``line`` and ``note`` (written by `kdkit manifest`, or by hand) are kept out of the way.
Read fast: ten thousand entries cost milliseconds (no Path per entry). Standard library only.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kdkit.core.errors import BadInput
from kdkit.core.jsonlcorpus import scan
from kdkit.core.pilotkeys import Output
from kdkit.core.projectfiles import PATH_RULE, SAFE_ID_RULE, inside, is_safe_id, is_within, load_object, path_problem

# A bare file name: no separator, no drive, cannot be "." or "..", so it stays in the manifest's folder
# without the general path check (which costs microseconds per entry, a tenth of a trivial app's time).
PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")  # fullmatch


@dataclass(frozen=True, slots=True)
class Document:
    """One input. ``location`` comes from the manifest's ``file`` (or is the JSONL corpus), never from the ID.

    The location is kept as a string: a Path per entry costs more than reading a small file's name.
    """

    id: str
    file: str  # the manifest's file name; "line N" for a record of a JSONL corpus
    location: str
    label: str | None  # the expected category; None: none expected
    expect: str  # accept | reject
    # A record of a JSONL corpus (inputs.jsonl): where its line lies in ``location`` (offset -1: a file per item).
    offset: int = -1
    length: int = 0
    expected: Any = None  # the manifest's expected output (text, vector, JSON) for the other output kinds

    @property
    def path(self) -> Path:
        return Path(self.location)


def _at(path: Path, index: int) -> str:
    """Where an entry is, for a message: built only on error (a string per entry costs as much as its checks)."""
    return f"{path}: $.documents[{index}]"


def _entries(path: Path) -> list[Any]:
    data = load_object(path, "manifest")
    documents = data.get("documents")
    if not isinstance(documents, list):
        raise BadInput(f"{path}: $.documents: expected a list of entries (id, file, label, expect); run "
                       "`kdkit validate`")
    if not documents:
        raise BadInput(f"{path}: $.documents: empty; list every pilot input")
    return documents


def expected_problem(value: Any, output: Output) -> str | None:
    """Why ``value`` cannot be the reference output of ``output``'s kind, or None."""
    if output.kind == "category":
        return 'the category kind\'s expected answer is "label"; move it there'
    if output.kind == "text":
        return None if isinstance(value, str) else f"expected the reference text, got {type(value).__name__}"
    if output.kind == "vector":
        fits = isinstance(value, list) and len(value) == output.dim and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in value)
        return None if fits else f"expected a list of {output.dim} finite numbers (the reference vector)"
    from kdkit.core.answerschema import answer_problem

    problem = answer_problem(value, output.schema)
    return None if problem is None else f"does not fit the answer schema: {problem}"


def expectation(doc: dict[str, Any], path: Path, index: int, output: Output) -> tuple[str | None, str, Any]:
    """(label, expect, expected) of one manifest entry, checked against the declared output."""
    expect, label = doc.get("expect"), doc.get("label")
    if expect not in ("accept", "reject"):
        raise BadInput(f"{_at(path, index)}.expect: {json.dumps(expect)}; use \"accept\" or \"reject\"")
    if label is not None:
        if not isinstance(label, str):
            raise BadInput(f"{_at(path, index)}.label: expected a category or null")
        if expect == "accept" and label not in output.categories:
            allowed = ", ".join(output.categories) or f"none: output kind {output.kind!r} has no categories"
            raise BadInput(f"{_at(path, index)}.label: {json.dumps(label)} is not an allowed category ({allowed})")
    expected = doc.get("expected")
    if expected is not None and (problem := expected_problem(expected, output)) is not None:
        raise BadInput(f"{_at(path, index)}.expected: {problem}")
    return label, str(expect), expected


def _id(doc: Any, path: Path, index: int, seen: set[str]) -> str:
    if not isinstance(doc, dict):
        raise BadInput(f"{_at(path, index)}: expected an object with id, file, label, expect")
    ident = doc.get("id")
    if not is_safe_id(ident):
        raise BadInput(f"{_at(path, index)}.id: {json.dumps(ident)} is not a safe ID; {SAFE_ID_RULE}")
    if ident in seen:
        raise BadInput(f"{_at(path, index)}.id: duplicate ID {ident!r}; every ID must be unique")
    seen.add(ident)
    return ident


def load_manifest(path: Path, inputs: Path, output: Output | tuple[str, ...]) -> tuple[Document, ...]:
    """A folder's documents from its manifest; IDs checked as data, files kept inside the inputs folder.
    ``output``: the declared output (a tuple of categories is the category kind, as before)."""
    out_kind = output if isinstance(output, Output) else Output("category", tuple(output))
    seen: set[str] = set()
    out = []
    folders = (str(path.parent), str(inputs))  # once: ten thousand entries must cost milliseconds
    plain_ok = is_within(folders[0], folders[1])  # a plain name then lands inside the inputs folder
    for index, doc in enumerate(_entries(path)):
        ident = _id(doc, path, index, seen)
        name = doc.get("file")
        if not isinstance(name, str):
            raise BadInput(f"{_at(path, index)}.file: expected the input's file name, relative to the manifest")
        plain = plain_ok and PLAIN_NAME.fullmatch(name) is not None
        if not plain and (problem := path_problem(name)) is not None:
            raise BadInput(f"{_at(path, index)}.file: {problem.replace(PATH_RULE, 'a name relative to the manifest')}")
        target = folders[0].rstrip(os.sep) + os.sep + name if plain else _target(name, path, index, folders)
        label, expect, expected = expectation(doc, path, index, out_kind)
        out.append(Document(ident, name, target, label, expect, expected=expected))
    return tuple(out)


def _target(name: str, path: Path, index: int, folders: tuple[str, str]) -> str:
    """The input's location: inside the manifest's folder and inside the inputs folder, else BadInput."""
    manifest_folder, inputs = folders
    where = f"$.documents[{index}].file"
    target = os.fspath(inside(manifest_folder, name, path, where))
    if not is_within(os.path.dirname(target), inputs):
        raise BadInput(f"{path}: {where}: {name!r} is not inside the inputs folder {inputs}")
    return target


def load_expectations(path: Path, output: Output) -> dict[str, tuple[int, str | None, str, Any]]:
    """A JSONL corpus's manifest: ID -> (entry index, label, expect, expected). Entries name records by ID
    only (a ``file`` is refused: the corpus is one file)."""
    seen: set[str] = set()
    found = {}
    for index, doc in enumerate(_entries(path)):
        ident = _id(doc, path, index, seen)
        if "file" in doc:
            raise BadInput(f"{_at(path, index)}.file: the inputs are a JSONL corpus, whose records are named by "
                           "ID; remove \"file\"")
        found[ident] = (index, *expectation(doc, path, index, output))
    return found


def corpus_documents(jsonl: Path, field: str, manifest: Path | None, output: Output) -> tuple[Document, ...]:
    """Every record of the corpus as a Document (``file`` "line N", ``location`` the corpus, its offset and
    length), with the manifest's expectations where it names the ID (else expect "accept", nothing expected);
    an ID of the manifest that the corpus lacks is BadInput."""
    wanted = load_expectations(manifest, output) if manifest is not None else {}
    location = str(jsonl)
    out = []
    for line, _record in scan(jsonl, field):
        entry = wanted.pop(line.id, None)
        label, expect, expected = (entry[1], entry[2], entry[3]) if entry is not None else (None, "accept", None)
        out.append(Document(line.id, f"line {line.number}", location, label, expect, line.offset, line.length,
                            expected))
    if wanted:
        ident, (index, *_rest) = min(wanted.items(), key=lambda item: item[1][0])
        raise BadInput(f"{_at(manifest or jsonl, index)}.id: {ident!r} is not in the corpus {jsonl}"
                       f"{f' (+{len(wanted) - 1} more)' if len(wanted) > 1 else ''}; fix the ID or drop the entry")
    if not out:
        raise BadInput(f"{jsonl}: no record; a corpus holds one JSON object per line")
    return tuple(out)
