"""What a bundle carries of a project, decided before anything is written: the allow-list, the
project's files (its committed tree in a git checkout, else its folder) and the packing plan
(written into the bundle by :mod:`kdkit.config.export`).

What a project is comes from an allow-list, the same in both modes: ``kdkit.json``,
``campaign.json`` and its decisions, ``config/``, ``requirements/``, ``src/``, ``README*``, and what
the configs name (the requirements input, each backend's lock and the PEP 751 lock beside it, the
pilot config, its inputs and manifest, the top-level package of the pilot's entry and of the train
module). Nothing else travels: ``runs/``, ``.git``, caches and any other folder stay home (their
top-level names are listed in bundle.json). A file named like a secret
(:data:`kdkit.core.secretnames.SECRET_FILES`: ``.env*``, ``*.pem``, ``id_ed25519``, ``.netrc``,
``.ssh/`` ...) is left out wherever it is, even inside an allowed folder, and named in bundle.json
(``left_out``) and in the command's output: secrets reach the rented machine at run time only.

Symbolic links: every file the bundle reads must resolve inside the project
(:func:`kdkit.core.projectfiles.real_inside`, through every link; in git mode the committed link
is followed inside the committed tree). A link inside the project to a file inside it is carried as
that file (a bundle holds no links). A link that leads outside the project, to a folder, to nothing
or to a place a bundle never carries (``.git``, ``runs/``) is refused with exit 2 naming the link
and where it points: it is decided before anything is written, and a bundle that silently lacked a
file the project reaches through a link would fail on the rented machine, where the time is paid
for. A link to a file named like a secret is left out and named, as that file would be.
"""

from __future__ import annotations

import fnmatch
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from kdkit.config.project import Project
from kdkit.core.errors import BadInput
from kdkit.core.git import git_output, git_path
from kdkit.core.pilotconfig import named_paths
from kdkit.core.projectfiles import DOTTED, config_path, real_inside, require, runs_problem
from kdkit.core.secretnames import secret_file

if TYPE_CHECKING:
    from collections.abc import Mapping

# The folders that make a project, besides what its configs name (see the module docstring).
PROJECT_FOLDERS = ("config", "requirements", "src")
# The campaign (kdkit.config.campaign, kdkit.order.campaign): carried so that `kdkit campaign` and
# `decide` work on the rented machine too, its decisions log with it
CAMPAIGN_FILES = ("campaign.json", "campaign-decisions.jsonl")
README = "readme*"
# Never walked and never carried, anywhere: version control, virtual environments, caches.
NEVER_CARRIED = frozenset(
    {".git", "__pycache__", ".venv", ".mypy_cache", ".pytest_cache", ".ruff_cache"})


# ---------------------------------------------------------------- what a project is: the allow-list


@dataclass(frozen=True)
class AllowList:
    """The places that make a project (relative POSIX paths, files or folders) and its runs
    folder."""

    places: tuple[str, ...]
    runs: str

    @classmethod
    def of(cls, project: Project) -> AllowList:
        """The allow-list of ``project``: :data:`PROJECT_FOLDERS`, README*, and what its configs
        name."""
        root, pilot_file, marker = (project.root, project.pilot_config_path,
                                    project.root / "kdkit.json")
        named = [(marker, "$.requirements", project.config["requirements"]),
                 (marker, "$.pilot_config", project.config["pilot_config"])]
        named += [(marker, f"$.backends.{name}.lock", spec["lock"])
                  for name, spec in project.config["backends"].items()]
        places = ["kdkit.json", *CAMPAIGN_FILES, *PROJECT_FOLDERS]
        places += [_relative(root, str(value), file, where) for file, where, value in named]
        # each lock checked above: its pylock is beside it
        places += [_relative(root, os.path.relpath(project.backend(name).pylock, root), marker,
                             f"$.backends.{name}.lock")
                   for name in project.config["backends"]]
        # read nothing outside the project, even through a link
        if real_inside(root, pilot_file) is None:
            raise BadInput(f"{marker}: $.pilot_config: {pilot_file} leads to "
                           f"{os.path.realpath(pilot_file)}, outside the project {root}; keep the "
                           "pilot config inside the project")
        pilot = project.pilot_config()
        places += [_relative(root, value, pilot_file, where) for where, value in named_paths(pilot)]
        for value in (pilot.get("entry"), project.config.get("train")):
            top = str(value).split(":", 1)[0].split(".", 1)[0] if isinstance(value, str) else ""
            if DOTTED.fullmatch(top):  # the importable package or module the configs name
                places += [top, f"{top}.py"]
        runs = _relative(root, require(pilot, "runs", str, pilot_file), pilot_file, "$.runs")
        # the pilot's own rule, on all it carries
        if (problem := runs_problem(root, runs, places)) is not None:
            raise BadInput(f"{pilot_file}: $.runs: {problem}")
        return cls(tuple(dict.fromkeys(places)), runs)

    def never(self, rel: str) -> str | None:
        """Why ``rel`` is never carried (version control, caches, results), or None."""
        parts = PurePosixPath(rel).parts
        hidden = sorted(NEVER_CARRIED.intersection(parts))
        if hidden:
            return f"{hidden[0]}/ is never carried"
        if rel.endswith((".pyc", ".pyo")):
            return "compiled Python is never carried"
        if rel == self.runs or rel.startswith(self.runs + "/"):
            return f"results ({self.runs}/) are copied out with `kdkit copy-out`, never bundled"
        return None

    def allows(self, rel: str) -> bool:
        """Whether ``rel`` lies in a place that makes the project."""
        if "/" not in rel and fnmatch.fnmatchcase(rel.lower(), README):
            return True
        return any(p == "." or rel == p or rel.startswith(p + "/") for p in self.places)

    def carries(self, rel: str) -> bool:
        """Whether a regular file at ``rel`` would travel in the bundle."""
        return self.never(rel) is None and secret_file(rel) is None and self.allows(rel)


