"""What one key of the pilot config may hold (:class:`Rule`), and the checks that judge a value by
it.

The pilot config's model (kdkit.core.pilotconfig.FIELDS, kdkit.core.pilotkeys' nested keys) is made
of these rules; `kdkit validate` and the pilot judge with the same functions. Standard library only.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from kdkit.core.projectfiles import CONTROL_CHARACTER, config_path_problem, shown

JSON_TYPE = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array",
             dict: "object",
             type(None): "null"}
Problems = list[tuple[str, str]]  # (JSON path, message)


@dataclass(frozen=True)
class Rule:
    """What one key of the pilot config may hold."""

    # path | string | integer | number | categories | object | inputs (a path or an object)
    kind: str
    required: bool = True
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    nullable: bool = False
    pattern: re.Pattern[str] | None = None
    hint: str = ""


def value_shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:40] + "..."


WANTED: dict[str, tuple[type, ...]] = {"path": (str,), "string": (str,), "categories": (list,),
                                       "object": (dict,),
                                       "integer": (int,), "number": (int, float),
                                       "inputs": (str, dict)}
EXPECTED = {"path": "string",
            "categories": "array", "inputs": "string (a folder) or object ({\"jsonl\": ...})"}


def kind_problem(rule: Rule, value: Any) -> str | None:
    """The type problem of ``value`` under ``rule``, or None. Whole-valued floats (4.0) are
    integers, as in JSON Schema; booleans are never numbers."""
    if value is None and rule.nullable:
        return None
    fits = isinstance(value, WANTED[rule.kind]) and not isinstance(value, bool)
    if rule.kind == "integer" and isinstance(value, float) and value.is_integer():
        fits = True
    if fits:
        return None
    expected = EXPECTED.get(rule.kind, rule.kind)
    return (
        f"expected {expected}{' or null' if rule.nullable else ''}, got {type(value).__name__} "
        f"{value_shown(value)}")


def range_problem(rule: Rule, value: float) -> str | None:
    low = rule.minimum is not None and (value <= rule.minimum if rule.exclusive_minimum
                                        else value < rule.minimum)
    high = rule.maximum is not None and value > rule.maximum
    if not (low or high):
        return None
    bounds = [f"{'>' if rule.exclusive_minimum else '>='} {rule.minimum:g}"
              if rule.minimum is not None else "",
              f"<= {rule.maximum:g}" if rule.maximum is not None else ""]
    return f"{value:g} is out of range; use a value {' and '.join(b for b in bounds if b)}" + \
        (" (or null for no limit)" if rule.nullable else "")


def categories_problem(value: list[Any]) -> str | None:
    if not value or not all(isinstance(c, str) and c for c in value) \
            or len(set(value)) != len(value):
        return "expected a non-empty list of distinct, non-empty strings"
    bad = next((c for c in value if CONTROL_CHARACTER.search(c)), None)  # no category breaks a line
    return (None if bad is None
            else f"the category {shown(bad)} holds a control character or a line break; "
            "write it on one line")


def value_problem(rule: Rule, value: Any) -> str | None:
    """Why ``value`` does not keep ``rule`` (type, range, path, pattern), or None. An object (and
    the object form of ``inputs``) is judged here by its type only: its keys are the nested rules'
    (kdkit.core.pilotkeys)."""
    problem = kind_problem(rule, value)
    if problem is not None or value is None or isinstance(value, dict):
        return problem
    if rule.kind in ("integer", "number"):
        return range_problem(rule, value)
    if rule.kind in ("path", "inputs"):
        return config_path_problem(value)
    if rule.kind == "categories":
        return categories_problem(value)
    if isinstance(value, str) and CONTROL_CHARACTER.search(value):
        return f"{shown(value)} holds a control character or a line break; write it on one line"
    if rule.pattern is not None and not rule.pattern.fullmatch(value):
        text = repr(value) if len(value) <= 60 else repr(value[:60]) + "..."
        return f"{text} is not {rule.hint}" if rule.hint.startswith('"') else f"{text}; {rule.hint}"
    return None


def object_problems(data: dict[str, Any], fields: dict[str, Rule], where: str,
                    what: str = "") -> Problems:
    """Unknown keys, missing required keys, then each key's value, in ``fields``' order. ``what``
    qualifies the object in messages (e.g. 'for output kind "text"')."""
    problems = []
    unknown = sorted(set(data) - set(fields))
    if unknown:
        allowed = ", ".join(k for k in sorted(fields) if not k.startswith("$"))
        problems.append((where,
                         f"unknown key {', '.join(repr(k) for k in unknown)}{what}; allowed keys: "
                         f"{allowed} (a typo?)"))
    missing = [k for k, rule in fields.items() if rule.required and k not in data]
    if missing:
        problems.append(
            (where, f"missing required key {', '.join(repr(k) for k in missing)}{what}; add it"))
    for key, rule in fields.items():
        if key in data and (problem := value_problem(rule, data[key])) is not None:
            problems.append((f"{where}.{key}", problem))
    return problems
