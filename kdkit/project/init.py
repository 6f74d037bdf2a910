"""`kdkit init`: copy the project template into a new folder, all or nothing.

The project is built as ``.TARGET.partial-PID`` beside the target (kdkit.core.staging) and renamed
into place once complete, so a target is either absent or a whole project, even after a SIGKILL. An
existing empty folder (often the shell's current folder, which must stay the same folder) is filled
in place instead, kdkit.json last: a kill half-way leaves a folder that is not a project. What a
killed init left is removed by the next init of that target, which says so. A target that cannot be
written (read-only mount, no permission, a file in the way, a full disk) is exit 2 and leaves
nothing, not even the parent folders init created.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from kdkit.config.shipped import template_dir
from kdkit.core.builds import BACKENDS, TORCH_INDEX_URL
from kdkit.core.errors import BadInput
from kdkit.core.staging import staged_beside, staging_for
from kdkit.core.stalestaging import clean_stale
from kdkit.project.templates import DEFAULT, Template, find, template_files

NAME_LENGTH = 63  # kdkit.json's name rule (schemas/kdkit.schema.json), which NAME repeats
NAME = re.compile(rf"^[a-z0-9][a-z0-9._-]{{0,{NAME_LENGTH - 1}}}$")
# Template files stored under another name so they do not act on kdkit's own repository.
RENAMES = {"dot-gitignore": ".gitignore", "dot-env.example": ".env.example"}
# Files below these folders are copied byte for byte (pilot inputs must stay exactly as shipped).
VERBATIM = ("data",)


def default_name(target: Path) -> str:
    name = re.sub(r"[^a-z0-9._-]+", "-", target.resolve().name.lower()).strip("-._")
    return name or "kdkit-project"


def template_builds(python: str) -> dict[str, str]:
    """The torch pin, and each backend's wheel index and base image, that a new project gets: the
    build pairings.json names under "template", which must be a published build of that release."""
    from kdkit.facts.pairings import load_pairings

    pairings = load_pairings()
    values = {"torch": pairings.data["template"]["torch"]}
    for backend in BACKENDS:
        build = pairings.template_build(backend)
        image = pairings.base_image(build.label, python)
        if image is None:
            raise BadInput(
                f"{pairings.files[-1]}: $.indexes.{build.label} has no base_image for the "
                "template; add it")
        values[f"{backend}_index"] = TORCH_INDEX_URL.format(label=build.label)
        values[f"{backend}_image"] = image
    return values


def _render(text: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        text = text.replace("{{" + key + "}}", value)
    return text


@dataclass(frozen=True)
class Created:
    """What ``kdkit init`` did: the project's root, and the staging of killed inits it removed
    first."""

    root: Path
    removed: list[Path]


def init_project(target: Path, name: str | None = None, backend: str = "cuda", force: bool = False,
                 template: str = DEFAULT) -> Path:
    """Create a project at ``target`` from the template and return its resolved path (see
    create_project)."""
    return create_project(target, name, backend, force, template).root


def create_project(target: Path, name: str | None = None, backend: str = "cuda",
                   force: bool = False,
                   template: str = DEFAULT) -> Created:
    """Create a project at ``target`` from the template called ``template``
    (kdkit.project.templates).

    An existing non-empty folder is refused unless ``force``; with ``force`` only the
    template's files are written over. A failure part-way leaves no trace behind.
    """
    chosen = find(template)  # an unknown template: BadInput before anything is written
    target = target.resolve()
    project_name, existing = _check_inputs(target, name, backend, force)
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    values = {"name": project_name, "backend": backend, "python": python, **template_builds(python)}
    # Build the whole tree beside the target, then move it into place: a failure leaves nothing.
    made: list[Path] = []
    was_empty = target.is_dir() and not existing
    try:
        _make_parents(target.parent, made)
        with staged_beside(target) as staged:  # removed, whatever fails, unless published
            _copy_template(template_dir(), chosen, staged.path, values)
            (staged.path / "runs").mkdir(exist_ok=True)
            # an empty folder (often the shell's cwd: never replaced), or --force
            if target.is_dir():
                _merge(staged.path, target)
            else:
                staged.publish()  # atomic: absent, or the whole project
    except OSError as exc:
        if was_empty:
            _empty(target)
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                folder.rmdir()
        if exc.errno == errno.ENAMETOOLONG:
            raise BadInput(f"{target}: a folder name on the way is longer than the file system "
                           f"allows ({exc.strerror}); nothing was left behind, choose a shorter "
                           "path") from None
        raise BadInput(f"{target}: could not write the project ({exc.strerror or exc}); nothing "
                       "was left behind, free space or fix permissions (or choose another place) "
                       "and retry") from None
    return Created(target, staged.removed)


def _check_inputs(target: Path, name: str | None, backend: str, force: bool) -> tuple[str, bool]:
    """(the project's name, whether ``target`` holds anything), once the name, the backend and the
    place are fit for a project; BadInput before anything is written when they are not."""
    project_name = name if name is not None else default_name(target)
    if not NAME.fullmatch(project_name):
        raise BadInput(_name_problem(project_name, target if name is None else None))
    _check_name_length(target)
    if backend not in BACKENDS:
        raise BadInput(f"--backend {backend}: unknown backend; choose one of {', '.join(BACKENDS)}")
    if target.exists() and not target.is_dir():
        raise BadInput(f"{target}: exists and is not a folder; choose another path")
    existing = _not_empty(target)
    if existing and not force:
        # a killed init's staging goes anyway
        cleaned = clean_stale(target) if target.parent.is_dir() else []
        said = (f" (removed {len(cleaned)} staging folder(s) left by a killed init: {cleaned[0]})"
                if cleaned else "")
        raise BadInput(
            f"{target}: folder exists and is not empty; choose a new path or pass --force{said}")
    return project_name, existing


def _name_problem(name: str, folder: Path | None) -> str:
    """Why ``name`` cannot be a project's name (kdkit.json's rule, NAME): its length or its
    characters, and where it came from (--name, or the folder's name when ``folder`` is given)."""
    said = f"{name[:40]!r}..." if len(name) > 40 else repr(name)
    if len(name) > NAME_LENGTH:
        reason = (
            f"has {len(name)} characters, more than the {NAME_LENGTH} a project name may have (it "
            "names the image)")
    else:
        reason = "use lowercase letters, digits, '.', '_' or '-' (it becomes the image name)"
    if folder is None:
        return f"--name {said}: {reason}"
    return (
        f"{folder}: the project name made from the folder's name, {said}, {reason}; pass --name "
        "NAME")


def _check_name_length(target: Path) -> None:
    """Each folder name ``target`` still needs within the file system's limit on one name (NAME_MAX
    bytes, read from the nearest folder that exists), the last one counting the staging name the
    project is built under (kdkit.core.staging.staging_for: .NAME.partial-PID)."""
    existing = target.parent
    while not _is_dir(existing) and existing != existing.parent:
        existing = existing.parent
    try:
        limit = os.pathconf(existing, "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255  # the limit of ext4, XFS, Btrfs, APFS and NTFS
    for part in target.relative_to(existing).parts[:-1]:
        if len(os.fsencode(part)) > limit:
            raise BadInput(f"{target}: the folder name {part[:40]!r}... on the way is "
                           f"{len(os.fsencode(part))} bytes, longer than the file system allows "
                           f"({limit} bytes in a name); choose a shorter path")
    size, staged = len(os.fsencode(target.name)), len(os.fsencode(staging_for(target).name))
    if staged > limit:
        raise BadInput(f"{target}: the folder's name is {size} bytes; this file system allows "
                       f"{limit} bytes in a name and init builds the project under {staged - size} "
                       "more (.NAME.partial-PID); choose a name of at most "
                       f"{limit - (staged - size)} bytes")


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:  # a name too long to look up
        return False


def _not_empty(target: Path) -> bool:
    try:
        return target.is_dir() and any(target.iterdir())
    except OSError as exc:  # a folder this user cannot list
        raise BadInput(
            f"{target}: cannot read the folder ({exc.strerror}); choose another path") from None


def _empty(folder: Path) -> None:
    """Remove what a failed merge moved into ``folder``: it was empty before, so all of it is
    init's."""
    with contextlib.suppress(OSError):
        for path in folder.iterdir():
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


def _make_parents(folder: Path, made: list[Path]) -> None:
    """Create ``folder`` and its missing parents, outermost first, noting each in ``made`` as it is
    made."""
    for path in reversed([p for p in (folder, *folder.parents) if not p.exists()]):
        path.mkdir()
        made.append(path)


def _copy_template(source: Path, template: Template, dest: Path, values: dict[str, str]) -> None:
    """The base template, then the chosen template's overlay over it
    (kdkit.project.templates.template_files)."""
    for path, rel in template_files(source, template):
        out = dest / rel.parent / RENAMES.get(rel.name, rel.name)
        if path.is_dir():
            out.mkdir(parents=True, exist_ok=True)
        elif rel.parts[0] in VERBATIM:
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, out)
        else:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(_render(path.read_text(encoding="utf-8"), values), encoding="utf-8")


def _merge(staging: Path, target: Path) -> None:
    """Into an existing folder: move each template file over its namesake, kdkit.json last, so a
    folder that a kill stopped half-way is never taken for a project."""
    marker = staging / "kdkit.json"
    for path in [*sorted(p for p in staging.rglob("*") if p != marker), marker]:
        dest = target / path.relative_to(staging)
        if path.is_dir():
            dest.mkdir(parents=True, exist_ok=True)
        else:
            os.replace(path, dest)
