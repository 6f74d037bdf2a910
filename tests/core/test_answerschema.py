"""kdkit/core/answerschema.py and schemacheck.py: the JSON Schema subset an app's answers are
checked against (issue 25).

Each keyword is tried on answers it accepts and answers it refuses, the schema checker on every
keyword it refuses and every malformed value of a keyword it supports; messages are asserted whole.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from kdkit.core.answerschema import SUPPORTED, answer_problem
from kdkit.core.schemacheck import schema_problems

ANNOTATIONS = {"$schema", "$id", "title", "description", "default", "examples", "$comment"}


def nested(depth: int, kind: str = "list") -> Any:
    """A value ``depth`` containers deep, built without recursion."""
    value: Any = 0
    for _ in range(depth):
        value = [value] if kind == "list" else {"a": value}
    return value


# ------------------------------------------------------------------------------------------ SUPPORTED


def test_supported_is_the_subset_and_nothing_more() -> None:
    assert ANNOTATIONS | {
        "type", "enum", "const", "properties", "required", "additionalProperties", "items",
        "minItems",
        "maxItems", "uniqueItems", "minLength", "maxLength", "pattern", "minimum", "maximum",
        "exclusiveMinimum", "exclusiveMaximum", "anyOf", "oneOf", "allOf", "not"} == SUPPORTED


# ------------------------------------------------------------------------------------ schema_problems


GOOD_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "x", "title": "t",
    "description": "d",
    "default": {}, "examples": [{}], "$comment": "c",
    "type": "object", "required": ["label", "tags"], "additionalProperties": False,
    "properties": {
        "label": {"enum": ["cat", "dog"]}, "kind": {"const": "pet"},
        "tags": {"type": "array",
                 "items": {"type": "string", "minLength": 1, "maxLength": 9, "pattern": "^[a-z]+$"},
                 "minItems": 0, "maxItems": 5, "uniqueItems": True},
        "score": {"type": ["number", "null"], "minimum": 0, "maximum": 1.5, "exclusiveMinimum": -1,
                  "exclusiveMaximum": 2},
        "extra": {"anyOf": [{"type": "string"}, True],
                  "oneOf": [{"type": "string"}, {"not": {"type": "string"}}],
                  "allOf": [{}, {"not": False}]},
        "any": True, "none": False,
    },
}


@pytest.mark.parametrize("schema",
                         [GOOD_SCHEMA, True, False, {},
                          {"additionalProperties": {"type": "integer"}},
                          {"minItems": 3.0}, {"type": ["integer"]}, {"required": []}])
def test_a_schema_of_the_subset_has_no_problem(schema: Any) -> None:
    assert schema_problems(schema) == []


@pytest.mark.parametrize("keyword", ["$ref", "$defs", "definitions", "format", "if", "then", "else",
                                     "patternProperties", "dependentRequired", "dependentSchemas",
                                     "unevaluatedProperties", "unevaluatedItems", "contains",
                                     "prefixItems",
                                     "propertyNames", "minProperties",
                                     "multipleOf", "$anchor", "nullable"])
def test_every_other_keyword_is_refused_naming_it_and_the_supported_ones(keyword: str) -> None:
    problems = schema_problems({"type": "object", "properties": {"name": {keyword: {}}}})
    assert len(problems) == 1
    path, message = problems[0]
    assert path == f"$.properties.name[{json.dumps(keyword)}]" if keyword.startswith("$") else \
        path == f"$.properties.name.{keyword}"
    assert message.startswith(
        f"unsupported keyword {json.dumps(keyword)}; supported: type, enum, const,")
    assert all(supported in message for supported in SUPPORTED)


@pytest.mark.parametrize(("schema", "path", "message"), [
    ({"type": "strin"}, "$.type", "must be one of the JSON types"),
    ({"type": ["string", "float"]}, "$.type", "must be one of the JSON types"),
    ({"type": []}, "$.type", "must be one of the JSON types"),
    ({"type": ["string", "string"]}, "$.type", "must be one of the JSON types"),
    ({"type": 3}, "$.type", "must be one of the JSON types"),
    ({"enum": "cat"}, "$.enum", "must be a non-empty list of the values allowed"),
    ({"enum": []}, "$.enum", "must be a non-empty list of the values allowed"),
    ({"required": "name"}, "$.required", "must be a list of distinct property names (strings)"),
    ({"required": ["a", 1]}, "$.required", "must be a list of distinct property names (strings)"),
    ({"required": ["a", "a"]}, "$.required", "must be a list of distinct property names (strings)"),
    ({"properties": []}, "$.properties", "must be an object mapping property names to schemas"),
    ({"properties": {"a": 1}}, "$.properties.a",
     "a schema must be an object or a boolean, not integer"),
    ({"additionalProperties": "no"}, "$.additionalProperties",
     "a schema must be an object or a boolean, not string"),
    ({"items": [{"type": "string"}]}, "$.items",
     "must be one schema (an object or a boolean); the list form"),
    ({"items": None}, "$.items", "a schema must be an object or a boolean, not null"),
    ({"minItems": -1}, "$.minItems", "must be a non-negative integer"),
    ({"maxItems": 1.5}, "$.maxItems", "must be a non-negative integer"),
    ({"minLength": True}, "$.minLength", "must be a non-negative integer"),
    ({"maxLength": "3"}, "$.maxLength", "must be a non-negative integer"),
    ({"uniqueItems": 1}, "$.uniqueItems", "must be true or false"),
    ({"pattern": 5}, "$.pattern", "must be a string (a Python regular expression)"),
    ({"pattern": "["}, "$.pattern",
     "not a valid Python regular expression: unterminated character set"),
    ({"pattern": "a{99999999999}"}, "$.pattern",
     "not a usable Python regular expression (OverflowError)"),
    ({"minimum": "0"}, "$.minimum", "must be a number"),
    ({"maximum": True}, "$.maximum", "must be a number"),
    ({"exclusiveMinimum": True}, "$.exclusiveMinimum",
     "must be a number (draft 2020-12; the boolean form"),
    ({"exclusiveMaximum": None}, "$.exclusiveMaximum", "must be a number (draft 2020-12"),
    ({"anyOf": {}}, "$.anyOf", "must be a non-empty list of schemas"),
    ({"oneOf": []}, "$.oneOf", "must be a non-empty list of schemas"),
    ({"allOf": [True, 3]}, "$.allOf[1]", "a schema must be an object or a boolean, not integer"),
    ({"not": []}, "$.not", "a schema must be an object or a boolean, not array"),
    ("string", "$", "a schema must be an object or a boolean, not string"),
    (None, "$", "a schema must be an object or a boolean, not null"),
    ({"minimum": float("nan")}, "$.minimum", "NaN or Infinity is not a JSON number"),
    ({"enum": [{1: 2}]}, "$.enum[0]", "an object key that is not a string (not JSON)"),
    ({"const": {1, 2}}, "$.const", "not a JSON value (a Python set)"),
])
def test_a_malformed_keyword_value_is_a_problem_at_its_path(
    schema: Any, path: str, message: str) -> None:
    problems = schema_problems(schema)
    assert len(problems) == 1, problems
    assert problems[0][0] == path
    assert problems[0][1].startswith(message)


def test_every_problem_is_listed_with_nested_paths() -> None:
    schema = {"type": "object", "format": "x", "properties": {
        "tags": {"type": "array", "items": {"type": "string", "pattern": "("}},
        "odd key": {"anyOf": [{"type": "intger"}, {"not": {"$ref": "#"}}]}}}
    assert [path for path, _ in schema_problems(schema)] == [
        "$.format", "$.properties.tags.items.pattern", '$.properties["odd key"].anyOf[0].type',
        '$.properties["odd key"].anyOf[1].not["$ref"]']


def test_annotations_are_accepted_with_any_value() -> None:
    assert schema_problems({name: {"anything": [1, None]} for name in ANNOTATIONS}) == []


def test_a_schema_nested_deeper_than_64_levels_is_refused_once() -> None:
    deep: Any = {"type": "string"}
    for _ in range(10_000):
        deep = {"not": deep}
    problems = schema_problems(deep)
    assert len(problems) == 1
    assert problems[0][1] == "nested deeper than 64 levels"
    assert problems[0][0] == "$" + ".not" * 64
    at_limit: Any = {}
    for _ in range(63):
        at_limit = {"not": at_limit}
    assert schema_problems(at_limit) == []
    assert schema_problems({"not": at_limit}) == [
        ("$" + ".not" * 64, "nested deeper than 64 levels")]


def test_a_key_with_control_characters_is_escaped_in_the_path() -> None:
    problems = schema_problems({"properties": {"a\x1b[2J\u202eb": 5}})
    assert problems == [('$.properties["a\\u001b[2J\\u202eb"]',
                         "a schema must be an object or a boolean, not integer")]


# ----------------------------------------------------------------------------------- answer_problem


@pytest.mark.parametrize(("schema", "value", "expected"), [
    # type, one name or several; integer takes whole floats; booleans are never numbers
    ({"type": "string"}, "x", None),
    ({"type": "string"}, 1, "$: expected string, got integer"),
    ({"type": "integer"}, 4, None),
    ({"type": "integer"}, 4.0, None),
    ({"type": "integer"}, -0.0, None),
    ({"type": "integer"}, 1e300, None),
    ({"type": "integer"}, 4.5, "$: expected integer, got number"),
    ({"type": "integer"}, True, "$: expected integer, got boolean"),
    ({"type": "number"}, 4.5, None),
    ({"type": "number"}, 4, None),
    ({"type": "number"}, False, "$: expected number, got boolean"),
    ({"type": "number"}, "4", "$: expected number, got string"),
    ({"type": "boolean"}, True, None),
    ({"type": "boolean"}, 1, "$: expected boolean, got integer"),
    ({"type": "boolean"}, 0.0, "$: expected boolean, got integer"),
    ({"type": "null"}, None, None),
    ({"type": "null"}, 0, "$: expected null, got integer"),
    ({"type": "array"}, [], None),
    ({"type": "array"}, {}, "$: expected array, got object"),
    ({"type": "object"}, {}, None),
    ({"type": "object"}, [], "$: expected object, got array"),
    ({"type": ["string", "null"]}, None, None),
    ({"type": ["string", "null"]}, 2.5, "$: expected string or null, got number"),
    # enum and const: JSON equality (1 == 1.0, true is not 1, objects ignore key order)
    ({"enum": ["cat", "dog"]}, "dog", None),
    ({"enum": ["cat", "dog"]}, "cow", '$: not one of the enum values ["cat", "dog"]'),
    ({"enum": [1, 2]}, 1.0, None),
    ({"enum": [1, 2]}, True, "$: not one of the enum values [1, 2]"),
    ({"enum": [True]}, 1, "$: not one of the enum values [true]"),
    ({"enum": [None]}, None, None),
    ({"enum": [{"a": [1, 2], "b": None}]}, {"b": None, "a": [1.0, 2]}, None),
    ({"enum": [[1, 2]]}, [2, 1], "$: not one of the enum values [[1, 2]]"),
    ({"const": "pet"}, "pet", None),
    ({"const": "pet"}, "pets", '$: not the const value "pet"'),
    ({"const": 0}, False, "$: not the const value 0"),
    ({"const": 0}, 0.0, None),
    ({"const": {"a": 1}}, {"a": 1, "b": 2}, '$: not the const value {"a": 1}'),
    # required, properties, additionalProperties
    ({"required": ["a", "b"]}, {"a": 1, "b": None}, None),
    ({"required": ["a", "b"]}, {"a": 1}, '$: missing required property "b"'),
    ({"required": ["a"]}, [1], None),
    ({"properties": {"a": {"type": "string"}}}, {"a": "x", "b": 1}, None),
    ({"properties": {"a": {"type": "string"}}}, {"b": 1}, None),
    ({"properties": {"a": {"type": "string"}}}, {"a": 1}, "$.a: expected string, got integer"),
    ({"properties": {"a": {"type": "string"}}}, "not an object", None),
    ({"properties": {"a": {}}, "additionalProperties": False}, {"a": 1}, None),
    ({"properties": {"a": {}}, "additionalProperties": False}, {"a": 1, "b": 2},
     "$.b: property not allowed (additionalProperties is false)"),
    ({"additionalProperties": False}, {}, None),
    ({"additionalProperties": True}, {"z": 1}, None),
    ({"properties": {"a": {}}, "additionalProperties": {"type": "integer"}},
     {"a": "x", "b": 2, "c": 3}, None),
    ({"properties": {"a": {}}, "additionalProperties": {"type": "integer"}}, {"a": "x", "b": 2.5},
     "$.b: expected integer, got number"),
    # items, minItems, maxItems, uniqueItems
    ({"items": {"type": "string"}}, ["a", "b"], None),
    ({"items": {"type": "string"}}, ["a", "b", 3], "$[2]: expected string, got integer"),
    ({"items": False}, [], None),
    ({"items": False}, [1], "$[0]: no value is allowed here (the schema is false)"),
    ({"items": {"type": "string"}}, "abc", None),
    ({"minItems": 2}, [1, 2], None),
    ({"minItems": 2}, [1], "$: 1 items, fewer than minItems 2"),
    ({"minItems": 2}, "a", None),
    ({"maxItems": 1}, [1], None),
    ({"maxItems": 1}, [1, 2], "$: 2 items, more than maxItems 1"),
    ({"uniqueItems": True}, [1, "1", True, None, [1], {"a": 1}], None),
    ({"uniqueItems": True}, [1, 2, 1.0], "$[2]: a duplicate of item 0 (uniqueItems)"),
    ({"uniqueItems": True},
     [{"a": 1, "b": 2}, {"b": 2, "a": 1}], "$[1]: a duplicate of item 0 (uniqueItems)"),
    ({"uniqueItems": False}, [1, 1], None),
    # minLength, maxLength (code points), pattern (re.search)
    ({"minLength": 2}, "ab", None),
    ({"minLength": 2}, "a", "$: 1 characters, fewer than minLength 2"),
    ({"minLength": 2}, "😀😀", None),
    ({"maxLength": 2}, "😀😀", None),
    ({"maxLength": 2}, "abc", "$: 3 characters, more than maxLength 2"),
    ({"maxLength": 2}, 12345, None),
    ({"pattern": "b"}, "abc", None),
    ({"pattern": "^b"}, "abc", '$: does not match the pattern "^b"'),
    ({"pattern": "^[a-z]+$"}, "abc\n", None),  # $ before a final newline, as re.search has it
    ({"pattern": "^[a-z]+\\Z"}, "abc\n", '$: does not match the pattern "^[a-z]+\\\\Z"'),
    ({"pattern": "x"}, 5, None),
    # minimum, maximum, exclusiveMinimum, exclusiveMaximum
    ({"minimum": 1}, 1, None),
    ({"minimum": 1}, 0.5, "$: less than minimum 1"),
    ({"maximum": 1.5}, 1.5, None),
    ({"maximum": 1.5}, 2, "$: greater than maximum 1.5"),
    ({"exclusiveMinimum": 0}, 0.001, None),
    ({"exclusiveMinimum": 0}, 0, "$: not greater than exclusiveMinimum 0"),
    ({"exclusiveMaximum": 1}, 0.999, None),
    ({"exclusiveMaximum": 1}, 1.0, "$: not less than exclusiveMaximum 1"),
    ({"minimum": 5}, True, None),  # a boolean is not a number: the bound does not apply
    ({"minimum": 5}, "1", None),
    ({"maximum": 2**53}, 2**53 + 1, "$: greater than maximum 9007199254740992"),
    # anyOf, oneOf, allOf, not
    ({"anyOf": [{"type": "string"}, {"type": "null"}]}, None, None),
    ({"anyOf": [{"type": "string"}, {"type": "null"}]}, 1,
     "$: matches none of the 2 schemas of anyOf; anyOf[0] says: $: expected string, got integer"),
    ({"oneOf": [{"type": "integer"}, {"type": "string"}]}, "a", None),
    ({"oneOf": [{"type": "integer"}, {"minimum": 1}]}, 0, None),
    ({"oneOf": [{"type": "integer"}, {"minimum": 1}]}, 3,
     "$: matches 2 schemas of oneOf (oneOf[0] and oneOf[1]), not exactly one"),
    ({"oneOf": [{"type": "integer"}, {"type": "string"}]}, None,
     "$: matches none of the 2 schemas of oneOf; oneOf[0] says: $: expected integer, got null"),
    ({"allOf": [{"type": "integer"}, {"minimum": 1}]}, 2, None),
    ({"allOf": [{"type": "integer"}, {"minimum": 1}]}, 0, "$: less than minimum 1"),
    ({"not": {"type": "string"}}, 1, None),
    ({"not": {"type": "string"}}, "a", '$: matches the schema under "not"'),
    # boolean schemas, annotations, the empty schema
    (True, {"anything": [1, None]}, None),
    (False, None, "$: no value is allowed here (the schema is false)"),
    ({}, [1, "a"], None),
    ({"title": "t", "description": "d", "default": 1, "examples": [], "$comment": "c", "$id": "i",
      "$schema": "s"}, "x", None),
])
def test_each_keyword_accepts_and_refuses(schema: Any, value: Any, expected: str | None) -> None:
    assert schema_problems(schema) == []
    assert answer_problem(value, schema) == expected


def test_a_wrong_type_is_named_before_other_rules_whatever_the_order() -> None:
    assert answer_problem(5, {"minimum": 10, "type": "string"}) == "$: expected string, got integer"


def test_nested_paths_name_the_place_in_the_value() -> None:
    assert answer_problem(
        GOOD_SCHEMA["examples"][0], GOOD_SCHEMA) == '$: missing required property "label"'
    answer = {"label": "cat", "tags": ["ok", "Bad"]}
    assert answer_problem(answer, GOOD_SCHEMA) == '$.tags[1]: does not match the pattern "^[a-z]+$"'
    assert answer_problem({"label": "cat", "tags": [], "score": True}, GOOD_SCHEMA) == \
        "$.score: expected number or null, got boolean"
    assert answer_problem({"label": "cat", "tags": [], "none": 1}, GOOD_SCHEMA) == \
        "$.none: no value is allowed here (the schema is false)"
    assert answer_problem(
        {"label": "cat", "tags": [], "score": 0.5, "any": [{}]}, GOOD_SCHEMA) is None
    deep = {"properties": {"a b": {"items": {"properties": {"c": {"type": "string"}}}}}}
    assert answer_problem(
        {"a b": [{"c": "x"}, {"c": 1}]}, deep) == '$["a b"][1].c: expected string, got integer'


def test_an_odd_key_of_the_answer_is_escaped_and_cut_in_the_message() -> None:
    schema = {"additionalProperties": False}
    message = answer_problem({"\x1b]0;pwned\x07\u202e": 1}, schema)
    assert message == '$["\\u001b]0;pwned\\u0007\\u202e"]: property not allowed (additionalProperties is false)'
    long_key = "k" * 1000
    message = answer_problem({long_key: 1}, schema)
    assert message == f'$["{"k" * 64}"…]: property not allowed (additionalProperties is false)'


def test_the_message_fits_the_limit_and_keeps_the_rule() -> None:
    schema = {"items": {"items": {"items": {"properties": {"x" * 60: {"type": "string"}}}}}}
    value = [[[{"x" * 60: 1}]]]
    full = answer_problem(value, schema, limit=1000)
    assert full == f"$[0][0][0].{'x' * 60}: expected string, got integer"
    short = answer_problem(value, schema, limit=60)
    assert short is not None and len(short) <= 60 and short.endswith(
        ": expected string, got integer")
    assert short.startswith("$…")
    tiny = answer_problem(value, schema, limit=1)
    assert tiny is not None and 0 < len(tiny) <= 16


@pytest.mark.parametrize("kind", ["list", "dict"])
def test_a_10000_deep_answer_is_a_problem_not_a_crash(kind: str) -> None:
    value = nested(10_000, kind)
    for schema in (True, {}, {"type": ["array", "object"]}, {"items": {"items": {}}},
                   {"properties": {"a": {"properties": {"a": {}}}}}, {"uniqueItems": True},
                   {"enum": [1]}):
        message = answer_problem(value, schema)
        assert message is not None and message.endswith(": nested deeper than 64 levels"), message


def test_an_answer_of_64_levels_is_checked_and_65_is_refused() -> None:
    assert answer_problem(nested(64), {"type": "array"}) is None
    assert answer_problem(nested(64, "dict"), {"const": nested(64, "dict")}) is None
    assert answer_problem(nested(65),
                          True, limit=400) == "$" + "[0]" * 64 + ": nested deeper than 64 levels"


@pytest.mark.parametrize(("value", "message"), [
    (float("nan"), "$: NaN or Infinity is not a JSON number"),
    ([1, float("inf")], "$[1]: NaN or Infinity is not a JSON number"),
    ({"a": {1: 2}}, "$.a: an object key that is not a string (not JSON)"),
    ({"a": (1, 2)}, "$.a: not a JSON value (a Python tuple)"),
    (b"bytes", "$: not a JSON value (a Python bytes)"),
])
def test_a_value_that_is_not_json_is_a_problem(value: Any, message: str) -> None:
    assert answer_problem(value, True) == message


@pytest.mark.parametrize(("schema", "value"), [
    ({"format": "email"}, "x"), ({"minimum": "3"}, 5), ({"type": 5}, 5), ({"pattern": "["}, "x"),
    ({"enum": 5}, 1),
    ({"items": [{}]}, [1]), ({"properties": [1]}, {"a": 1}), ({"anyOf": 7}, 1), ("schema", 1),
    ({"const": {1}}, 1),
    (nested(5_000, "dict"), {"a": 1}), ({"not": {"format": "email"}}, "x"),
    ({"not": {"not": {"not": "x"}}}, 1),
    ({"anyOf": [{"$ref": "#"}, {"type": "string"}]}, 1), ({"oneOf": [{"$ref": "#"}]}, 1),
    ({"allOf": [{"not": {"not": {"$ref": "#"}}}]}, 1),
])
def test_an_unchecked_bad_schema_that_applies_gives_a_message_never_an_exception(
    schema: Any, value: Any) -> None:
    message = answer_problem(value, schema)
    assert isinstance(message, str) and message.startswith("$"), message


def test_a_malformed_keyword_that_does_not_apply_to_the_value_is_not_seen_without_schema_problems() -> None:
    """The documented contract: schema_problems, once, is what refuses a bad schema."""
    assert schema_problems({"minimum": "3"}) == [("$.minimum", "must be a number")]
    assert answer_problem({"a": 1}, {"minimum": "3"}) is None


def test_a_schema_deeper_than_64_levels_is_reported_by_answer_problem_too() -> None:
    deep: Any = {}
    for _ in range(200):
        deep = {"not": {"not": deep}}
    for schema in (deep, {"not": deep}):  # a "not" never turns the refusal into a pass
        assert answer_problem(1, schema) == "$: the schema is nested deeper than 64 levels"


def test_answer_problem_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    answer_problem(nested(10_000), {"type": "string"})
    answer_problem({"a": 1}, {"$ref": "#"})
    assert capsys.readouterr() == ("", "")
