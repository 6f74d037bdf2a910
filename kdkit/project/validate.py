"""`kdkit validate`: every config against its JSON schema, then the portability rules a
schema cannot express (paths that only exist on one machine, secrets, unsafe IDs). campaign.json,
config/train.json and config/service.json, when the project has them, are checked by their own
models (kdkit.project.configchecks); the pilot manifest's entries by kdkit.project.manifestchecks.
The pilot sample's warning is judged from the manifest these checks parsed (check_project): a long
manifest is read once.

Secrets are looked for with :mod:`kdkit.core.credentials` in the JSON configs (keys and values) and
in the text of ``requirements/`` and the locks, line by line. Every message is redacted where a
config problem is made (kdkit.config.schemas.config_problem), so no finding, schema error or echoed
value can show a credential.
Files named like secrets (``.env``, ``*.pem``, ``.ssh/`` ...) are warnings, not problems: every
real project has a ``.env``, and `kdkit bundle` leaves them out.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

# mounts inside the project; index URLs that parse
from kdkit.config.project import mount_problems, url_problem
from kdkit.config.schemas import (
    config_problem,
    schema_problems,
    secret_problems,
    shown_redacted,
)
from kdkit.core.credentials import find
from kdkit.core.errors import BadInput
from kdkit.core.finding import Finding
from kdkit.core.jsonio import parse_json, read_text_file
from kdkit.core.pilotconfig import (
    config_problems,
    entry_problem,
    load_documents,
    runs_folder_problem,
)
from kdkit.core.pilotkeys import Output
from kdkit.core.pilotmanifest import Document
from kdkit.core.projectfiles import (
    config_path_problem,
    is_within,
    named_places,
    real_inside,
)
from kdkit.project.configchecks import (
    acceptance_problems,
    campaign_train_problems,
    machine_path_problems,
)
from kdkit.project.manifestchecks import manifest_problems
from kdkit.project.names import secret_file_warnings
from kdkit.project.pilotchecks import (
    FolderDocuments,
    PilotSample,
    deep_problems,
    plain_documents,
    refused,
    sample_warnings,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

# pip expands ${VAR} in requirements files; a lock or .in line names the variable, never its value.
TEXT_HINT = ("name an environment variable instead (pip expands ${VAR} in requirements files, e.g. "
             "https://user:${PIP_PASSWORD}@host/simple) or use pip's keyring support")


# ---------------------------------------------------------------- portability rules


def text_secret_problems(root: Path, relative: Path) -> list[Finding]:
    """Credential shapes in a text file of the project (a requirements input, a lock), one per
    line."""
    path = root / relative
    try:
        if real_inside(root, path) is None or not path.is_file():
            return []  # outside the project: reported by the path rules, never read
        text = path.read_bytes().decode("utf-8", errors="replace")
    except OSError as exc:
        return [config_problem(relative, "$", f"cannot read ({exc.strerror or exc})")]
    problems = []
    for number, line in enumerate(text.splitlines(), start=1):
        found = find(line)
        if found:
            problems.append(config_problem(relative, f"line {number}",
                                           f"holds {found[0].what} ({shown_redacted(line)}); "
                                           f"{TEXT_HINT}"))
    return problems


def requirement_texts(root: Path, project: Mapping[str, Any]) -> list[Path]:
    """The text files scanned for credentials: every file of requirements/, the input kdkit.json
    names and every backend's lock (relative to the root, each once, in order)."""
    folder = root / "requirements"
    found = [p.relative_to(root) for p in sorted(folder.rglob("*"))
             if p.is_file()] if folder.is_dir() else []
    named = [project.get("requirements")] + [spec.get("lock") for spec in _backends(project)]
    found += [Path(value) for value in named if isinstance(value, str)
              and not config_path_problem(value)]
    unique: dict[str, Path] = {}
    for rel in found:
        unique.setdefault(PurePosixPath(rel.as_posix()).as_posix(), rel)
    return list(unique.values())


