"""What an image says of itself: the labels `kdkit build` gives it (OCI's and kdkit's own, the
torch architectures read out of the built image), its default tag, and `kdkit inspect`, which reads
them back and compares the baked lock with the project's current one."""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit import __version__
from kdkit.config.project import Backend, Project, load_project
from kdkit.core.errors import BadInput, CheckFailed, KdkitError
from kdkit.core.git import provenance
from kdkit.core.jsonio import sha256_file
from kdkit.core.lockfile import Lock
from kdkit.core.projectfiles import require_root
from kdkit.core.safetext import printable
from kdkit.facts.pairings import Pairings, load_pairings

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import TypedDict

    from kdkit.docker_adapter import ImageFacts

    class TorchArch(TypedDict):
        """What an image's labels say of its torch's compiled architectures (`kdkit inspect`)."""

        recorded: bool  # False: an image built before kdkit recorded them
        arch_list: list[str] | None  # None: unknown (``source`` says why)
        source: str | None

    class LockMatch(TypedDict):
        """The project's current lock against the one baked into the image."""

        image_sha256: str
        project_lock: str | None  # None: no project here
        project_sha256: str | None
        matches: bool | None

    class ProjectMatch(TypedDict):
        """The project's config/ and src/ against the image's (None: nothing to compare)."""

        matches: bool | None
        image_sha256: str | None
        project_sha256: str | None
        changed: list[str] | None

LABEL = "dev.kdkit."
OCI = "org.opencontainers.image."
# Written in the final stage by `kdkit torch-arch --json` (Dockerfile.common), read back by
# build_image.
ARCH_FILE = "/opt/kdkit/torch-arch.json"
ARCH_LIST = f"{LABEL}torch.arch_list"
ARCH_SOURCE = f"{LABEL}torch.arch_source"
UNKNOWN_ARCH = "unknown"
# config/ and src/ as the build context took them (project_digest)
PROJECT_SHA256 = f"{LABEL}project.sha256"
# their files' hashes (project_labels), for inspect to name what changed
PROJECT_FILES = f"{LABEL}project.files"
PROJECT_FILES_MAX = 32 << 10
CHANGED_SHOWN = 20
PROJECT_LABELS = (PROJECT_SHA256, PROJECT_FILES)


# ---------------------------------------------------------------- the labels a build gives


def default_tag(project: Project, backend: str, lock_sha256: str) -> str:
    """``<project>:<backend>-<first 12 of the lock's sha256>``: a new lock is a new image."""
    return f"{project.name}:{backend}-{lock_sha256[:12]}"


def default_tags(project: Project, backend: Backend) -> list[str]:
    """The default tag of each image `kdkit build` makes from this backend's locks that exist: from
    its requirements lock first, then from its pylock (``--lock-format pylock``)."""
    return [default_tag(project, backend.name, sha256_file(lock))
            for lock in (backend.lock, backend.pylock)
            if lock.is_file()]


def built_image(engine: Any, project: Project, backend: Backend) -> str:
    """The image `kdkit run` and `kdkit bundle` take by default: of those `kdkit build` made from
    the backend's current locks (:func:`default_tags`) that the engine holds, the newest (Docker's
    RFC 3339 creation times order as text); the requirements lock's tag when it holds none, which
    the caller then reports missing."""
    tags = default_tags(project, backend)
    found = [(facts.created, tag) for tag in tags if (facts := engine.image(tag)) is not None]
    return max(found)[1] if found else tags[0]


