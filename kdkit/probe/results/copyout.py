"""`kdkit copy-out RUN_DIR DEST`: copy a run folder (or a checkpoint folder) to a place you control
and verify the copy.

DEST is a local folder, ``[user@]host:path`` over SSH or an rclone remote ``remote:path``
(kdkit.probe.results.destinations says how they are told apart; kdkit.probe.results.remote copies
and verifies there). A folder without SHA256SUMS (a plain checkpoint folder, e.g. a Hugging Face
Trainer's) is hashed first, copied, verified against those hashes, and its SHA256SUMS is written
into the copy, never into the source. A checkpoint folder with its own SHA256SUMS (kdkit train's,
kdkit.core.checkpoints) is checked against it at the source, copied with it, and verified against it
where it lands.

Verification re-reads the copy, not the original, against the run's SHA256SUMS
(after asking the kernel to drop the copy from its page cache where it can), so
what is checked is what was written. A copy that fails is removed and the file
is named; exit 1. The check is kdkit.core.runverify.verify_folder, the one that
``kdkit close`` and ``gather`` hold a run folder to.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from kdkit.core.checksums import SUMS, safe_name
from kdkit.core.errors import BadInput, CheckFailed
from kdkit.core.jsonio import sha256_file
from kdkit.core.parsers import add_json, command_parser
from kdkit.core.reloadcheck import reload_problems
from kdkit.core.report import print_result
from kdkit.core.runfolder import HEARTBEAT, PARAMS, REQUIRED

# the one verification of a run folder, also close's
from kdkit.core.runverify import read_sums as read_sums
from kdkit.core.runverify import required_files, unlisted
from kdkit.core.runverify import verify_folder as verify_folder
from kdkit.core.safetext import printable
from kdkit.core.staging import staged_beside
from kdkit.core.stalestaging import clean_stale, describe_removed
from kdkit.probe.results.destinations import LOCAL, Place, parse_place
from kdkit.probe.results.remote import copy_remote, verify_remote


def _copy_file(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    with target.open("rb") as handle:
        os.fsync(handle.fileno())


def copy_run(run_dir: Path, dest: Path | str | Place) -> Path | Place:
    """Copy ``run_dir`` (a closed run folder, or a checkpoint folder without SHA256SUMS) to
    ``dest/<name>`` and verify the copy where it lies; return the copy's path (local) or place
    (remote)."""
    place = dest if isinstance(dest, Place) else parse_place(str(dest))
    run_dir = run_dir.resolve()
    if not run_dir.is_dir():
        raise BadInput(
            f"{run_dir}: not a folder; give a run folder (runs/<run-id>) or a checkpoint folder")
    sums, sums_text = _source_sums(run_dir)
    if place.kind != LOCAL:
        return copy_remote(run_dir, sums, place, sums_text)
    return _copy_local(run_dir, sums, Path(place.path), sums_text)


def _source_sums(folder: Path) -> tuple[dict[str, str], str | None]:
    """(the folder's {name: sha256}, None) for a closed run folder, checked unchanged since it was
    closed; for a folder without SHA256SUMS, every file hashed now and the SHA256SUMS text the copy
    receives."""
    if (folder / SUMS).exists() or (folder / SUMS).is_symlink():
        sums = read_sums(folder)
        if not is_run_copy(sums, folder):
            return sums, _checkpoint_sums(folder, sums)
        # never hashed here: hashed where it lands
        problems = [f"{folder / name}: missing, and not listed in {SUMS} either"
                    for name in required_files(folder)
                    if name not in sums] + unlisted(folder, sums)
        if problems:
            raise CheckFailed(f"{problems[0]}; the run folder changed after it was closed")
        return sums, None
    _refuse_uncopyable(folder)
    digests = {path.relative_to(folder).as_posix(): sha256_file(path)
               for path in sorted(folder.rglob("*"))
               if path.is_file()}
    if not digests:
        raise BadInput(f"{folder}: holds no file; nothing to copy")
    return digests, "".join(f"{digest}  {name}\n" for name, digest in sorted(digests.items()))


def _checkpoint_sums(folder: Path, sums: dict[str, str]) -> str:
    """A checkpoint folder's own SHA256SUMS, checked at the source (every listed file there and
    unchanged, none unlisted); its text is what the copy is verified against and receives."""
    _refuse_uncopyable(folder)
    problems = [f"{folder / name}: missing, listed in {SUMS}" for name in sums
                if not (folder / name).is_file()]
    problems = problems or mismatched_only(folder, sums) + unlisted(folder, sums)
    if problems:
        raise CheckFailed(f"{problems[0]}; the checkpoint folder is incomplete or changed since it "
                          "was written: copy a complete one")
    return (folder / SUMS).read_text(encoding="utf-8")


def sums_origin(folder: Path) -> str | None:
    """How a folder about to be copied is verified: "computed" (a folder without SHA256SUMS: hashed
    at the source), "own" (a checkpoint folder's own SHA256SUMS), None (a run folder's)."""
    if not (folder / SUMS).is_file():
        return "computed"
    return None if is_run_copy(read_sums(folder), folder) else "own"


def _refuse_uncopyable(folder: Path) -> None:
    """A folder without SHA256SUMS that cannot be copied as a checkpoint folder: an open (or killed)
    run folder, a link inside, a file name SHA256SUMS cannot list."""
    if any(os.path.lexists(folder / name) for name in (PARAMS, HEARTBEAT)):
        raise BadInput(f"{folder}: a run folder that is not closed (no {SUMS}); wait for its end "
                       "(kdkit wait), or `kdkit pilot --resume` a killed one, then copy it")
    for path in sorted(folder.rglob("*")):
        if path.is_symlink():
            raise BadInput(
                f"{path}: a symbolic link; a folder copied without {SUMS} holds regular files only")
        if not safe_name(path.relative_to(folder).as_posix()):
            raise BadInput(f"{folder}/{printable(path.relative_to(folder).as_posix())}: a file "
                           f"name {SUMS} cannot list (a newline, a backslash or a control "
                           "character); rename it, then copy the folder")


def _copy_local(run_dir: Path, sums: dict[str, str], dest: Path, sums_text: str | None) -> Path:
    final = dest.resolve() / run_dir.name
    if final == run_dir or run_dir in final.parents:
        raise BadInput(f"{dest}: the copy must go outside the run folder {run_dir}")
    if final.exists():
        raise BadInput(f"{final}: exists; choose another DEST or remove the old copy")
    for line in describe_removed(clean_stale(final)):  # said even when the copy then cannot start
        print(f"copy-out: {line}", file=sys.stderr)
    try:
        # removed, whatever fails, unless published
        with staged_beside(final, clean=False, parents=True) as staged:
            _fill(run_dir, sums, staged.path, sums_text)
            problems = _local_problems(run_dir, staged.path, sums_text)
            if problems:
                raise CheckFailed(problems[0].replace(str(staged.path), str(final))
                                  + "; the copy was removed, "
                                  "copy again")
            staged.publish()
    except OSError as exc:
        raise BadInput(
            f"{final}: cannot copy there ({exc.strerror}); choose a writable DEST") from None
    return final


def _fill(run_dir: Path, sums: dict[str, str], staging: Path, sums_text: str | None) -> None:
    for name in [*sums, *([] if sums_text is not None else [SUMS])]:
        _copy_file(run_dir / name, staging / name)
    if sums_text is not None:
        (staging / SUMS).write_text(sums_text, encoding="utf-8")


def _local_problems(run_dir: Path, staging: Path, sums_text: str | None) -> list[str]:
    copied = read_sums(staging)
    if sums_text is not None:
        return mismatched_only(staging, copied)
    return verify_folder(staging, copied) + _same_sums(run_dir, staging) or reload_problems(staging)


def mismatched_only(folder: Path, sums: dict[str, str]) -> list[str]:
    """A checkpoint folder's copy against its hashes: each file re-read from the copy."""
    return [f"{folder / name}: SHA-256 differs from {SUMS}" for name, digest in sums.items()
            if not (folder / name).is_file() or sha256_file(folder / name) != digest]


