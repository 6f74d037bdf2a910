"""`kdkit validate`'s rules for a pilot manifest's entries: each ID safe as a file name and
unique, each file of a folder's inputs inside the inputs folder and present (a JSONL corpus names
its records by ID, never by file), each label an allowed category, each expected output of the
output's kind, and a folder's manifest with a planned rejection. A long manifest of plain entries
is judged once (kdkit.project.pilotchecks.clean_entries), not entry by entry."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.config.schemas import config_problem
from kdkit.core.finding import Finding
from kdkit.core.pilotkeys import Output
from kdkit.core.pilotmanifest import PLAIN_NAME, expected_problem
from kdkit.core.projectfiles import SAFE_ID_RULE, is_safe_id, path_problem, real_inside
from kdkit.project.configchecks import machine_path_problems
from kdkit.project.pilotchecks import clean_entries, plain_files

if TYPE_CHECKING:
    from collections.abc import Mapping


def manifest_problems(root: Path, manifest: Mapping[str, Any], manifest_file: Path,
                      categories: list[str] | None, inputs: Path | None, *, folder: bool = True,
                      output: Output | None = None) -> list[Finding]:
    """Every entry's ID, file (a folder's inputs only: a JSONL corpus names records by ID), label
    (null: no expected category) and expected output (``output``'s kind, when it could be read); a
    folder's manifest needs a planned rejection (a JSONL sample's lack of one is a warning:
    pilotchecks.sample_warnings)."""
    problems = []
    seen: dict[str, int] = {}
    docs = manifest.get("documents", [])
    plain = plain_files(root, manifest_file, inputs) if folder else frozenset()
    # a long manifest's usual case
    clean = clean_entries(docs, plain, categories, folder=folder, output=output)
    for index, doc in enumerate([] if clean else docs):
        where = f"$.documents[{index}]"
        problems += _id_problems(doc.get("id"), manifest_file, where, seen, index)
        name = doc.get("file")
        if folder:
            plain_file = (isinstance(name, str) and name in plain
                          and PLAIN_NAME.fullmatch(name) is not None)
            problems += [] if plain_file else _file_problems(
                root, name, manifest_file, where, inputs)
        elif name is not None:
            problems.append(config_problem(manifest_file,
                                           f"{where}.file", "the inputs are a JSONL corpus, whose "
                                           "records are named by ID; remove \"file\""))
        label, expect = doc.get("label"), doc.get("expect")
        if expect == "accept" and categories is not None and label is not None \
                and label not in categories:
            allowed = ", ".join(categories) or "none: this output kind has no categories"
            problems.append(config_problem(manifest_file,
                                           f"{where}.label", f"{json.dumps(label)} is not an "
                                           f"allowed category ({allowed})"))
        expected = doc.get("expected")
        if output is not None and expected is not None \
                and (problem := expected_problem(expected, output)):
            problems.append(config_problem(manifest_file, f"{where}.expected", problem))
    if folder and docs \
            and not any(d.get("expect") == "reject" for d in docs if isinstance(d, dict)):
        problems.append(config_problem(manifest_file,
                                       "$.documents",
                                       "no expected rejection declared; a pilot must "
                                       "include at least one input that a correct pipeline "
                                       "rejects"))
    return problems


def _id_problems(ident: Any, manifest_file: Path, where: str,
                 seen: dict[str, int], index: int) -> list[Finding]:
    if not isinstance(ident, str):
        return []
    problems = []
    if not ident.strip():
        problems.append(
            config_problem(manifest_file, f"{where}.id", "empty ID; give every input an ID"))
    elif not is_safe_id(ident):
        problems.append(config_problem(manifest_file, f"{where}.id",
                                       f"ID {ident!r} is unsafe as a file name; {SAFE_ID_RULE}"))
    if ident in seen:
        problems.append(config_problem(manifest_file, f"{where}.id", f"duplicate ID {ident!r} "
                                       f"(first at $.documents[{seen[ident]}]); every ID must be "
                                       "unique"))
    else:
        seen[ident] = index
    return problems


def _file_problems(root: Path, name: Any, manifest_file: Path, where: str,
                   inputs: Path | None) -> list[Finding]:
    if name is None:
        return [config_problem(manifest_file, f"{where}.file",
                               "missing; name the input's file, relative to the manifest")]
    if not isinstance(name, str):
        return []
    folder = (root / manifest_file).parent
    path_bad = machine_path_problems(name, manifest_file) or path_problem(name) is not None
    target = real_inside(folder, folder / name) if not path_bad else None
    if path_bad or target is None or (inputs is not None and inputs not in target.parents):
        return [config_problem(manifest_file, f"{where}.file", f"{name!r} is not inside the inputs "
                               "folder; name files relative to the manifest")]
    if not target.is_file():
        return [config_problem(manifest_file, f"{where}.file", f"{name!r} does not exist; add the "
                               "file or fix the manifest")]
    return []
