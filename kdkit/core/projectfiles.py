"""Reading a project's files from inside the container, with the standard library only.

The host's `kdkit validate` checks these files against their JSON schemas; the
probe cannot (no jsonschema there), so it does the few structural checks it
relies on itself and names the file, the place and the fix when one fails.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import Any, TypeGuard

from kdkit.core.errors import BadInput
from kdkit.core.jsonio import load_json
from kdkit.core.safetext import CONTROLS

MARKER = "kdkit.json"
# An ID is data that must never be able to steer a path (`kdkit validate` and the pilot share this
# rule). Patterns here are used with fullmatch only: ``re.match("...$")`` lets a final newline
# through.
SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
SAFE_ID_RULE = "use letters, digits, '.', '_' and '-' (first a letter or digit), at most 128"
DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
# A path a config names (each backend's lock, the requirements input, the pilot config, the pilot's
# inputs, manifest and runs) becomes file names, Docker mounts and words of RUN.md's shell lines:
# like an ID, it is held to characters that are one plain word to every shell and the same name on
# every file system. fullmatch only.
_SEGMENT = r"[A-Za-z0-9._][A-Za-z0-9._-]*"
SAFE_PATH = re.compile(rf"(?!(?:.*/)?\.\.(?:/|$)){_SEGMENT}(?:/{_SEGMENT})*/?")
PATH_RULE = "a path relative to the project root"
SAFE_PATH_RULE = ("use ASCII letters, digits, '.', '_' and '-' with '/' between folders, no folder "
                  "named '..' and none starting with '-' (then it is one plain word to every "
                  "shell)")
# Lengths (SAFE_PATH is ASCII: a character is a byte). One name holds at most NAME_MAX (255 on ext4,
# XFS, Btrfs,
# APFS, NTFS) less what kdkit adds when it stages the name (kdkit.core.staging:
# ``.NAME.partial-PID``, ``.NAME.old-PID``, ``.NAME.PID.XXXXXXXX.tmp``; a PID has up to 7 digits):
# 32 bytes. The whole path stays far below PATH_MAX (4096), for the project root in front of it.
MAX_SEGMENT = 255 - 32
MAX_PATH = 1024
# What ends a line or steers a terminal: C0 and C1 controls (tab too), DEL, the separators
# str.splitlines() splits on besides them (U+2028, U+2029) and Unicode's bidi controls (TR #9). No
# string of a config holds one (kdkit.config.schemas.line_problems, the pilot config's model): it
# would reach a command line or a file name.
# safetext's set
CONTROL_CHARACTER = re.compile("[" + "".join(re.escape(chr(code)) for code in sorted(CONTROLS))
                               + "]")


def is_safe_id(value: object) -> TypeGuard[str]:
    """Whether ``value`` is a string usable as an ID (and so as a file name): the whole of it."""
    return isinstance(value, str) and SAFE_ID.fullmatch(value) is not None


def shown(value: str, limit: int = 60) -> str:
    """``value`` for a one-line message: JSON-quoted in ASCII (a newline shows as \\n),
    shortened."""
    text = json.dumps(value)
    return text if len(text) <= limit else text[:limit] + "..."


def path_problem(value: str) -> str | None:
    """A path the config names: relative, inside the project, no home folder, no control
    characters."""
    if not value:
        return f"empty; give {PATH_RULE}"
    if CONTROL_CHARACTER.search(value):
        return f"{shown(value)} holds a control character; give {PATH_RULE}"
    if value.startswith("~"):
        return (
            f"{value!r} starts with '~', which kdkit never expands (it would be a folder named ~); "
            f"give {PATH_RULE}")
    if PurePosixPath(value.replace("\\", "/")).is_absolute() or re.match(r"[A-Za-z]:", value):
        return f"{value!r} is absolute; give {PATH_RULE}"
    if "\\" in value:
        return f"{value!r} holds a backslash; use '/' between folders (the same on every machine)"
    # leaving the project (.., links) is judged against the real tree: inside(), real_inside()
    return None


def config_path_problem(value: str) -> str | None:
    """Why ``value`` cannot be a path a config names (:func:`path_problem`, then SAFE_PATH), or
    None.

    The one rule for such paths: `kdkit validate` applies it (the schemas' ``"format":
    "project-path"``, the pilot config's model), and so does each reader where the path is used
    (:func:`config_path`).
    """
    problem = path_problem(value)
    if problem is None and not SAFE_PATH.fullmatch(value):
        if PurePosixPath(os.path.normpath(value)).parts[:1] == ("..",):
            return f"{value!r} points outside the project folder; keep every path inside it"
        return f"{shown(value)} is not a safe path; {SAFE_PATH_RULE}"
    return problem or _length_problem(value)


def _length_problem(value: str) -> str | None:
    """Why ``value`` (a SAFE_PATH) is too long for a file system, or None: :data:`MAX_SEGMENT`,
    :data:`MAX_PATH`."""
    if len(value) > MAX_PATH:
        return f"{shown(value)} is {len(value)} characters; give a path of at most {MAX_PATH}"
    longest = max(value.split("/"), key=len)
    if len(longest) > MAX_SEGMENT:
        return (f"{shown(value)} holds a name of {len(longest)} characters; give names of at most "
                f"{MAX_SEGMENT} (a file system's 255, less what kdkit adds while it writes one)")
    return None


def config_path(base: Path, relative: str, path: Path, where: str) -> Path:
    """:func:`inside` for a path a config names, refused first unless it keeps
    :func:`config_path_problem`'s rule."""
    problem = config_path_problem(relative)
    if problem is not None:
        raise BadInput(f"{path}: {where}: {problem}")
    return inside(base, relative, path, where)


# What every project is made of besides what its configs name (kdkit.config.files.AllowList carries
# them all).
PROJECT_PLACES = (MARKER, "config", "requirements", "src")


def runs_problem(root: Path, runs: str, places: Iterable[str]) -> str | None:
    """Why ``runs`` (the pilot config's results folder, a path :func:`config_path_problem` passed)
    cannot be a folder of its own, or None: it is the project root, or it holds or lies inside
    :data:`PROJECT_PLACES` or one of ``places`` (what the configs name), compared with every link
    inside the project resolved (``.``, ``./src``, ``src/.``, a link to ``src``). The one rule of
    the pilot, `kdkit validate`, bundle, run and sweep: results are written there and never carried,
    and a pilot cleans its staging leftovers there."""
    real_root = os.path.realpath(root)
    target = os.path.realpath(os.path.join(root, runs))
    if target == real_root:
        return (
            f"{runs!r} is the project folder itself; give the results a folder of their own (e.g. "
            "\"runs\")")
    for place in dict.fromkeys((*PROJECT_PLACES, *places)):
        other = os.path.realpath(os.path.join(root, place))
        if other == real_root:
            continue
        if is_within(other, target) or is_within(target, other):
            relation = ("is" if other == target else "holds" if is_within(other, target)
                        else "is inside")
            return (f"{runs!r} {relation} {place!r}, a part of the project; give the results a "
                    "folder of their own (e.g. \"runs\")")
    return None


def named_places(project: dict[str, Any]) -> tuple[str, ...]:
    """The paths kdkit.json names (requirements, pilot config, each backend's lock), for
    :func:`runs_problem`."""
    named = [project.get("requirements"), project.get("pilot_config")]
    backends = project.get("backends")
    named += [spec.get("lock") for spec in backends.values() if isinstance(spec, dict)] \
        if isinstance(backends, dict) else []
    return tuple(value for value in named if isinstance(value, str)
                 and config_path_problem(value) is None)


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
        raise BadInput(f"{(start or Path.cwd()).resolve()}: no {MARKER} here or in any parent "
                       "folder; pass PROJECT_DIR, run inside a project, or make one with `kdkit "
                       "init PATH`")
    return found


def project_root(project_dir: Path | None) -> Path:
    """PROJECT_DIR as given (a folder holding kdkit.json), or the root found upward from cwd."""
    if project_dir is None:
        return require_root()
    root = project_dir.resolve()
    if root.exists() and not root.is_dir():
        raise BadInput(f"PROJECT_DIR {project_dir}: is a file; give the project's folder")
    if not (root / MARKER).is_file():
        raise BadInput(
            f"{root / MARKER}: not found; is {project_dir} a kdkit project (`kdkit init`)?")
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
        raise BadInput(
            f"{path}: $.{key}: expected {names}, got {type(value).__name__}; fix the value")
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
    """``path`` with every symbolic link resolved, or None when that leaves ``root`` (itself
    resolved).

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
        raise BadInput(f"{file}: {where}: {path} leads to {os.path.realpath(path)}, outside the "
                       f"project {root} (a symbolic link?); keep it inside the project")
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
