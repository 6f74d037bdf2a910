"""A kdkit project on disk: finding its root and loading its checked configuration."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.config.schemas import raise_first, schema_problems
from kdkit.core import projectfiles
from kdkit.core.builds import BACKENDS
from kdkit.core.errors import BadInput
from kdkit.core.jsonio import load_json
from kdkit.core.pilotconfig import refuse_problems, runs_folder_problem
from kdkit.core.projectfiles import MARKER, named_places

if TYPE_CHECKING:
    from collections.abc import Mapping


@dataclass(frozen=True)
class Backend:
    name: str
    base_image: str
    torch_index: str
    lock: Path

    @property
    def pylock(self) -> Path:
        """The backend's PEP 751 lock, ``pylock.<backend>.toml`` beside its requirements lock:
        `kdkit lock` writes it from the same resolution. The name follows the specification's rule,
        ``pylock.<name>.toml`` with no dot in the name
        (https://packaging.python.org/en/latest/specifications/pylock-toml/#file-name)."""
        return self.lock.parent / f"pylock.{self.name}.toml"


@dataclass(frozen=True)
class Project:
    root: Path
    config: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.config["name"])

    @property
    def python(self) -> str:
        return str(self.config["python"])

    @property
    def default_backend(self) -> str:
        return str(self.config["default_backend"])

    @property
    def requirements(self) -> Path:
        return self.root / str(self.config["requirements"])

    @property
    def pilot_config_path(self) -> Path:
        return self.root / str(self.config["pilot_config"])

    @property
    def extensions(self) -> list[dict[str, str]]:
        return list(self.config.get("extensions", []))

    @property
    def mounts(self) -> dict[str, dict[str, Any]]:
        """kdkit.json's declared mounts, NAME -> {"path", "writable", "env"} (schema-checked; may be
        empty)."""
        return dict(self.config.get("mounts", {}))

    def backend(self, name: str | None = None) -> Backend:
        """The named backend (default: default_backend); BadInput if kdkit.json lacks it."""
        chosen = name or self.default_backend
        if chosen not in BACKENDS:
            raise BadInput(
                f"--backend {chosen}: unknown backend; choose one of {', '.join(BACKENDS)}")
        spec = self.config["backends"].get(chosen)
        if spec is None:
            raise BadInput(
                f"{self.root / MARKER}: $.backends has no '{chosen}'; add it or pick one of "
                f"{', '.join(self.config['backends'])}"
            )
        if (problem := url_problem(spec["torch_index"])) is not None:
            raise BadInput(f"{self.root / MARKER}: $.backends.{chosen}.torch_index: {problem}")
        return Backend(chosen, spec["base_image"], spec["torch_index"], self.root / spec["lock"])

    def pilot_config(self) -> dict[str, Any]:
        """The pilot config, held to the pilot's own model (kdkit.core.pilotconfig) as `kdkit
        validate` and the pilot hold it: a host command (bundle, run) never uses a value the pilot
        would refuse, such as a path outside the safe set, even in a config edited after `kdkit
        validate`. Read once per Project (made once where a command starts): every part of the
        command sees the same config."""
        return self._pilot

    @cached_property
    def _pilot(self) -> dict[str, Any]:
        data = load_json(self.pilot_config_path, what="pilot config")
        if not isinstance(data, dict):
            raise BadInput(f"{self.pilot_config_path}: $: expected an object; run `kdkit validate`")
        refuse_problems(data, self.pilot_config_path)
        if (problem := runs_folder_problem(self.root, data, named_places(self.config))) is not None:
            raise BadInput(f"{self.pilot_config_path}: $.runs: {problem}")
        return data


def url_problem(url: str) -> str | None:
    """Why ``url`` is not an index URL every tool reads alike (a bracket left open, a port out of
    range), or None; the scheme and the lack of spaces are the schema's."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError for a port out of range or not a number)
    except ValueError as exc:
        return f"not a URL ({exc}); write it as https://host[:port]/path"
    if not parts.hostname:
        return "names no host; write it as https://host[:port]/path"
    return None


def mount_variable(name: str) -> str:
    """The variable naming a declared mount's place in the container: KDKIT_MOUNT_<NAME>, '.' and
    '-' as '_'."""
    return "KDKIT_MOUNT_" + re.sub(r"[^A-Za-z0-9]", "_", name).upper()


# Variables a declared mount's "env" may not take: the cache's (kdkit.machine.mounts sets them), and
# what the shell, Python and the dynamic loader read before the app runs (names starting LD_ are
# refused too).
RESERVED_ENV = frozenset({"HOME", "PATH", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "HF_HOME",
                          "TORCH_HOME",
                          "TRITON_CACHE_DIR", "XDG_CACHE_HOME", "TMPDIR"})


def mount_problems(root: Path, config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(JSON path, problem) of kdkit.json's ``mounts`` beyond its schema: a path that leaves the
    project through a link, two names that give one KDKIT_MOUNT_ variable."""
    problems: list[tuple[str, str]] = []
    seen: dict[str, str] = {}
    mounts = config.get("mounts")
    for name, spec in sorted(mounts.items()) if isinstance(mounts, dict) else []:
        if (other := seen.setdefault(mount_variable(name), name)) != name:
            problems.append((f"$.mounts.{name}",
                             f"gives the same variable {mount_variable(name)} as {other!r}; "
                             "rename one"))
        env = spec.get("env") if isinstance(spec, dict) else None
        if isinstance(env, str) and (env in RESERVED_ENV or env.startswith("LD_")):
            problems.append((f"$.mounts.{name}.env",
                             f"{env} is the container's own (kdkit sets it, or the loader and "
                             "Python read it); choose another name"))
        elif isinstance(env, str) and (other := seen.setdefault(f"env:{env}", name)) != name:
            problems.append(
                (f"$.mounts.{name}.env",
                 f"{env} is also the env of {other!r}; give each mount its own"))
        path = spec.get("path") if isinstance(spec, dict) else None
        if isinstance(path, str) and projectfiles.real_inside(root, root / path) is None:
            problems.append((f"$.mounts.{name}.path",
                             f"{path!r} leads to {os.path.realpath(root / path)}, outside "
                             "the project (a link?); keep it inside, or name the folder "
                             f"with `kdkit run --mount SRC:{name}`"))
    return problems


def load_project(project_dir: Path | None = None) -> Project:
    """Load kdkit.json and check it against its schema (first problem reported)."""
    root = projectfiles.project_root(project_dir)
    path = root / MARKER
    data = load_json(path, what="project file")
    raise_first(schema_problems(data, "kdkit", path.relative_to(root)),
                base=root, more_hint="run `kdkit validate`")
    return Project(root, data)
