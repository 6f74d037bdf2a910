"""`kdkit validate` refuses each hostile path a config names (issue 24 §1; the values are
tests/core/test_safe_paths.py's): exit 2, one line for the problem and one for the count, the value shown escaped
when it is not printable ASCII, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import invoke, tree_snapshot
from tests.core.test_safe_paths import CASES, _id, set_key


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_validate_refuses_each_hostile_path_in_one_line(project: Path,
                                                        case: tuple[str, str, str, str]) -> None:
    file, where, _name, value = case
    set_key(project, file, where, value)
    before = tree_snapshot(project)
    result = invoke("validate", project)
    assert result.exit_code == 2, result.output
    # outside git: a tmp folder
    lines = [line for line in result.output.splitlines() if ": git: " not in line]
    assert len(lines) == 2, result.output  # the problem, then the count: each on one line
    assert lines[0].startswith(f"{project}/{file}: {where}: "), result.output
    assert lines[1] == f"Error: {project}: 1 problem(s) found; fix them and run `kdkit validate` again"
    # else shown escaped
    assert value not in result.output or (value.isascii() and value.isprintable())
    assert tree_snapshot(project) == before
