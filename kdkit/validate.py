"""`kdkit validate`: every config against its JSON schema, then the portability rules a
schema cannot express (paths that only exist on one machine, secrets, unsafe IDs)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any

from kdkit.errors import BadInput
from kdkit.jsonio import load_json, parse_json
from kdkit.probe.projectfiles import SAFE_ID_RULE, is_safe_id, real_inside
from kdkit.resources import schema_path

SECRET_KEY = re.compile(
    r"(token|passw(or)?d|passwd|secret|api[_-]?key|access[_-]?key|private[_-]?key|credential|auth)",
    re.IGNORECASE,
)
SECRET_VALUES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("a GitHub token", re.compile(r"\b(ghp|gho|ghs|ghu|ghr)_[A-Za-z0-9]{30,}|\bgithub_pat_[A-Za-z0-9_]{20,}")),
    ("a Hugging Face token", re.compile(r"\bhf_[A-Za-z0-9]{30,}")),
    ("an OpenAI-style API key", re.compile(r"\bsk-[A-Za-z0-9_-]{20,}")),
    ("an AWS access key", re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("a Slack token", re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}")),
    ("a GitLab token", re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}")),
    ("a JSON web token", re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.")),
    ("a private key", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")),
    ("a password inside a URL", re.compile(r"[a-z][a-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@", re.IGNORECASE)),
)
MACHINE_PATHS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^~"), "a path into a home folder"),
    (re.compile(r"^/(home|root|Users)(/|$)"), "a path into a home folder"),
    (re.compile(r"^/(tmp|var/tmp)(/|$)"), "a path into a temporary folder"),
    (re.compile(r"^(/|[A-Za-z]:[\\/]|\\\\)"), "an absolute path"),
)


@dataclass(frozen=True)
class Problem:
    """One finding: the file (relative to the project root), the JSON path, and what to do."""

    file: Path
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.where}: {self.message}"

    def as_dict(self) -> dict[str, str]:
        return {"file": str(self.file), "where": self.where, "message": self.message}


# ---------------------------------------------------------------- schemas


def _whole_pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Any:
    r"""JSON Schema's ``pattern``, with ``$`` meaning the end of the string as in ECMA-262.

    jsonschema applies the pattern with Python's ``re.search``, where ``$`` also matches before a
    final newline: ``"doc-01\n"`` would pass ``^[A-Za-z0-9._-]+$``. Anchored at the end with ``\Z``.
    """
    from jsonschema.exceptions import ValidationError

    if isinstance(instance, str) and not re.search(_end_anchored(pattern), instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


@cache
def _end_anchored(pattern: str) -> str:
    return pattern[:-1] + r"\Z" if pattern.endswith("$") and not pattern.endswith(r"\$") else pattern


@cache
def _validator(name: str) -> Any:
    from jsonschema import Draft202012Validator, validators

    with schema_path(name).open(encoding="utf-8") as handle:
        schema = json.load(handle)
    Draft202012Validator.check_schema(schema)
    strict = validators.extend(Draft202012Validator, {"pattern": _whole_pattern})
    return strict(schema)


def json_path(parts: Any) -> str:
    out = "$"
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _describe(error: Any) -> str:
    kind, value, schema = error.validator, error.instance, error.schema
    if kind == "additionalProperties":
        allowed = sorted(schema.get("properties", {}))
        extra = sorted(set(value) - set(allowed)) if isinstance(value, dict) else []
        names = ", ".join(repr(k) for k in extra)
        return f"unknown key {names}; allowed keys: {', '.join(allowed)} (a typo?)"
    if kind == "required":
        missing = [k for k in error.validator_value if isinstance(value, dict) and k not in value]
        return f"missing required key {', '.join(repr(k) for k in missing)}; add it"
    if kind == "type":
        expected = error.validator_value
        expected = " or ".join(expected) if isinstance(expected, list) else expected
        return f"expected {expected}, got {type(value).__name__} {json.dumps(value)[:40]}"
    if kind == "enum":
        choices = ", ".join(json.dumps(c) for c in error.validator_value)
        return f"{json.dumps(value)} is not allowed; expected one of {choices}"
    if kind == "pattern":
        hint = schema.get("description", "")
        return f"{json.dumps(value)} does not match {error.validator_value}" + (f" ({hint})" if hint else "")
    return f"{error.message}"


def schema_problems(data: Any, schema: str, file: Path) -> list[Problem]:
    """Every schema violation of ``data``, ordered by place in the document."""
    errors = sorted(_validator(schema).iter_errors(data), key=lambda e: [str(p) for p in e.absolute_path])
    return [Problem(file, json_path(e.absolute_path), _describe(e)) for e in errors]


# ---------------------------------------------------------------- portability rules


def _walk(data: Any, parts: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any, Any]]:
    """Yield (path, key, value) for every value in a JSON document."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield (*parts, key), key, value
            yield from _walk(value, (*parts, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield (*parts, index), index, value
            yield from _walk(value, (*parts, index))


def secret_problems(data: Any, file: Path) -> list[Problem]:
    problems = []
    for parts, key, value in _walk(data):
        if isinstance(key, str) and SECRET_KEY.search(key) and value not in (None, "", [], {}):
            problems.append(
                Problem(file, json_path(parts), f"key {key!r} looks like a secret; secrets go in .env "
                        "(see .env.example) and reach the container with `kdkit run --env-file`")
            )
        elif isinstance(value, str):
            for what, pattern in SECRET_VALUES:
                if pattern.search(value):
                    problems.append(
                        Problem(file, json_path(parts), f"value looks like {what}; remove it and put it in "
                                ".env (see .env.example), passed at run time with --env-file")
                    )
                    break
    return problems


def machine_path_problems(data: Any, file: Path) -> list[Problem]:
    problems = []
    for parts, _key, value in _walk(data):
        if not isinstance(value, str) or "://" in value:
            continue
        for pattern, what in MACHINE_PATHS:
            if pattern.search(value):
                problems.append(
                    Problem(file, json_path(parts), f"{value!r} is {what}, which exists on one machine only; "
                            "use a path relative to the project root")
                )
                break
    return problems


def _inside(root: Path, relative: str) -> Path | None:
    """``root / relative`` with links resolved, or None when it escapes the project folder."""
    return real_inside(root, root / relative)


def path_problems(
    root: Path, data: dict[str, Any], file: Path, keys: dict[str, bool]
) -> list[Problem]:
    """Each key's path must stay inside the project; those mapped to True must also exist."""
    problems = []
    for key, must_exist in keys.items():
        value = data.get(key)
        if not isinstance(value, str):
            continue
        target = _inside(root, value)
        if target is None:
            problems.append(Problem(file, f"$.{key}", f"{value!r} points outside the project folder; "
                                    "keep every path inside it"))
        elif must_exist and not target.exists():
            problems.append(Problem(file, f"$.{key}", f"{value!r} does not exist in the project folder; "
                                    "create it or fix the path"))
    return problems


def entry_problems(root: Path, pilot: dict[str, Any], file: Path) -> list[Problem]:
    entry = pilot.get("entry")
    if not isinstance(entry, str) or ":" not in entry:
        return []
    module = entry.split(":", 1)[0]
    base = root.joinpath(*module.split("."))
    if base.with_suffix(".py").is_file() or (base / "__init__.py").is_file():
        return []
    rel = PurePosixPath(*module.split("."))
    return [Problem(file, "$.entry", f"module {module!r} not found: expected {rel}.py or "
                    f"{rel}/__init__.py under the project root")]


def manifest_problems(root: Path, manifest: dict[str, Any], manifest_file: Path,
                      categories: list[str] | None, inputs: Path | None) -> list[Problem]:
    problems = []
    folder = (root / manifest_file).parent
    seen: dict[str, int] = {}
    docs = manifest.get("documents", [])
    for index, doc in enumerate(docs):
        where = f"$.documents[{index}]"
        ident = doc.get("id")
        if isinstance(ident, str):
            if not ident.strip():
                problems.append(Problem(manifest_file, f"{where}.id", "empty ID; give every input an ID"))
            elif not is_safe_id(ident):
                problems.append(Problem(manifest_file, f"{where}.id", f"ID {ident!r} is unsafe as a file name; "
                                        f"{SAFE_ID_RULE}"))
            if ident in seen:
                problems.append(Problem(manifest_file, f"{where}.id", f"duplicate ID {ident!r} "
                                        f"(first at $.documents[{seen[ident]}]); every ID must be unique"))
            else:
                seen[ident] = index
        name = doc.get("file")
        if isinstance(name, str):
            path_bad = machine_path_problems(name, manifest_file)
            target = _inside(folder, name) if not path_bad else None
            if path_bad or target is None or (inputs is not None and inputs not in target.parents):
                problems.append(Problem(manifest_file, f"{where}.file", f"{name!r} is not inside the inputs "
                                        "folder; name files relative to the manifest"))
            elif not target.is_file():
                problems.append(Problem(manifest_file, f"{where}.file", f"{name!r} does not exist; add the "
                                        "file or fix the manifest"))
        label, expect = doc.get("label"), doc.get("expect")
        if expect == "accept" and categories is not None and label not in categories:
            problems.append(Problem(manifest_file, f"{where}.label", f"{json.dumps(label)} is not an "
                                    f"allowed category ({', '.join(categories)})"))
    if docs and not any(d.get("expect") == "reject" for d in docs if isinstance(d, dict)):
        problems.append(Problem(manifest_file, "$.documents", "no expected rejection declared; a pilot must "
                                "include at least one input that a correct pipeline rejects"))
    return problems


# ---------------------------------------------------------------- the whole project

def _load(root: Path, relative: Path, problems: list[Problem]) -> Any:
    path = root / relative
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        problems.append(Problem(relative, "$", "file not found; create it (kdkit init writes one)"))
        return None
    except IsADirectoryError:
        problems.append(Problem(relative, "$", "is a folder, not a file; point the key at the JSON file"))
        return None
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(Problem(relative, "$", f"cannot read ({exc})"))
        return None
    try:
        return parse_json(text, str(relative))
    except BadInput as exc:
        rest = str(exc).removeprefix(f"{relative}:")
        placed = re.match(r"(\d+):(\d+): (.*)", rest)
        problems.append(Problem(relative, f"line {placed[1]} column {placed[2]}", placed[3]) if placed
                        else Problem(relative, "$", rest.strip()))
        return None


def _check_document(root: Path, rel: Path, schema: str, problems: list[Problem]) -> tuple[Any, bool]:
    """Load, schema-check and rule-check one JSON file: (data or None, whether its shape is valid)."""
    data = _load(root, rel, problems)
    if data is None:
        return None, False
    shape = schema_problems(data, schema, rel)
    problems.extend(shape + machine_path_problems(data, rel) + secret_problems(data, rel))
    return (data if isinstance(data, dict) else None), not shape


def _named_file(root: Path, data: dict[str, Any], key: str) -> Path | None:
    """The relative path under ``key`` when it names something inside the project that exists
    (a folder there is reported by the loader: it is not a file)."""
    value = data.get(key)
    if not isinstance(value, str) or _inside(root, value) is None or not (root / value).exists():
        return None
    return Path(value)


def validate_project(root: Path) -> list[Problem]:
    """Every problem of the project at ``root``; an empty list means valid.

    A file whose shape is wrong is still followed as far as its keys allow, so
    one run lists the problems of every file, not just of the first.
    """
    root = root.resolve()
    problems: list[Problem] = []
    project, project_ok = _check_document(root, Path("kdkit.json"), "kdkit", problems)
    if project is None:
        return problems
    problems += path_problems(root, project, Path("kdkit.json"), {"requirements": True, "pilot_config": True})
    if project_ok:
        for name, spec in project["backends"].items():
            if _inside(root, spec["lock"]) is None:
                problems.append(Problem(Path("kdkit.json"), f"$.backends.{name}.lock",
                                        f"{spec['lock']!r} points outside the project folder"))
        from kdkit.locking import stale_lock_problems

        problems += stale_lock_problems(root, project)

    pilot_rel = _named_file(root, project, "pilot_config")
    if pilot_rel is None:
        return problems
    pilot, pilot_ok = _check_document(root, pilot_rel, "pilot", problems)
    if pilot is None:
        return problems
    problems += path_problems(root, pilot, pilot_rel, {"inputs": True, "manifest": True, "runs": False})
    problems += entry_problems(root, pilot, pilot_rel)

    manifest_rel = _named_file(root, pilot, "manifest")
    if manifest_rel is None:
        return problems
    manifest, manifest_ok = _check_document(root, manifest_rel, "manifest", problems)
    if manifest is not None and manifest_ok:
        categories = pilot.get("categories") if pilot_ok else None
        inputs = _inside(root, pilot["inputs"]) if isinstance(pilot.get("inputs"), str) else None
        problems += manifest_problems(root, manifest, manifest_rel, categories, inputs)
    return problems


def raise_first(problems: list[Problem], *, base: Path | None = None, more_hint: str = "", hint: str = "") -> None:
    """Raise BadInput naming the first problem (and how many follow) when there is any.

    ``base`` prefixes the problem's relative file; ``more_hint`` is added to the count of the
    others (e.g. where to see them all), ``hint`` to the whole line.
    """
    if not problems:
        return
    first = problems[0]
    file = base / first.file if base is not None else first.file
    rest = len(problems) - 1
    more = f" (+{rest} more{'; ' + more_hint if more_hint else ''})" if rest else ""
    raise BadInput(f"{file}: {first.where}: {first.message}{more}{hint}")


def load_valid(path: Path, schema: str, *, what: str, hint: str = "") -> dict[str, Any]:
    """A JSON file checked against ``schemas/<schema>.schema.json``; BadInput naming the first problem."""
    data = load_json(path, what=what)
    raise_first(schema_problems(data, schema, path), hint=hint)
    result: dict[str, Any] = data
    return result
