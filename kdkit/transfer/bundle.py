"""`kdkit bundle`: one verified folder that carries a project to the rented machine.

A bundle holds the project at its revision (``git archive`` in a git checkout, else its files),
``kdkit.pyz`` (kdkit's in-container part as one runnable file, for hosts without Docker), the image
as a compressed ``docker save`` archive (unless ``--no-image``), ``bundle.json`` (what was packed,
file by file, with the image's id and labels), ``RUN.md`` (the exact commands) and ``SHA256SUMS``
(``sha256sum -c`` reads it).

What travels of the project, and how links and secret-shaped files are treated, is decided by
:mod:`kdkit.config.files`; what a bundle folder is, by :mod:`kdkit.transfer.format`; `kdkit
verify-bundle` and `kdkit load` are :mod:`kdkit.transfer.verify`.

``--out`` must lie outside the project and must not hold it (resolved paths, links included);
``--force`` replaces only a folder that kdkit wrote as a bundle: its bundle.json carries
``kdkit_bundle`` and every file in it is one its SHA256SUMS lists (results of a run, or any other
added file, make it refuse). Files are not re-hashed for that: a bundle is derived data.

The folder is assembled as ``.OUT.partial-PID`` beside ``--out`` (:mod:`kdkit.core.staging`) and
renamed at the end without replacing anything: a failure or a SIGKILL leaves nothing half-written
under ``--out``, of two bundles to one ``--out`` one is refused, what another program put at
``--out`` meanwhile stays as it is (and ``--force`` replaces only the bundle it checked), and the
next `kdkit bundle` to the same ``--out`` removes what a dead process left and says so on stderr. A
full disk is bad input (exit 2). The image is compressed while ``docker save`` still streams, with
zstd by default: measured on the test image (bench/bench_bundle.py) it is both smaller and many
times faster than ``docker save | gzip``. Docker engines before 25 cannot read zstd themselves, so
``kdkit load`` decompresses on the way in.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from kdkit import __version__
from kdkit.config.export import copy_files, export_git
from kdkit.config.files import AllowList, Packing, plan_packing
from kdkit.config.project import Project, load_project
from kdkit.core import checksums, proc
from kdkit.core.checksums import SUMS
from kdkit.core.credentials import refuse_credentials_in
from kdkit.core.errors import BadInput, CheckFailed, KdkitError, Unavailable
from kdkit.core.git import checkout_state
from kdkit.core.jsonio import atomic_write_json, atomic_write_text, sha256_file
from kdkit.core.lockfile import Lock, machine_local
from kdkit.core.pilotconfig import inputs_folder, listing_file
from kdkit.core.projectfiles import is_within
from kdkit.core.report import Progress
from kdkit.core.staging import refuse_link, staged_folder
from kdkit.core.stalestaging import describe_removed
from kdkit.image.container import APP, named_mounts
from kdkit.transfer.format import (
    BUNDLE_JSON,
    COMPRESSORS,
    FORMAT,
    FORMAT_KEY,
    PROJECT,
    RUN_MD,
    ZIPAPP,
    Compressor,
    label_mismatches,
    not_a_bundle,
)
from kdkit.transfer.imagearchive import Counted
from kdkit.transfer.kdkitwheels import WHEELS, add_kdkit_wheels
from kdkit.transfer.localwheels import carry, local_wheel_files
from kdkit.transfer.runmd import run_md
from kdkit.transfer.zipapp import build_zipapp

if TYPE_CHECKING:
    from kdkit.transfer.format import BundleInfo, ImageRecord

# ---------------------------------------------------------------- the project at its revision


@dataclass(frozen=True)
class Source:
    """What a bundle is made from: the project, its backend and fresh lock, its git state."""

    project: Project
    backend: str
    lock: Path
    lock_sha256: str
    git: dict[str, Any] | None
    parsed: Lock  # the lock, read once
    # the files of its machine-local pins, from --wheelhouse (kdkit.transfer.localwheels)
    local_wheels: list[Path]

    @property
    def machine_local(self) -> list[str]:
        """The pins whose files only the locking machine had: no index serves them (see
        localwheels)."""
        return machine_local(self.parsed)

    @property
    def lock_rel(self) -> str:
        return self.lock.relative_to(self.project.root).as_posix()

    @property
    def revision(self) -> str | None:
        return str(self.git["revision"]) if self.git else None

    def expected_labels(self, baked: Path | None = None) -> dict[str, str]:
        """The image labels that must agree with this source for the image to belong in the bundle;
        ``baked``: the lock the image was built from when not the requirements lock (its pylock)."""
        lock = baked or self.lock
        expected = {"dev.kdkit.project": self.project.name, "dev.kdkit.backend": self.backend,
                    "dev.kdkit.python": self.project.python,
                    "dev.kdkit.lock.path": lock.relative_to(self.project.root).as_posix(),
                    "dev.kdkit.lock.sha256": sha256_file(lock) if baked else self.lock_sha256}
        if self.revision:
            expected["org.opencontainers.image.revision"] = self.revision
        return expected


def essential_files(project: Project, lock: Path) -> list[str]:
    """Paths (relative to the project) the rented machine cannot do without."""
    pilot = project.pilot_config()
    # the last: the manifest, else the JSONL corpus
    rel = [Path("kdkit.json"), project.pilot_config_path.relative_to(project.root),
           lock.relative_to(project.root), Path(listing_file(pilot))]
    return [PurePosixPath(os.path.normpath(p)).as_posix() for p in rel]


def require_essentials(source: Source, packing: Packing) -> None:
    """Before anything is written: the files the rented machine needs are in what will be packed."""
    for rel in essential_files(source.project, source.lock):
        if rel in packing.files:
            continue
        left = next((item["why"] for item in packing.left_out if item["file"] == rel), None)
        if left is not None:
            raise BadInput(f"{rel}: {left}, so no bundle carries it, yet the rented machine needs "
                           "it; rename it and update the config that names it")
        if source.git:
            raise BadInput(f"{rel}: not committed at revision {str(source.revision)[:12]}; the "
                           f"bundle must carry it (git add {rel} && git commit)")
        raise BadInput(f"{source.project.root / rel}: missing; the bundle must carry it (create "
                       "it, see `kdkit validate`)")


# ---------------------------------------------------------------- the image


def save_image(ref: str, compressor: Compressor, out: Path) -> ImageRecord:
    """Stream ``docker save`` of ``ref`` through the compressor into ``out``."""
    from kdkit.docker_adapter import connect

    engine = connect()
    facts = engine.require_image(ref)
    started = time.perf_counter()
    # its length bounds `kdkit load` (kdkit.transfer.imagearchive)
    archive = Counted(engine.save_image_chunks(ref))
    done = proc.pipe_to_file(compressor.compress, archive, out)
    if not done.ok:
        raise KdkitError(
            f"{' '.join(compressor.compress)}: {done.first_error_line()} while compressing {ref}")
    return {"ref": ref, "id": facts.id, "labels": facts.labels, "file": out.name,
            "compressor": compressor.name,
            "bytes": out.stat().st_size, "archive_bytes": archive.total, "image_bytes": facts.size,
            "seconds": round(time.perf_counter() - started, 3)}


def _check_image(image: str | None, source: Source, packing: Packing) -> str:
    """Before anything is written: the image (``image``, else the newest `kdkit build` made from the
    current requirements lock or pylock: kdkit.image.labels.built_image) exists and belongs to this
    project, lock and revision; its ref. An image built from the pylock needs the bundle to carry
    that pylock (`kdkit load` checks it)."""
    from kdkit.docker_adapter import connect
    from kdkit.image.labels import built_image, project_lock

    engine = connect()
    ref = image or built_image(engine, source.project, source.project.backend(source.backend))
    facts = engine.require_image(ref)
    baked = project_lock(
        source.project, facts.labels) if facts.labels.get("dev.kdkit.backend") == source.backend \
        else source.lock
    wrong = label_mismatches(facts.labels,
                             source.expected_labels(None if baked == source.lock else baked))
    if wrong:
        raise CheckFailed(f"image {ref}: does not match the project ({wrong[0]}); rebuild it with "
                          f"`kdkit build --backend {source.backend}` or pass --image")
    rel = baked.relative_to(source.project.root).as_posix()
    if rel not in packing.files:
        raise BadInput(f"{rel}: image {ref} was built from it, but the bundle would not carry it "
                       f"(commit it, or build from {source.lock_rel} with `kdkit build "
                       "--lock-format requirements`)")
    return ref


# ---------------------------------------------------------------- SHA256SUMS


def write_sums(folder: Path) -> int:
    """``SHA256SUMS`` over every file of the bundle (kdkit.core.checksums); returns the count."""
    files = [(p.relative_to(folder).as_posix(), p) for p in folder.rglob("*") if p.is_file()
             and p != folder / SUMS]
    return checksums.write_sums(folder, files)


# ---------------------------------------------------------------- kdkit bundle


def _prepare_out(out: Path, root: Path, force: bool) -> Path:
    """``--out`` resolved (links included), outside the project and not holding it; an existing
    folder only with --force and only when kdkit wrote it as a bundle."""
    given, out = out, out.resolve()
    if is_within(os.fspath(out), os.fspath(root)):
        raise BadInput(f"--out {given}: resolves to {out}, the project {root} or a folder inside "
                       "it; write the bundle outside the project (e.g. --out "
                       f"{root.parent / (root.name + '-bundle')})")
    if is_within(os.fspath(root), os.fspath(out)):
        raise BadInput(f"--out {given}: resolves to {out}, which holds the project {root}; write "
                       "the bundle to a new folder outside the project")
    refuse_link(given, "--out")
    if out.exists() and not force:
        raise BadInput(
            f"{out}: already exists; choose a new --out folder or pass --force to replace it")
    if out.exists():
        why = replaceable_bundle(out)
        if why == "exists and is not a folder":
            raise BadInput(f"{out}: exists and is not a folder; choose another --out")
        if why is not None:
            raise BadInput(f"{out}: {why}; --force replaces only a bundle that kdkit wrote: choose "
                           "a new --out or move the folder away first")
    if not out.parent.is_dir():
        raise BadInput(f"{out.parent}: folder does not exist; create it or choose another --out")
    return out


def replaceable_bundle(folder: Path) -> str | None:
    """Why ``--force`` must not replace what is at ``folder`` (kdkit did not write it as a bundle),
    or None."""
    if folder.is_symlink() or not folder.is_dir():
        return "exists and is not a folder"
    return not_a_bundle(folder)


def make_bundle(project_dir: Path | None, out: Path, *, backend: str | None = None,
                image: str | None = None,
                include_image: bool = True, compressor: str = "zstd", force: bool = False,
                kdkit_wheels: bool = True, progress: Progress | None = None,
                wheelhouse: Path | None = None) -> BundleInfo:
    """Pack the project for another machine into ``out``; return what bundle.json records plus
    timings.

    Everything is checked before the first write (bad input leaves every file as it was); then stale
    staging of ``out`` left by a killed run is removed (and said), and the bundle is staged and
    published under ``out`` by kdkit.core.staging.staged_folder (the name claimed atomically: see
    there).
    """
    say = progress or (lambda _m: None)
    started = time.perf_counter()
    project = load_project(project_dir)
    out = _prepare_out(out, project.root, force)
    source, allow, packing, ref = _plan(project, backend, image,
                                        include_image, compressor, wheelhouse)
    with staged_folder(out, "--out", replaceable_bundle if force else None) as staged:
        for line in describe_removed(staged.removed):
            say(line)
        staging = staged.path
        info = _fill(staging, source, allow, packing, say)
        # what is packed, as packed: nothing secret travels
        for path in sorted((staging / PROJECT).rglob("*")):
            if path.is_file():
                refuse_credentials_in(path, path.relative_to(staging / PROJECT).as_posix())
        # the lock's machine-local pins, if given
        info["local_wheels"] = carry(staging, source.local_wheels)
        if kdkit_wheels:
            say(f"{WHEELS}/ (kdkit and its runtime lock, to install offline)")
            info["kdkit_wheels"] = add_kdkit_wheels(staging, _lock_arch(source.parsed.header), say)
        if include_image:
            say(f"image {ref}: docker save | {' '.join(COMPRESSORS[compressor].compress)}")
            info["image"] = save_image(ref,
                                       COMPRESSORS[compressor], staging
                                       / f"image{COMPRESSORS[compressor].suffix}")
        _seal(staging, info, say)
    info["out"] = str(out)
    info["removed_staging"] = [str(path) for path in staged.removed]
    info["seconds"] = round(time.perf_counter() - started, 3)
    return info


def _plan(project: Project, backend: str | None, image: str | None, include_image: bool,
          compressor: str, wheelhouse: Path | None) -> tuple[Source, AllowList, Packing, str]:
    """Every check before the first write: fresh lock, allow-list, packing plan, essentials, image,
    compressor."""
    from kdkit.image.labels import default_tag
    from kdkit.lock.locked import read_locked

    # the lock read once: parsed, checked fresh, hashed
    locked = read_locked(project, project.backend(backend))
    lock = locked.requirements
    source = Source(project, locked.backend.name, lock.path, lock.sha256,
                    checkout_state(project.root), lock.lock,
                    local_wheel_files(wheelhouse, lock.lock))
    allow = AllowList.of(project)
    packing = plan_packing(project, allow, source.git)
    require_essentials(source, packing)
    ref = image or default_tag(project, locked.backend.name, source.lock_sha256)
    if compressor not in COMPRESSORS:
        raise BadInput(f"--compressor {compressor}: choose one of {', '.join(COMPRESSORS)}")
    if include_image:
        if shutil.which(COMPRESSORS[compressor].compress[0]) is None:
            raise Unavailable(f"{compressor}: program not found; install it (apt-get install "
                              f"{compressor}) or pass --compressor gzip")
        ref = _check_image(image, source, packing)
    return source, allow, packing, ref


def _fill(staging: Path, source: Source, allow: AllowList,
          packing: Packing, say: Progress) -> BundleInfo:
    """Write the project and the zipapp into ``staging``; return the start of bundle.json's
    content."""
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
    if source.machine_local and not source.local_wheels:
        say(f"warning: {source.lock_rel} pins {', '.join(source.machine_local)} from a folder of "
            "this machine only; RUN.md's path without Docker cannot install them on the rented "
            "host unless the bundle carries them (--wheelhouse DIR, from `kdkit wheelhouse`)")
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
        "lock": source.lock_rel, "lock_sha256": source.lock_sha256,
        "pylock": _pylock(source, packing),
        "machine_local": source.machine_local,
        "pilot_config": pilot_config,
        "manifest": manifest, "inputs": _pilot_inputs(project), "mounts": _named_mounts(project),
        "runs": allow.runs, "zipapp": ZIPAPP,
        "image": None, "kdkit_wheels": None,
    }


def _pylock(source: Source, packing: Packing) -> str | None:
    """The backend's PEP 751 lock (``Backend.pylock``) when the bundle carries it, relative to the
    project."""
    rel = source.project.backend(source.backend).pylock.relative_to(source.project.root).as_posix()
    return rel if rel in packing.files else None


def _pilot_inputs(project: Project) -> str:
    """The pilot inputs folder, relative to the project (what RUN.md mounts read-only)."""
    return PurePosixPath(os.path.normpath(inputs_folder(project.pilot_config()))).as_posix()


def _named_mounts(project: Project) -> list[str]:
    """What the pilot config names outside the inputs and the image's folders (a model's folder),
    relative to the project: RUN.md's ``docker run`` line mounts each read-only, as `kdkit run` does
    (one rule for both: kdkit.image.container.named_mounts)."""
    mounts = named_mounts(project, project.pilot_config(), project.root / _pilot_inputs(project))
    return [PurePosixPath(mount.target).relative_to(APP).as_posix() for mount in mounts]


def _lock_arch(header: dict[str, str]) -> str:
    """The CPU the lock was resolved for (its header's platform), that kdkit-wheels/ serves; x86_64
    if unsaid."""
    from kdkit.facts.platforms import linux_arch

    return linux_arch(header.get("platform", ""))[0] or "x86_64"


def readable_by_all(folder: Path) -> None:
    """Folders 0755, files 0644 (0755 where the owner may execute), whatever the umask it was made
    under: on the rented host the container's user (10001, not the one who unpacks the bundle) reads
    the inputs."""
    for base, _dirs, files in os.walk(folder):
        os.chmod(base, 0o755)
        for name in files:
            path = os.path.join(base, name)
            os.chmod(path, 0o755 if os.stat(path).st_mode & 0o100 else 0o644)


def _seal(staging: Path, info: BundleInfo, say: Progress) -> None:
    """RUN.md, bundle.json, then SHA256SUMS over everything: the last files written."""
    atomic_write_text(staging / RUN_MD, run_md(info))
    atomic_write_json(staging / BUNDLE_JSON, info)
    say(SUMS)
    write_sums(staging)
    readable_by_all(staging)
