"""`kdkit bundle`, `kdkit verify-bundle`, `kdkit load`: one verified folder that carries a project
to the rented machine.

A bundle holds the project at its revision (``git archive`` in a git checkout, else its files;
``runs/`` and ``.env`` never), the locks, config and pilot data inside it, ``kdkit.pyz`` (kdkit's
in-container part as one runnable file, for hosts without Docker), the image as a compressed
``docker save`` archive (unless ``--no-image``), ``bundle.json`` (what was packed, with the image's
id and labels), ``RUN.md`` (the exact commands) and ``SHA256SUMS`` (``sha256sum -c`` reads it).

The folder is assembled under a temporary name beside ``--out`` and renamed at the end: a failure
leaves nothing half-written. The image is compressed while ``docker save`` still streams, with
zstd by default: measured on the test image (bench/bench_bundle.py) it is both smaller and many
times faster than ``docker save | gzip``. Docker engines before 25 cannot read zstd themselves, so
``kdkit load`` decompresses on the way in.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
import time
import zipapp
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kdkit import __version__, proc
from kdkit.errors import BadInput, CheckFailed, KdkitError, Unavailable
from kdkit.jsonio import atomic_write_json, atomic_write_text, load_json, sha256_file
from kdkit.probe import CORE_MODULES
from kdkit.project import Project, load_project

BUNDLE_JSON = "bundle.json"
SUMS = "SHA256SUMS"
RUN_MD = "RUN.md"
ZIPAPP = "kdkit.pyz"
PROJECT = "project"
FORMAT = 1
# Never carried: results (copied out separately), secrets (given at run time), local caches.
EXCLUDED_NAMES = {".git", ".env", "__pycache__", ".venv", ".mypy_cache", ".pytest_cache", ".ruff_cache"}
# Labels that tie an image to the bundle; `kdkit load` re-checks them after loading.
TIED_LABELS = ("dev.kdkit.project", "dev.kdkit.backend", "dev.kdkit.python", "dev.kdkit.lock.path",
               "dev.kdkit.lock.sha256", "org.opencontainers.image.revision")
# Probe commands the zipapp offers besides kdkit.probe.commands.COMMANDS (the host CLI has its own).
ZIPAPP_EXTRA_COMMANDS = {
    "resume-test": ("kdkit.probe.resume", "Prove a training loop resumes exactly in a new process."),
    "sweep": ("kdkit.probe.sweep", "Batch-size sweep of the pilot inputs by length group."),
}

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
    """git's output (whitespace kept: porcelain lines start with a space), None on failure or without git."""
    try:
        done = proc.run(["git", "-C", str(root), *args], timeout=60)
    except Unavailable:
        return None  # no git on this host: the project is copied as files
    return done.stdout if done.ok else None


def git_state(root: Path) -> dict[str, Any] | None:
    """Revision, source and uncommitted paths of the checkout holding ``root``; None outside git."""
    from kdkit.images import provenance

    if _git(root, "rev-parse", "--verify", "--quiet", "HEAD") is None:
        return None
    revision, source = provenance(root)
    status = _git(root, "status", "--porcelain", "--untracked-files=all", "--", ".") or ""
    return {"revision": revision.removesuffix("-dirty"), "source": source,
            "prefix": (_git(root, "rev-parse", "--show-prefix") or "").strip(),
            "uncommitted": [line[3:] for line in status.splitlines() if line.strip()]}


def _excluded(rel: Path, runs: str) -> bool:
    return bool(set(rel.parts) & EXCLUDED_NAMES) or rel.parts[:1] == (runs,) or rel.suffix == ".pyc"


def export_git(root: Path, prefix: str, dest: Path, runs: str) -> int:
    """Extract the committed tree of ``root`` (HEAD) into ``dest``; return the number of files."""
    archive = dest.parent / ".project.tar"
    done = proc.run(["git", "-C", str(root), "archive", "--format=tar", "-o", str(archive), f"HEAD:{prefix}"])
    if not done.ok:
        raise KdkitError(f"{root}: git archive failed ({done.first_error_line()})")
    count = 0
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.isfile() and not _excluded(Path(m.name), runs)]
        tar.extractall(dest, members=members, filter="data")
        count = len(members)
    archive.unlink()
    return count


def copy_files(root: Path, dest: Path, runs: str, skip: Path) -> int:
    """Copy the project's files (no git): everything but runs/, .env, caches and ``skip``."""
    count = 0
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if _excluded(rel, runs) or path == skip or skip in path.parents or not path.is_file():
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest / rel)
        count += 1
    return count


