"""`kdkit validate`'s look at what the pilot config names beyond its shape, with the pilot's own readers
(kdkit.core.pilotload, kdkit.core.pilotmanifest): the answer schema of a json output, the model's folders (walked,
not hashed), a JSONL corpus and the manifest that maps its IDs; and the warnings about a pilot sample.

A pilot sample (documents with expectations: a label, an expected output or a planned rejection) should span
short, usual and near-limit sizes (SAMPLE_RULES); a warning names what it lacks, never an error. A full corpus
(no expectations) is not a sample and gets no such warning.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from kdkit.config.schemas import Problem
from kdkit.core.errors import BadInput
from kdkit.core.pilotconfig import config_file, config_problems, entry_problem, load_documents
from kdkit.core.pilotkeys import Output
from kdkit.core.pilotload import existing, load_model, load_output
from kdkit.core.projectfiles import config_path_problem, load_object

SHORT, NEAR, USUAL = 0.05, 0.25, 3
SAMPLE_RULES = (f"short: an accepted input of at most {SHORT:.0%} of max_input_bytes; near-limit: one between "
                f"{NEAR:.0%} and 100%; usual: at least {USUAL} accepted inputs; and one planned rejection")


def refused(root: Path, exc: BadInput, file: Path) -> Problem:
    """A reader's one line ("FILE: PLACE: MESSAGE", or strict JSON's "FILE:LINE:COLUMN: MESSAGE") as a Problem
    of the file it names (else of ``file``)."""
    text = str(exc)
    placed = re.match(r"(.+?):(\d+):(\d+): (.*)", text, re.DOTALL)
    if placed:
        named, where, message = placed[1], f"line {placed[2]} column {placed[3]}", placed[4]
    else:
        named, _sep, rest = text.partition(": ")
        where, _sep, message = rest.partition(": ")
    try:
        return Problem(Path(named).relative_to(root), where, message) if message else Problem(file, "$", text)
    except ValueError:
        return Problem(file, "$", text)


def places(pilot: dict[str, Any]) -> dict[str, str]:
    """The newer places the pilot config names, by JSON path: what must exist (path_problems names the rest)."""
    found: dict[str, Any] = {}
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


def deep_problems(root: Path, pilot: dict[str, Any], rel: Path) -> tuple[list[Problem], Output | None]:
    """What the pilot's readers refuse in the places a valid config names (one problem per reader), and the
    declared output (None when it could not be read)."""
    path = root / rel
    problems = []
    for where, value in places(pilot).items():
        kind = "file" if where in ("$.inputs.jsonl", "$.output.schema") else "file or folder"
        try:
            existing(root, value, path, where, kind)
        except BadInput as exc:
            problems.append(refused(root, exc, rel))
    scorer = (pilot.get("quality") or {}).get("scorer")
    if isinstance(scorer, str) and (problem := entry_problem(root, scorer)) is not None:  # as the pilot's _quality
        problems.append(Problem(rel, "$.quality.scorer", f"not the project's own function: {problem}"))
    if any(p.where != "$.quality.scorer" for p in problems):
        return problems, None
    output = None
    try:
        output = load_output(root, pilot, path)
        load_model(root, pilot, path, digest=False)
        if isinstance(pilot["inputs"], dict):
            load_documents(root, pilot, path, output)
    except BadInput as exc:
        problems.append(refused(root, exc, rel))
    return problems, output


def _size(location: str, offset: int, length: int) -> int | None:
    if offset >= 0:
        return length
    try:
        return os.path.getsize(location)
    except OSError:
        return None


def sample_warnings(root: Path) -> list[Problem]:
    """What a pilot sample lacks of SAMPLE_RULES, as one warning; nothing for a config that does not load or
    for a full corpus (no expectations)."""
    try:
        path = config_file(root, None)
        data = load_object(path, "pilot config")
        if config_problems(data):
            return []
        output = load_output(root, data, path)
        _inputs, manifest, documents = load_documents(root, data, path, output)
    except (BadInput, OSError):
        return []
    if manifest is None or not any(d.label is not None or d.expected is not None or d.expect == "reject"
                                   for d in documents):
        return []
    limit = int(data["max_input_bytes"])
    sizes = [s for d in documents if d.expect != "reject"
             if (s := _size(d.location, d.offset, d.length)) is not None]
    lacks = []
    if not any(s <= SHORT * limit for s in sizes):
        lacks.append(f"a short input (at most {int(SHORT * limit)} bytes)")
    if not any(NEAR * limit <= s <= limit for s in sizes):
        lacks.append(f"a near-limit input ({int(NEAR * limit)} to {limit} bytes)")
    if len(sizes) < USUAL:
        lacks.append(f"usual inputs (at least {USUAL} accepted)")
    if isinstance(data["inputs"], dict) and not any(d.expect == "reject" for d in documents):
        lacks.append('a planned rejection ("expect": "reject")')
    if not lacks:
        return []
    rel = Path(os.path.relpath(manifest, root))
    return [Problem(rel, "$.documents", f"the pilot sample lacks {'; '.join(lacks)}: a pilot should show how the app "
                    "meets short, usual and near-limit inputs and one it must refuse")]
