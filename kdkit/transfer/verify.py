"""`kdkit verify-bundle` and `kdkit load`: a bundle checked file by file before anything is loaded.

`kdkit verify-bundle` checks every file against SHA256SUMS and against the file list of
bundle.json: a required file that is gone (with its SHA256SUMS line or without), a listed file that
bundle.json does not know, a file that neither lists, or a link, is a failure. Then it checks what
a tamperer who re-signs SHA256SUMS could change: bundle.json against schemas/bundle.schema.json (a
wrong shape is bad input, naming its JSON path), and the image archive, read through with nothing
loaded (one image, the bundle's id, its own tag only, no longer than declared:
kdkit.transfer.imagearchive). `kdkit load` verifies, decompresses the image on the way into the
engine (engines before Docker 25 cannot read zstd themselves), the archive checked again as it
streams, and checks the loaded image's id and tied labels against the bundle.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Generator, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.config.files import printable_name
from kdkit.config.schemas import raise_first, schema_problems
from kdkit.core import proc
from kdkit.core.checksums import SUMS, safe_name
from kdkit.core.errors import BadInput, CheckFailed
from kdkit.core.jsonio import load_json, sha256_file
from kdkit.core.report import Progress
from kdkit.transfer.format import (
    BUNDLE_JSON,
    FORMAT_KEY,
    PROJECT,
    READS,
    RUN_MD,
    TIED_LABELS,
    ZIPAPP,
    ImageEntry,
    bundle_tree,
    label_mismatches,
    read_sums,
)
from kdkit.transfer.imagearchive import expected, rewritten
from kdkit.transfer.kdkitwheels import listed_files
from kdkit.transfer.localwheels import carried_files

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import TypedDict

    class Problems(TypedDict):
        """A bundle's problems, each ``{"file", "problem"}``: what require_verified reads."""

        bundle: str
        problems: list[dict[str, str]]

    class VerifyReport(Problems):
        """`kdkit verify-bundle`'s report: its problems, and how many files SHA256SUMS lists."""

        files: int
        ok: bool

    class LoadReport(TypedDict):
        """`kdkit load`'s report: the image loaded and checked against the bundle."""

        bundle: str
        image: str
        id: str
        loaded: list[str]  # the tags (or ids) the engine says it loaded
        labels_checked: list[str]
        seconds: float
        files: int


def _format_problem(info: Any) -> str | None:
    """Why bundle.json is of no format this kdkit reads (a bundle of another kdkit, or not kdkit's),
    or None."""
    if not isinstance(info, dict) or info.get(FORMAT_KEY) not in READS:
        return (f"has no {FORMAT_KEY!r}: {' or '.join(map(str, READS))} (made by an older or newer "
                "kdkit, or not by kdkit); make the bundle again with `kdkit bundle` of this kdkit")
    return None


def _required(info: Mapping[str, Any]) -> tuple[set[str], str | None]:
    """The files bundle.json (of a format this kdkit reads, valid against its schema) says the
    bundle holds, and why it cannot say (None when it can): a name that leads out of the bundle."""
    files, image = info["files"], info["image"]
    named = [info[key] for key in ("lock", "pilot_config", "manifest")]
    if not all(safe_name(f) for f in [*files, *named, "kdkit.json"]):
        return set(), "its file list ($.files, $.lock, $.pilot_config, $.manifest) is malformed"
    wheels, carried = listed_files(info), carried_files(info)
    if wheels is None or not all(safe_name(f) for f in wheels):
        return set(), "its $.kdkit_wheels.files is malformed"
    if carried is None or not all(safe_name(f) for f in carried):
        return set(), "its $.local_wheels.files is malformed"
    required = {BUNDLE_JSON, RUN_MD, ZIPAPP, *wheels, *carried,
                *(f"{PROJECT}/{f}" for f in [*files, *named, "kdkit.json"])}
    if image is not None:
        required.add(image["file"])
    return required, None


def _results_folders(folder: Path, info: Any, listed: Iterable[str]) -> list[Path]:
    """Where runs write their results inside a bundle (RUN.md's commands: ``runs/`` beside the
    image, ``project/<runs>`` for kdkit.pyz): new files there are expected. A folder that holds a
    packed file is never one of them, whatever the pilot config says (``"runs": "src"`` would hide
    an added file)."""
    runs = info.get("runs") if isinstance(info, dict) else None
    runs = runs if safe_name(runs) else "runs"
    candidates = [folder / "runs", folder / PROJECT / str(runs)]
    packed = [folder / name for name in listed]
    return [r for r in candidates if not any(r == p or r in p.parents for p in packed)]


