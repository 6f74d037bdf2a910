"""JSON documents against kdkit's schemas, and the problems a config file has.

A config problem (:func:`config_problem`, a kdkit.core.finding.Finding) names the file (relative to
the project root), the JSON path and what to do; it is redacted where it is made, so no finding can
show a credential. :func:`load_valid` reads a JSON
file and refuses it, naming its first problem, unless it matches ``schemas/<name>.schema.json``.
:func:`secret_problems` finds credential shapes in a document. Below `kdkit validate` (which
orchestrates every rule of a project) and below everything that loads a checked file (catalog,
pairings, orders, kdkit.json, locks), so none of them imports the project-wide rules.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

from kdkit.config.shipped import schema_path
from kdkit.core.credentials import SECRET_NAME, find, redact
from kdkit.core.errors import BadInput
from kdkit.core.finding import Finding
from kdkit.core.jsonio import load_json
from kdkit.core.projectfiles import CONTROL_CHARACTER, config_path_problem, shown

ENV_HINT = ".env (see .env.example), passed at run time with --env-file"


def config_problem(file: Path, where: str, message: str, verdict: str = "fail") -> Finding:
    """One problem of a config file, a finding of the ``config`` section: its name is the JSON path
    checked (``$.inputs``, ``line 3``), its place the file (relative to the project root), its why
    what to do. The file, the path and the message are redacted here, once: whatever a rule or
    jsonschema echoes, whatever a file is named, no problem can carry a credential shape."""
    return Finding("config", redact(where), None, None, "", None, verdict, redact(message),
                   where=redact(str(file)))


def config_warning(file: Path, where: str, message: str) -> Finding:
    """A config finding that leaves the project valid (`kdkit validate` says it, exit 0)."""
    return config_problem(file, where, message, "warn")


def problem_line(problem: Finding, base: Path | None = None) -> str:
    """``file: JSON path: what to do``, the file under ``base`` when given: how a config problem is
    said on one line."""
    file = base / (problem.where or "") if base is not None else problem.where
    return f"{file}: {problem.name}: {problem.why}"


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
    return (pattern[:-1] + r"\Z" if pattern.endswith("$") and not pattern.endswith(r"\$")
            else pattern)


def _project_path(validator: Any, format: str, instance: Any, schema: Any) -> Any:
    """JSON Schema's ``format``, asserted for ``"project-path"``: a path a config names, held to the
    one rule of kdkit.core.projectfiles (the pilot config's model and every reader of such a path
    apply it too). Other formats stay annotations, as draft 2020-12 says."""
    from jsonschema.exceptions import ValidationError

    if format == "project-path" and isinstance(instance, str) \
            and (problem := config_path_problem(instance)):
        yield ValidationError(problem)


@cache
def _validator(name: str) -> Any:
    from jsonschema import Draft202012Validator, validators

    with schema_path(name).open(encoding="utf-8") as handle:
        # a valid draft 2020-12 schema: tests/config/test_shipped_schemas.py checks each
        schema = json.load(handle)
    strict = validators.extend(Draft202012Validator,
                               {"pattern": _whole_pattern, "format": _project_path})
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
        return f"{json.dumps(value)} does not match {error.validator_value}" + (
            f" ({hint})" if hint else "")
    return f"{error.message}"


# Records kdkit writes (an order, a bundle's bundle.json) quote what they found, file names
# included, and are checked for their shape only; the one-line rule is for the configs a person
# writes.
RECORDS = frozenset({"order", "bundle"})
# Free text a config may hold across lines: a manifest entry's expected output (a generation's
# reference text keeps its line breaks and is compared exactly; it is data, shown escaped, never a
# command line or a file name).
FREE_TEXT = {"manifest": re.compile(r"\$\.documents\[\d+\]\.expected(?:[.\[]|$)")}


def schema_problems(data: Any, schema: str, file: Path) -> list[Finding]:
    """Every schema violation of ``data``, ordered by place in the document, then, in a config (not
    one of RECORDS), every string of it (key or value) that breaks a line or holds a control
    character (:func:`line_problems`), where nothing else is said."""
    errors = sorted(_validator(schema).iter_errors(data),
                    key=lambda e: [str(p) for p in e.absolute_path])
    problems = [config_problem(file, json_path(e.absolute_path), _describe(e)) for e in errors]
    if schema in RECORDS:
        return problems
    said = {problem.name for problem in problems}
    free = FREE_TEXT.get(schema)
    return problems + [problem for problem in line_problems(data, file) if problem.name not in said
                       and not (free is not None and free.match(problem.name))]


def line_problems(data: Any, file: Path) -> list[Finding]:
    """Each string of a config that holds a line break or a control character (tab too): a config
    value reaches command lines, file names and one-line messages, where such a character ends the
    line or steers the terminal (``"cpu.txt\\n--index-url http:"``). One rule for every key, in
    every schema."""
    problems = []
    for parts, key, value in walk_document(data):
        for text, what in ((key, "key"), (value, "value")):
            if isinstance(text, str) and CONTROL_CHARACTER.search(text):
                problems.append(config_problem(file,
                                               json_path(parts),
                                               f"the {what} {shown(text)} holds a control "
                                               "character or a line break; write it on one line"))
    return problems


# ---------------------------------------------------------------- secrets in a document


def walk_document(data: Any,
                  parts: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any, Any]]:
    """Yield (path, key, value) for every value in a JSON document."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield (*parts, key), key, value
            yield from walk_document(value, (*parts, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield (*parts, index), index, value
            yield from walk_document(value, (*parts, index))


def secret_problems(data: Any, file: Path) -> list[Finding]:
    """Keys named like a secret with a value, and values holding a credential shape, in a JSON
    document. A number or a boolean is a setting, never a credential: ``"max_new_tokens": 60``,
    ``"use_auth": true``."""
    problems = []
    for parts, key, value in walk_document(data):
        if isinstance(key, str) and SECRET_NAME.search(key) and value not in (None, "", [], {}) \
                and not isinstance(value, (bool, int, float)):
            problems.append(
                config_problem(file,
                               json_path(parts),
                               f"key {key!r} looks like a secret; secrets go in .env "
                               "(see .env.example) and reach the container with `kdkit run "
                               "--env-file`")
            )
        elif isinstance(value, str) and (found := find(value)):
            problems.append(
                config_problem(file,
                               json_path(parts),
                               f"value looks like {found[0].what}; remove it and put it in "
                               f"{ENV_HINT} (the value reads {shown_redacted(value)})")
            )
    return problems


def shown_redacted(text: str, limit: int = 120) -> str:
    """``text`` redacted, then shortened: a prefix of a redacted text holds no secret either."""
    shown = redact(text.strip())
    return repr(shown if len(shown) <= limit else shown[:limit] + "…")


def raise_first(problems: list[Finding], *, base: Path | None = None, more_hint: str = "",
                hint: str = "") -> None:
    """Raise BadInput naming the first problem (and how many follow) when there is any.

    ``base`` prefixes the problem's relative file; ``more_hint`` is added to the count of the
    others (e.g. where to see them all), ``hint`` to the whole line.
    """
    if not problems:
        return
    rest = len(problems) - 1
    more = f" (+{rest} more{'; ' + more_hint if more_hint else ''})" if rest else ""
    raise BadInput(f"{problem_line(problems[0], base)}{more}{hint}")


def load_valid(path: Path, schema: str, *, what: str, hint: str = "") -> dict[str, Any]:
    """A JSON file checked against ``schemas/<schema>.schema.json``; BadInput naming the first
    problem."""
    data = load_json(path, what=what)
    raise_first(schema_problems(data, schema, path), hint=hint)
    result: dict[str, Any] = data
    return result
