"""`kdkit manifest PATH`: the manifest of a folder of inputs (one file per item) or of a JSONL
corpus.

It writes the manifest the pilot reads (``{"documents": [{"id", "file" | "line", "label", "expect",
"sha256", "size"}, ...]}``), streaming: the entries are written one by one into a staging file
beside ``--out``, renamed into place at the end (kdkit.core.jsonio.atomic_write_chunks), so memory
holds the set of IDs and nothing more, and a refusal or a kill leaves nothing behind.

- A folder: one entry per regular file, its subfolders included, hidden files and folders skipped,
  in name order; the ID is the file's name without its extension (which must be a safe ID), ``file``
  its path relative to the manifest (so the manifest lies in the folder or above it), ``sha256`` and
  ``size`` its bytes'.
- A JSONL file: one entry per record (kdkit.core.jsonlcorpus.scan: a broken line, a missing or
  unsafe ID, a duplicate are refused), ``line`` its line number, ``sha256`` and ``size`` its
  canonical bytes' (reformatting the file changes neither).

Every entry has ``"label": null, "expect": "accept"``: the expected answers are the user's to add.
Standard library only: it runs on the host, in the image and in kdkit.pyz.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import stat
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from kdkit.core import jsonlcorpus
from kdkit.core.errors import BadInput
from kdkit.core.jsonio import atomic_write_chunks, require_replaceable
from kdkit.core.parsers import add_json, command_parser
from kdkit.core.projectfiles import (
    PATH_RULE,
    SAFE_ID_RULE,
    find_root,
    is_safe_id,
    is_within,
    path_problem,
    project_root,
    shown,
)
from kdkit.core.report import print_result

SUFFIX = ".manifest.json"
# the name a project keeps its pilot manifest under, inside the inputs folder
OLD_MANIFEST = "manifest.json"

if TYPE_CHECKING:
    from typing import Literal, NotRequired, TypedDict

    class ManifestEntry(TypedDict):
        """One document of the manifest written: a file's (``file``) or a corpus line's."""

        id: str
        file: NotRequired[str]
        line: NotRequired[int]
        label: None
        expect: Literal["accept"]
        sha256: str
        size: int

    class ManifestResult(TypedDict):
        """What `kdkit manifest` says it wrote."""

        out: str
        kind: str
        source: str
        count: int
        bytes: int
        skipped: list[str]
READ_CHUNK = 1 << 20
HELP = """\
Write the manifest of a folder of inputs (one file per item) or of a JSONL corpus (one
JSON object per line, its ID in field --id): every item's ID, sha256 and size, in the
form the pilot reads. Every entry says "label": null and "expect": "accept"; add the
expected answers and planned rejections of a pilot sample by hand.

A folder: every regular file below it (hidden ones skipped), ID = the file name without
its extension, "file" = its path relative to the manifest, which must therefore lie in
the folder or above it. A top-level manifest.json in the folder is skipped and named.
A JSONL file: one entry per record, "line" = its line number, sha256 and size of the
record's canonical bytes (keys sorted, no spaces, UTF-8): reformatting the file changes
no hash, a changed value does.

Streaming: memory holds the IDs only; the manifest is written whole or not at all."""
EPILOG = """\
examples:
  kdkit manifest data/pilot                 -> data/pilot.manifest.json
  kdkit manifest data/corpus.jsonl --id doc_id
                                            -> data/corpus.manifest.json
  kdkit manifest data/pilot --out data/pilot/manifest.json --force

