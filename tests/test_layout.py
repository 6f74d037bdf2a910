"""tests/ mirrors kdkit/: each folder of tests is a room of the package, so a change to kdkit/core/staging.py
finds its tests in tests/core/. Only the tests of the tree as a whole sit at the top (docs/architecture.md,
"A new test")."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
KDKIT = TESTS.parent / "kdkit"
TREE_WIDE = {"test_architecture.py", "test_code_shape.py", "test_records.py",
             "test_bench_rented.py", "test_layout.py", "test_wheel.py"}
NOT_TESTS = {"data", "__pycache__"}


def _test_modules() -> list[Path]:
    return sorted(p for p in TESTS.rglob("test_*.py") if not set(p.relative_to(TESTS).parts)
                  & NOT_TESTS)


def test_every_folder_of_tests_is_a_room_of_kdkit() -> None:
    rooms = {p.parent.relative_to(TESTS) for p in _test_modules()} - {Path(".")}
    assert rooms, "no room found: the test looked in the wrong place"
    strangers = sorted(str(room) for room in rooms if not (KDKIT / room / "__init__.py").is_file())
    assert strangers == [], f"folders of tests that are no room of kdkit/: {strangers}"


def test_only_the_tree_wide_tests_sit_at_the_top() -> None:
    top = {p.name for p in TESTS.glob("test_*.py")}
    assert top - TREE_WIDE == set(), f"move these into the room they test: {sorted(top - TREE_WIDE)}"


def test_module_names_are_unique_across_rooms() -> None:
    names = [p.name for p in _test_modules()]
    assert len(names) == len(set(names)), sorted(n for n in set(names) if names.count(n) > 1)


def _bare_imports(path: Path, bare: set[str]) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in bare:
            found.append(f"{path.relative_to(TESTS)}:{node.lineno}: from {node.module}")
        elif isinstance(node, ast.Import):
            found += [f"{path.relative_to(TESTS)}:{node.lineno}: import {a.name}"
                      for a in node.names
                      if a.name.split(".")[0] in bare]
    return found


def test_tests_import_one_another_by_their_full_name() -> None:
    """A bare `from test_lock import ...` works only while pytest has put that room on sys.path first: the
    order of collection decides. `from tests.lock.test_lock import ...` always works."""
    bare = {p.stem for p in _test_modules()} | {p.stem for p in TESTS.glob("*.py")}
    found = [line for p in [*_test_modules(), *TESTS.glob("*.py")]
             for line in _bare_imports(p, bare)]
    assert found == [], found