def _backends(project: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    backends = project.get("backends")
    return [spec for spec in backends.values()
            if isinstance(spec, dict)] if isinstance(backends, dict) else []


def file_warnings(root: Path, sample: PilotSample | None) -> list[Finding]:
    """Warnings about the names of the project's files (``root``, resolved), from one walk of it:
    named like secrets (a project has a .env), or lost by a copy through macOS or Windows
    (kdkit.project.names); and what the pilot ``sample`` lacks
    (kdkit.project.pilotchecks.sample_warnings). Never problems."""
    from kdkit.config.files import project_names
    from kdkit.project.names import name_warnings

    names = list(project_names(root))
    return secret_file_warnings(names) + name_warnings(names) + sample_warnings(root, sample)


FOLDER_KEYS = ("inputs", "runs")  # keys of the pilot config that name folders


def path_problems(root: Path, data: Mapping[str, Any], file: Path,
                  keys: dict[str, bool]) -> list[Finding]:
    """Each key's path must stay inside the project; those mapped to True must also exist."""
    problems = []
    for key, must_exist in keys.items():
        value = data.get(key)
        # the schema or model named it
        if not isinstance(value, str) or config_path_problem(value) is not None:
            continue
        target = real_inside(root, root / value)
        try:
            found = target is not None and target.exists()
        # too long for this file system under this root, no permission on the way
        except OSError as exc:
            problems.append(config_problem(file,
                                           f"$.{key}",
                                           f"cannot look at {value!r} ({exc.strerror or exc}); use "
                                           "a shorter path, or one you can read"))
            continue
        if target is None:
            problems.append(config_problem(file,
                                           f"$.{key}",
                                           f"{value!r} points outside the project folder; "
                                           "keep every path inside it"))
        elif must_exist and not found:
            problems.append(config_problem(file,
                                           f"$.{key}",
                                           f"{value!r} does not exist in the project folder; "
                                           "create it or fix the path"))
        elif key in FOLDER_KEYS and found and not target.is_dir():
            problems.append(
                config_problem(file, f"$.{key}", f"{value!r} is a file; it must name a folder"))
    return problems


def entry_problems(root: Path, pilot: Mapping[str, Any], file: Path) -> list[Finding]:
    entry = pilot.get("entry")
    if not isinstance(entry, str) or ":" not in entry:
        return []
    problem = entry_problem(root, entry)
    return [] if problem is None else [config_problem(file, "$.entry", problem)]


# ---------------------------------------------------------------- the whole project

def _load(root: Path, relative: Path, problems: list[Finding]) -> Any:
    path = root / relative
    if not path.exists():
        problems.append(
            config_problem(relative, "$", "file not found; create it (kdkit init writes one)"))
        return None
    if path.is_dir():
        problems.append(
            config_problem(
                relative, "$", "is a folder, not a file; point the key at the JSON file"))
        return None
    try:
        text = read_text_file(path, "file")
    except BadInput as exc:
        problems.append(config_problem(relative, "$", str(exc).split(": ", 1)[-1]))
        return None
    try:
        return parse_json(text, str(relative))
    except BadInput as exc:
        rest = str(exc).removeprefix(f"{relative}:")
        placed = re.match(r"(\d+):(\d+): (.*)", rest)
        problems.append(config_problem(relative, f"line {placed[1]} column {placed[2]}", placed[3])
                        if placed
                        else config_problem(relative, "$", rest.strip()))
        return None


def _check_document(root: Path, rel: Path, schema: str,
                    problems: list[Finding]) -> tuple[Any, bool]:
    """Load, schema-check and rule-check one JSON file: (data or None, whether its shape is valid).

    The pilot config is checked by the pilot's own model (pilotconfig.config_problems), the one
    the pilot refuses to start on, so `kdkit validate` and `kdkit pilot` cannot disagree;
    schemas/pilot.schema.json says the same for editors (a test holds the two together).
    """
    data = _load(root, rel, problems)
    if data is None:
        return None, False
    # A manifest of plain entries has the problems of its first entry and of what lies beside them:
    # a long one is checked so, entry by entry it would take seconds.
    checked = {**data,
               "documents": data["documents"][:1]} if schema == "manifest" and plain_documents(
                   data) else data
    machine = machine_path_problems(checked, rel)
    taken = {p.name for p in machine}  # a machine-bound path is named once, as such
    if schema == "pilot":
        shape = [config_problem(rel, where, message) for where, message in config_problems(checked)
                 if where not in taken]
        valid = not shape
    else:
        found = schema_problems(checked, schema, rel)
        shape, valid = [p for p in found if p.name not in taken], not found
    problems.extend(shape + machine + secret_problems(checked, rel))
    return (data if isinstance(data, dict) else None), valid


def _named_file(root: Path, data: Mapping[str, Any], key: str) -> Path | None:
    """The relative path under ``key`` when it names something inside the project that exists
    (a folder there is reported by the loader: it is not a file)."""
    value = data.get(key)
    # the schema or model named it
    if not isinstance(value, str) or config_path_problem(value) is not None:
        return None
    try:
        found = real_inside(root, root / value) is not None and (root / value).exists()
    except OSError:  # path_problems names the key and why
        return None
    return Path(value) if found else None


def _backend_problems(root: Path, project: Mapping[str, Any]) -> list[Finding]:
    """Each backend's lock inside the project, its torch index a URL every tool reads alike."""
    problems: list[Finding] = []
    for name, spec in project["backends"].items():
        if real_inside(root, root / spec["lock"]) is None:
            problems.append(config_problem(Path("kdkit.json"), f"$.backends.{name}.lock",
                                           f"{spec['lock']!r} points outside the project folder"))
        if (bad_url := url_problem(spec["torch_index"])) is not None:
            problems.append(
                config_problem(Path("kdkit.json"), f"$.backends.{name}.torch_index", bad_url))
    return problems


def validate_project(root: Path) -> list[Finding]:
    """Every problem of the project at ``root``; an empty list means valid.

    A file whose shape is wrong is still followed as far as its keys allow, so
    one run lists the problems of every file, not just of the first.
    """
    return validated(root)[0]


def check_project(root: Path) -> tuple[list[Finding], list[Finding]]:
    """`kdkit validate`'s (problems, warnings) of the project at ``root``: the warnings about its
    files' names and its pilot sample (file_warnings), the sample as the problems' check read it
    (read once)."""
    root = root.resolve()
    problems, sample = validated(root)
    return problems, file_warnings(root, sample)


def validated(root: Path) -> tuple[list[Finding], PilotSample | None]:
    """Every problem of the project at ``root``, and its pilot sample when no problem lies in the
    pilot config or its manifest (the documents read by the checks, for sample_warnings)."""
    root = root.resolve()
    problems: list[Finding] = []
    project, project_ok = _check_document(root, Path("kdkit.json"), "kdkit", problems)
    if project is None:
        return problems, None
    problems += path_problems(root, project, Path("kdkit.json"),
                              {"requirements": True, "pilot_config": True})
    for text in requirement_texts(root, project):
        problems += text_secret_problems(root, text)
    if project_ok:
        problems += _backend_problems(root, project)
        from kdkit.lock.staleness import stale_lock_problems

        problems += stale_lock_problems(root, project)
        problems += acceptance_problems(project)
        problems += [config_problem(Path("kdkit.json"), where, what) for where,
                     what in mount_problems(root, project)]

    problems += campaign_train_problems(root)
    pilot_rel = _named_file(root, project, "pilot_config")
    if pilot_rel is None:
        return problems, None
    found, sample = _pilot_problems(root, project, pilot_rel)
    return problems + found, sample


def _pilot_problems(root: Path,
                    project: dict[str, Any],
                    pilot_rel: Path) -> tuple[list[Finding], PilotSample | None]:
    """The problems of the pilot config and its manifest, and the sample they name when there are
    none."""
    problems: list[Finding] = []
    pilot, pilot_ok = _check_document(root, pilot_rel, "pilot", problems)
    if pilot is None:
        return problems, None
    problems += path_problems(root, pilot, pilot_rel,
                              {"inputs": True, "manifest": True, "runs": False})
    if pilot_ok \
            and (problem := runs_folder_problem(root, pilot, named_places(project))) is not None:
        problems.append(config_problem(pilot_rel, "$.runs", problem))
    problems += entry_problems(root, pilot, pilot_rel)
    deep, output, corpus = deep_problems(root, pilot, pilot_rel) if pilot_ok else ([], None, None)
    problems += deep
    manifest_rel = _named_file(root, pilot, "manifest")
    if manifest_rel is None:  # a full corpus, not a sample
        return problems, None
    manifest, manifest_ok = _check_document(root, manifest_rel, "manifest", problems)
    if manifest is not None and manifest_ok:
        categories = (list(output.categories) if output is not None
                      else pilot.get("categories")) if pilot_ok \
            else None
        # a folder the model refused is named once, not once per document
        named = pilot.get("inputs")
        inputs = real_inside(root, root
                             / named) if isinstance(named,
                                                    str) and not config_path_problem(
                                                        named) else None
        problems += manifest_problems(root, manifest, manifest_rel, categories, inputs,
                                      folder=not isinstance(named, dict), output=output)
    if problems or not (pilot_ok and manifest_ok):
        return problems, None
    if corpus is not None:  # a JSONL corpus: the documents the pilot's reader made
        return problems, PilotSample(pilot, root / manifest_rel, corpus)
    refusal, documents = _folder_documents(root, pilot, pilot_rel, manifest, manifest_rel, output)
    return problems + refusal, PilotSample(pilot,
                                           root
                                           / manifest_rel,
                                           documents) if documents is not None else None


def _folder_documents(root: Path, pilot: dict[str, Any], pilot_rel: Path,
                      manifest: Mapping[str, Any],
                      manifest_rel: Path,
                      output: Output | None) -> tuple[list[Finding], Iterable[Document] | None]:
    """A folder manifest's documents, once validate found no problem in it. The pilot compares the
    manifest's folder with the inputs folder as the config writes them (links not followed), where
    validate's checks resolve links: a manifest not within the inputs folder so (a rare layout, such
    as inputs named through a link) is read by the pilot's own reader, whose refusal is a
    problem."""
    folder = os.path.normpath(root / manifest_rel.parent)
    if is_within(folder, os.path.normpath(root / str(pilot["inputs"]))):
        return [], FolderDocuments(manifest["documents"], Path(folder))
    if output is None:
        return [], None
    try:
        return [], load_documents(root, pilot, root / pilot_rel, output)[2]
    except BadInput as exc:
        return [refused(root, exc, pilot_rel)], None