def verify_bundle(folder: Path, progress: Progress | None = None) -> VerifyReport:
    """Check every file against SHA256SUMS and bundle.json's file list, and the image archive's
    contents, before anything is loaded.

    Each problem names its file: altered, missing (with its SHA256SUMS line or without), listed in
    SHA256SUMS but not part of the bundle, present but listed nowhere, or a link (kdkit writes
    none); an image archive that names another image or tag, or decompresses past what bundle.json
    declares. A bundle.json that SHA256SUMS vouches for but that does not match
    schemas/bundle.schema.json is bad input (BadInput naming its JSON path).
    """
    return _verified(folder, progress)[0]


def _verified(folder: Path,
              progress: Progress | None) -> tuple[VerifyReport, dict[str, Any] | None]:
    """(verify_bundle's report, bundle.json's content as checked: None when it could not be
    read)."""
    folder = folder.resolve()
    if not folder.is_dir():
        raise BadInput(f"{folder}: not a folder; give the bundle folder made by `kdkit bundle`")
    listed = read_sums(folder)
    present = dict(bundle_tree(folder))
    problems: list[dict[str, str]] = []
    info = _description(folder, listed, present, problems)
    required, why = _required(info) if info is not None else (set(), None)
    if why is not None:
        problems.append({"file": BUNDLE_JSON, "problem": why})
    listed_problems, intact = _check_listed(folder, listed, present, progress)
    problems += listed_problems
    image = info["image"] if info is not None and why is None else None
    if image is not None and image["file"] in intact:
        problems += _image_problems(folder, ImageEntry.of(image), progress)
    results = _results_folders(folder, info, listed)
    unlisted = {name for name in present if name not in listed and name != SUMS
                and not any(r in (folder / name).parents for r in results)} - {BUNDLE_JSON}
    for name in sorted(required - set(listed)):
        problems.append({"file": name,
                         "problem": "missing, and its SHA256SUMS line too (bundle.json lists it)"
                         if name not in present
                         else "not listed in SHA256SUMS (bundle.json lists it)"})
        unlisted.discard(name)
    if info is not None and why is None:
        problems += [{"file": name,
                      "problem": "listed in SHA256SUMS but not part of the bundle (bundle.json "
                      "does not list it)"} for name in sorted(set(listed) - required)]
    problems += [{
        "file": printable_name(name), "problem": "not listed in SHA256SUMS (added after bundling)"}
                 for name in sorted(unlisted)]
    report: VerifyReport = {"bundle": str(folder), "files": len(listed), "ok": not problems,
                            "problems": problems}
    return report, info if why is None else None


def _image_problems(folder: Path, image: ImageEntry,
                    progress: Progress | None) -> list[dict[str, str]]:
    """The archive read through (kdkit.transfer.imagearchive) with nothing loaded: its size against
    bundle.json, its one image and tag, its length against the bound."""
    path = folder / image.file
    size = path.stat().st_size
    if size != image.bytes:
        return [
            {"file": image.file,
             "problem": f"{size} bytes, bundle.json declares {image.bytes} ($.image.bytes)"}]
    if progress is not None:
        progress(
            f"reading {image.file} through {image.compressor.decompress[0]}: one image, its own "
            "tag, its length")
    try:
        for _chunk in _archive(folder, image):
            pass
    except CheckFailed as exc:
        return [{"file": image.file, "problem": str(exc)}]
    return []


@contextlib.contextmanager
def _decompressed(folder: Path, image: ImageEntry) -> Iterator[Iterator[bytes]]:
    """The image archive decompressed, its decompressor ended when the block ends (early, at a
    refusal)."""
    chunks = proc.stdout_chunks([*image.compressor.decompress, str(folder / image.file)])
    try:
        yield chunks
    finally:
        if isinstance(chunks, Generator):
            chunks.close()


def _archive(folder: Path, image: ImageEntry) -> Iterator[bytes]:
    """The archive as the engine gets it: decompressed, checked and written again as it streams."""
    with _decompressed(folder, image) as chunks:
        yield from rewritten(chunks,
                             expected(image.ref, image.id, image.bytes, image.archive_bytes))


def _check_listed(folder: Path, listed: dict[str, str], present: dict[str, os.stat_result],
                  progress: Progress | None) -> tuple[list[dict[str, str]], set[str]]:
    """(a problem for each file SHA256SUMS lists that is missing, not plain or altered; the intact
    ones)."""
    problems: list[dict[str, str]] = []
    intact: set[str] = set()
    for name, digest in listed.items():
        info_ = present.get(name)
        if info_ is None:
            problems.append({"file": name, "problem": "missing"})
            continue
        if stat.S_ISLNK(info_.st_mode) or not stat.S_ISREG(info_.st_mode):
            problems.append(
                {"file": name,
                 "problem": "a link or special file where a bundle holds a plain file"})
            continue
        if progress is not None and info_.st_size > 1 << 26:
            progress(f"checking {name} ({info_.st_size / 1e9:.2f} GB)")
        if sha256_file(folder / name) != digest:
            problems.append(
                {"file": name, "problem": "altered: its sha256 differs from SHA256SUMS"})
        else:
            intact.add(name)
    return problems, intact


