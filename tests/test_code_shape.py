"""The size rules of docs/architecture.md, over every module of kdkit: a module fits in 400 lines, a
function in 50 (its def line to its last), and no function nests compound statements deeper than 4;
and its prose (comments and docstrings) fits in 100 columns."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "kdkit"
MODULE_LINES, FUNCTION_LINES, NESTING, PROSE_WIDTH = 400, 50, 4, 100
# its place is its line: it cannot move above
DIRECTIVE = re.compile(r"#\s*(noqa|type:\s*ignore|pragma)")
BULLET = re.compile(r"\s*([-*] |\d+\. )")
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
                problems.append(
                    f"{name}:{node.lineno} {node.name}: {length} lines (at most {FUNCTION_LINES})")
            if (depth := nesting(node)) > NESTING:
                problems.append(
                    f"{name}:{node.lineno} {node.name}: nests {depth} deep (at most {NESTING})")
    return problems


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_module_functions_and_nesting_fit_the_rules(path: Path) -> None:
    assert shape_problems(path, path.relative_to(PACKAGE.parent).as_posix()) == []


def test_the_rules_see_a_long_function_and_deep_nesting(tmp_path: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(50))
    deep = ("def deep(a):\n    if a:\n        for b in a:\n            while b:\n                "
            "with b:\n                    try:\n                        pass\n                    "
            "finally:\n                        pass\n")
    source = tmp_path / "shapes.py"
    source.write_text(f"def long():\n{body}\n\n{deep}" + "\n" * 400, encoding="utf-8")
    assert shape_problems(source, "shapes.py") == ["shapes.py: 462 lines (at most 400)",
                                                   "shapes.py:1 long: 51 lines (at most 50)",
                                                   "shapes.py:54 deep: nests 5 deep (at most 4)"]


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _verbatim(lines: list[str], first: int, last: int, base: int) -> set[int]:
    """The lines of a docstring (numbered from 1) shown as they are written, so free to run long: a
    click ``\\b`` block, a line naming a URL, and a block indented under a line that ends with ":"
    or follows a blank line (an example). A bullet's hanging lines are prose."""
    kept, block = set(), False
    for number in range(first, last + 1):
        text = lines[number - 1].strip()
        block = text in ("\\b", '"""\\b') or (block and bool(text))
        if block or "://" in text:
            kept.add(number)
        elif number > first and _indent(lines[number - 1]) > base \
                and not BULLET.match(lines[number - 1]):
            head = number - 1
            while head > first and lines[head - 1].strip() and _indent(lines[head - 1]) > base:
                head -= 1
            above = lines[head - 1]
            if not above.strip() or above.rstrip().endswith(":") or not BULLET.match(above):
                kept.add(number)
    return kept


def prose_too_wide(text: str, name: str) -> list[str]:
    """Each comment and docstring line of ``text`` longer than PROSE_WIDTH, unless shown verbatim."""
    lines, wide = text.splitlines(), set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) \
                and ast.get_docstring(node, clean=False) is not None:
            doc = node.body[0]
            kept = _verbatim(lines, doc.lineno, doc.end_lineno or doc.lineno, doc.col_offset)
            wide |= {n for n in range(doc.lineno, (doc.end_lineno or doc.lineno) + 1)
                     if n not in kept}
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT and not DIRECTIVE.search(token.string) \
                and "://" not in token.string:
            wide.add(token.start[0])
    return [f"{name}:{n}: {len(lines[n - 1])} columns of prose (at most {PROSE_WIDTH})"
            for n in sorted(wide) if len(lines[n - 1]) > PROSE_WIDTH]


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_comments_and_docstrings_fit_in_100_columns(path: Path) -> None:
    assert prose_too_wide(path.read_text(encoding="utf-8"),
                          path.relative_to(PACKAGE.parent).as_posix()) == []


def test_the_width_rule_sees_long_prose_and_lets_verbatim_lines_be() -> None:
    long = "word " * 22
    text = (f'"""{long}\n\nExample:\n    {long}\n\\b\n{long}\n\nhttps://example.org/{long}\n\n'
            f'- a bullet\n  {long}\n"""\n\n\n'
            f'def f():\n    """{long}"""\n    # {long}\n    x = 1  # noqa: E501 {long}\n    return '
            f'x  # {long}\n')
    assert [problem.split(":")[1]
            for problem in prose_too_wide(text, "m.py")] == ["1", "11", "16", "17", "19"]


def test_code_lines_of_the_package_are_held_to_100_columns() -> None:
    """ruff's E501 (`make lint`) keeps code lines of kdkit/ to 100 characters; tests/ and bench/
    keep 120 in ruff.toml files of their own, for long expected outputs and commands."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 and later
    root = PACKAGE.parent
    assert tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["ruff"][
        "line-length"] == PROSE_WIDTH
    for folder in ("tests", "bench"):
        local = tomllib.loads((root / folder / "ruff.toml").read_text(encoding="utf-8"))
        assert local["extend"] == "../pyproject.toml" and local["line-length"] == 120
