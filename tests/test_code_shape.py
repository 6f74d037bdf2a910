"""The size rules of docs/architecture.md, over every module of kdkit: a module fits in 400 lines, a
function in 50 (its def line to its last), and no function nests compound statements deeper than 4."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "kdkit"
MODULE_LINES, FUNCTION_LINES, NESTING = 400, 50, 4
COMPOUND = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.Match)
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
SOURCES = sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def nesting(node: ast.AST, depth: int = 0) -> int:
    """How deep compound statements nest inside ``node``; a nested function or class counts on its own."""
    deepest = depth
    for child in ast.iter_child_nodes(node):
        if isinstance(child, SCOPES):
            continue
        deepest = max(deepest, nesting(child, depth + isinstance(child, COMPOUND)))
    return deepest


def shape_problems(path: Path, name: str) -> list[str]:
    text = path.read_text(encoding="utf-8")
    problems = []
    if (lines := len(text.splitlines())) > MODULE_LINES:
        problems.append(f"{name}: {lines} lines (at most {MODULE_LINES})")
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > FUNCTION_LINES:
                problems.append(f"{name}:{node.lineno} {node.name}: {length} lines (at most {FUNCTION_LINES})")
            if (depth := nesting(node)) > NESTING:
                problems.append(f"{name}:{node.lineno} {node.name}: nests {depth} deep (at most {NESTING})")
    return problems


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_module_functions_and_nesting_fit_the_rules(path: Path) -> None:
    assert shape_problems(path, path.relative_to(PACKAGE.parent).as_posix()) == []


def test_the_rules_see_a_long_function_and_deep_nesting(tmp_path: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(50))
    deep = "def deep(a):\n    if a:\n        for b in a:\n            while b:\n                with b:\n" \
           "                    try:\n                        pass\n                    finally:\n" \
           "                        pass\n"
    source = tmp_path / "shapes.py"
    source.write_text(f"def long():\n{body}\n\n{deep}" + "\n" * 400, encoding="utf-8")
    assert shape_problems(source, "shapes.py") == ["shapes.py: 462 lines (at most 400)",
                                                   "shapes.py:1 long: 51 lines (at most 50)",
                                                   "shapes.py:54 deep: nests 5 deep (at most 4)"]
