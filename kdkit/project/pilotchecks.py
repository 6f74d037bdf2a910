"""`kdkit validate`'s look at what the pilot config names beyond its shape, with the pilot's own
readers (kdkit.core.pilotload, kdkit.core.pilotmanifest): the answer schema of a json output, the
model's folders (walked, not hashed), a JSONL corpus and the manifest that maps its IDs; and the
warnings about a pilot sample.

A pilot sample (documents with expectations: a label, an expected output or a planned rejection)
should span short, usual and near-limit sizes (SAMPLE_RULES); a warning names what it lacks, never
an error. A full corpus (no expectations) is not a sample and gets no such warning.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from kdkit.config.schemas import config_problem, config_warning
from kdkit.core.credentials import find
from kdkit.core.errors import BadInput
from kdkit.core.finding import Finding
from kdkit.core.pilotconfig import entry_problem, load_documents
from kdkit.core.pilotkeys import Output
from kdkit.core.pilotload import existing, load_model, load_output
from kdkit.core.pilotmanifest import PLAIN_NAME, Document
from kdkit.core.projectfiles import CONTROL_CHARACTER, SAFE_ID, config_path_problem

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import NotRequired, TypedDict

    class ManifestEntry(TypedDict):
        """One entry of a pilot manifest as its schema checked it (``documents[]``)."""

        id: str
        expect: str  # accept or reject
        file: NotRequired[str]  # a folder's inputs only (validate held a folder's entries to it)
        label: NotRequired[str | None]
        expected: NotRequired[Any]  # the reference output, of the output's kind
        sha256: NotRequired[str]
        size: NotRequired[int]
        line: NotRequired[int]
        note: NotRequired[str]

SHORT, NEAR, USUAL = 0.05, 0.25, 3
MACHINE_PATHS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^~"), "a path into a home folder"),
    (re.compile(r"^/(home|root|Users)(/|$)"), "a path into a home folder"),
    (re.compile(r"^/(tmp|var/tmp)(/|$)"), "a path into a temporary folder"),
    (re.compile(r"^(/|[A-Za-z]:[\\/]|\\\\)"), "an absolute path"),
)
# A manifest entry that no rule of its schema, of line breaks, of machine-bound paths or of
# credential shapes can refuse (plain_documents): these keys, each text of these characters, ...
PLAIN_KEYS = frozenset({"id", "file", "label", "expect", "note"})
PLAIN_TEXTS = re.compile(r"[A-Za-z0-9._ \n-]*")  # fullmatch: the texts, each after a line break
# ... and none holding what starts a credential shape (kdkit.core.credentials: a prefixed token, a
# private key block, 40 characters of an AWS secret; a URL or an assignment needs a ':' or '=',
# which a plain text lacks).
SHAPE_STARTS = ("sk-", "sk_", "rk_", "github_pat_", "hf_", "xox", "AIza", "npm_", "pypi-", "AKIA",
                "ASIA", "ABIA",
                "ACCA", "eyJ", "-----")
SHAPE_START = re.compile(r"g(?:h[pousr]_|l[a-z]+-)")  # GitHub's and GitLab's prefixes
AWS_SECRET_RUN = re.compile(r"[A-Za-z0-9]{40}")
# fullmatch: texts each ending in a line break
SAFE_IDS = re.compile(f"(?:(?:{SAFE_ID.pattern})\n)*")
PLAIN_NAMES = re.compile(f"(?:(?:{PLAIN_NAME.pattern})\n)*")
SAMPLE_RULES = (f"short: an accepted input of at most {SHORT:.0%} of max_input_bytes; near-limit: "
                f"one between {NEAR:.0%} and 100%; usual: at least {USUAL} accepted inputs; and "
                "one planned rejection")


def refused(root: Path, exc: BadInput, file: Path) -> Finding:
    """A reader's one line ("FILE: PLACE: MESSAGE", or strict JSON's "FILE:LINE:COLUMN: MESSAGE") as
    a problem of the file it names (else of ``file``)."""
    text = str(exc)
    placed = re.match(r"(.+?):(\d+):(\d+): (.*)", text, re.DOTALL)
    if placed:
        named, where, message = placed[1], f"line {placed[2]} column {placed[3]}", placed[4]
    else:
        named, _sep, rest = text.partition(": ")
        where, _sep, message = rest.partition(": ")
    try:
        if message:
            return config_problem(Path(named).relative_to(root), where, message)
        return config_problem(file, "$", text)
    except ValueError:
        return config_problem(file, "$", text)


def places(pilot: Mapping[str, Any]) -> dict[str, str]:
    """The newer places the pilot config names, by JSON path: what must exist (path_problems names
    the rest)."""
    found: dict[str, object] = {}
    inputs, output, model = pilot.get("inputs"), pilot.get("output"), pilot.get("model")
    if isinstance(inputs, dict):
        found["$.inputs.jsonl"] = inputs.get("jsonl")
    if isinstance(output, dict):
        found["$.output.schema"] = output.get("schema")
    if isinstance(model, dict):
        found["$.model.path"] = model.get("path")
        if isinstance(model.get("base"), dict):
            found["$.model.base.path"] = model["base"].get("path")
    return {where: value for where, value in found.items()
            if isinstance(value, str) and config_path_problem(value) is None}


def deep_problems(root: Path, pilot: dict[str, Any],
                  rel: Path) -> tuple[list[Finding], Output | None, Sequence[Document] | None]:
    """What the pilot's readers refuse in the places a valid config names (one problem per reader),
    the declared output (None when it could not be read) and, for a JSONL corpus the reader took,
    its documents."""
    path = root / rel
    problems = []
    for where, value in places(pilot).items():
        kind = "file" if where in ("$.inputs.jsonl", "$.output.schema") else "file or folder"
        try:
            existing(root, value, path, where, kind)
        except BadInput as exc:
            problems.append(refused(root, exc, rel))
    scorer = (pilot.get("quality") or {}).get("scorer")
    # as the pilot's _quality
    if isinstance(scorer, str) and (problem := entry_problem(root, scorer)) is not None:
        problems.append(
            config_problem(rel, "$.quality.scorer", f"not the project's own function: {problem}"))
    if any(p.name != "$.quality.scorer" for p in problems):
        return problems, None, None
    output, documents = None, None
    try:
        output = load_output(root, pilot, path)
        load_model(root, pilot, path, digest=False)
        if isinstance(pilot["inputs"], dict):
            documents = load_documents(root, pilot, path, output)[2]
    except BadInput as exc:
        problems.append(refused(root, exc, rel))
    return problems, output, documents


def plain_documents(data: Any) -> bool:
    """Whether ``data`` is a manifest with entries, each plain: keys of PLAIN_KEYS, an ID of 1 to
    128 characters, "accept" or "reject", a label or null, and every text plain (PLAIN_TEXTS, no
    SHAPE_STARTS). Such entries are valid by the manifest's schema and hold no control character,
    machine-bound path or credential shape: the whole document then has the problems of its first
    entry alone (none) and of what lies beside the list."""
    documents = data.get("documents") if isinstance(data, dict) else None
    if not isinstance(documents, list) or not documents \
            or not all(type(doc) is dict for doc in documents):
        return False
    if not all(doc.keys() <= PLAIN_KEYS for doc in documents) \
            or not all(_plain_note(doc["note"]) for doc in documents if "note" in doc):
        return False
    # compared one by one: an "expect" may be any JSON value, a list or an object too
    if not all(doc.get("expect") in ("accept", "reject") and "id" in doc for doc in documents):
        return False
    ids = [doc.get("id") for doc in documents]
    texts = [value for doc in documents for key, value in doc.items() if key != "note"
             and (value is not None or key != "label")]
    try:
        joined = "\n" + "\n".join(texts) + "\n"  # a TypeError when one is not a text
    except TypeError:
        return False
    # no text breaks a line
    return (max(map(len, ids)) <= 128 and joined.count("\n") == len(texts) + 1
            and "\n\n" not in joined and PLAIN_TEXTS.fullmatch(joined) is not None  # nor is empty
            and not any(start in joined for start in SHAPE_STARTS)
            and SHAPE_START.search(joined) is None
            and not any(AWS_SECRET_RUN.search(text) for text in texts if len(text) >= 40))


def plain_files(root: Path, manifest_file: Path, inputs: Path | None) -> frozenset[str]:
    """The regular files (no link) of the manifest's folder when it is real (no link on the way) and
    inside the inputs folder: an entry naming one of them by a plain name (pilotmanifest.PLAIN_NAME)
    has no file problem."""
    folder = (root / manifest_file).parent
    try:
        if os.path.realpath(folder) != str(folder) or not (inputs is None or inputs == folder
                                                            or inputs in folder.parents):
            return frozenset()
        with os.scandir(folder) as entries:  # one listing, not a stat per entry
            return frozenset(entry.name for entry in entries
                             if entry.is_file(follow_symlinks=False))
    except OSError:
        return frozenset()


def clean_entries(documents: list[Any], plain: frozenset[str], categories: list[str] | None, *,
                  folder: bool,
                  output: Output | None) -> bool:
    """Whether manifestchecks.manifest_problems finds nothing in any entry of a manifest whose shape
    is valid: IDs safe and unique, files plain names of ``plain`` (a JSONL corpus's: none), labels
    allowed, no expected output."""
    if not all(type(doc) is dict for doc in documents):
        return False
    ids, names = [doc.get("id") for doc in documents], [doc.get("file") for doc in documents]
    if not _all_match(SAFE_IDS, ids) or len(set(ids)) != len(ids):
        return False
    if folder and not (_all_match(PLAIN_NAMES, names) and set(names) <= plain):
        return False
    if not folder and any(name is not None for name in names):
        return False
    try:
        labels = {doc.get("label") for doc in documents if doc.get("expect") == "accept"} - {None}
        allowed = categories is None or labels <= set(categories)
    except TypeError:  # a label that is not a text
        return False
    return allowed and (output is None or all(doc.get("expected") is None for doc in documents))


def _all_match(lines: re.Pattern[str], texts: list[Any]) -> bool:
    """Whether every one of ``texts`` is a text that the one-line pattern of ``lines`` matches
    whole."""
    try:
        joined = "\n".join(texts) + "\n"  # a TypeError when one is not a text
    except TypeError:
        return False
    # none breaks a line
    return joined.count("\n") == len(texts) and lines.fullmatch(joined) is not None


def _plain_note(note: Any) -> bool:
    """A note is prose (any text): plain when no rule the entry's texts meet by their characters
    refuses it."""
    return type(note) is str and CONTROL_CHARACTER.search(note) is None and not find(note) and (
        "://" in note or not any(pattern.search(note) for pattern, _what in MACHINE_PATHS))


def _size(location: str, offset: int, length: int) -> int | None:
    if offset >= 0:
        return length
    try:
        return os.path.getsize(location)
    except OSError:
        return None


def _sizes(documents: Iterable[Document], limit: int) -> tuple[bool, bool, bool]:
    """Whether the accepted inputs (those whose size can be read) hold a short one, a near-limit one
    and USUAL ones; the sizes read up to the first document where all three hold (a stat each: a
    large sample's cost)."""
    short = near = False
    count = 0
    for doc in documents:
        if doc.expect == "reject" or (size := _size(doc.location, doc.offset, doc.length)) is None:
            continue
        short, near, count = (short or size <= SHORT * limit,
                              near or NEAR * limit <= size <= limit, count + 1)
        if short and near and count >= USUAL:
            break
    return short, near, count >= USUAL


class PilotSample(NamedTuple):
    """The pilot's inputs as `kdkit validate` read them, when it found no problem in the pilot
    config and its manifest: the config, the manifest (absolute) and the documents. A JSONL corpus
    without a manifest is a full corpus, not a sample: it has none."""

    config: Mapping[str, Any]  # the pilot config
    manifest: Path
    documents: Iterable[Document]  # iterated more than once


class FolderDocuments:
    """A folder manifest's entries (checked by validate) as the pilot's Documents, each made when
    reached: a sample's judgment (sample_warnings) mostly stops at its first entries."""

    def __init__(self, entries: list[ManifestEntry], folder: Path) -> None:
        self.entries, self.folder = entries, str(folder).rstrip(os.sep) + os.sep

    def __iter__(self) -> Iterator[Document]:
        for doc in self.entries:
            name = doc["file"]
            location = self.folder + name if PLAIN_NAME.fullmatch(name) else os.path.normpath(
                self.folder + name)
            yield Document(doc["id"], name, location, doc.get("label"), doc["expect"],
                           expected=doc.get("expected"))


def sample_warnings(root: Path, sample: PilotSample | None) -> list[Finding]:
    """What a pilot sample lacks of SAMPLE_RULES, as one warning; nothing when validate could not
    read the sample (``sample`` None) or for a full corpus (no expectations)."""
    if sample is None:
        return []
    data, documents = sample.config, sample.documents
    if not any(d.label is not None or d.expected is not None or d.expect == "reject"
               for d in documents):
        return []
    limit = int(data["max_input_bytes"])
    short, near, usual = _sizes(documents, limit)
    lacks = []
    if not short:
        lacks.append(f"a short input (at most {int(SHORT * limit)} bytes)")
    if not near:
        lacks.append(f"a near-limit input ({int(NEAR * limit)} to {limit} bytes)")
    if not usual:
        lacks.append(f"usual inputs (at least {USUAL} accepted)")
    if isinstance(data["inputs"], dict) and not any(d.expect == "reject" for d in documents):
        lacks.append('a planned rejection ("expect": "reject")')
    if not lacks:
        return []
    rel = Path(os.path.relpath(sample.manifest, root))
    return [config_warning(rel,
                           "$.documents",
                           f"the pilot sample lacks {'; '.join(lacks)}: a pilot should show how "
                           "the app meets short, usual and near-limit inputs and one it must "
                           "refuse")]