def _same_sums(original: Path, copy: Path) -> list[str]:
    if (original / SUMS).read_bytes() != (copy / SUMS).read_bytes():
        return [f"{copy / SUMS}: differs from the original's {SUMS}"]
    return []


def verify_copy(folder: Path) -> int:
    """Verify an existing local copy in place (SHA256SUMS, then reloadable); raise CheckFailed
    naming the first bad file."""
    sums = read_sums(folder)
    # a checkpoint folder's copy: its files against its SHA256SUMS
    if not is_run_copy(sums, folder):
        problems = mismatched_only(folder, sums) + unlisted(folder, sums)
    else:
        problems = verify_folder(folder, sums) or reload_problems(folder)
    if problems:
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        raise CheckFailed(problems[0] + more)
    return len(sums)


def is_run_copy(sums: dict[str, str], folder: Path | None = None) -> bool:
    """Whether a copy is of a run folder (any file a run folder or a gathering requires is listed,
    or there), not of a checkpoint folder."""
    names = {name for names in REQUIRED.values() for name in names}
    return any(name in sums or (folder is not None and os.path.lexists(folder / name))
               for name in names)


def verify_place(text: str, rclone_config: str | None) -> tuple[str, int]:
    """Verify the copy ``text`` names, local or remote; (where it is, how many files)."""
    place = parse_place(text, rclone_config)
    if place.kind == LOCAL:
        return str(Path(place.path).resolve()), verify_copy(Path(place.path))
    return str(place), verify_remote(place)