def _description(folder: Path, listed: dict[str, str], present: dict[str, os.stat_result],
                 problems: list[dict[str, str]]) -> dict[str, Any] | None:
    """bundle.json's content when SHA256SUMS lists it, it is intact and of a format this kdkit
    reads, else None (with a problem added); BadInput naming the JSON path when it does not match
    its schema."""
    path = folder / BUNDLE_JSON
    if BUNDLE_JSON not in listed:
        problems.append({"file": BUNDLE_JSON,
                         "problem": "not listed in SHA256SUMS" if BUNDLE_JSON in present
                         else "missing, and its SHA256SUMS line too"})
        return None
    if BUNDLE_JSON not in present or not stat.S_ISREG(present[BUNDLE_JSON].st_mode):
        return None  # named by _check_listed
    if sha256_file(path) != listed[BUNDLE_JSON]:
        return None  # named by _check_listed
    try:
        info = load_json(path, what="bundle description")
    except BadInput as exc:
        problems.append({"file": BUNDLE_JSON, "problem": f"unreadable ({exc})"})
        return None
    why = _format_problem(info)
    if why is not None:
        problems.append({"file": BUNDLE_JSON, "problem": why})
        return None
    raise_first(schema_problems(info, "bundle", Path(BUNDLE_JSON)), base=folder,
                hint="; `kdkit bundle` never writes it so: make the bundle again")
    result: dict[str, Any] = info
    return result


def require_verified(report: Problems) -> None:
    """CheckFailed naming the first bad file (and how many more)."""
    if report["problems"]:
        first = report["problems"][0]
        more = f" (+{len(report['problems']) - 1} more)" if len(report["problems"]) > 1 else ""
        raise CheckFailed(f"{Path(report['bundle']) / first['file']}: {first['problem']}{more}; "
                          "the bundle was changed or damaged in transfer: copy it again")


# ---------------------------------------------------------------- kdkit load


def load_bundle(folder: Path, progress: Progress | None = None) -> LoadReport:
    """Verify every file and the archive's contents, load the image (the archive as checked, written
    again as it streams: kdkit.transfer.imagearchive), and check its id and labels against the
    bundle."""
    from kdkit.docker_adapter import connect

    say = progress or (lambda _m: None)
    say("verifying every file against SHA256SUMS")
    verified, info = _verified(folder, progress)
    require_verified(verified)
    assert info is not None  # verified: bundle.json was read and checked
    folder = Path(verified["bundle"])
    if info["image"] is None:
        raise BadInput(f"{folder / BUNDLE_JSON}: this bundle has no image (made with --no-image); "
                       f"use {ZIPAPP} as RUN.md says, or bundle again with the image")
    image = ImageEntry.of(info["image"])
    engine = connect()
    say(f"loading {image.file} ({image.bytes / 1e6:.0f} MB) through "
        f"{image.compressor.decompress[0]}")
    started = time.perf_counter()
    try:
        loaded = engine.load_image_chunks(_archive(folder, image), str(folder / image.file))
    # changed since it was verified: broken off before any name reached the engine
    except CheckFailed as exc:
        require_verified(
            {"bundle": str(folder), "problems": [{"file": image.file, "problem": str(exc)}]})
        raise
    seconds = time.perf_counter() - started
    facts = engine.require_image(image.ref)
    recorded = {name: image.labels[name] for name in TIED_LABELS}
    # the requirements lock, or the pylock the image was built from
    baked = recorded["dev.kdkit.lock.path"]
    lock_sha256 = sha256_file(folder / PROJECT
                              / (baked if baked in info["files"] else info["lock"]))
    wrong = [] if facts.id == image.id else [f"id: image has {facts.id}, bundle has {image.id}"]
    wrong += label_mismatches(facts.labels, {**recorded, "dev.kdkit.lock.sha256": lock_sha256})
    if wrong:
        raise CheckFailed(f"image {image.ref}: loaded, but does not match the bundle ({wrong[0]}); "
                          "the bundle is inconsistent: make it again with `kdkit bundle`")
    return {"bundle": str(folder), "image": image.ref, "id": facts.id, "loaded": loaded,
            "labels_checked": list(TIED_LABELS), "seconds": round(seconds, 3),
            "files": verified["files"]}