def essential_files(project: Project, lock: Path) -> list[str]:
    """Paths (relative to the project) the rented machine cannot do without."""
    pilot = project.pilot_config()
    rel = [Path("kdkit.json"), project.pilot_config_path.relative_to(project.root),
           lock.relative_to(project.root), Path(str(pilot["manifest"]))]
    return [p.as_posix() for p in rel]


def require_essentials(source: Source) -> None:
    """Before anything is written: the files the rented machine needs are in what will be packed."""
    for rel in essential_files(source.project, source.lock):
        if source.git is None:
            present = (source.project.root / rel).is_file()
        else:
            present = _git(source.project.root, "cat-file", "-e", f"HEAD:{source.git['prefix']}{rel}") is not None
        if present:
            continue
        if source.git:
            raise BadInput(f"{rel}: not committed at revision {str(source.revision)[:12]}; the bundle must "
                           f"carry it (git add {rel} && git commit)")
        raise BadInput(f"{source.project.root / rel}: missing; the bundle must carry it (create it, see "
                       "`kdkit validate`)")


# ---------------------------------------------------------------- the zipapp


def build_zipapp(target: Path) -> int:
    """``kdkit.pyz``: kdkit's in-container part, runnable as ``python3 kdkit.pyz COMMAND``; returns its size."""
    package = Path(__file__).resolve().parent
    with tempfile.TemporaryDirectory(prefix="kdkit-pyz.") as staging:
        root = Path(staging)
        (root / "kdkit" / "probe").mkdir(parents=True)
        for name in CORE_MODULES:
            shutil.copyfile(package / name, root / "kdkit" / name)
        for path in sorted((package / "probe").rglob("*.py")):
            if "__pycache__" not in path.parts:
                copy = root / "kdkit" / path.relative_to(package)
                copy.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, copy)
        (root / "__main__.py").write_text(_zipapp_main(), encoding="utf-8")
        zipapp.create_archive(root, target, interpreter="/usr/bin/env python3")
    return target.stat().st_size


def _zipapp_main() -> str:
    extra = "".join(f"COMMANDS.setdefault({name!r}, {entry!r})\n" for name, entry in ZIPAPP_EXTRA_COMMANDS.items())
    return (f'"""kdkit {__version__}, in-container part: python3 kdkit.pyz COMMAND [ARGS] (--help lists them)."""\n'
            "import sys\n\nfrom kdkit.probe.commands import COMMANDS, main\n\n"
            f"{extra}\nsys.exit(main())\n")


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
    """``SHA256SUMS`` over every file of the bundle (sorted, ``sha256sum -c`` format); returns the count."""
    files = [p for p in sorted(folder.rglob("*")) if p.is_file() and p != folder / SUMS]
    lines = [f"{sha256_file(p)}  {p.relative_to(folder).as_posix()}" for p in files]
    atomic_write_text(folder / SUMS, "\n".join(lines) + "\n")
    return len(lines)


# ---------------------------------------------------------------- kdkit bundle


def _prepare_out(out: Path, force: bool) -> Path:
    out = out.resolve()
    if out.exists() and not force:
        raise BadInput(f"{out}: already exists; choose a new --out folder or pass --force to replace it")
    if out.exists() and not out.is_dir():
        raise BadInput(f"{out}: exists and is not a folder; choose another --out")
    if not out.parent.is_dir():
        raise BadInput(f"{out.parent}: folder does not exist; create it or choose another --out")
    return out


