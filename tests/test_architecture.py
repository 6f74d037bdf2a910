"""The shape of the package: its layers, no import circles and no arrow that runs back up, counting
the imports made inside functions too (docs/architecture.md draws the same layers).

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
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.startswith("kdkit"):
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


# Bottom up: (rank, group). A module belongs to the group of the longest prefix of its name; it may
# import its own group and any group of a lower rank, never a higher one, nor another group of its
# rank (the three first command packages of the probe stand side by side and ignore each other).
LAYERS: tuple[tuple[int, str], ...] = (
    (0, "kdkit"),  # the package's face: __version__
    (1, "kdkit.core"),  # stdlib core, both sides
    (2, "kdkit.probe.results"),
    (2, "kdkit.probe.diagnose"),
    (2, "kdkit.probe.env"),
    (3, "kdkit.probe.pilot"),
    (4, "kdkit.probe.measure"),
    (4, "kdkit.probe.train"),
    (6, "kdkit.probe"),  # the in-container entry: python -m kdkit.probe, kdkit.pyz
    (7, "kdkit.config"),  # the host from here: a project as the host reads it
    (7, "kdkit.docker_adapter"),  # the only module that imports docker
    (8, "kdkit.facts"),
    (9, "kdkit.lock"),
    (10, "kdkit.image"),
    (11, "kdkit.order"),
    (11, "kdkit.machine"),
    (11, "kdkit.transfer"),
    (11, "kdkit.project"),
    (12, "kdkit.cli"),  # click
    (13, "kdkit.__main__"),
)


def _group(module: str) -> tuple[int, str]:
    named = [(rank, group) for rank,
             group in LAYERS if module == group or module.startswith(group + ".")]
    return max(named, key=lambda layer: len(layer[1]))


def _upward(graph: dict[str, set[str]]) -> list[str]:
    wrong = []
    for source, targets in sorted(graph.items()):
        rank, group = _group(source)
        for target in sorted(targets):
            to_rank, to_group = _group(target)
            if to_rank > rank or (to_rank == rank and to_group != group):
                wrong.append(f"{source} ({group}) -> {target} ({to_group})")
    return wrong


def test_no_arrow_runs_up_or_sideways_between_layers() -> None:
    assert _upward(_graph()) == []


def test_the_layer_check_sees_an_upward_and_a_sideways_arrow() -> None:
    graph = {"kdkit.core.jsonio": {"kdkit.image.build"},
             "kdkit.probe.env.verify": {"kdkit.probe.diagnose.host"},
             "kdkit.cli.order": {"kdkit.order.check", "kdkit.core.errors"}}
    assert _upward(graph) == ["kdkit.core.jsonio (kdkit.core) -> kdkit.image.build (kdkit.image)",
                              "kdkit.probe.env.verify (kdkit.probe.env) -> "
                              "kdkit.probe.diagnose.host (kdkit.probe.diagnose)"]


def test_every_module_has_a_layer_and_each_package_says_what_it_owns() -> None:
    for name, path in _modules().items():
        assert name == "kdkit" or _group(
            name)[1] != "kdkit", f"{path}: a module of no layer; add it to LAYERS"
        if path.name == "__init__.py" and name != "kdkit":
            docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
            assert docstring, f"{path}: a package's __init__.py says in its docstring what the package owns"


def test_the_graph_sees_function_local_imports() -> None:
    graph = _graph()
    assert "kdkit.order.check" in graph["kdkit.cli.order"]  # imported inside the command function
    assert "kdkit.core.proc" in graph["kdkit.lock.pipconfig"]  # `from kdkit.core import proc`


def test_no_module_imports_itself_back_through_others() -> None:
    assert _circles(_graph()) == []


def test_the_circle_finder_finds_a_circle() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_core_loads_no_module_by_name() -> None:
    """importlib in the core would be an arrow up that no import statement shows: the entry points
    that load the commands of the table by name stand above it (kdkit.probe.entry, kdkit.cli)."""
    for name, path in _modules().items():
        if _group(name)[1] == "kdkit.core":
            assert "import_module" not in path.read_text(encoding="utf-8"), name


# Third-party packages that have one home: the package or module that alone may import them.
ONE_HOME = {"click": "kdkit.cli", "rich": "kdkit.cli", "docker": "kdkit.docker_adapter"}


def _third_party(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_click_rich_and_docker_are_each_imported_in_one_home_only() -> None:
    strays = [f"{name} imports {package}" for name, path in sorted(_modules().items())
              for package, home in ONE_HOME.items()
              if package in _third_party(path)
              and not (name == home or name.startswith(home + "."))]
    assert strays == []
