"""An app's answer checked against the user's JSON Schema (the "json" output kind), standard library
only.

The subset supported, and nothing more:
type (a string or a list of them; "integer" accepts whole floats like 4.0 as JSON Schema does,
booleans are never numbers), enum, const, properties, required, additionalProperties (boolean or
schema), items (a single schema; its list form and prefixItems are not supported), minItems,
maxItems, uniqueItems, minLength, maxLength (in code points), pattern (a Python regular expression
with ``re.search`` semantics: it matches anywhere in the string unless anchored with ``^``/``$``),
minimum, maximum, exclusiveMinimum, exclusiveMaximum (numbers, draft 2020-12 meaning), anyOf, oneOf,
allOf, not; annotation keywords accepted and ignored: $schema, $id, title, description, default,
examples, $comment. A boolean schema is allowed: ``true`` accepts anything, ``false`` nothing.
Everything else (e.g. $ref, $defs, format, if/then/else, patternProperties, dependentRequired,
unevaluatedProperties, contains) is refused by ``schema_problems`` (kdkit.core.schemacheck), never
silently accepted; so is a schema nested deeper than 64 levels. In enum, const and uniqueItems
numbers compare by value (1 equals 1.0) and ``true`` is not ``1``.

``schema_problems`` (kdkit.core.schemacheck) is called once, at the edge, on the user's schema;
:func:`answer_problem` then checks each answer. An answer must be plain JSON nested at most 64
levels deep, whatever the schema; deeper, or holding NaN/Infinity or a non-JSON Python value, it
gets a problem message, never an exception. Messages name a JSON path (``$.tags[2]``); an object key
that is not a plain ASCII name is shown JSON-quoted (control, bidi and non-ASCII characters escaped)
and cut at 64 characters, so a message never carries an answer's raw text. ``pattern`` runs Python's
backtracking ``re``: a pathological pattern can be slow on a long string.
"""

from __future__ import annotations

import json
import math
import operator
import re
from collections.abc import Callable, Iterable
from typing import Any, TypeAlias

MAX_DEPTH = 64
KEY_SHOWN = 64  # characters of an object key shown in a path
TYPES = ("array", "boolean", "integer", "null", "number", "object", "string")
VALIDATION = ("type", "enum", "const", "properties", "required", "additionalProperties", "items",
              "minItems",
              "maxItems", "uniqueItems", "minLength", "maxLength", "pattern", "minimum", "maximum",
              "exclusiveMinimum", "exclusiveMaximum", "anyOf", "oneOf", "allOf", "not")
ANNOTATIONS = frozenset(
    {"$schema", "$id", "title", "description", "default", "examples", "$comment"})
SUPPORTED: frozenset[str] = frozenset(VALIDATION) | ANNOTATIONS

JsonPath: TypeAlias = tuple[Any, ...]  # str keys and int indexes, from the root down
Problem: TypeAlias = tuple[JsonPath, str]
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def render_path(path: JsonPath) -> str:
    """``$``, ``$.name``, ``$.tags[2]``, ``$["odd key"]``."""
    out = ["$"]
    for part in path:
        if isinstance(part, int):
            out.append(f"[{part}]")
        elif isinstance(part, str) and len(part) <= KEY_SHOWN and _NAME.fullmatch(part):
            out.append("." + part)
        else:
            out.append(f"[{_quoted(part)}]")
    return "".join(out)


def _quoted(text: Any) -> str:
    """A string as JSON shows it, ASCII only (so escaped), cut at KEY_SHOWN characters."""
    if not isinstance(text, str):
        return f"<{type(text).__name__}>"
    shown = json.dumps(text[:KEY_SHOWN])
    return shown + "…" if len(text) > KEY_SHOWN else shown