exit: 0 written, 2 bad input (nothing written)"""


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser("manifest", HELP, EPILOG)
    parser.add_argument("path", type=Path,
                        metavar="PATH", help="a folder of inputs, or a .jsonl corpus")
    parser.add_argument("--out", type=Path, metavar="FILE",
                        help=f"the manifest to write (default: <PATH without extension>{SUFFIX} "
                             "beside PATH, inside the project)")
    parser.add_argument("--id", dest="field",
                        metavar="FIELD", help='a JSONL record\'s ID field (default: "id")')
    parser.add_argument("--force", action="store_true", help="replace an existing --out")
    parser.add_argument("--project-dir", type=Path, metavar="DIR",
                        help="the project the default --out must lie in (default: found upward "
                             "from the current folder)")
    add_json(parser, "the result (out, kind, count, bytes)")
    return parser


class Tally:
    """What has been written so far, told on stderr at most once a second (a long corpus shows it is
    alive)."""

    def __init__(self) -> None:
        self.count, self.bytes = 0, 0
        self.skipped: list[str] = []
        self.last = time.monotonic()

    def add(self, size: int) -> None:
        self.count += 1
        self.bytes += size
        now = time.monotonic()
        if now - self.last >= 1.0:
            self.last = now
            print(f"manifest: {self.count} entries, {self.bytes} bytes so far",
                  file=sys.stderr, flush=True)


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    source, kind = _source(args.path)
    if kind == "folder" and args.field is not None:
        raise BadInput(
            f"--id {args.field}: applies to a JSONL corpus only; {args.path} is a folder")
    out = Path(os.path.abspath(args.out)) if args.out is not None else _default_out(
        source, args.project_dir)
    _check_out(out, source, kind, args.force)
    tally = Tally()
    if kind == "folder":
        entries = folder_entries(source, out, tally)
    else:
        entries = jsonl_entries(source, args.field or "id", tally)
    atomic_write_chunks(out, document_chunks(entries, source))
    result: ManifestResult = {"out": str(out), "kind": kind, "source": str(source),
                              "count": tally.count, "bytes": tally.bytes,
                              "skipped": tally.skipped}
    print_result(args.json, result, lambda: _text(result), ascii_only=False)
    return 0


def _text(result: ManifestResult) -> str:
    lines = [f"Wrote {result['out']}: {result['count']} entries, {result['bytes']} bytes of input "
             f"({result['kind']} {result['source']})."]
    lines += [f"Skipped {name}: a manifest, not an input." for name in result["skipped"]]
    lines.append('Every entry says "label": null, "expect": "accept"; add the expected answers and '
                 "planned rejections of a pilot sample by hand.")
    return "\n".join(lines)


def _source(path: Path) -> tuple[Path, str]:
    """PATH as an absolute path, and whether it is a folder or a JSONL file; else BadInput."""
    absolute = Path(os.path.abspath(path))
    try:
        mode = os.stat(absolute).st_mode
    except FileNotFoundError:
        raise BadInput(
            f"{path}: does not exist; give a folder of inputs or a .jsonl corpus") from None
    except OSError as exc:
        raise BadInput(
            f"{path}: cannot look at it ({exc.strerror or exc}); give a readable path") from None
    if stat.S_ISDIR(mode):
        return absolute, "folder"
    if stat.S_ISREG(mode) and absolute.suffix == ".jsonl":
        return absolute, "jsonl"
    raise BadInput(f"{path}: not a folder or a regular .jsonl file; give a folder of inputs (one "
                   "file per item) or a JSONL corpus (one JSON object per line)")


def _default_out(source: Path, project_dir: Path | None) -> Path:
    """``<parent>/<name without extension>.manifest.json``, refused unless it lies inside the
    project."""
    name = source.stem if source.suffix == ".jsonl" else source.name
    out = source.parent / f"{name}{SUFFIX}"
    root = project_root(project_dir) if project_dir is not None else find_root()
    if root is None:
        raise BadInput(f"{Path.cwd()}: no kdkit.json here or in any parent folder, so the default "
                       f"{out} may lie outside a project; run inside a project, pass "
                       "--project-dir, or name the file with --out")
    if not is_within(os.path.realpath(out.parent), os.fspath(root)):
        raise BadInput(f"{out}: the default manifest path lies outside the project {root}; name "
                       "the file with --out to write it there")
    return out


def _check_out(out: Path, source: Path, kind: str, force: bool) -> None:
    """Refuse an --out that exists (without --force), is not a regular file, has no folder, is the
    corpus itself, or (for a folder) lies where the files cannot be named relative to it."""
    require_replaceable(out)
    if out.exists() and not force:
        raise BadInput(f"{out}: exists; give --force to replace it, or another --out")
    if not os.path.isdir(out.parent):
        raise BadInput(
            f"{out}: its folder {out.parent} does not exist; create it first or choose another "
            "--out")
    real_out, real_source = os.path.realpath(out), os.path.realpath(source)
    if real_out == real_source:
        raise BadInput(f"{out}: is the corpus {source} itself; choose another --out")
    if kind == "folder" and not is_within(real_source, os.path.dirname(real_out)):
        raise BadInput(f"{out}: a folder's manifest names its files relative to itself, so it must "
                       f"lie in {source} or a folder above it; choose such an --out")


def document_chunks(entries: Iterable[ManifestEntry], source: Path) -> Iterator[bytes]:
    """The manifest's bytes, entry by entry; BadInput (nothing written) when there is no entry."""
    yield b'{\n  "documents": [\n'
    separator = b"    "
    empty = True
    for entry in entries:
        yield separator + json.dumps(entry, ensure_ascii=False, allow_nan=False).encode("utf-8")
        separator, empty = b",\n    ", False
    if empty:
        raise BadInput(
            f"{source}: holds no input (hidden files and blank lines are skipped); add the inputs "
            "first")
    yield b"\n  ]\n}\n"