def torch_build(lock_path: Path | Lock, backend: Backend, python: str,
                pairings: Pairings | None = None) -> tuple[str, str, str]:
    """(torch version, CUDA version, ROCm version) promised by the lock's torch pin for the image
    (Linux, CPython ``python``, the lock's CPU: a lock for several environments pins one torch per
    marker) and its label; empty when the lock pins no torch there, or one with no version (a vcs
    checkout). A PyPI pin's recorded build that the facts contradict is BadInput (the image would
    promise the wrong CUDA)."""
    from kdkit.core.builds import header_build, parse_label
    from kdkit.core.lockfile import parse_lock
    from kdkit.facts.platforms import image_environment, linux_arch
    from kdkit.lock.lock import backend_label

    # parsed once by `kdkit build`
    lock = lock_path if isinstance(lock_path, Lock) else parse_lock(lock_path)
    platform = lock.header.get("platform", "")
    pin = lock.pin_for("torch", image_environment(python, platform))
    if pin is None or not pin.version:
        return "", "", ""
    recorded = None if pin.local else header_build(lock.header)
    problem = (pairings
               or load_pairings()).pypi_header_problem(pin.version,
                                                       linux_arch(platform)[0] or "x86_64",
                                                                recorded)
    if problem is not None:
        raise BadInput(
            f"{backend.lock}: {printable(problem)}; re-lock with `kdkit lock --backend "
            f"{backend.name}`")
    build = parse_label(pin.local or recorded or backend_label(backend) or "")  # PyPI: the header
    kind, version = build if build else ("", None)
    return pin.version, (version
                         or "") if kind == "cuda" else "", (version or "") if kind == "rocm" else ""


def image_labels(project: Project, backend: Backend, lock_sha256: str, lock: Path | None = None,
                 parsed: Lock | None = None) -> dict[str, str]:
    """The labels an image of this project gets: OCI's and kdkit's own. ``lock`` is the lock it
    installs (default: the backend's requirements lock; ``backend.pylock`` for `kdkit build
    --lock-format pylock`); ``parsed``: that lock as the build parsed it from the bytes it hashed
    (then it is not read again)."""
    lock = lock or backend.lock
    revision, source = provenance(project.root)
    torch, cuda, rocm = torch_build(parsed or lock, backend, project.python,
                                    load_pairings(project.root))
    return {
        f"{OCI}title": project.name,
        f"{OCI}revision": revision,
        f"{OCI}source": source,
        f"{OCI}version": f"{backend.name}-{lock_sha256[:12]}",
        f"{LABEL}project": project.name,
        f"{LABEL}backend": backend.name,
        f"{LABEL}python": project.python,
        f"{LABEL}lock.path": lock.relative_to(project.root).as_posix(),
        f"{LABEL}lock.sha256": lock_sha256,
        f"{LABEL}torch.version": torch,
        f"{LABEL}torch.cuda": cuda,
        f"{LABEL}torch.rocm": rocm,
        f"{LABEL}version": __version__,
    }


def project_lock(project: Project, labels: dict[str, str]) -> Path:
    """The project's file of the lock an image was built from: the backend's pylock when the image's
    ``lock.path`` label names it, else its requirements lock."""
    backend = project.backend(labels.get(f"{LABEL}backend"))
    baked = labels.get(f"{LABEL}lock.path")
    return backend.pylock if baked and project.root / baked == backend.pylock else backend.lock


# ---------------------------------------------------------------- the torch architecture labels


def arch_labels(answer: Any) -> dict[str, str]:
    """The two arch labels from the ``kdkit torch-arch --json`` answer read out of an image.

    ``arch_list``: torch's tokens, space-separated ("" for a CPU build) or "unknown";
    ``arch_source``: where they were read, or ``unknown: <reason>``. Anything not of the answer's
    shape is unknown: the file comes from the image, and a list is never made up.
    """
    from kdkit.core.credentials import redact
    from kdkit.probe.env.torcharch import SOURCE_CPU, SOURCE_FLAGS, SOURCE_HEADER, TORCH_TOKEN

    def unknown(reason: str) -> dict[str, str]:
        line = redact(" ".join(reason.split()))
        return {ARCH_LIST: UNKNOWN_ARCH, ARCH_SOURCE: f"{UNKNOWN_ARCH}: {line[:500]}"}

    if not isinstance(answer, dict):
        return unknown(f"{ARCH_FILE} does not hold a JSON object")
    arch_list, source = answer.get("arch_list"), answer.get("source")
    if arch_list is None:
        reason = answer.get("reason")
        return unknown(reason if isinstance(reason, str) and reason.strip()
                       else "kdkit torch-arch gave no reason")
    if not isinstance(arch_list, list) or len(arch_list) > 128 or not all(
            isinstance(token, str) and TORCH_TOKEN.fullmatch(token) for token in arch_list):
        return unknown(f"{ARCH_FILE}: arch_list is not a list of architecture names")
    if source not in (SOURCE_FLAGS, SOURCE_HEADER, SOURCE_CPU) \
            or (source == SOURCE_CPU) != (not arch_list):
        return unknown(
                   f"{ARCH_FILE}: source {str(source)[:60]!r} does not go with arch_list "
                   f"{arch_list[:4]}")
    return {ARCH_LIST: " ".join(arch_list), ARCH_SOURCE: source}


