"""The user's JSON Schema checked once, at the edge, before any answer is checked against it
(:func:`schema_problems`): every keyword outside the subset kdkit.core.answerschema supports is
refused, never ignored, and every malformed value of a supported one found, by JSON path in the
schema. Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from kdkit.core.answerschema import (
    ANNOTATIONS,
    TYPES,
    VALIDATION,
    JsonPath,
    Problem,
    _is_number,
    _not_json,
    _quoted,
    json_type,
    render_path,
)


def _unsupported(keyword: Any) -> str:
    return (f"unsupported keyword {_quoted(keyword)}; supported: {', '.join(VALIDATION)}, "
            f"and the annotations {', '.join(sorted(ANNOTATIONS))} (ignored)")


def schema_problems(schema: Any) -> list[tuple[str, str]]:
    """Every problem of a schema document, as (JSON path in the schema, message); [] when it is
    usable.

    A document that is not plain JSON within 64 levels gets that one problem only.
    """
    problem = _not_json(schema)
    if problem is not None:
        return [(render_path(problem[0]), problem[1])]
    return [(render_path(path), message) for path, message in _check_schema(schema, ())]


def _check_schema(schema: Any, path: JsonPath) -> list[Problem]:
    if isinstance(schema, bool):
        return []
    if not isinstance(schema, dict):
        return [(path, f"a schema must be an object or a boolean, not {json_type(schema)}")]
    problems: list[Problem] = []
    for keyword, argument in schema.items():
        where = (*path, keyword)
        if keyword in _PLAIN_ARGUMENTS:
            valid, needed = _PLAIN_ARGUMENTS[keyword]
            problems.extend([] if valid(argument) else [(where, needed)])
        elif keyword in _SCHEMA_ARGUMENTS:
            problems.extend(_SCHEMA_ARGUMENTS[keyword](argument, where))
        elif keyword not in ANNOTATIONS:
            problems.append((where, _unsupported(keyword)))
    return problems


def _distinct(argument: Any, kinds: tuple[str, ...]) -> bool:
    """A list of distinct strings, each one of ``kinds`` (any string when empty)."""
    return (isinstance(argument, list)
            and all(isinstance(a, str) and (not kinds or a in kinds) for a in argument)
            and len(set(argument)) == len(argument))


def _check_pattern(argument: Any, where: JsonPath) -> list[Problem]:
    if not isinstance(argument, str):
        return [(where, "must be a string (a Python regular expression)")]
    try:
        re.compile(argument)
    except re.error as error:
        return [(where, f"not a valid Python regular expression: {error}")]
    except (OverflowError, RecursionError, ValueError) as error:
        return [(where, f"not a usable Python regular expression ({type(error).__name__})")]
    return []


def _check_properties(argument: Any, where: JsonPath) -> list[Problem]:
    if not isinstance(argument, dict):
        return [(where, "must be an object mapping property names to schemas")]
    return [problem for name,
            sub in argument.items() for problem in _check_schema(sub, (*where, name))]


def _check_subschema(argument: Any, where: JsonPath) -> list[Problem]:
    if where[-1] == "items" and isinstance(argument, list):
        return [(where,
                 "must be one schema (an object or a boolean); the list form (and prefixItems) "
                 "is not supported")]
    return _check_schema(argument, where)


def _check_schema_list(argument: Any, where: JsonPath) -> list[Problem]:
    if not isinstance(argument, list) or not argument:
        return [(where, "must be a non-empty list of schemas")]
    return [problem for i,
            sub in enumerate(argument) for problem in _check_schema(sub, (*where, i))]


_COUNT = (lambda a: json_type(a) == "integer" and a >= 0, "must be a non-negative integer")
_BOUND = (_is_number, "must be a number")
_EXCLUSIVE = (
    (_is_number, "must be a number (draft 2020-12; the boolean form of draft 4 is not supported)"))
_PLAIN_ARGUMENTS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "type": (lambda a: _distinct(a if isinstance(a, list) else [a], TYPES) and a != [],
             f"must be one of the JSON types ({', '.join(TYPES)}) or a non-empty list of distinct "
             "ones"),
    "enum": (lambda a: isinstance(a, list)
             and a != [], "must be a non-empty list of the values allowed"),
    "const": (lambda a: True, ""),  # any JSON value: _not_json has checked it is one
    "required": (lambda a: _distinct(a, ()), "must be a list of distinct property names (strings)"),
    "uniqueItems": (lambda a: isinstance(a, bool), "must be true or false"),
    "minItems": _COUNT, "maxItems": _COUNT, "minLength": _COUNT, "maxLength": _COUNT,
    "minimum": _BOUND, "maximum": _BOUND, "exclusiveMinimum": _EXCLUSIVE,
    "exclusiveMaximum": _EXCLUSIVE,
}
_SCHEMA_ARGUMENTS: dict[str, Callable[[Any, JsonPath], list[Problem]]] = {
    "properties": _check_properties, "additionalProperties": _check_subschema,
    "items": _check_subschema,
    "not": _check_subschema, "anyOf": _check_schema_list, "oneOf": _check_schema_list,
    "allOf": _check_schema_list, "pattern": _check_pattern,
}
