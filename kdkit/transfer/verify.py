"""`kdkit verify-bundle` and `kdkit load`: a bundle checked file by file before anything is loaded.

`kdkit verify-bundle` checks every file against SHA256SUMS and against the file list of
bundle.json: a required file that is gone (with its SHA256SUMS line or without), a listed file that
bundle.json does not know, a file that neither lists, or a link, is a failure. `kdkit load`
verifies, decompresses the image on the way into the engine (engines before Docker 25 cannot read
zstd themselves) and checks the loaded image's id and tied labels against the bundle.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kdkit.config.files import printable_name
from kdkit.core import proc
from kdkit.core.checksums import SUMS, safe_name
from kdkit.core.errors import BadInput, CheckFailed
from kdkit.core.jsonio import load_json, sha256_file
from kdkit.core.report import Progress
from kdkit.transfer.format import (
    BUNDLE_JSON,
    COMPRESSORS,
    FORMAT_KEY,
    PROJECT,
    READS,
    RUN_MD,
    TIED_LABELS,
    ZIPAPP,
    bundle_tree,
    label_mismatches,
    read_sums,
)
from kdkit.transfer.kdkitwheels import listed_files


def _required(info: Any) -> tuple[set[str], str | None]:
    """The files bundle.json says the bundle holds, and why it cannot say (None when it can)."""
    if not isinstance(info, dict) or info.get(FORMAT_KEY) not in READS:
        return set(), (f"has no {FORMAT_KEY!r}: {' or '.join(map(str, READS))} (made by an older or newer kdkit, "
                       "or not by kdkit); make the bundle again with `kdkit bundle` of this kdkit")
    files, image = info.get("files"), info.get("image")
    named = [info.get(key) for key in ("lock", "pilot_config", "manifest")]
    if not isinstance(files, list) or not all(safe_name(f) for f in [*files, *named, "kdkit.json"]):
        return set(), "its file list ($.files, $.lock, $.pilot_config, $.manifest) is malformed"
    wheels = listed_files(info)
    if wheels is None or not all(safe_name(f) for f in wheels):
        return set(), "its $.kdkit_wheels.files is malformed"
    required = {BUNDLE_JSON, RUN_MD, ZIPAPP, *wheels, *(f"{PROJECT}/{f}" for f in [*files, *named, "kdkit.json"])}
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
    present = dict(bundle_tree(folder))
    problems, intact = _check_listed(folder, listed, present, progress)
    info = _description(folder, listed, present, intact, problems)
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


def _check_listed(folder: Path, listed: dict[str, str], present: dict[str, os.stat_result],
                  progress: Progress | None) -> tuple[list[dict[str, str]], set[str]]:
    """(a problem for each file SHA256SUMS lists that is missing, not plain or altered; the intact ones)."""
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
    return problems, intact


def _description(folder: Path, listed: dict[str, str], present: dict[str, os.stat_result], intact: set[str],
                 problems: list[dict[str, str]]) -> Any:
    """bundle.json's content when SHA256SUMS lists it and it is intact, else None (with a problem added)."""
    if BUNDLE_JSON not in listed:
        problems.append({"file": BUNDLE_JSON, "problem": "not listed in SHA256SUMS" if BUNDLE_JSON in present
                         else "missing, and its SHA256SUMS line too"})
    elif BUNDLE_JSON in intact:
        try:
            return load_json(folder / BUNDLE_JSON, what="bundle description")
        except BadInput as exc:
            problems.append({"file": BUNDLE_JSON, "problem": f"unreadable ({exc})"})
    return None


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
    from kdkit.docker_adapter import connect

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
    loaded = engine.load_image_chunks(proc.stdout_chunks([*compressor.decompress, str(folder / image["file"])]),
                                      str(folder / image["file"]))
    seconds = time.perf_counter() - started
    facts = engine.require_image(image["ref"])
    recorded = {name: image["labels"][name] for name in TIED_LABELS if name in image["labels"]}
    baked = recorded.get("dev.kdkit.lock.path")  # the requirements lock, or the pylock the image was built from
    lock_sha256 = sha256_file(folder / PROJECT / (baked if baked and baked in info["files"] else info["lock"]))
    wrong = [] if facts.id == image["id"] else [f"id: image has {facts.id}, bundle has {image['id']}"]
    wrong += label_mismatches(facts.labels, {**recorded, "dev.kdkit.lock.sha256": lock_sha256})
    if wrong:
        raise CheckFailed(f"image {image['ref']}: loaded, but does not match the bundle ({wrong[0]}); "
                          "the bundle is inconsistent: make it again with `kdkit bundle`")
    return {"bundle": str(folder), "image": image["ref"], "id": facts.id, "loaded": loaded,
            "labels_checked": list(TIED_LABELS), "seconds": round(seconds, 3), "files": verified["files"]}
