"""`kdkit bundle`, `kdkit verify-bundle`, `kdkit load`: one verified folder that carries a project
to the rented machine.

A bundle holds the project at its revision (``git archive`` in a git checkout, else its files),
``kdkit.pyz`` (kdkit's in-container part as one runnable file, for hosts without Docker), the image
as a compressed ``docker save`` archive (unless ``--no-image``), ``bundle.json`` (what was packed,
file by file, with the image's id and labels), ``RUN.md`` (the exact commands) and ``SHA256SUMS``
(``sha256sum -c`` reads it).

What a project is comes from an allow-list, the same in both modes: ``kdkit.json``, ``config/``,
``requirements/``, ``src/``, ``README*``, and what the configs name (the requirements input, each
backend's lock, the pilot config, its inputs and manifest, the top-level package of the pilot's
entry and of the train module). Nothing else travels: ``runs/``, ``.git``, caches and any other
folder stay home (their top-level names are listed in bundle.json). A file named like a secret
(:data:`kdkit.core.credentials.SECRET_FILES`: ``.env*``, ``*.pem``, ``id_ed25519``, ``.netrc``, ``.ssh/``
...) is left out wherever it is, even inside an allowed folder, and named in bundle.json
(``left_out``) and in the command's output: secrets reach the rented machine at run time only.

Symbolic links: every file the bundle reads must resolve inside the project
(:func:`kdkit.core.projectfiles.real_inside`, through every link; in git mode the committed link
is followed inside the committed tree). A link inside the project to a file inside it is carried as
that file (a bundle holds no links). A link that leads outside the project, to a folder, to nothing
or to a place a bundle never carries (``.git``, ``runs/``) is refused with exit 2 naming the link and
where it points: it is decided before anything is written, and a bundle that silently lacked a file
the project reaches through a link would fail on the rented machine, where the time is paid for.
A link to a file named like a secret is left out and named, as that file would be.

``--out`` must lie outside the project and must not hold it (resolved paths, links included);
``--force`` replaces only a folder that kdkit wrote as a bundle: its bundle.json carries
``kdkit_bundle`` and every file in it is one its SHA256SUMS lists (results of a run, or any other
added file, make it refuse). Files are not re-hashed for that: a bundle is derived data.

The folder is assembled as ``.OUT.partial-PID`` beside ``--out`` (:mod:`kdkit.core.staging`) and renamed
at the end: a failure or a SIGKILL leaves nothing half-written under ``--out``, and the next
`kdkit bundle` to the same ``--out`` removes what a dead process left and says so on stderr. The
image is compressed while ``docker save`` still streams, with zstd by default: measured on the test
image (bench/bench_bundle.py) it is both smaller and many times faster than ``docker save | gzip``.
Docker engines before 25 cannot read zstd themselves, so ``kdkit load`` decompresses on the way in.

`kdkit verify-bundle` checks every file against SHA256SUMS and against the file list of
bundle.json: a required file that is gone (with its SHA256SUMS line or without), a listed file that
bundle.json does not know, a file that neither lists, or a link, is a failure.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import stat
import tarfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from kdkit import __version__
from kdkit.core import checksums, proc
from kdkit.core.checksums import SUMS, safe_name
from kdkit.core.credentials import refuse_credentials_in, secret_file
from kdkit.core.errors import BadInput, CheckFailed, KdkitError, Unavailable
from kdkit.core.jsonio import atomic_write_json, atomic_write_text, load_json, sha256_file
from kdkit.core.projectfiles import DOTTED, inside, is_within, real_inside, require
from kdkit.core.staging import clean_stale, describe_removed, hold, release, staging_for
from kdkit.project import Project, load_project
from kdkit.zipapp import build_zipapp

BUNDLE_JSON = "bundle.json"
RUN_MD = "RUN.md"
ZIPAPP = "kdkit.pyz"
PROJECT = "project"
# bundle.json's format key: what marks a folder as a bundle kdkit wrote (and --force may replace).
FORMAT_KEY = "kdkit_bundle"
FORMAT = 2
# The folders that make a project, besides what its configs name (see the module docstring).
PROJECT_FOLDERS = ("config", "requirements", "src")
README = "readme*"
# Never walked and never carried, anywhere: version control, virtual environments, caches.
NEVER_CARRIED = frozenset({".git", "__pycache__", ".venv", ".mypy_cache", ".pytest_cache", ".ruff_cache"})
# Labels that tie an image to the bundle; `kdkit load` re-checks them after loading.
TIED_LABELS = ("dev.kdkit.project", "dev.kdkit.backend", "dev.kdkit.python", "dev.kdkit.lock.path",
               "dev.kdkit.lock.sha256", "org.opencontainers.image.revision")

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Compressor:
    """A command-line compressor: streaming, multi-threaded where it can be, present on most hosts."""

    name: str
    suffix: str
    compress: tuple[str, ...]
    decompress: tuple[str, ...]


COMPRESSORS = {
    # Chosen by measurement (bench/results/bundle.json): level 3 on all cores.
    "zstd": Compressor("zstd", ".tar.zst", ("zstd", "-q", "-T0", "-3", "-c"), ("zstd", "-q", "-dc")),
    # The universal fallback: every engine and host reads gzip.
    "gzip": Compressor("gzip", ".tar.gz", ("gzip", "-6", "-c"), ("gzip", "-dc")),
}


# ---------------------------------------------------------------- the project at its revision


@dataclass(frozen=True)
class Source:
    """What a bundle is made from: the project, its backend and fresh lock, its git state."""

    project: Project
    backend: str
    lock: Path
    lock_sha256: str
    git: dict[str, Any] | None

    @property
    def lock_rel(self) -> str:
        return self.lock.relative_to(self.project.root).as_posix()

    @property
    def revision(self) -> str | None:
        return str(self.git["revision"]) if self.git else None

    def expected_labels(self) -> dict[str, str]:
        """The image labels that must agree with this source for the image to belong in the bundle."""
        expected = {"dev.kdkit.project": self.project.name, "dev.kdkit.backend": self.backend,
                    "dev.kdkit.python": self.project.python, "dev.kdkit.lock.path": self.lock_rel,
                    "dev.kdkit.lock.sha256": self.lock_sha256}
        if self.revision:
            expected["org.opencontainers.image.revision"] = self.revision
        return expected


def _git(root: Path, *args: str) -> str | None:
    """git's output (whitespace kept: porcelain lines start with a space), None on failure or without git.

    Paths come quoted with octal escapes (``core.quotePath``), so the output is ASCII whatever the
    names hold; :func:`git_path` reads them back.
    """
    try:
        done = proc.run(["git", "-C", str(root), "-c", "core.quotePath=true", *args], timeout=60)
    except Unavailable:
        return None  # no git on this host: the project is copied as files
    return done.stdout if done.ok else None


_GIT_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


def git_path(text: str) -> str:
    """A path as git prints it (C-quoted when unusual) back to the name (non-UTF-8 bytes as surrogates)."""
    if len(text) < 2 or text[0] != '"' or text[-1] != '"':
        return text
    body, out, i = text[1:-1], bytearray(), 0
    while i < len(body):
        char = body[i]
        if char == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            if nxt in "01234567":
                out.append(int(body[i + 1:i + 4], 8) & 0xFF)
                i += 4
                continue
            out.append(_GIT_ESCAPES.get(nxt, ord(nxt)))
            i += 2
            continue
        out += char.encode("utf-8")
        i += 1
    return out.decode("utf-8", errors="surrogateescape")


def git_state(root: Path) -> dict[str, Any] | None:
    """Revision, source and uncommitted paths (relative to ``root``) of the checkout holding ``root``;
    None outside git."""
    from kdkit.images import provenance

    if _git(root, "rev-parse", "--verify", "--quiet", "HEAD") is None:
        return None
    revision, source = provenance(root)
    prefix = (_git(root, "rev-parse", "--show-prefix") or "").strip()
    # Porcelain paths are relative to the repository's top, whatever the current folder.
    status = _git(root, "status", "--porcelain", "--untracked-files=all", "--no-renames", "--", ".") or ""
    paths = [git_path(line[3:]) for line in status.splitlines() if line.strip()]
    return {"revision": revision.removesuffix("-dirty"), "source": source, "prefix": prefix,
            "uncommitted": [p.removeprefix(prefix) for p in paths if p.startswith(prefix)]}


# ---------------------------------------------------------------- what a project is: the allow-list


@dataclass(frozen=True)
class AllowList:
    """The places that make a project (relative POSIX paths, files or folders) and its runs folder."""

    places: tuple[str, ...]
    runs: str

    @classmethod
    def of(cls, project: Project) -> AllowList:
        """The allow-list of ``project``: :data:`PROJECT_FOLDERS`, README*, and what its configs name."""
        root, pilot_file, marker = project.root, project.pilot_config_path, project.root / "kdkit.json"
        named = [(marker, "$.requirements", project.config["requirements"]),
                 (marker, "$.pilot_config", project.config["pilot_config"])]
        named += [(marker, f"$.backends.{name}.lock", spec["lock"])
                  for name, spec in project.config["backends"].items()]
        places = ["kdkit.json", *PROJECT_FOLDERS]
        places += [_relative(root, str(value), file, where) for file, where, value in named]
        if real_inside(root, pilot_file) is None:  # read nothing outside the project, even through a link
            raise BadInput(f"{marker}: $.pilot_config: {pilot_file} leads to {os.path.realpath(pilot_file)}, outside "
                           f"the project {root}; keep the pilot config inside the project")
        pilot = project.pilot_config()
        places += [_relative(root, require(pilot, key, str, pilot_file), pilot_file, f"$.{key}")
                   for key in ("inputs", "manifest")]
        for value in (pilot.get("entry"), project.config.get("train")):
            top = str(value).split(":", 1)[0].split(".", 1)[0] if isinstance(value, str) else ""
            if DOTTED.fullmatch(top):  # the importable package or module the configs name
                places += [top, f"{top}.py"]
        runs = _relative(root, require({"runs": "runs", **pilot}, "runs", str, pilot_file), pilot_file, "$.runs")
        for place in places:
            if runs == "." or place == runs or place.startswith(runs + "/"):
                raise BadInput(f"{pilot_file}: $.runs: {runs!r} holds {place}, which the bundle must carry; give "
                               "the results a folder of their own (e.g. \"runs\")")
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
    """A path a config names, relative to the root (BadInput naming the key when it leaves the project)."""
    target = inside(root, value, file, where)
    return "." if target == root else target.relative_to(root).as_posix()


# ---------------------------------------------------------------- the files of the project, in both modes


@dataclass(frozen=True)
class Entry:
    """One non-folder of the project tree: a regular file, a link (with its target), or something else."""

    kind: str  # "file", "link", "submodule" or "other" (FIFO, socket, device)
    target: str = ""


@dataclass
class Packing:
    """What goes into ``project/``: each path there and the path of the project it is read from (the
    same, or a link's target), what was left out and why, and the top-level names outside the allow-list."""

    files: dict[str, str] = field(default_factory=dict)
    left_out: list[dict[str, str]] = field(default_factory=list)
    outside_allow_list: list[str] = field(default_factory=list)


def walk_project(root: Path, skip: frozenset[str] = frozenset()) -> Iterator[tuple[str, os.stat_result | None]]:
    """(path relative to ``root``, lstat) of every non-folder below ``root``, folder by folder in name order.

    Never enters :data:`NEVER_CARRIED`, the relative folders of ``skip`` or a linked folder (the link
    itself is yielded). A folder it cannot read is yielded with None: the caller decides (a results
    folder written by the container's user is not the bundle's business; a source folder is).
    """
    unreadable: list[str] = []

    def note(error: OSError) -> None:
        unreadable.append(Path(error.filename).relative_to(root).as_posix())

    for folder, dirs, files in os.walk(root, onerror=note):
        while unreadable:
            yield unreadable.pop(), None
        base = Path(folder).relative_to(root)
        entries, keep = list(files), list[str]()
        for name in sorted(dirs):
            rel = (base / name).as_posix()
            if name in NEVER_CARRIED or rel in skip:
                continue
            (entries if os.path.islink(os.path.join(folder, name)) else keep).append(name)
        dirs[:] = keep
        for name in sorted(entries):
            try:
                info = os.lstat(os.path.join(folder, name))
            except OSError:
                continue  # gone while walking
            yield (base / name).as_posix(), info
    while unreadable:
        yield unreadable.pop(), None


def _file_entries(root: Path, allow: AllowList) -> dict[str, Entry]:
    entries = {}
    for rel, info in walk_project(root, frozenset({allow.runs})):
        if info is None:
            if allow.never(rel) is None and (allow.allows(rel) or any(p.startswith(rel + "/") for p in allow.places)):
                raise BadInput(f"{root / rel}: cannot read this folder of the project; fix its permissions")
            continue
        if stat.S_ISLNK(info.st_mode):
            entries[rel] = Entry("link", os.readlink(root / rel))
        else:
            entries[rel] = Entry("file" if stat.S_ISREG(info.st_mode) else "other")
    return entries


def _git_entries(root: Path, git: dict[str, Any]) -> dict[str, Entry]:
    """The committed tree of ``root`` at HEAD: every blob, link and submodule, by path relative to ``root``."""
    # Fails when HEAD has no such folder (the project was never committed): then nothing is, and the
    # essential files are reported as not committed.
    listing = _git(root, "ls-tree", "-r", "--full-tree", f"HEAD:{git['prefix']}") or ""
    entries = {}
    for line in listing.splitlines():
        meta, _tab, name = line.partition("\t")
        mode, _kind, oid = meta.split(" ")
        rel = git_path(name)
        if mode == "120000":
            try:
                target = _git(root, "cat-file", "blob", oid)
            except UnicodeDecodeError:
                target = None
            if target is None:
                raise BadInput(f"{rel}: a committed link whose target git cannot give as UTF-8 text; "
                               "replace the link by the file")
            entries[rel] = Entry("link", target)
        else:
            entries[rel] = Entry({"100644": "file", "100755": "file", "160000": "submodule"}.get(mode, "other"))
    return entries


def _tree_resolve(rel: str, entries: dict[str, Entry]) -> str | None:
    """Follow the committed links of ``rel`` inside the tree (lexically, as git stores them); None when
    the path leaves the project or links loop."""
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
    """A carried name must be UTF-8 without control characters or backslashes (SHA256SUMS holds it as is)."""
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        raise BadInput(f"{where}: the file name is not UTF-8; rename it (bundle.json and SHA256SUMS list "
                       "names as UTF-8)") from None
    if any(ord(c) < 32 or ord(c) == 127 or c == "\\" for c in rel):
        raise BadInput(f"{where}: the file name holds a control character or a backslash; rename it "
                       "(SHA256SUMS lists one name a line)")


def plan_packing(project: Project, allow: AllowList, git: dict[str, Any] | None) -> Packing:
    """Decide, before anything is written, what goes into ``project/`` (see the module docstring)."""
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
            packing.left_out.append({"file": rel, "why": "a git submodule: git archive does not carry it"})
            continue
        if entry.kind == "other":
            raise BadInput(f"{where}: not a regular file (a FIFO, socket or device); remove it from the project")
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


def _link_source(root: Path, rel: str, entry: Entry, entries: dict[str, Entry], allow: AllowList, where: str,
                 in_git: bool) -> tuple[str, str | None]:
    """The project file a link stands for, and why it is left out (None when it is carried); BadInput
    when it leads outside the project, to a folder or to nothing."""
    if in_git:
        target = _tree_resolve(rel, entries)
        shown = entry.target
        kind = "missing" if target is None else (
            entries[target].kind if target in entries else
            "folder" if any(k.startswith(target + "/") for k in entries) else "missing")
    else:
        real = real_inside(root, root / rel)
        shown = os.path.realpath(root / rel)
        target = None if real is None else ("." if real == root else real.relative_to(root).as_posix())
        kind = ("folder" if real.is_dir() else "file" if real.is_file() else
                "missing" if not real.exists() else "other") if real is not None else "missing"
    if target is None:
        raise BadInput(f"{where}: a symbolic link to {shown}, outside the project {root}; a bundle carries "
                       "the project's own files only: copy the file into the project or remove the link")
    if kind != "file":
        is_what = {"folder": "a folder", "missing": "nothing (a broken link)"}.get(kind, "not a regular file")
        raise BadInput(f"{where}: a symbolic link to {shown}, which is {is_what}; a bundle carries files, not "
                       "links: replace the link by the file itself")
    never = allow.never(target)
    if never is not None:
        raise BadInput(f"{where}: a symbolic link to {target}, which a bundle never carries ({never}); "
                       "replace the link by a copy of the file")
    what = secret_file(target)
    return target, (f"a link to {target}, named like {what}" if what is not None else None)


def essential_files(project: Project, lock: Path) -> list[str]:
    """Paths (relative to the project) the rented machine cannot do without."""
    pilot = project.pilot_config()
    rel = [Path("kdkit.json"), project.pilot_config_path.relative_to(project.root),
           lock.relative_to(project.root), Path(require(pilot, "manifest", str, project.pilot_config_path))]
    return [PurePosixPath(os.path.normpath(p)).as_posix() for p in rel]


def require_essentials(source: Source, packing: Packing) -> None:
    """Before anything is written: the files the rented machine needs are in what will be packed."""
    for rel in essential_files(source.project, source.lock):
        if rel in packing.files:
            continue
        left = next((item["why"] for item in packing.left_out if item["file"] == rel), None)
        if left is not None:
            raise BadInput(f"{rel}: {left}, so no bundle carries it, yet the rented machine needs it; rename "
                           "it and update the config that names it")
        if source.git:
            raise BadInput(f"{rel}: not committed at revision {str(source.revision)[:12]}; the bundle must "
                           f"carry it (git add {rel} && git commit)")
        raise BadInput(f"{source.project.root / rel}: missing; the bundle must carry it (create it, see "
                       "`kdkit validate`)")


def export_git(root: Path, prefix: str, dest: Path, packing: Packing, essentials: list[str]) -> None:
    """Write the planned files of the committed tree of ``root`` (HEAD) into ``dest``.

    ``git archive`` honours ``export-ignore``: a planned file it leaves out is named in
    ``packing.left_out`` (BadInput when the rented machine needs it).
    """
    archive = dest.parent / ".project.tar"
    # From the repository's top: in a sub-folder, git archive would look for the sub-folder inside HEAD:prefix.
    top = (_git(root, "rev-parse", "--show-toplevel") or str(root)).strip()
    done = proc.run(["git", "-C", top, "archive", "--format=tar", "-o", str(archive), f"HEAD:{prefix}"])
    if not done.ok:
        raise KdkitError(f"{root}: git archive failed ({done.first_error_line()})")
    with tarfile.open(archive) as tar:
        members = {m.name: m for m in tar.getmembers() if m.isfile()}
        for rel, src in list(packing.files.items()):
            member = members.get(src)
            if member is None:
                if rel in essentials:
                    raise BadInput(f"{rel}: left out by `git archive` (export-ignore in .gitattributes?); the "
                                   "bundle must carry it")
                del packing.files[rel]
                packing.left_out.append({"file": rel, "why": "export-ignore: git archive leaves it out"})
                continue
            handle = tar.extractfile(member)
            assert handle is not None  # a regular member always has content
            _write_new(dest / rel, handle)
    archive.unlink()


def copy_files(root: Path, dest: Path, packing: Packing) -> None:
    """Copy the planned files of the project (no git) into ``dest``, each read without following a link."""
    for rel, src in packing.files.items():
        fd = os.open(root / src, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as handle:
            _write_new(dest / rel, handle)


def _write_new(path: Path, handle: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("xb") as out:
        shutil.copyfileobj(handle, out, 1 << 20)


# ---------------------------------------------------------------- the image


def label_mismatches(labels: dict[str, str], expected: dict[str, str]) -> list[str]:
    """``name: image has X, bundle has Y`` for each tied label that disagrees."""
    return [f"{name}: image has {labels.get(name, '(none)')!r}, bundle has {value!r}"
            for name, value in expected.items() if labels.get(name) != value]


def save_image(ref: str, compressor: Compressor, out: Path) -> dict[str, Any]:
    """Stream ``docker save`` of ``ref`` through the compressor into ``out``."""
    from kdkit.docker_adapter import connect, save_image_chunks

    engine = connect()
    facts = engine.require_image(ref)
    started = time.perf_counter()
    done = proc.pipe_to_file(compressor.compress, save_image_chunks(engine, ref), out)
    if not done.ok:
        raise KdkitError(f"{' '.join(compressor.compress)}: {done.first_error_line()} while compressing {ref}")
    return {"ref": ref, "id": facts.id, "labels": facts.labels, "file": out.name, "compressor": compressor.name,
            "bytes": out.stat().st_size, "image_bytes": facts.size,
            "seconds": round(time.perf_counter() - started, 3)}


def _check_image(ref: str, source: Source) -> None:
    """Before anything is written: the image exists and belongs to this project, lock and revision."""
    from kdkit.docker_adapter import connect

    facts = connect().require_image(ref)
    wrong = label_mismatches(facts.labels, source.expected_labels())
    if wrong:
        raise CheckFailed(f"image {ref}: does not match the project ({wrong[0]}); rebuild it with "
                          f"`kdkit build --backend {source.backend}` or pass --image")


# ---------------------------------------------------------------- RUN.md and SHA256SUMS


GPU_FLAGS = {"cuda": "--gpus all ", "rocm": "--device /dev/kfd --device /dev/dri --group-add video "
             "--security-opt seccomp=unconfined ", "cpu": ""}


def run_md(info: dict[str, Any]) -> str:
    """The exact commands, in order, for the machine that receives the bundle."""
    backend, lock = info["backend"], info["lock"]
    image = info["image"]
    lines = [f"# {info['project']}: bundle for the {backend} backend",
             "", f"Made by kdkit {info['kdkit_version']} on {info['created']} from revision "
             f"{info['revision'] or '(not a git checkout)'}.",
             "", "## 1. Check the copy before anything else", "",
             "    cd THIS_FOLDER", "    sha256sum -c --quiet SHA256SUMS     # or: kdkit verify-bundle .", ""]
    if image:
        decompress = " ".join(COMPRESSORS[image["compressor"]].decompress)
        lines += ["## 2. With Docker", "",
                  f"    kdkit load .                         # or: {decompress} {image['file']} | docker load",
                  f"    docker image inspect {image['ref']}   # id {image['id'][:19]}",
                  "    mkdir -p runs && chmod 777 runs      # the container runs as uid 10001",
                  f"    docker run --rm --network none {GPU_FLAGS[backend]}"
                  f"-v \"$PWD/runs:/app/runs\" {image['ref']}",
                  "", "The container runs diagnose, then verify-env against the lock, then the pilot; "
                  "its exit code is the verdict.", ""]
    lines += [f"## {3 if image else 2}. Without Docker (a Python that already has the locked packages)", "",
              f"    python3 kdkit.pyz diagnose --expect {backend}",
              f"    python3 kdkit.pyz verify-env --lock {PROJECT}/{lock}",
              f"    cd {PROJECT} && python3 ../kdkit.pyz pilot .",
              "    python3 ../kdkit.pyz sweep --batch-sizes 1,2,4,8           # batch size from measurements",
              "    python3 ../kdkit.pyz resume-test --out runs/resume-test   # training: resume in a new process",
              "", "Results go to runs/<run-id>/; copy them out with `python3 kdkit.pyz copy-out` and check "
              "the copy.", ""]
    return "\n".join(lines)


def write_sums(folder: Path) -> int:
    """``SHA256SUMS`` over every file of the bundle (kdkit.core.checksums); returns the count."""
    files = [(p.relative_to(folder).as_posix(), p) for p in folder.rglob("*") if p.is_file() and p != folder / SUMS]
    return checksums.write_sums(folder, files)


# ---------------------------------------------------------------- kdkit bundle


def _prepare_out(out: Path, root: Path, force: bool) -> Path:
    """``--out`` resolved (links included), outside the project and not holding it; an existing folder
    only with --force and only when kdkit wrote it as a bundle."""
    given, out = out, out.resolve()
    if is_within(os.fspath(out), os.fspath(root)):
        raise BadInput(f"--out {given}: resolves to {out}, the project {root} or a folder inside it; write the "
                       f"bundle outside the project (e.g. --out {root.parent / (root.name + '-bundle')})")
    if is_within(os.fspath(root), os.fspath(out)):
        raise BadInput(f"--out {given}: resolves to {out}, which holds the project {root}; write the bundle "
                       "to a new folder outside the project")
    if out.exists() and not force:
        raise BadInput(f"{out}: already exists; choose a new --out folder or pass --force to replace it")
    if out.exists() and not out.is_dir():
        raise BadInput(f"{out}: exists and is not a folder; choose another --out")
    if out.exists():
        why = not_a_bundle(out)
        if why is not None:
            raise BadInput(f"{out}: {why}; --force replaces only a bundle that kdkit wrote: choose a new --out "
                           "or move the folder away first")
    if not out.parent.is_dir():
        raise BadInput(f"{out.parent}: folder does not exist; create it or choose another --out")
    return out


def not_a_bundle(folder: Path) -> str | None:
    """Why ``folder`` is not exactly a bundle kdkit wrote (and so --force must not replace it), or None."""
    try:
        info = load_json(folder / BUNDLE_JSON, what="bundle description")
    except BadInput:
        return f"holds no readable {BUNDLE_JSON}, so kdkit did not write it as a bundle"
    if not isinstance(info, dict) or not isinstance(info.get(FORMAT_KEY), int):
        return f"its {BUNDLE_JSON} has no {FORMAT_KEY!r} key, so kdkit did not write it as a bundle"
    try:
        listed = read_sums(folder)
    except KdkitError:
        return f"its {SUMS} is missing or unreadable, so kdkit cannot tell its own files"
    foreign = [rel for rel, info_ in _bundle_tree(folder)
               if rel != SUMS and (rel not in listed or stat.S_ISLNK(info_.st_mode))]
    if foreign:
        return (f"holds {len(foreign)} file(s) that `kdkit bundle` did not write (e.g. {printable_name(foreign[0])}: "
                "results of a run, or an edit), which --force would delete")
    return None


def _replace_folder(staging: Path, out: Path) -> None:
    """Move the finished bundle into place; an old bundle (--force) is removed only afterwards."""
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")  # kdkit.core.staging's name: cleaned if left
        os.replace(out, old)
    os.replace(staging, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def make_bundle(project_dir: Path | None, out: Path, *, backend: str | None = None, image: str | None = None,
                include_image: bool = True, compressor: str = "zstd", force: bool = False,
                progress: Progress | None = None) -> dict[str, Any]:
    """Pack the project for another machine into ``out``; return what bundle.json records plus timings.

    Everything is checked before the first write (bad input leaves every file as it was); then stale
    staging of ``out`` left by a killed run is removed (and said), and the bundle is staged and renamed.
    """
    from kdkit.images import default_tag
    from kdkit.locking import require_fresh_lock

    say = progress or (lambda _m: None)
    started = time.perf_counter()
    project = load_project(project_dir)
    out = _prepare_out(out, project.root, force)
    chosen = project.backend(backend)
    lock = require_fresh_lock(project, chosen.name)
    source = Source(project, chosen.name, lock, sha256_file(lock), git_state(project.root))
    allow = AllowList.of(project)
    packing = plan_packing(project, allow, source.git)
    require_essentials(source, packing)
    ref = image or default_tag(project, chosen.name, source.lock_sha256)
    if compressor not in COMPRESSORS:
        raise BadInput(f"--compressor {compressor}: choose one of {', '.join(COMPRESSORS)}")
    if include_image:
        if shutil.which(COMPRESSORS[compressor].compress[0]) is None:
            raise Unavailable(f"{compressor}: program not found; install it (apt-get install {compressor}) "
                              "or pass --compressor gzip")
        _check_image(ref, source)

    removed = clean_stale(out)
    for line in describe_removed(removed):
        say(line)
    staging = staging_for(out)
    staging.mkdir()
    owner = hold(staging)
    try:
        info = _fill(staging, source, allow, packing, say)
        for path in sorted((staging / PROJECT).rglob("*")):  # what is packed, as packed: nothing secret travels
            if path.is_file():
                refuse_credentials_in(path, path.relative_to(staging / PROJECT).as_posix())
        if include_image:
            say(f"image {ref}: docker save | {' '.join(COMPRESSORS[compressor].compress)}")
            info["image"] = save_image(ref, COMPRESSORS[compressor], staging / f"image{COMPRESSORS[compressor].suffix}")
        _seal(staging, info, say)
        _replace_folder(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        release(owner)
    info["out"] = str(out)
    info["removed_staging"] = [str(path) for path in removed]
    info["seconds"] = round(time.perf_counter() - started, 3)
    return info


def _fill(staging: Path, source: Source, allow: AllowList, packing: Packing, say: Progress) -> dict[str, Any]:
    """Write the project and the zipapp into ``staging``; return the start of bundle.json's content."""
    project, git = source.project, source.git
    essentials = essential_files(project, source.lock)
    copied = staging / PROJECT
    copied.mkdir()
    if git:
        say(f"project at revision {git['revision'][:12]} (git archive)")
        export_git(project.root, git["prefix"], copied, packing, essentials)
    else:
        say("project files (not a git checkout)")
        copy_files(project.root, copied, packing)
    say(f"{ZIPAPP} (kdkit's in-container part)")
    build_zipapp(staging / ZIPAPP)
    pilot_config, manifest = essentials[1], essentials[3]
    return {
        FORMAT_KEY: FORMAT, "kdkit_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "project": project.name, "backend": source.backend, "python": project.python,
        "revision": source.revision, "source": git["source"] if git else None,
        "uncommitted": [p for p in git["uncommitted"] if allow.carries(p)] if git else [],
        "project_files": len(packing.files), "files": sorted(packing.files),
        "left_out": sorted(packing.left_out, key=lambda item: item["file"]),
        "outside_allow_list": packing.outside_allow_list,
        "lock": source.lock_rel, "lock_sha256": source.lock_sha256, "pilot_config": pilot_config,
        "manifest": manifest, "runs": allow.runs, "zipapp": ZIPAPP, "image": None,
    }


def _seal(staging: Path, info: dict[str, Any], say: Progress) -> None:
    """RUN.md, bundle.json, then SHA256SUMS over everything: the last files written."""
    atomic_write_text(staging / RUN_MD, run_md(info))
    atomic_write_json(staging / BUNDLE_JSON, info)
    say(SUMS)
    write_sums(staging)


# ---------------------------------------------------------------- kdkit verify-bundle



def read_sums(folder: Path) -> dict[str, str]:
    """A bundle's SHA256SUMS (kdkit.core.checksums); BadInput when it has none."""
    return checksums.read_sums(folder, "bundle", f"{folder} is not a kdkit bundle (made by `kdkit bundle`)")


def _bundle_tree(folder: Path) -> Iterator[tuple[str, os.stat_result]]:
    """(name, lstat) of every non-folder of a bundle, links included and never followed."""
    for base, dirs, files in os.walk(folder):
        here = Path(base)
        links = [d for d in dirs if (here / d).is_symlink()]
        dirs[:] = sorted(d for d in dirs if d not in links)
        for name in sorted([*files, *links]):
            path = here / name
            yield path.relative_to(folder).as_posix(), path.lstat()


def _required(info: Any) -> tuple[set[str], str | None]:
    """The files bundle.json says the bundle holds, and why it cannot say (None when it can)."""
    if not isinstance(info, dict) or info.get(FORMAT_KEY) != FORMAT:
        return set(), (f"has no {FORMAT_KEY!r}: {FORMAT} (made by an older kdkit, or not by kdkit); make the "
                       "bundle again with `kdkit bundle`")
    files, image = info.get("files"), info.get("image")
    named = [info.get(key) for key in ("lock", "pilot_config", "manifest")]
    if not isinstance(files, list) or not all(safe_name(f) for f in [*files, *named, "kdkit.json"]):
        return set(), "its file list ($.files, $.lock, $.pilot_config, $.manifest) is malformed"
    required = {BUNDLE_JSON, RUN_MD, ZIPAPP, *(f"{PROJECT}/{f}" for f in [*files, *named, "kdkit.json"])}
    if image:
        if not isinstance(image, dict) or not safe_name(image.get("file")):
            return set(), "its $.image.file is malformed"
        required.add(str(image["file"]))
    return required, None


def _results_folders(folder: Path, info: Any, listed: Iterable[str]) -> list[Path]:
    """Where runs write their results inside a bundle (RUN.md's commands: ``runs/`` beside the image,
    ``project/<runs>`` for kdkit.pyz): new files there are expected. A folder that holds a packed file
    is never one of them, whatever the pilot config says (``"runs": "src"`` would hide an added file)."""
    runs = info.get("runs") if isinstance(info, dict) else None
    runs = runs if safe_name(runs) else "runs"
    candidates = [folder / "runs", folder / PROJECT / str(runs)]
    packed = [folder / name for name in listed]
    return [r for r in candidates if not any(r == p or r in p.parents for p in packed)]


def verify_bundle(folder: Path, progress: Progress | None = None) -> dict[str, Any]:
    """Check every file against SHA256SUMS and bundle.json's file list before anything is loaded.

    Each problem names its file: altered, missing (with its SHA256SUMS line or without), listed in
    SHA256SUMS but not part of the bundle, present but listed nowhere, or a link (kdkit writes none).
    """
    folder = folder.resolve()
    if not folder.is_dir():
        raise BadInput(f"{folder}: not a folder; give the bundle folder made by `kdkit bundle`")
    listed = read_sums(folder)
    present = dict(_bundle_tree(folder))
    problems: list[dict[str, str]] = []
    intact: set[str] = set()
    for name, digest in listed.items():
        info_ = present.get(name)
        if info_ is None:
            problems.append({"file": name, "problem": "missing"})
            continue
        if stat.S_ISLNK(info_.st_mode) or not stat.S_ISREG(info_.st_mode):
            problems.append({"file": name, "problem": "a link or special file where a bundle holds a plain file"})
            continue
        if progress is not None and info_.st_size > 1 << 26:
            progress(f"checking {name} ({info_.st_size / 1e9:.2f} GB)")
        if sha256_file(folder / name) != digest:
            problems.append({"file": name, "problem": "altered: its sha256 differs from SHA256SUMS"})
        else:
            intact.add(name)
    info: Any = None
    if BUNDLE_JSON not in listed:
        problems.append({"file": BUNDLE_JSON, "problem": "not listed in SHA256SUMS" if BUNDLE_JSON in present
                         else "missing, and its SHA256SUMS line too"})
    elif BUNDLE_JSON in intact:
        try:
            info = load_json(folder / BUNDLE_JSON, what="bundle description")
        except BadInput as exc:
            problems.append({"file": BUNDLE_JSON, "problem": f"unreadable ({exc})"})
    required, why = _required(info) if info is not None else (set(), None)
    if why is not None:
        problems.append({"file": BUNDLE_JSON, "problem": why})
    results = _results_folders(folder, info, listed)
    unlisted = {name for name in present if name not in listed and name != SUMS
                and not any(r in (folder / name).parents for r in results)} - {BUNDLE_JSON}
    for name in sorted(required - set(listed)):
        problems.append({"file": name, "problem": "missing, and its SHA256SUMS line too (bundle.json lists it)"
                         if name not in present else "not listed in SHA256SUMS (bundle.json lists it)"})
        unlisted.discard(name)
    if info is not None and why is None:
        problems += [{"file": name, "problem": "listed in SHA256SUMS but not part of the bundle (bundle.json "
                      "does not list it)"} for name in sorted(set(listed) - required)]
    problems += [{"file": printable_name(name), "problem": "not listed in SHA256SUMS (added after bundling)"}
                 for name in sorted(unlisted)]
    return {"bundle": str(folder), "files": len(listed), "ok": not problems, "problems": problems}


def require_verified(report: dict[str, Any]) -> None:
    """CheckFailed naming the first bad file (and how many more)."""
    if report["problems"]:
        first = report["problems"][0]
        more = f" (+{len(report['problems']) - 1} more)" if len(report["problems"]) > 1 else ""
        raise CheckFailed(f"{Path(report['bundle']) / first['file']}: {first['problem']}{more}; "
                          "the bundle was changed or damaged in transfer: copy it again")


# ---------------------------------------------------------------- kdkit load


def load_bundle(folder: Path, progress: Progress | None = None) -> dict[str, Any]:
    """Verify every file, load the image, and check its id and labels against the bundle."""
    from kdkit.docker_adapter import connect, load_image_chunks

    say = progress or (lambda _m: None)
    say("verifying every file against SHA256SUMS")
    verified = verify_bundle(folder, progress)
    require_verified(verified)
    folder = Path(verified["bundle"])
    info = load_json(folder / BUNDLE_JSON, what="bundle description")
    image = info.get("image")
    if not image:
        raise BadInput(f"{folder / BUNDLE_JSON}: this bundle has no image (made with --no-image); use "
                       f"{ZIPAPP} as RUN.md says, or bundle again with the image")
    compressor = COMPRESSORS[image["compressor"]]
    engine = connect()
    say(f"loading {image['file']} ({image['bytes'] / 1e6:.0f} MB) through {compressor.decompress[0]}")
    started = time.perf_counter()
    loaded = load_image_chunks(engine, proc.stdout_chunks([*compressor.decompress, str(folder / image["file"])]),
                               str(folder / image["file"]))
    seconds = time.perf_counter() - started
    facts = engine.require_image(image["ref"])
    lock_sha256 = sha256_file(folder / PROJECT / info["lock"])
    wrong = [] if facts.id == image["id"] else [f"id: image has {facts.id}, bundle has {image['id']}"]
    recorded = {name: image["labels"][name] for name in TIED_LABELS if name in image["labels"]}
    wrong += label_mismatches(facts.labels, {**recorded, "dev.kdkit.lock.sha256": lock_sha256})
    if wrong:
        raise CheckFailed(f"image {image['ref']}: loaded, but does not match the bundle ({wrong[0]}); "
                          "the bundle is inconsistent: make it again with `kdkit bundle`")
    return {"bundle": str(folder), "image": image["ref"], "id": facts.id, "loaded": loaded,
            "labels_checked": list(TIED_LABELS), "seconds": round(seconds, 3), "files": verified["files"]}