def _relative(root: Path, value: str, file: Path, where: str) -> str:
    """A path a config names, relative to the root (BadInput naming the key when it leaves the
    project)."""
    target = config_path(root, value, file, where)
    return "." if target == root else target.relative_to(root).as_posix()


# ---------------------------------------------------------------- the files of the project, in both
# modes


@dataclass(frozen=True)
class Entry:
    """One non-folder of the project tree: a regular file, a link (with its target), or something
    else."""

    kind: str  # "file", "link", "submodule" or "other" (FIFO, socket, device)
    target: str = ""


@dataclass
class Packing:
    """What goes into ``project/``: each path there and the path of the project it is read from (the
    same, or a link's target), what was left out and why, and the top-level names outside the
    allow-list."""

    files: dict[str, str] = field(default_factory=dict)
    left_out: list[dict[str, str]] = field(default_factory=list)
    outside_allow_list: list[str] = field(default_factory=list)


def walk_project(root: Path,
                 skip: frozenset[str] = frozenset()) -> Iterator[tuple[str, os.stat_result | None]]:
    """(path relative to ``root``, lstat) of every non-folder below ``root``, folder by folder in
    name order.

    Never enters :data:`NEVER_CARRIED`, the relative folders of ``skip`` or a linked folder (the
    link itself is yielded). A folder it cannot read is yielded with None: the caller decides (a
    results folder written by the container's user is not the bundle's business; a source folder
    is).
    """
    for rel, path in _walk_paths(root, skip):
        if path is None:
            yield rel, None
            continue
        try:
            info = os.lstat(path)
        except OSError:
            continue  # gone while walking
        yield rel, info


def project_names(root: Path, skip: frozenset[str] = frozenset()) -> Iterator[str]:
    """The paths :func:`walk_project` yields, without an lstat each (a large tree's cost): names
    only."""
    for rel, _path in _walk_paths(root, skip):
        yield rel


def _walk_paths(root: Path, skip: frozenset[str]) -> Iterator[tuple[str, str | None]]:
    """(relative path, path) of every non-folder below ``root``, as :func:`walk_project` walks;
    (relative path, None) for a folder it cannot read."""
    unreadable: list[str] = []

    def note(error: OSError) -> None:
        unreadable.append(Path(error.filename).relative_to(root).as_posix())

    for folder, dirs, files in os.walk(root, onerror=note):
        while unreadable:
            yield unreadable.pop(), None
        base = Path(folder).relative_to(root).as_posix()
        # as (base / name).as_posix(), without a Path per file
        prefix = "" if base == "." else base + "/"
        entries, keep = list(files), list[str]()
        for name in sorted(dirs):
            rel = prefix + name
            if name in NEVER_CARRIED or rel in skip:
                continue
            (entries if os.path.islink(os.path.join(folder, name)) else keep).append(name)
        dirs[:] = keep
        path = os.path.join(folder, "")  # the folder and a separator, once
        for name in sorted(entries):
            yield prefix + name, path + name
    while unreadable:
        yield unreadable.pop(), None


def _file_entries(root: Path, allow: AllowList) -> dict[str, Entry]:
    entries = {}
    for rel, info in walk_project(root, frozenset({allow.runs})):
        if info is None:
            if allow.never(rel) is None \
                    and (allow.allows(rel) or any(p.startswith(rel + "/") for p in allow.places)):
                raise BadInput(
                    f"{root / rel}: cannot read this folder of the project; fix its permissions")
            continue
        if stat.S_ISLNK(info.st_mode):
            entries[rel] = Entry("link", os.readlink(root / rel))
        else:
            entries[rel] = Entry("file" if stat.S_ISREG(info.st_mode) else "other")
    return entries


def _git_entries(root: Path, git: Mapping[str, Any]) -> dict[str, Entry]:
    """The committed tree of ``root`` at HEAD: every blob, link and submodule, by path relative to
    ``root``."""
    # Fails when HEAD has no such folder (the project was never committed): then nothing is, and the
    # essential files are reported as not committed.
    listing = git_output(root, "ls-tree", "-r", "--full-tree", f"HEAD:{git['prefix']}") or ""
    entries = {}
    for line in listing.splitlines():
        meta, _tab, name = line.partition("\t")
        mode, _kind, oid = meta.split(" ")
        rel = git_path(name)
        if mode == "120000":
            try:
                target = git_output(root, "cat-file", "blob", oid)
            except UnicodeDecodeError:
                target = None
            if target is None:
                raise BadInput(f"{rel}: a committed link whose target git cannot give as UTF-8 "
                               "text; replace the link by the file")
            entries[rel] = Entry("link", target)
        else:
            entries[rel] = Entry(
                {"100644": "file", "100755": "file", "160000": "submodule"}.get(mode, "other"))
    return entries