def recorded_arch(engine: Any, image_id: str) -> dict[str, str]:
    """The arch labels of a built image, from its ARCH_FILE; never raises: a failure is "unknown"
    with why."""
    from kdkit.core.jsonio import parse_json

    try:
        data = engine.read_file(image_id, ARCH_FILE, limit=64 << 10)
    except KdkitError as exc:
        return arch_labels(
            {"arch_list": None, "reason": f"cannot copy {ARCH_FILE} out of the image: {exc}"})
    if data is None:
        return arch_labels({"arch_list": None,
                            "reason": f"the image has no {ARCH_FILE} (its torch-arch step "
                                      "wrote nothing; see the build log)"})
    try:
        answer = parse_json(data.decode("utf-8"), ARCH_FILE)
    except (UnicodeDecodeError, BadInput) as exc:
        return arch_labels(
            {"arch_list": None, "reason": f"{ARCH_FILE} is not readable JSON ({exc})"})
    return arch_labels(answer)



def torch_arch(labels: dict[str, str]) -> TorchArch:
    """What an image's labels say of its torch's compiled architectures, for `kdkit inspect`."""
    if ARCH_LIST not in labels:
        return {"recorded": False, "arch_list": None, "source": None}
    value, source = labels[ARCH_LIST], labels.get(ARCH_SOURCE, "")
    if value == UNKNOWN_ARCH:
        return {"recorded": True, "arch_list": None, "source": source}
    return {"recorded": True, "arch_list": value.split(), "source": source}


# ---------------------------------------------------------------- inspect


def _project_for(project_dir: Path | None) -> Project | None:
    if project_dir is not None:
        return load_project(project_dir)
    try:
        return load_project(require_root())
    except BadInput:
        return None  # not inside a project: the image is described on its own


def lock_match(labels: dict[str, str], project: Project | None) -> LockMatch:
    """Whether ``project``'s current lock for the image's backend is the one baked into the image
    (its requirements lock, or its pylock for an image built from that: :func:`project_lock`)."""
    baked = labels.get(f"{LABEL}lock.sha256", "")
    if project is None:
        return {"image_sha256": baked, "project_lock": None,
                "project_sha256": None, "matches": None}
    lock = project_lock(project, labels)
    current = sha256_file(lock) if lock.is_file() else None
    return {"image_sha256": baked, "project_lock": str(lock), "project_sha256": current,
            "matches": current == baked}


def _file_hashes(files: Iterable[tuple[str, bytes]]) -> dict[str, str]:
    from kdkit.image.context import PROJECT_FOLDERS

    folders = tuple(f"project/{folder}/" for folder in PROJECT_FOLDERS)
    return {name.removeprefix("project/"): hashlib.sha256(data).hexdigest() for name, data in files
            if name.startswith(folders)}


def project_digest(files: Iterable[tuple[str, bytes]]) -> str:
    """sha256 over the config/ and src/ files of a build context (kdkit.image.context.project_files:
    its names ``project/<rel>`` and bytes): one line ``<rel> NUL <sha256 of the bytes>`` per file,
    sorted. `kdkit build` labels the image with it; `kdkit inspect` computes it again from the
    project to compare."""
    lines = sorted(f"{rel}\0{digest}\n" for rel, digest in _file_hashes(files).items())
    return hashlib.sha256("".join(lines).encode("utf-8", "surrogateescape")).hexdigest()


def project_labels(files: Iterable[tuple[str, bytes]]) -> dict[str, str]:
    """PROJECT_SHA256, and PROJECT_FILES (each file's sha256, 16 hex digits, as compact JSON) unless
    that would be over PROJECT_FILES_MAX bytes: then `kdkit inspect` tells that config/ or src/
    differ, not which files."""
    files = list(files)
    hashes = json.dumps({rel: digest[:16] for rel, digest in sorted(_file_hashes(files).items())},
                        separators=(",", ":"))
    return {PROJECT_SHA256: project_digest(files),
            **({PROJECT_FILES: hashes} if len(hashes) <= PROJECT_FILES_MAX
               else {})}