def _shown(value: Any, width: int = 80) -> str:
    """A value of the schema, as compact ASCII JSON, cut at ``width`` characters."""
    try:
        text = json.dumps(value, separators=(", ", ": "), allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return "(a value that cannot be shown)"
    return text if len(text) <= width else text[: width - 1] + "…"


def _message(path: JsonPath, rule: str, limit: int) -> str:
    """``PATH: RULE`` in at most ``limit`` characters: a long path loses its start first."""
    where = render_path(path)
    room = limit - len(rule) - 2
    if len(where) > room:
        where = "$…" + where[len(where) - max(room - 2, 0):] if room > 2 else "$…"
    text = f"{where}: {rule}"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def json_type(value: Any) -> str:
    """The JSON type of a value, "integer" for a whole number (4 and 4.0), "number" for any
    other."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return f"a Python {type(value).__name__} (not JSON)"


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _not_json(document: Any) -> Problem | None:
    """The first place where ``document`` is not plain JSON nested at most MAX_DEPTH levels (no
    recursion)."""
    stack: list[tuple[Any, JsonPath]] = [(document, ())]
    while stack:
        node, path = stack.pop()
        problem = _node_problem(node, len(path))
        if problem is not None:
            return path, problem
        if isinstance(node, dict):
            stack.extend((node[key], (*path, key)) for key in reversed(node))
        elif isinstance(node, list):
            stack.extend((node[i], (*path, i)) for i in range(len(node) - 1, -1, -1))
    return None


def _node_problem(node: Any, depth: int) -> str | None:
    if isinstance(node, (dict, list)) and depth >= MAX_DEPTH:
        return f"nested deeper than {MAX_DEPTH} levels"
    if isinstance(node, dict) and not all(isinstance(key, str) for key in node):
        return "an object key that is not a string (not JSON)"
    if isinstance(node, float) and not math.isfinite(node):
        return "NaN or Infinity is not a JSON number"
    if node is None or isinstance(node, (str, int, float, list, dict)):
        return None
    return f"not a JSON value (a Python {type(node).__name__})"


class _BadSchema(Exception):
    """A schema schema_problems would have refused: raised, so that no ``not`` or ``anyOf`` turns it
    into a pass."""

    def __init__(self, path: JsonPath, text: str) -> None:
        super().__init__(text)
        self.problem: Problem = (path, text)


def answer_problem(value: Any, schema: Any, limit: int = 200) -> str | None:
    """None when ``value`` satisfies ``schema``, else one message of at most ``limit`` (at least 16)
    characters naming the JSON path in the value and the rule it breaks. Never raises, never prints.

    ``schema`` must be one :func:`schema_problems` found nothing in (checked once, at the edge).
    Given another, it still never raises: an unsupported or malformed keyword it reaches is the
    message; but a malformed keyword that does not apply to the value (a string ``minimum``, an
    object) goes unseen.
    """
    limit = max(limit, 16)
    problem = _not_json(value)
    if problem is None:
        try:
            problem = _apply(value, schema, (), 1)
        except _BadSchema as bad:
            problem = bad.problem
        except (TypeError, ValueError, AttributeError, OverflowError,
                RecursionError, re.error) as error:
            problem = ((),
                       f"the schema cannot be applied ({type(error).__name__}); check it with "
                       "schema_problems")
    return None if problem is None else _message(*problem, limit)


def _apply(value: Any, schema: Any, path: JsonPath, depth: int) -> Problem | None:
    if isinstance(schema, bool):
        return None if schema else (path, "no value is allowed here (the schema is false)")
    if not isinstance(schema, dict):
        raise _BadSchema(path,
                         f"the schema here is {json_type(schema)}, not an object or a boolean")
    if depth > MAX_DEPTH:
        raise _BadSchema(path, f"the schema is nested deeper than {MAX_DEPTH} levels")
    # a wrong type first: the clearest message
    for keyword in sorted(schema, key=lambda k: k != "type"):
        if keyword in _VALUE_RULES:
            broken = _VALUE_RULES[keyword](value, schema[keyword])
            if broken is not None:
                return path, broken
        elif keyword in _NESTED_RULES:
            problem = _NESTED_RULES[keyword](value, schema[keyword], schema, path, depth + 1)
            if problem is not None:
                return problem
        elif keyword not in ANNOTATIONS:
            raise _BadSchema(path,
                             f"unsupported keyword {_quoted(keyword)} in the schema (see "
                             "schema_problems)")
    return None


def _key(value: Any) -> Any:
    """A hashable stand-in, equal for equal JSON values: 1 equals 1.0, but true is not 1."""
    if isinstance(value, bool):
        return ("boolean", value)
    if isinstance(value, (int, float)):
        return ("number", value)
    if isinstance(value, list):
        return ("array", tuple(_key(item) for item in value))
    if isinstance(value, dict):
        return ("object", frozenset((name, _key(item)) for name, item in value.items()))
    return (json_type(value), value)


def _type_broken(value: Any, argument: Any) -> str | None:
    names = [argument] if isinstance(argument, str) else list(argument)
    if any(_is_number(value) if name == "number" else json_type(value) == name for name in names):
        return None
    return f"expected {' or '.join(str(name) for name in names)}, got {json_type(value)}"


def _sizes(kind: type[list[Any]] | type[str], keyword: str) -> Callable[[Any, Any], str | None]:
    """minItems / maxItems / minLength / maxLength."""
    unit, fewer = ("items" if kind is list else "characters"), keyword.startswith("min")

    def broken(value: Any, bound: Any) -> str | None:
        if not isinstance(value, kind) \
                or not ((len(value) < bound) if fewer else (len(value) > bound)):
            return None
        return f"{len(value)} {unit}, {'fewer' if fewer else 'more'} than {keyword} {_shown(bound)}"
    return broken


def _bounds(keyword: str,
            holds: Callable[[Any, Any], bool], says: str) -> Callable[[Any, Any], str | None]:
    """minimum / maximum / exclusiveMinimum / exclusiveMaximum."""
    def broken(value: Any, bound: Any) -> str | None:
        return (None if not _is_number(value) or holds(value, bound)
                else f"{says} {keyword} {_shown(bound)}")
    return broken


_VALUE_RULES: dict[str, Callable[[Any, Any], str | None]] = {
    "type": _type_broken,
    "enum": lambda v,
    a: None if _key(v) in {_key(x) for x in a} else f"not one of the enum values {_shown(a)}",
    "const": lambda v, a: None if _key(v) == _key(a) else f"not the const value {_shown(a)}",
    "required": lambda v, a: next((f"missing required property {_quoted(name)}" for name in a
                 if isinstance(v, dict) and name not in v), None),
    "pattern": lambda v, a: (f"does not match the pattern {_quoted(a)}"
           if isinstance(v, str) and re.search(a, v) is None else None),
    "minItems": _sizes(list, "minItems"), "maxItems": _sizes(list, "maxItems"),
    "minLength": _sizes(str, "minLength"), "maxLength": _sizes(str, "maxLength"),
    "minimum": _bounds("minimum", operator.ge, "less than"),
    "maximum": _bounds("maximum", operator.le, "greater than"),
    "exclusiveMinimum": _bounds("exclusiveMinimum", operator.gt, "not greater than"),
    "exclusiveMaximum": _bounds("exclusiveMaximum", operator.lt, "not less than"),
}


def _first(problems: Iterable[Problem | None]) -> Problem | None:
    return next((problem for problem in problems if problem is not None), None)


def _properties(value: Any, argument: Any, schema: dict[str, Any],
                path: JsonPath, depth: int) -> Problem | None:
    if not isinstance(value, dict):
        return None
    return _first(_apply(value[name], sub, (*path, name), depth) for name,
                  sub in argument.items() if name in value)


def _additional(value: Any, argument: Any, schema: dict[str, Any],
                path: JsonPath, depth: int) -> Problem | None:
    if not isinstance(value, dict):
        return None
    known = schema.get("properties")
    extra = [name for name in value if not (isinstance(known, dict) and name in known)]
    if argument is False and extra:
        return (*path, extra[0]), "property not allowed (additionalProperties is false)"
    return _first(_apply(value[name], argument, (*path, name), depth) for name in extra)


def _items(value: Any, argument: Any, schema: dict[str, Any],
           path: JsonPath, depth: int) -> Problem | None:
    if not isinstance(value, list):
        return None
    return _first(_apply(item, argument, (*path, i), depth) for i, item in enumerate(value))


def _unique(value: Any, argument: Any, schema: dict[str, Any],
            path: JsonPath, depth: int) -> Problem | None:
    if argument is True and isinstance(value, list):
        seen: dict[Any, int] = {}
        for i, item in enumerate(value):
            first = seen.setdefault(_key(item), i)
            if first != i:
                return (*path, i), f"a duplicate of item {first} (uniqueItems)"
    return None


def _none_matched(keyword: str, count: int, first: Problem | None) -> str:
    said = "" if first is None else f"; {keyword}[0] says: {_message(*first, 120)}"
    return f"matches none of the {count} schemas of {keyword}{said}"


def _any_of(value: Any, argument: Any, schema: dict[str, Any],
            path: JsonPath, depth: int) -> Problem | None:
    first = _apply(value, argument[0], path, depth)
    if first is None or any(_apply(value, sub, path, depth) is None for sub in argument[1:]):
        return None
    return path, _none_matched("anyOf", len(argument), first)


def _one_of(value: Any, argument: Any, schema: dict[str, Any],
            path: JsonPath, depth: int) -> Problem | None:
    problems = [_apply(value, sub, path, depth) for sub in argument]
    matched = [i for i, problem in enumerate(problems) if problem is None]
    if len(matched) == 1:
        return None
    if not matched:
        return path, _none_matched("oneOf", len(argument), problems[0] if problems else None)
    return path, (f"matches {len(matched)} schemas of oneOf (oneOf[{matched[0]}] and "
                  f"oneOf[{matched[1]}]), not exactly one")


_NESTED_RULES: dict[str, Callable[[Any, Any, dict[str, Any], JsonPath, int], Problem | None]] = {
    "properties": _properties, "additionalProperties": _additional, "items": _items,
    "uniqueItems": _unique,
    "anyOf": _any_of, "oneOf": _one_of,
    "allOf": lambda v, a, s, p, d: _first(_apply(v, sub, p, d) for sub in a),
    "not": lambda v, a, s, p,
    d: (p, 'matches the schema under "not"') if _apply(v, a, p, d) is None else None,
}