def _destination(text: str) -> str:
    if not text.strip():
        raise BadInput(f"DEST {text!r}: empty; name the folder that receives the copy")
    return text


PLACE_RULE = ("DEST/PLACE: a path starting with /, ./, ../ or ~, one with no ':', or one with a "
              "'/' before its first ':' is a local folder; user@host:path is SSH (rsync when both "
              "ends have it, else sftp; ~/.ssh/config is read, or the file KDKIT_SSH_CONFIG "
              "names); name:path is rclone when name is one of `rclone listremotes` "
              "(--rclone-config, else RCLONE_CONFIG), else SSH to the host name.")


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser(
        "copy-out",
        "Copy a pilot run folder (or a checkpoint folder) to a place you control (a folder, an SSH "
        "host, an rclone remote) and verify the copy where it lies: every file hashed there "
        "against the run's SHA256SUMS, its summary and results reloaded. With --verify, check an "
        "existing copy instead.",
        PLACE_RULE
        + " Exit 0 verified, 1 a file differs (named), 2 bad input, 3 unreachable or a tool "
        "missing. Examples: kdkit copy-out runs/20260101T120000Z-1a2b3c4d /mnt/backup; kdkit "
        "copy-out runs/ID me@backup.example:kdkit-evidence; kdkit copy-out runs/ID/ckpt "
        "s3remote:bucket/ckpt; kdkit copy-out --verify me@backup.example:kdkit-evidence/ID",
        preformatted=(False))
    parser.add_argument("run_dir", metavar="RUN_DIR",
                        help="the run folder (runs/<run-id>) or a checkpoint folder; with "
                             "--verify, the copy (local, user@host:path/ID or remote:path/ID)")
    parser.add_argument("dest", type=_destination, nargs="?", metavar="DEST",
                        help="where DEST/<run-id> is made (not with --verify)")
    parser.add_argument("--verify",
                        action="store_true", help="only verify RUN_DIR (e.g. an earlier copy)")
    parser.add_argument("--rclone-config", metavar="FILE",
                        help="the rclone config to read (default: RCLONE_CONFIG, "
                        "else rclone's own)")
    add_json(parser, "the result as JSON")
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.verify == (args.dest is not None):
        raise BadInput("give RUN_DIR and DEST to copy, or RUN_DIR with --verify to check a copy")
    if args.verify:
        where, count = verify_place(args.run_dir, args.rclone_config)
        result = {"verified": where, "files": count}
        message = f"{args.run_dir}: {count} files match {SUMS}, hashed where the copy lies"
    else:
        source, place = Path(args.run_dir), parse_place(args.dest, args.rclone_config)
        origin = sums_origin(source) if source.is_dir() else None
        copy = copy_run(source, place)
        copied = len(read_sums(copy)) if isinstance(copy, Path) else None
        result = {"copy": str(copy), "files": copied, "verified": True}
        message = f"Copied to {copy}; every file, hashed where the copy lies, matches {SUMS}"
        if origin is not None:
            result["sums"] = origin
            message += (f" (computed at the source: the folder had no {SUMS}; written into the "
                        "copy only)"
                        if origin == "computed"
                        else " (the checkpoint folder's own, checked at the source first)")
    print_result(args.json, result, message)
    return 0
