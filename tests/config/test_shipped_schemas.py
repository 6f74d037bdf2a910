"""The JSON schemas kdkit ships are valid draft 2020-12 schemas, and each is the one kdkit's checks load.

kdkit.config.schemas builds its validators without checking the schemas again at every command (a meta-schema
pass over each costs tens of milliseconds of `kdkit validate`); this test is that check, once per change.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from kdkit.config.schemas import schema_path

SCHEMAS = sorted(Path(__file__).resolve().parents[2].joinpath("schemas").glob("*.schema.json"))


def test_the_schemas_folder_is_found() -> None:
    assert len(SCHEMAS) >= 10, SCHEMAS


@pytest.mark.parametrize("path", SCHEMAS, ids=lambda path: path.name)
def test_each_shipped_schema_is_a_valid_draft_2020_12_schema(path: Path) -> None:
    schema = json.loads(path.read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    name = path.name.removesuffix(".schema.json")
    # the copy kdkit loads
    assert json.loads(schema_path(name).read_text(encoding="utf-8")) == schema


def test_a_broken_schema_is_caught_by_that_check() -> None:
    with pytest.raises(SchemaError):
        Draft202012Validator.check_schema({"type": "objekt"})