def jsonl_entries(path: Path, field: str, tally: Tally) -> Iterator[ManifestEntry]:
    """One entry per record of the corpus, hashed over its canonical bytes."""
    for line, record in jsonlcorpus.scan(path, field):
        data = jsonlcorpus.canonical(record)
        tally.add(len(data))
        yield {"id": line.id, "line": line.number, "label": None, "expect": "accept",
               "sha256": jsonlcorpus.digest(data), "size": len(data)}


def folder_entries(folder: Path, out: Path, tally: Tally) -> Iterator[ManifestEntry]:
    """One entry per regular file below ``folder`` (not ``out``, nor a top-level manifest.json), IDs
    unique."""
    real_folder = os.path.realpath(folder)
    real_out = os.path.realpath(out)
    base = os.path.dirname(real_out)
    old = os.path.join(real_folder, OLD_MANIFEST)
    seen: set[str] = set()
    for path in walk(real_folder):
        if path in (real_out, old):
            if path == old:
                tally.skipped.append(os.path.join(os.fspath(folder), OLD_MANIFEST))
            continue
        ident = _file_id(path, real_folder, seen, (real_out, old))
        name = _relative_name(path, base)
        digest, size = _hash_file(path)
        seen.add(ident)
        tally.add(size)
        yield {"id": ident, "file": name, "label": None, "expect": "accept",
               "sha256": digest, "size": size}


def walk(folder: str) -> Iterator[str]:
    """Every regular file below ``folder``, hidden names skipped: a folder's files in name order,
    then each subfolder's in name order. A link, a FIFO, a device or a socket is refused (BadInput),
    never followed."""
    stack = [folder]
    while stack:
        current = stack.pop()
        files, folders = [], []
        for entry in _listing(current):
            if entry.name.startswith("."):
                continue
            if entry.is_dir(follow_symlinks=False):
                folders.append(entry.path)
            elif entry.is_file(follow_symlinks=False):
                files.append(entry.path)
            else:
                what = "a symbolic link" if entry.is_symlink() else "a FIFO, socket or device"
                raise BadInput(f"{entry.path}: is {what}, not a regular file; replace it with the "
                               "file itself or move it out of the folder")
        yield from sorted(files)
        stack.extend(sorted(folders, reverse=True))


def _listing(folder: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(folder) as entries:
            return list(entries)
    except OSError as exc:
        raise BadInput(
            f"{folder}: cannot list it ({exc.strerror or exc}); make it readable") from None


def _file_id(path: str, folder: str, seen: set[str], skipped: tuple[str, ...]) -> str:
    """The file's name without its extension, when that is a safe ID not taken yet; else
    BadInput."""
    ident = Path(path).stem
    if not is_safe_id(ident):
        raise BadInput(f"{path}: its name without the extension, {shown(ident)}, is not a safe ID "
                       f"({SAFE_ID_RULE}); rename the file")
    if ident in seen:
        other = next(
            (p for p in walk(folder) if Path(p).stem == ident and p not in (path, *skipped)),
            "another file")
        raise BadInput(f"{path}: its ID {ident!r} is also the ID of {other}; file names without "
                       "their extensions must be unique: rename one")
    return ident


def _relative_name(path: str, base: str) -> str:
    """``path`` relative to the manifest's folder, with '/' between folders; BadInput if the pilot
    cannot read it."""
    name = os.path.relpath(path, base).replace(os.sep, "/")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise BadInput(f"{path}: its name is not valid UTF-8; rename the file") from None
    problem = path_problem(name)
    if problem is not None:
        raise BadInput(f"{path}: {problem.replace(PATH_RULE, 'another name')}; "
                       "rename the file")
    return name


def _hash_file(path: str) -> tuple[str, int]:
    """The sha256 and the length of the file's bytes, read once."""
    digest, size = hashlib.sha256(), 0
    try:
        with open(path, "rb") as handle:
            while block := handle.read(READ_CHUNK):
                digest.update(block)
                size += len(block)
    except OSError as exc:
        raise BadInput(
            f"{path}: cannot read it ({exc.strerror or exc}); make it readable or move it "
            "out") from None
    return digest.hexdigest(), size