def _changed(labels: dict[str, str], files: list[tuple[str, bytes]]) -> list[str] | None:
    """The config/ and src/ files that differ from the image's PROJECT_FILES label; None without a
    readable one."""
    try:
        then = json.loads(labels.get(PROJECT_FILES, ""))
    except ValueError:
        # no label (an older build, too many files) or another builder's: which files stays unknown
        return None
    if not isinstance(then, dict):
        return None
    now = {rel: digest[:16] for rel, digest in _file_hashes(files).items()}
    return sorted(rel for rel in set(now) | set(then)
                  if now.get(rel) != then.get(rel))[:CHANGED_SHOWN]


def project_match(labels: dict[str, str], project: Project | None) -> ProjectMatch:
    """Whether the project's config/ and src/ are the image's (None: no project here, or an image
    built before the label), and the files that differ (``changed``, at most CHANGED_SHOWN; None
    where the image has no PROJECT_FILES label)."""
    baked, current, changed = labels.get(PROJECT_SHA256) or None, None, None
    if project is not None:
        from kdkit.image.context import project_files

        files = project_files(project.root)[0]
        current = project_digest(files)
        changed = _changed(labels, files) if baked and baked != current else None
    matches = None if baked is None or current is None else baked == current
    return {"matches": matches, "image_sha256": baked,
            "project_sha256": current, "changed": changed}


def require_kdkit_labels(ref: str, labels: dict[str, str]) -> None:
    if not labels.get(f"{LABEL}backend") or not labels.get(f"{LABEL}lock.sha256"):
        raise BadInput(f"image {ref}: has no kdkit labels ({LABEL}backend, {LABEL}lock.sha256); "
                       "it was not made by `kdkit build`; build the project's image with `kdkit "
                       "build`")


# The end of the command an image of `kdkit build` runs by default (Dockerfile.common's CMD): after
# diagnose and verify-env, the pilot of the project in /app.
PILOT_TAIL = "kdkit pilot /app"


def resumed_command(facts: ImageFacts, run_id: str) -> list[str]:
    """The image's own command with its pilot finishing run ``run_id`` (``kdkit pilot /app --resume
    ID``): diagnose and verify-env run first, as in every run, and the verdict is still the exit
    code."""
    shell, flag, chain = (*facts.command, "", "", "")[:3]
    if (shell, flag) != ("/bin/sh", "-c") or not chain.rstrip().endswith(PILOT_TAIL) \
            or len(facts.command) != 3:
        raise BadInput(f"image {facts.ref}: its command is not kdkit's "
                       f"(`{' '.join(facts.command)}`); resume by hand: `kdkit run -- kdkit pilot "
                       f"/app --resume {run_id}`")
    return [shell, flag, f"{chain.rstrip()} --resume {shlex.quote(run_id)}"]


def inspect_image(ref: str, project_dir: Path | None = None) -> dict[str, Any]:
    """Labels, size, user and the lock comparison of image ``ref`` (BadInput without kdkit's
    labels)."""
    from kdkit.docker_adapter import connect

    facts = connect().require_image(ref)
    require_kdkit_labels(ref, facts.labels)
    project = _project_for(project_dir)
    return {"image": ref, "id": facts.id, "size": facts.size, "created": facts.created,
            "user": facts.user,
            "os": facts.os, "architecture": facts.architecture,
            "kdkit": {k[len(LABEL):]: v for k,
                      v in sorted(facts.labels.items()) if k.startswith(LABEL)},
            "oci": {k[len(OCI):]: v for k, v in sorted(facts.labels.items()) if k.startswith(OCI)},
            "torch_arch": torch_arch(facts.labels), "lock": lock_match(facts.labels, project),
            "project": project_match(facts.labels, project)}


def require_lock_match(report: Mapping[str, Any]) -> None:
    """CheckFailed when the project's lock moved on since the image was built."""
    lock = report["lock"]
    if lock["matches"] is False:
        raise CheckFailed(f"image {report['image']}: built from lock {lock['image_sha256'][:12]}, "
                          f"but {lock['project_lock']} is now {str(lock['project_sha256'])[:12]}; "
                          "rebuild with `kdkit build`")
