"""A closed run folder verified, and read: what its kind must hold (required_files), the one
verification against its SHA256SUMS (verify_folder: copy-out, gather, train --verify-reload),
whether it proves what its summary says (closed_problems), and the one reader, read_run(), whose
verdict stands only when it does (close, estimate-memory, a stopped workers run).

The names and keys are kdkit.core.runfolder's: read_run() reads exactly the keys the writers write
(kdkit.core.runresults.RunFolder, the summaries of kdkit.probe.pilot and kdkit.probe.train),
tolerating files that are missing or torn.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.core import checksums, outputfiles, vectorfile
from kdkit.core.checksums import SUMS, safe_name
from kdkit.core.errors import BadInput, CheckFailed
from kdkit.core.jsonio import drop_cached_pages, sha256_file
from kdkit.core.jsonio import object_or_empty as _object
from kdkit.core.pilotconfig import params_hash
from kdkit.core.resultlines import Scan, blocks, scan_block
from kdkit.core.runfolder import (
    ACCEPTED,
    BYTES,
    DEVICE,
    FILES,
    GATHERED,
    KIND,
    OUTPUT_ITEMS,
    PARAMS,
    PARAMS_HASH,
    PEAK,
    PILOT,
    REASON,
    REJECTED,
    REQUIRED,
    RESULTS,
    RUN_ID,
    SHARE,
    STOP,
    STOPPED,
    SUMMARY,
    TOTAL,
    TRAIN,
    VECTOR_ROWS,
    VERDICT,
    WORKER,
    WORKERS,
    folder_kind,
    session_seconds,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

# ---------------------------------------------------------------- what a closed folder holds


def required_files(folder: Path) -> list[str]:
    """The files a closed run folder of its kind (folder_kind) must hold."""
    summary = _object(folder / SUMMARY)
    kind = folder_kind(folder, summary)
    listed = summary.get(FILES)  # a closed pilot run names every file it holds
    named = [str(f) for f in listed if safe_name(f)
             and f != SUMS] if isinstance(listed, list) else []
    required = [*REQUIRED[kind], *([STOP] if kind == PILOT and summary.get(STOPPED) else [])]
    return required + [name for name in named if name not in required]


# ---------------------------------------------------------------- verifying a closed folder
# (copy-out, close, gather)


def read_sums(folder: Path) -> dict[str, str]:
    """A run folder's SHA256SUMS (kdkit.core.checksums); BadInput when it has none: it was never
    closed."""
    return checksums.read_sums(folder, "run folder", f"is {folder} a finished run folder?")


def verify_folder(folder: Path, sums: dict[str, str]) -> list[str]:
    """Every difference between ``folder`` and ``sums``, each naming the file: a file that differs,
    one that is missing, one not listed, a link, and one the folder's kind requires that neither
    has; then vectors.npy against the results that name its rows (vectorfile.run_problems), a pilot
    run's outputs/ against its accepted records' file hashes (output_problems), and a gathering's
    counts against what it holds (count_problems)."""
    required = [f"{folder / name}: missing, and not listed in {SUMS} either; a closed run folder "
                "always holds it (removed with its line?)" for name in required_files(folder)
                if name not in sums]
    if (folder / SUMS).is_symlink():
        required.append(f"{folder / SUMS}: a symbolic link, not the folder's own {SUMS}")
    problems = required + mismatched(folder, sums) + unlisted(folder, sums)
    # the bytes are the closed ones: do the vectors add up?
    return problems or (vectorfile.run_problems(folder, folder / RESULTS, folder / PARAMS)
                        + output_problems(folder, sums) + count_problems(folder))


def output_problems(folder: Path, sums: dict[str, str]) -> list[str]:
    """A pilot run folder of the file kind (params.json's output, or an outputs/ there) against its
    accepted records' file hashes (kdkit.core.outputfiles.kept_problems)."""
    if not os.path.lexists(folder / PARAMS):
        return []
    output = _object_in(_object_in(_object(folder / PARAMS), "params"), "output")
    return outputfiles.kept_problems(folder, sums, folder / RESULTS, output.get(KIND) == "file")


def count_problems(folder: Path) -> list[str]:
    """A gathering's summary.json against what it holds (kdkit.core.outputfiles.count_problems)."""
    summary = _object(folder / SUMMARY)
    if folder_kind(folder, summary) != GATHERED:
        return []
    return outputfiles.count_problems(folder, summary.get(VECTOR_ROWS),
                                      summary.get(OUTPUT_ITEMS), folder / SUMMARY)


def mismatched(folder: Path, sums: dict[str, str]) -> list[str]:
    """Listed files that are missing, reached through a symbolic link (the harness writes none: a
    link makes another file, anywhere, stand for the run's), or whose SHA-256 differs; each re-read
    from the disk."""
    problems = []
    for name, digest in sums.items():
        path, linked = folder / name, _linked_part(folder, name)
        if linked is not None:
            problems.append(f"{linked}: a symbolic link (listed in {SUMS}), not a file of the run")
            continue
        if not path.is_file():
            problems.append(f"{path}: missing (listed in {SUMS})")
            continue
        drop_cached_pages(path)
        actual = sha256_file(path)
        if actual != digest:
            problems.append(
                f"{path}: SHA-256 {actual[:12]}... differs from {SUMS} ({digest[:12]}...)")
    return problems


def _linked_part(folder: Path, name: str) -> Path | None:
    """The first part of ``folder/name`` below the folder that is a symbolic link, else None."""
    part = folder
    for piece in Path(name).parts:
        part = part / piece
        if part.is_symlink():
            return part
    return None


def unlisted(folder: Path, sums: dict[str, str]) -> list[str]:
    """Files and links the checksums do not cover: added after the run was closed."""
    covered = {*sums, SUMS}
    return [f"{path}: {'a symbolic link, ' if path.is_symlink() else ''}not listed in {SUMS}"
            for path in sorted(folder.rglob("*")) if (path.is_symlink() or path.is_file())
            and path.relative_to(folder).as_posix() not in covered]


def closed_problems(folder: Path, params: Mapping[str, Any],
                    summary: Mapping[str, Any]) -> list[str]:
    """Why a closed run folder does not prove what its summary says (empty when it does): it is a
    link, has no SHA256SUMS or does not verify against it (verify_folder: copy-out --verify's
    check), names another run, or, passing, holds results that do not add up to its summary."""
    if folder.is_symlink():
        return [f"{folder}: a symbolic link to {os.readlink(folder)}, not a run folder of its own"]
    try:
        problems = verify_folder(folder, read_sums(folder))
    except BadInput:
        return (
            [f"{folder / SUMS}: not found; the run was never closed (still running, or stopped "
             "before closing)"])
    except CheckFailed as exc:
        return [str(exc)]
    # a file of it that cannot be read: the reader stays tolerant, the run proves nothing
    except OSError as exc:
        return (
            [f"{exc.filename or folder}: cannot be read ({exc.strerror or exc}); the run cannot be "
             "verified"])
    kind = folder_kind(folder, summary)
    # a gathering is named after its run; a pilot or training folder after itself
    if kind in (PILOT, TRAIN):
        problems += [f"{folder / name}: names run {data.get(RUN_ID)!r}, not its folder "
                     f"{folder.name!r} (a copy of another run under a new name?)" for name,
                     data in ((PARAMS, params), (SUMMARY, summary))
                     if (data or name == PARAMS) and data.get(RUN_ID) != folder.name]
    if kind == PILOT and (not params.get(PARAMS_HASH)
                          or params.get(PARAMS_HASH) != params_hash(_object_in(params, "params"))):
        problems.append(
            f"{folder / PARAMS}: its params_hash is not the hash of its params (edited?)")
    return problems or (results_problems(folder, summary) if summary.get(VERDICT) == "pass" else [])


def results_problems(folder: Path, summary: Mapping[str, Any]) -> list[str]:
    """A passing pilot summary against its own results.jsonl: every ID once, the counts it
    states."""
    if folder_kind(folder, summary) in (GATHERED, TRAIN):
        return []
    scan, path = Scan(), folder / RESULTS
    try:
        data = path.read_bytes()
        for first, block in blocks(data, len(data)):
            scan_block(scan, block, first, path)
    except (OSError, CheckFailed) as exc:
        return (
            [f"{path}: cannot be read back ({exc}); the summary's pass is not shown by its "
             "results"])
    total, rejected, accepted = summary.get(TOTAL), summary.get(REJECTED), summary.get(ACCEPTED)
    if summary.get("problems") \
            or not (scan.lines == len(scan.finished) == total and scan.rejected == rejected
                                       and isinstance(total, int) and accepted == total
                    - scan.rejected):
        return [f"{folder / SUMMARY}: says pass with {total} IDs ({accepted} accepted, {rejected} "
                f"rejected) and its problems {summary.get('problems')!r}, but {RESULTS} holds "
                f"{scan.lines} line(s) for {len(scan.finished)} ID(s), {scan.rejected} rejected"]
    return []


# ---------------------------------------------------------------- the reader


@dataclass(frozen=True)
class Run:
    """One run folder as read_run() finds it; a field is None where its file is missing or torn."""

    path: Path
    kind: str  # folder_kind: "pilot" (any folder holding params.json) or "gathered"
    has_params: bool  # a pilot run writes params.json before its first item
    has_summary: bool
    params_hash: str | None  # params.json's (a gathering's: its summary's)
    manifest_sha256: str | None  # params.json's params.manifest_sha256: the manifest the run read
    # "pass" or "fail" (the summary's, when the folder verifies), "unverified" (a summary in a
    # folder that does not: see problems), else "stopped" (a stop.json, the run never closed), else
    # "incomplete"
    verdict: str
    stop_reason: str | None
    total: int | None
    accepted: int | None
    rejected: int | None
    seconds: float | None  # the summary's timings.seconds
    peak_bytes: int | None  # the summary's peak_memory.bytes, measured on peak_device
    peak_device: str | None
    share: tuple[int, int] | None  # (worker, workers) of a worker's folder
    workers: int | None  # a gathering's N
    # why the folder does not prove its summary (closed_problems); () when it does
    problems: tuple[str, ...] = ()

    @property
    def run_id(self) -> str:
        return self.path.name


def read_run(folder: Path) -> Run:
    """One run folder, read tolerantly (a run may have crashed half-way), and verified: a summary's
    verdict stands only when the folder is what its SHA256SUMS closed (closed_problems); else it is
    "unverified"."""
    params, summary, stop = _object(folder
                                    / PARAMS), _object(folder / SUMMARY), _object(folder / STOP)
    peak, share = _object_in(summary, PEAK), _object_in(params, SHARE)
    worker, workers = _int(share.get(WORKER)), _int(share.get(WORKERS))
    problems = tuple(closed_problems(folder, params, summary))
    verdict = summary.get(VERDICT) if summary.get(VERDICT) in ("pass", "fail") else None
    verdict = "unverified" if verdict and problems else verdict
    return Run(
        path=folder, kind=folder_kind(folder, summary),
        has_params=(folder / PARAMS).is_file(), has_summary=bool(summary),
        params_hash=_str(params.get(PARAMS_HASH)) or _str(summary.get(PARAMS_HASH)),
        manifest_sha256=_str(_object_in(params, "params").get("manifest_sha256")),
        verdict=verdict or ("stopped" if stop else "incomplete"),
        stop_reason=_str(stop.get(REASON)),
        total=_int(summary.get(TOTAL)), accepted=_int(summary.get(ACCEPTED)),
        rejected=_int(summary.get(REJECTED)),
        seconds=session_seconds(summary), peak_bytes=_int(peak.get(BYTES)),
        peak_device=_str(peak.get(DEVICE)),
        share=None if worker is None or workers is None else (worker, workers),
        workers=_int(summary.get(WORKERS)) if folder_kind(folder, summary) == GATHERED else None,
        problems=problems,
    )


def _object_in(data: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key)
    return value if isinstance(value, dict) else {}


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None