def _tree_resolve(rel: str, entries: dict[str, Entry]) -> str | None:
    """Follow the committed links of ``rel`` inside the tree (lexically, as git stores them); None
    when the path leaves the project or links loop."""
    pending, resolved, hops = list(PurePosixPath(rel).parts), list[str](), 0
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if not resolved:
                return None
            resolved.pop()
            continue
        resolved.append(part)
        entry = entries.get("/".join(resolved))
        if entry is not None and entry.kind == "link":
            hops += 1
            if hops > 40 or entry.target.startswith("/"):
                return None
            resolved.pop()
            pending = list(PurePosixPath(entry.target).parts) + pending
    return "/".join(resolved)


def printable_name(rel: str) -> str:
    """A name fit for a one-line message: control characters and undecodable bytes escaped."""
    shown = rel.encode("utf-8", errors="backslashreplace").decode("utf-8")
    return shown if shown.isprintable() else repr(shown)


def _check_name(rel: str, where: str) -> None:
    """A carried name must be UTF-8 without control characters or backslashes (SHA256SUMS holds it
    as is)."""
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        raise BadInput(f"{where}: the file name is not UTF-8; rename it (bundle.json and "
                       "SHA256SUMS list names as UTF-8)") from None
    if any(ord(c) < 32 or ord(c) == 127 or c == "\\" for c in rel):
        raise BadInput(f"{where}: the file name holds a control character or a backslash; rename "
                       "it (SHA256SUMS lists one name a line)")


def plan_packing(project: Project, allow: AllowList,
                 git: Mapping[str, Any] | None) -> Packing:
    """Decide, before anything is written, what goes into ``project/`` (see the module
    docstring)."""
    root = project.root
    entries = _git_entries(root, git) if git else _file_entries(root, allow)
    at = f" (committed at {str(git['revision'])[:12]})" if git else ""
    packing, outside = Packing(), set()
    for rel, entry in sorted(entries.items()):
        where = f"{printable_name(rel)}{at}" if git else printable_name(str(root / rel))
        if allow.never(rel) is not None:
            continue
        what = secret_file(rel)
        if what is not None:
            packing.left_out.append({"file": rel, "why": f"named like {what}"})
            continue
        if not allow.allows(rel):
            outside.add(rel.split("/", 1)[0])
            continue
        if entry.kind == "submodule":
            packing.left_out.append(
                {"file": rel, "why": "a git submodule: git archive does not carry it"})
            continue
        if entry.kind == "other":
            raise BadInput(
                f"{where}: not a regular file (a FIFO, socket or device); remove it from the "
                "project")
        source = rel
        if entry.kind == "link":
            source, left = _link_source(root, rel, entry, entries, allow, where, git is not None)
            if left is not None:
                packing.left_out.append({"file": rel, "why": left})
                continue
        _check_name(rel, where)
        packing.files[rel] = source
    packing.outside_allow_list = sorted(outside)
    return packing


def _link_source(root: Path, rel: str, entry: Entry, entries: dict[str, Entry], allow: AllowList,
                 where: str,
                 in_git: bool) -> tuple[str, str | None]:
    """The project file a link stands for, and why it is left out (None when it is carried);
    BadInput when it leads outside the project, to a folder or to nothing."""
    if in_git:
        target = _tree_resolve(rel, entries)
        shown = entry.target
        kind = "missing" if target is None else (
            entries[target].kind if target in entries else
            "folder" if any(k.startswith(target + "/") for k in entries) else "missing")
    else:
        real = real_inside(root, root / rel)
        shown = os.path.realpath(root / rel)
        target = None if real is None else ("." if real == root
                                            else real.relative_to(root).as_posix())
        kind = ("folder" if real.is_dir() else "file" if real.is_file() else
                "missing" if not real.exists() else "other") if real is not None else "missing"
    if target is None:
        raise BadInput(f"{where}: a symbolic link to {shown}, outside the project {root}; a bundle "
                       "carries the project's own files only: copy the file into the project or "
                       "remove the link")
    if kind != "file":
        is_what = {
            "folder": "a folder", "missing": "nothing (a broken link)"}.get(kind,
                                                                            "not a regular file")
        raise BadInput(f"{where}: a symbolic link to {shown}, which is {is_what}; a bundle carries "
                       "files, not links: replace the link by the file itself")
    never = allow.never(target)
    if never is not None:
        raise BadInput(f"{where}: a symbolic link to {target}, which a bundle never carries "
                       f"({never}); replace the link by a copy of the file")
    what = secret_file(target)
    return target, (f"a link to {target}, named like {what}" if what is not None else None)
