"""What `kdkit run` mounts beyond the pilot's inputs and runs, and what the container records of it.

* The host project's ``config/`` and ``src/``, read-only over the image's copies
  (:func:`kdkit.image.container.source_mounts`): what runs is what the user sees, with no rebuild.
* The folders kdkit.json declares under ``mounts`` (a model, a dataset), each at ``/mnt/NAME``,
  read-only unless declared ``writable``; ``kdkit run --mount SRC:NAME`` supplies or overrides
  NAME's folder with one the user names (it may lie outside the project: the user named it). Every
  folder is resolved through its links; a declared path must stay inside the project
  (projectfiles.real_inside). The container gets ``KDKIT_MOUNT_<NAME>`` (and the declared ``env``
  variable) set to ``/mnt/NAME``.
* ``<project>/.kdkit-cache/`` writable at ``/cache`` (HF_HOME, TORCH_HOME, TRITON_CACHE_DIR,
  XDG_CACHE_HOME below it): on disk, kept between runs, never in an image or a bundle.
* KDKIT_LAUNCH (:mod:`kdkit.core.launchrecord`): the image's ID, ref and lock, the host's code
  revision, the network and every mount, recorded by the pilot in params.json.

A fixed ``/mnt/NAME`` rather than ``/app/<path>``: the app finds the folder at one address whether
the project's own copy or a folder named on the command line supplies it, and the variable says
where.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kdkit.config.project import Project, mount_problems, mount_variable
from kdkit.core.errors import BadInput
from kdkit.core.git import code_state
from kdkit.core.launchrecord import VARIABLE
from kdkit.core.projectfiles import MARKER, is_safe_id, real_inside, shown
from kdkit.docker_adapter import ImageFacts, Mount
from kdkit.image.container import (
    APP,
    CACHE,
    CACHE_ENV,
    CACHE_FOLDER,
    MOUNTS,
    named_mounts,
    project_mounts,
    source_mounts,
)
from kdkit.image.labels import LABEL, OCI


@dataclass(frozen=True)
class Declared:
    """A declared mount as this run gets it: its name, the host folder (links resolved), writable or
    not."""

    name: str
    source: Path
    writable: bool
    env: str | None = None

    @property
    def target(self) -> str:
        return f"{MOUNTS}/{self.name}"


def parse_mount_options(values: Sequence[str]) -> dict[str, Path]:
    """``--mount SRC:NAME`` options as NAME -> the folder, links resolved; BadInput for a malformed
    option, a name given twice or a SRC that is not an existing folder."""
    given: dict[str, Path] = {}
    for value in values:
        source, sep, name = value.rpartition(":")
        if not sep or not source or not is_safe_id(name):
            raise BadInput(f"--mount {shown(value)}: expected SRC:NAME, a folder and a name "
                           "kdkit.json declares under \"mounts\" (letters, digits, '.', '_', '-')")
        if name in given:
            raise BadInput(f"--mount ...:{name}: given twice; give each name once")
        real = Path(os.path.realpath(Path(source).expanduser()))
        if not real.is_dir():
            raise BadInput(
                f"--mount {shown(value)}: {shown(str(real))} is not an existing folder; name a "
                "folder")
        given[name] = real
    return given


def declared_mounts(project: Project, values: Sequence[str] = ()) -> list[Declared]:
    """Each mount kdkit.json declares, its folder from ``--mount`` or its ``path``; BadInput (exit
    2) for an undeclared ``--mount`` name, a declared path outside the project or missing, a name
    with no folder."""
    given, declared, file = parse_mount_options(values), project.mounts, project.root / MARKER
    for name in given:
        if name not in declared:
            have = ", ".join(sorted(declared)) or "none"
            raise BadInput(f"--mount ...:{name}: {file} declares no mount {name!r} (declared: "
                           f"{have}); declare it under \"mounts\" or fix the name")
    for where, what in mount_problems(project.root, project.config):
        overridden = (where.endswith(".path")
                      and where.removeprefix("$.mounts.").removesuffix(".path") in given)
        if not overridden:  # a declared path leaving the project matters only when it is used
            raise BadInput(f"{file}: {where}: {what}")
    mounts = []
    for name, spec in sorted(declared.items()):
        source = given.get(name) or _declared_folder(project, name, spec)
        mounts.append(Declared(name, source, bool(spec.get("writable", False)), spec.get("env")))
    return mounts


def _declared_folder(project: Project, name: str, spec: dict[str, Any]) -> Path:
    where = f"{project.root / MARKER}: $.mounts.{name}"
    if "path" not in spec:
        raise BadInput(f"{where}: no path; give the folder with `kdkit run --mount SRC:{name}`")
    real = real_inside(project.root, project.root / spec["path"])
    if real is None or not real.is_dir():
        raise BadInput(f"{where}.path: {spec['path']!r} is not a folder of the project; create it, "
                       f"fix the path or give the folder with `kdkit run --mount SRC:{name}`")
    return real


def cache_folder(project: Project) -> Path:
    """``<project>/.kdkit-cache``, links resolved inside the project (created by a host step when
    missing)."""
    real = real_inside(project.root, project.root / CACHE_FOLDER)
    if real is None:
        raise BadInput(f"{project.root / CACHE_FOLDER}: leads outside the project (a link); remove "
                       "the link, kdkit creates the folder")
    return real


def extra_mounts(project: Project,
                 declared: Sequence[Declared]) -> tuple[list[Mount], dict[str, str]]:
    """(config/ and src/, the declared mounts and the cache; the variables that name them in the
    container)."""
    mounts = source_mounts(project.root) + [Mount(d.source, d.target, not d.writable)
                                            for d in declared]
    mounts.append(Mount(cache_folder(project), CACHE, False))
    env = dict(CACHE_ENV)
    for mount in declared:
        env[mount_variable(mount.name)] = mount.target
        if mount.env:
            env[mount.env] = mount.target
    return mounts, env


def revision(project: Project, facts: ImageFacts) -> str | None:
    """The host's git revision (``+dirty`` when the tree has changes), else the image's revision
    label."""
    state = code_state(project.root)
    if state["revision"]:
        return str(state["revision"]) + ("+dirty" if state["dirty"] else "")
    return facts.labels.get(f"{OCI}revision") or None


def launch_env(project: Project, facts: ImageFacts, network: str, mounts: Sequence[Mount],
               declared: Sequence[Declared]) -> dict[str, str]:
    """``{"KDKIT_LAUNCH": compact JSON}``: what the pilot records in params.json of what really
    ran."""
    names = {d.target: d.name for d in declared} | {CACHE: "cache"}
    record = {"image_id": facts.id, "image": facts.ref,
              "lock_sha256": facts.labels.get(f"{LABEL}lock.sha256", ""),
              "revision": revision(project, facts), "network": network,
              "mounts": [{"name": names.get(m.target, m.target.removeprefix(f"{APP}/")),
                          "target": m.target,
                          "writable": not m.read_only, "source": str(m.source)} for m in mounts]}
    return {VARIABLE: json.dumps(record, separators=(",", ":"))}


def run_mounts(project: Project, pilot: dict[str, Any], inputs: Path, runs: Path, facts: ImageFacts,
               network: str,
               options: Sequence[str]) -> tuple[list[Mount], dict[str, str]]:
    """(every mount of `kdkit run`'s container, the variables naming them and KDKIT_LAUNCH): the
    pilot's inputs, runs and named paths (kdkit.image.container), then config/, src/, the declared
    mounts and the cache."""
    declared = declared_mounts(project, options)
    bound = project_mounts(project.root, inputs.relative_to(project.root).as_posix(),
                           runs.relative_to(project.root).as_posix())
    bound += named_mounts(project, pilot, inputs)
    more, env = extra_mounts(project, declared)
    bound += more
    return bound, env | launch_env(project, facts, network, bound, declared)
