"""Issue 30 §2: one staging helper. The staging protocol (a folder built as ``.NAME.partial-PID`` beside its final
path, its owner's flock held on it, renamed into place, removed on any failure) is written once, in
kdkit.core.staging (staged_beside, and staged_folder on top of it); no other module renames a folder it got from
``staging_for(...)`` into place, or takes the owner's lock on one, by hand.

The staging protocol's own cases live here too: whose a staging folder is (the owner's lock, not its PID).
The commands that stage are tested in their rooms (a killed bundle's staging: tests/transfer/test_crash_bundle.py;
the run folder's: tests/core/test_crash_safety.py, tests/core/test_runs_folder_rule.py)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kdkit.core.staging import hold, release, staged_beside, staging_for
from kdkit.core.stalestaging import clean_stale

KDKIT = Path(__file__).resolve().parents[2] / "kdkit"
HELPERS = {KDKIT / "core" / "staging.py", KDKIT / "core" / "noreplace.py"}
RENAMES = {("os", "rename"), ("os", "replace"), ("shutil", "move")}
METHODS = {"rename", "replace"}  # Path.rename, Path.replace on a staging path


def _calls(node: ast.AST, name: str) -> bool:
    """Whether ``node`` is a call of ``name`` (``name(...)`` or ``module.name(...)``)."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    return (isinstance(func, ast.Name)
            and func.id == name) or (isinstance(func, ast.Attribute) and func.attr == name)


def _names(target: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}


def _staging_names(function: ast.AST) -> set[str]:
    """The names a function binds to a value built from ``staging_for(...)`` (``staging, lock = staging_for(p), None``
    binds both: a name too many only makes the check stricter)."""
    found: set[str] = set()
    for node in ast.walk(function):
        if not isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) or node.value is None:
            continue
        if any(_calls(n, "staging_for") for n in ast.walk(node.value)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found |= {name for target in targets for name in _names(target)}
    return found


def _is_staging(node: ast.AST, names: set[str]) -> bool:
    return (isinstance(node, ast.Name) and node.id in names) or _calls(node, "staging_for")


def hand_written(source: str, where: str = "<source>") -> list[str]:
    """Each place in ``source`` that renames a staging_for() value into place, or holds its lock, by hand."""
    found = []
    for function in ast.walk(ast.parse(source)):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        names = _staging_names(function)
        for call in (n for n in ast.walk(function) if isinstance(n, ast.Call)):
            func, args = call.func, [*call.args, *(k.value for k in call.keywords)]
            module = func.value.id if isinstance(func, ast.Attribute) and isinstance(
                func.value, ast.Name) else None
            attr = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(
                func, ast.Name) else None
            renames = (module, attr) in RENAMES or attr == "rename_no_replace"
            if (renames or attr == "hold") and any(_is_staging(arg, names) for arg in args):
                found.append(
                    f"{where}:{call.lineno}: {function.name}() calls {attr}() on a staging_for() "
                    "folder")
            elif attr in METHODS and isinstance(func, ast.Attribute) \
                    and _is_staging(func.value, names):
                found.append(
                    f"{where}:{call.lineno}: {function.name}() calls .{attr}() on a staging_for() "
                    "folder")
    return found


def test_no_module_stages_a_folder_by_hand() -> None:
    found = [line for path in sorted(KDKIT.rglob("*.py")) if path not in HELPERS
             for line in hand_written(path.read_text(encoding="utf-8"),
                                      str(path.relative_to(KDKIT.parent)))]
    assert found == [], "use kdkit.core.staging.staged_beside (or staged_folder):\n" + "\n".join(
        found)


@pytest.mark.parametrize("body", [
    "staging, lock = staging_for(target), None\n    staging.mkdir()\n    os.replace(staging, "
    "target)",
    "staging = staging_for(path)\n    os.rename(staging, path)",
    "staging = staging_for(cached)\n    rename_no_replace(staging, cached)",
    "staging_for(final).rename(final)",
    "staging = staging_for(folder)\n    owner = hold(staging)",
])
def test_the_scan_finds_a_hand_written_copy(body: str) -> None:
    """The scan flags the shapes the modules had before issue 30 §2 (init, copy-out, the run folder, kdkit's wheel
    cache, the wheelhouse), and not a str.replace of a staging path's text."""
    assert len(hand_written(f"def make(target, path, cached, final, folder):\n    {body}\n")) == 1
    assert hand_written(
        "def f(p):\n    staging = staging_for(p)\n    str(staging).replace('a', 'b')\n") == []


def test_staged_beside_removes_what_is_not_published(tmp_path: Path) -> None:
    final = tmp_path / "out"
    with pytest.raises(RuntimeError), staged_beside(final) as staged:
        (staged.path / "f").write_text("x")
        assert staged.path == staging_for(final) and clean_stale(final) == []  # held: never stale
        raise RuntimeError("stop")
    assert sorted(os.listdir(tmp_path)) == []
    with staged_beside(final) as staged:
        (staged.path / "f").write_text("x")
        staged.publish()
        lock = staged.take_lock()
    assert sorted(os.listdir(tmp_path)) == ["out"] and (final
                                                        / "f").read_text() == "x" and lock is not None
    os.close(lock)
    with pytest.raises(FileExistsError), staged_beside(final) as staged:
        (staged.path / "g").write_text("y")
        staged.publish(replace=False)
    assert sorted(os.listdir(tmp_path)) == ["out"] and sorted(os.listdir(final)) == ["f"]


# ---------------------------------------------------------------- staging: the owner's lock decides


def test_a_staging_folder_whose_owner_holds_its_lock_is_never_removed(tmp_path: Path) -> None:
    """Another PID namespace (a second container on the same runs/) sees a dead or reused PID; the
    lock says the truth. Here the PID in the name is dead, the lock is held by this process."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True,
                          check=True).stdout.strip()
    final = tmp_path / "R"
    staging = tmp_path / f".R.partial-{dead}"
    staging.mkdir()
    owner = hold(staging)
    try:
        assert clean_stale(final) == [] and staging.exists()
    finally:
        release(owner)
    assert clean_stale(final) == [staging] and not staging.exists()


def test_a_staging_folder_with_our_own_pid_and_a_free_lock_is_a_predecessors(
    tmp_path: Path) -> None:
    staging = tmp_path / f".R.partial-{os.getpid()}"
    staging.mkdir()
    assert clean_stale(tmp_path / "R") == [staging]
