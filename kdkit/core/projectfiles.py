"""Reading a project's files from inside the container, with the standard library only.

The host's `kdkit validate` checks these files against their JSON schemas; the
probe cannot (no jsonschema there), so it does the few structural checks it
relies on itself and names the file, the place and the fix when one fails.
"""

from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath
from typing import Any, TypeGuard

from kdkit.core.errors import BadInput
from kdkit.core.jsonio import load_json

MARKER = "kdkit.json"
# An ID is data that must never be able to steer a path (`kdkit validate` and the pilot share this
# rule). Patterns here are used with fullmatch only: ``re.match("...$")`` lets a final newline through.
SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
SAFE_ID_RULE = "use letters, digits, '.', '_' and '-' (first a letter or digit), at most 128"
DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def is_safe_id(value: object) -> TypeGuard[str]:
    """Whether ``value`` is a string usable as an ID (and so as a file name): the whole of it."""
    return isinstance(value, str) and SAFE_ID.fullmatch(value) is not None


def find_root(start: Path | None = None) -> Path | None:
    """The nearest folder at or above ``start`` (default: cwd) holding kdkit.json, or None."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / MARKER).is_file():
            return folder
    return None


def require_root(start: Path | None = None) -> Path:
    """find_root, or why there is no project to act on (BadInput)."""
    found = find_root(start)
    if found is None:
        raise BadInput(f"{(start or Path.cwd()).resolve()}: no {MARKER} here or in any parent folder; pass "
                       "PROJECT_DIR, run inside a project, or make one with `kdkit init PATH`")
    return found


def project_root(project_dir: Path | None) -> Path:
    """PROJECT_DIR as given (a folder holding kdkit.json), or the root found upward from cwd."""
    if project_dir is None:
        return require_root()
    root = project_dir.resolve()
    if root.exists() and not root.is_dir():
        raise BadInput(f"PROJECT_DIR {project_dir}: is a file; give the project's folder")
    if not (root / MARKER).is_file():
        raise BadInput(f"{root / MARKER}: not found; is {project_dir} a kdkit project (`kdkit init`)?")
    return root


def load_object(path: Path, what: str) -> dict[str, Any]:
    """A JSON file that must hold an object."""
    data = load_json(path, what=what)
    if not isinstance(data, dict):
        raise BadInput(f"{path}: $: expected a JSON object; run `kdkit validate`")
    return data


def require(data: dict[str, Any], key: str, kind: type | tuple[type, ...], path: Path) -> Any:
    """``data[key]`` checked for presence and type, else BadInput naming file and key."""
    if key not in data:
        raise BadInput(f"{path}: $: missing required key {key!r}; add it (see `kdkit validate`)")
    value = data[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _as_tuple(kind)):
        names = " or ".join(k.__name__ for k in _as_tuple(kind))
        raise BadInput(f"{path}: $.{key}: expected {names}, got {type(value).__name__}; fix the value")
    return value


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def inside(base: Path | str, relative: str, path: Path, where: str) -> Path:
    """``base / relative`` normalized, refusing absolute paths and anything that escapes ``base``.

    The check is lexical (no filesystem calls), so ten thousand manifest entries cost
    microseconds; ``base`` must itself be normalized (the project root is resolved once).
    """
    pure = PurePosixPath(relative.replace("\\", "/"))
    if not relative or pure.is_absolute() or re.match(r"^[A-Za-z]:", relative):
        raise BadInput(f"{path}: {where}: {relative!r} must be a relative path inside {base}")
    target = os.path.normpath(os.path.join(base, relative))
    if not is_within(target, os.fspath(base)):
        raise BadInput(f"{path}: {where}: {relative!r} points outside {base}; keep it inside")
    return Path(target)


def is_within(target: str, base: str) -> bool:
    """Whether normalized ``target`` is ``base`` or below it (string prefix on a path boundary)."""
    return target == base or target.startswith(base.rstrip(os.sep) + os.sep)


def real_inside(root: Path | str, path: Path | str) -> Path | None:
    """``path`` with every symbolic link resolved, or None when that leaves ``root`` (itself resolved).

    The one containment rule of kdkit: `kdkit validate` applies it to the paths a project names, the
    pilot to its inputs, manifest and runs folder, the bundle to every file it packs.
    """
    try:
        real = os.path.realpath(path)
    except ValueError:  # a NUL byte: no such path can exist, let alone inside
        return None
    return Path(real) if is_within(real, os.fspath(root)) else None


def require_real_inside(root: Path, path: Path, file: Path, where: str) -> Path:
    """:func:`real_inside`, or BadInput naming the key that led there and where the link points."""
    real = real_inside(root, path)
    if real is None:
        raise BadInput(f"{file}: {where}: {path} leads to {os.path.realpath(path)}, outside the project "
                       f"{root} (a symbolic link?); keep it inside the project")
    return real


def extensions(root: Path) -> list[dict[str, str]]:
    """kdkit.json's ``extensions`` list (module and optional smoke), checked for shape."""
    path = root / MARKER
    data = load_object(path, "project file")
    items = data.get("extensions", [])
    if not isinstance(items, list):
        raise BadInput(f"{path}: $.extensions: expected a list; run `kdkit validate`")
    out = []
    for index, item in enumerate(items):
        module = item.get("module") if isinstance(item, dict) else None
        if not isinstance(module, str) or not DOTTED.fullmatch(module):
            raise BadInput(f"{path}: $.extensions[{index}].module: expected a dotted module name")
        smoke = item.get("smoke")
        out.append({"module": module, **({"smoke": smoke} if isinstance(smoke, str) else {})})
    return out
