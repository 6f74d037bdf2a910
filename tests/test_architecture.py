"""The shape of the package: no import circles, counting the imports made inside functions too.

A function-local import does not remove a circle, it only hides it until the call: the graph here
takes every ``import kdkit...`` / ``from kdkit... import`` wherever it stands in a module.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "kdkit"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The kdkit modules ``path`` imports anywhere in it (``from kdkit.core import proc`` is kdkit.core.proc)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("kdkit"):
            subs = {f"{node.module}.{a.name}" for a in node.names} & set(modules)
            found |= subs or ({node.module} & set(modules))
            if subs and len(subs) < len(node.names) and node.module in modules:
                found.add(node.module)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, modules) - {name} for name, path in modules.items()}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_sees_function_local_imports() -> None:
    graph = _graph()
    assert "kdkit.check" in graph["kdkit.cli.order"]  # imported inside the command function
    assert "kdkit.core.proc" in graph["kdkit.locking"]  # `from kdkit import __version__, proc`


def test_no_module_imports_itself_back_through_others() -> None:
    assert _circles(_graph()) == []


def test_the_circle_finder_finds_a_circle() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