def _replace_folder(staging: Path, out: Path) -> None:
    """Move the finished bundle into place; an old bundle (--force) is removed only afterwards."""
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.replace(out, old)
    os.replace(staging, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def make_bundle(project_dir: Path | None, out: Path, *, backend: str | None = None, image: str | None = None,
                include_image: bool = True, compressor: str = "zstd", force: bool = False,
                progress: Progress | None = None) -> dict[str, Any]:
    """Pack the project for another machine into ``out``; return what bundle.json records plus timings."""
    from kdkit.images import default_tag
    from kdkit.locking import require_fresh_lock

    say = progress or (lambda _m: None)
    started = time.perf_counter()
    out = _prepare_out(out, force)
    project = load_project(project_dir)
    chosen = project.backend(backend)
    lock = require_fresh_lock(project, chosen.name)
    source = Source(project, chosen.name, lock, sha256_file(lock), git_state(project.root))
    require_essentials(source)
    ref = image or default_tag(project, chosen.name, source.lock_sha256)
    if compressor not in COMPRESSORS:
        raise BadInput(f"--compressor {compressor}: choose one of {', '.join(COMPRESSORS)}")
    if include_image:
        if shutil.which(COMPRESSORS[compressor].compress[0]) is None:
            raise Unavailable(f"{compressor}: program not found; install it (apt-get install {compressor}) "
                              "or pass --compressor gzip")
        _check_image(ref, source)

    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        info = _fill(staging, source, out, say)
        if include_image:
            say(f"image {ref}: docker save | {' '.join(COMPRESSORS[compressor].compress)}")
            info["image"] = save_image(ref, COMPRESSORS[compressor], staging / f"image{COMPRESSORS[compressor].suffix}")
        _seal(staging, info, say)
        _replace_folder(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    info["out"] = str(out)
    info["seconds"] = round(time.perf_counter() - started, 3)
    return info


def _fill(staging: Path, source: Source, out: Path, say: Progress) -> dict[str, Any]:
    """Write the project and the zipapp into ``staging``; return the start of bundle.json's content."""
    project, git = source.project, source.git
    runs = str(project.pilot_config().get("runs", "runs"))
    copied = staging / PROJECT
    copied.mkdir()
    if git:
        say(f"project at revision {git['revision'][:12]} (git archive)")
        count = export_git(project.root, git["prefix"], copied, runs)
    else:
        say("project files (not a git checkout)")
        count = copy_files(project.root, copied, runs, skip=out)
    say(f"{ZIPAPP} (kdkit's in-container part)")
    build_zipapp(staging / ZIPAPP)
    return {
        "format": FORMAT, "kdkit_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "project": project.name, "backend": source.backend, "python": project.python,
        "revision": source.revision, "source": git["source"] if git else None,
        "uncommitted": git["uncommitted"] if git else [], "project_files": count,
        "lock": source.lock_rel, "lock_sha256": source.lock_sha256, "runs": runs, "zipapp": ZIPAPP,
        "image": None,
    }


def _seal(staging: Path, info: dict[str, Any], say: Progress) -> None:
    """RUN.md, bundle.json, then SHA256SUMS over everything: the last files written."""
    atomic_write_text(staging / RUN_MD, run_md(info))
    atomic_write_json(staging / BUNDLE_JSON, info)
    say(SUMS)
    write_sums(staging)


# ---------------------------------------------------------------- kdkit verify-bundle


def _listed(folder: Path) -> dict[str, str]:
    sums = folder / SUMS
    if not sums.is_file():
        raise BadInput(f"{sums}: not found; {folder} is not a kdkit bundle (made by `kdkit bundle`)")
    listed: dict[str, str] = {}
    for number, line in enumerate(sums.read_text(encoding="utf-8").splitlines(), start=1):
        digest, sep, name = line.partition("  ")
        if not sep or len(digest) != 64 or not name or name.startswith("/") or ".." in Path(name).parts:
            raise CheckFailed(f"{sums}:{number}: malformed line; the bundle is damaged, copy it again")
        listed[name] = digest
    return listed


def _results_folders(folder: Path) -> list[Path]:
    """Where runs write their results inside a bundle (RUN.md's commands): new files there are expected."""
    try:
        runs = str(load_json(folder / BUNDLE_JSON).get("runs", "runs"))
    except (BadInput, AttributeError):
        runs = "runs"  # an unreadable bundle.json is reported by its hash check
    return [folder / runs, folder / PROJECT / runs]


def verify_bundle(folder: Path, progress: Progress | None = None) -> dict[str, Any]:
    """Check every file against SHA256SUMS (and that none is missing or added) before anything is loaded."""
    folder = folder.resolve()
    if not folder.is_dir():
        raise BadInput(f"{folder}: not a folder; give the bundle folder made by `kdkit bundle`")
    listed = _listed(folder)
    problems = []
    for name, digest in listed.items():
        path = folder / name
        if not path.is_file():
            problems.append({"file": name, "problem": "missing"})
            continue
        if progress is not None and path.stat().st_size > 1 << 26:
            progress(f"checking {name} ({path.stat().st_size / 1e9:.2f} GB)")
        if sha256_file(path) != digest:
            problems.append({"file": name, "problem": "altered: its sha256 differs from SHA256SUMS"})
    results = _results_folders(folder)
    present = {p.relative_to(folder).as_posix() for p in folder.rglob("*")
               if p.is_file() and not any(r == p or r in p.parents for r in results)}
    problems += [{"file": name, "problem": "not listed in SHA256SUMS (added after bundling)"}
                 for name in sorted(present - set(listed) - {SUMS})]
    if BUNDLE_JSON not in listed:
        problems.append({"file": BUNDLE_JSON, "problem": "not listed in SHA256SUMS"})
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
