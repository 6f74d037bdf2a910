"""`kdkit copy-out RUN_DIR DEST`: copy a run folder to a place you control and verify the copy.

Verification re-reads the copy, not the original, against the run's SHA256SUMS
(after asking the kernel to drop the copy from its page cache where it can), so
what is checked is what was written. A copy that fails is removed and the file
is named; exit 1. The check is kdkit.core.runfolder.verify_folder, the one that
``kdkit close`` and ``gather`` hold a run folder to.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from kdkit.core.checksums import SUMS
from kdkit.core.errors import BadInput, CheckFailed
from kdkit.core.parsers import add_json, command_parser
from kdkit.core.report import print_result
from kdkit.core.runfolder import read_sums as read_sums  # the one verification of a run folder, also close's
from kdkit.core.runfolder import unlisted
from kdkit.core.runfolder import verify_folder as verify_folder
from kdkit.core.staging import clean_stale, describe_removed, hold, release, staging_for


def _copy_file(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    with target.open("rb") as handle:
        os.fsync(handle.fileno())


def copy_run(run_dir: Path, dest: Path) -> Path:
    """Copy ``run_dir`` to ``dest/<run-id>`` and verify the copy; return the copy's path."""
    run_dir = run_dir.resolve()
    sums = read_sums(run_dir)
    final = dest.resolve() / run_dir.name
    if final == run_dir or run_dir in final.parents:
        raise BadInput(f"{dest}: the copy must go outside the run folder {run_dir}")
    if final.exists():
        raise BadInput(f"{final}: exists; choose another DEST or remove the old copy")
    problems = [p for p in verify_folder(run_dir, sums) if "missing, and not listed" in p] + unlisted(run_dir, sums)
    if problems:
        raise CheckFailed(f"{problems[0]}; the run folder changed after it was closed")
    for line in describe_removed(clean_stale(final)):
        print(f"copy-out: {line}", file=sys.stderr)
    staging, lock = staging_for(final), None
    try:
        staging.mkdir(parents=True)
        lock = hold(staging)
        for name in [*sums, SUMS]:
            _copy_file(run_dir / name, staging / name)
        problems = verify_folder(staging, read_sums(staging)) + _same_sums(run_dir, staging)
        if problems:
            raise CheckFailed(problems[0].replace(str(staging), str(final)) + "; the copy was removed, copy again")
        os.replace(staging, final)
    except OSError as exc:
        raise BadInput(f"{final}: cannot copy there ({exc.strerror}); choose a writable DEST") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        release(lock)
    return final


def _same_sums(original: Path, copy: Path) -> list[str]:
    if (original / SUMS).read_bytes() != (copy / SUMS).read_bytes():
        return [f"{copy / SUMS}: differs from the original's {SUMS}"]
    return []


def verify_copy(folder: Path) -> int:
    """Verify an existing copy in place; raise CheckFailed naming the first bad file."""
    sums = read_sums(folder)
    problems = verify_folder(folder, sums)
    if problems:
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        raise CheckFailed(problems[0] + more)
    return len(sums)


def _destination(text: str) -> Path:
    if not text.strip():
        raise BadInput(f"DEST {text!r}: empty; name the folder that receives the copy")
    return Path(text)


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser(
        "copy-out", "Copy a pilot run folder to a place you control and verify the copy against the run's "
                    "SHA256SUMS by re-reading the copy. With --verify, check an existing copy instead.",
        "Exit 0 verified, 1 a file differs (named), 2 bad input. Example: "
        "kdkit copy-out runs/20260101T120000Z-1a2b3c4d /mnt/backup", preformatted=False)
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="the run folder (runs/<run-id>)")
    parser.add_argument("dest", type=_destination, nargs="?", metavar="DEST",
                        help="folder that receives DEST/<run-id> (not with --verify)")
    parser.add_argument("--verify", action="store_true", help="only verify RUN_DIR (e.g. an earlier copy)")
    add_json(parser, "the result as JSON")
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.verify == (args.dest is not None):
        raise BadInput("give RUN_DIR and DEST to copy, or RUN_DIR with --verify to check a copy")
    if args.verify:
        count = verify_copy(args.run_dir)
        result = {"verified": str(args.run_dir.resolve()), "files": count}
        message = f"{args.run_dir}: {count} files match {SUMS}"
    else:
        copy = copy_run(args.run_dir, args.dest)
        result = {"copy": str(copy), "files": len(read_sums(copy)), "verified": True}
        message = f"Copied to {copy}; {result['files']} files re-read from the copy match {SUMS}"
    print_result(args.json, result, message)
    return 0
