"""A bundle's image archive, read as it streams: one image, the bundle's own, named by the bundle's
tag only, and never longer than bundle.json says.

`kdkit verify-bundle` reads the decompressed ``docker save`` archive once through :func:`rewritten`
and drops the bytes; `kdkit load` reads it again through the same function into the engine. The
engine is given the archive as this module writes it (each member's header written anew from what
Python's tarfile read, its bytes copied as they are, so every digest, and the image id, stays the
same), never the bytes as they came: what the engine reads is what was checked, and no difference
between two tar readers (a global pax header, data after a lone zero block, a member named twice)
can name a tag unseen. The members that name images (manifest.json, index.json, repositories) are
held back until the whole archive has been read and checked, so an archive refused at its end has
given the engine no name to set, and its stream is broken off, never ended.

The length is bounded while decompressing, before anything is kept: by ``image.archive_bytes`` (the
exact length `kdkit bundle` counted) and by :data:`MAX_RATIO` times the compressed file. Bundles
made before ``archive_bytes`` was recorded have the ratio only: ``image.image_bytes`` cannot bound
the archive, since an engine with the containerd image store has reported the compressed size there
(https://github.com/moby/moby/issues/53398).
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kdkit.core.checksums import safe_name
from kdkit.core.errors import CheckFailed
from kdkit.docker_adapter.spec import split_reference

MANIFEST, INDEX, REPOSITORIES = "manifest.json", "index.json", "repositories"
HELD = (MANIFEST, INDEX, REPOSITORIES)  # the members that name images: read whole, written last
HELD_LIMIT = 1 << 20  # one image's manifest.json is a few hundred bytes
# Past deflate's own limit (1032:1, https://zlib.net/zlib_tech.html), so a gzip bundle never reaches
# it: an image that is mostly zeros can always be bundled with --compressor gzip. zstd -3 reaches
# ~32000:1 on zeros (1 GiB in 33,679 bytes: the bomb of tests/transfer/test_load_hostile.py).
MAX_RATIO = 2000
SLACK = 64 << 20  # what a tiny archive may reach whatever its ratio
CHUNK = 1 << 20
_KINDS = {tarfile.REGTYPE: "file", tarfile.AREGTYPE: "file", tarfile.DIRTYPE: "folder",
          tarfile.SYMTYPE: "link",
          tarfile.LNKTYPE: "link"}


@dataclass(frozen=True)
class Expected:
    """What the archive must be: the bundle's image id under its reference, at most ``limit`` bytes
    (exactly ``declared`` when bundle.json records it)."""

    ref: str
    image_id: str
    limit: int
    declared: int | None
    why_limit: str


def expected(ref: str, image_id: str, compressed: int, declared: int | None) -> Expected:
    """The bound for an archive of ``compressed`` bytes that bundle.json says decompresses to
    ``declared``."""
    ratio_cap = compressed * MAX_RATIO + SLACK
    if declared is not None and declared <= ratio_cap:
        return Expected(ref, image_id, declared,
                        declared, f"the {declared} bytes bundle.json declares "
                        "($.image.archive_bytes)")
    why = f"{MAX_RATIO} times its {compressed} compressed bytes and {SLACK >> 20} MiB"
    return Expected(ref, image_id, ratio_cap, declared, why + (f" (bundle.json declares {declared})"
                                                               if declared is not None else ""))


class _Capped:
    """The decompressed chunks as a file for tarfile; CheckFailed as soon as they pass the limit."""

    def __init__(self, chunks: Iterator[bytes], want: Expected) -> None:
        self._chunks, self._want = chunks, want
        self._buffer = bytearray()
        self.total = 0

    def _next(self) -> bytes:
        chunk = next(self._chunks, b"")
        self.total += len(chunk)
        if self.total > self._want.limit:
            raise CheckFailed(
                f"decompresses past {self._want.why_limit}; stopped there, nothing loaded")
        return chunk

    def _more(self) -> bool:
        chunk = self._next()
        self._buffer += chunk
        return bool(chunk)

    def read(self, size: int = -1) -> bytes:
        # the common case, a chunk asked for whole: passed on uncopied
        if not self._buffer and size >= 0:
            chunk = self._next()
            if len(chunk) <= size:
                return chunk
            self._buffer += chunk
        while (size < 0 or len(self._buffer) < size) and self._more():
            pass
        size = len(self._buffer) if size < 0 else size
        out = bytes(self._buffer[:size])
        del self._buffer[:size]
        return out

    def drain(self) -> None:
        """Read what follows the tar's end (its padding) under the same bound; then the length must
        be exact."""
        while self._more():
            pass
        declared = self._want.declared
        if declared is not None and self.total != declared:
            raise CheckFailed(f"decompresses to {self.total} bytes, bundle.json declares "
                              f"{declared} ($.image.archive_bytes)")


def _header(name: str, kind: bytes, size: int = 0, mode: int = 0o644, mtime: float = 0,
            linkname: str = "") -> bytes:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.mode, info.mtime, info.linkname = kind, size, mode & 0o7777, max(
        0, int(mtime)), linkname
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


def _padding(size: int) -> bytes:
    return b"\0" * (-size % tarfile.BLOCKSIZE)


def _name(member: tarfile.TarInfo, seen: set[str]) -> str:
    """The member's name as an extractor makes it (normalised); CheckFailed for what no `docker
    save` holds."""
    name = posixpath.normpath(member.name)
    shown = json.dumps(member.name)[:80]
    if not safe_name(name) and name != ".":
        raise CheckFailed(f"holds a member named {shown}, outside the archive")
    if member.type not in _KINDS or member.sparse is not None:
        raise CheckFailed(f"holds {shown} of tar type {member.type!r}; a `docker save` archive "
                          "holds only files, folders and links")
    if name in seen:
        raise CheckFailed(f"holds {shown} twice")
    seen.add(name)
    target = posixpath.normpath(
        posixpath.join(posixpath.dirname(name), member.linkname)) if member.issym() \
        else posixpath.normpath(member.linkname)
    if _KINDS[member.type] == "link" and not safe_name(target):
        raise CheckFailed(
            f"holds {shown}, a link to {json.dumps(member.linkname)[:80]} outside the archive")
    return name


def _held(tar: tarfile.TarFile, member: tarfile.TarInfo, name: str) -> bytes:
    if not member.isreg() or member.size > HELD_LIMIT:
        raise CheckFailed(f"its {name} is not a file of at most {HELD_LIMIT} bytes")
    handle = tar.extractfile(member)
    assert handle is not None  # a regular file always has one
    return handle.read()


def _copy(tar: tarfile.TarFile, member: tarfile.TarInfo, name: str,
          configs: dict[str, str]) -> Iterator[bytes]:
    """The member as written again: its header, its bytes (hashed when it may be the image's
    config), padding."""
    yield _header(name, member.type, member.size if member.isreg() else 0, member.mode,
                  member.mtime,
                  posixpath.normpath(member.linkname) if member.islnk() else member.linkname)
    if not member.isreg():
        return
    digest = hashlib.sha256() if name in configs else None
    handle = tar.extractfile(member)
    assert handle is not None  # a regular file always has one
    while chunk := handle.read(CHUNK):
        if digest is not None:
            digest.update(chunk)
        yield chunk
    if digest is not None:
        configs[name] = digest.hexdigest()
    yield _padding(member.size)


def _members(tar: tarfile.TarFile, held: dict[str, bytes],
             configs: dict[str, str]) -> Iterator[bytes]:
    """Every member written again as it is read, but those that name images: kept in ``held``."""
    seen: set[str] = set()
    for member in tar:
        name = _name(member, seen)
        if name in HELD:
            held[name] = _held(tar, member, name)
        elif name != ".":
            yield from _copy(tar, member, name, configs)


def rewritten(chunks: Iterator[bytes], want: Expected) -> Iterator[bytes]:
    """The archive of ``chunks`` written again, checked as it passes; CheckFailed (the problem,
    without the file's name) at the first thing a bundle's archive may not be. Nothing that names an
    image comes out before the whole archive has passed."""
    hexid = want.image_id.removeprefix("sha256:")
    # where docker save puts the config, then its digest
    configs = {f"{hexid}.json": "", f"blobs/sha256/{hexid}": ""}
    source, held = _Capped(chunks, want), dict[str, bytes]()
    try:
        with tarfile.open(fileobj=source, mode="r|",  # type: ignore[call-overload]
                          bufsize=CHUNK) as tar:
            yield from _members(tar, held, configs)
    except tarfile.TarError as exc:
        raise CheckFailed(f"is not a readable tar archive once decompressed ({exc})") from None
    source.drain()
    check_names(held, want, configs)
    for name, data in held.items():
        yield _header(name, tarfile.REGTYPE, len(data)) + data + _padding(len(data))
    yield b"\0" * (2 * tarfile.BLOCKSIZE)


# ---------------------------------------------------------------- the names an archive gives


def normalized_reference(ref: str) -> str:
    """``ref`` the way the engine names it: the registry ``docker.io`` when the first part names
    none, ``library/`` before a one-part name there, ``:latest`` when it has no tag or digest. Two
    references name the same image exactly when these agree (distribution/reference's
    ParseNormalizedNamed and TagNameOnly:
    https://github.com/distribution/reference/blob/main/normalize.go)."""
    name, at, digest = ref.partition("@")
    first, slash, rest = name.partition("/")
    if not slash \
            or (not any(c in first for c in ".:") and first != "localhost"
                and first.lower() == first):
        domain, rest = "docker.io", name
    else:
        domain = "docker.io" if first == "index.docker.io" else first
    if domain == "docker.io" and "/" not in rest:
        rest = f"library/{rest}"
    if not at and ":" not in rest.rsplit("/", 1)[-1]:
        rest += ":latest"
    return f"{domain}/{rest}{at}{digest}"



def _json(held: dict[str, bytes], name: str) -> Any:
    try:
        return json.loads(held[name]) if name in held else None
    except ValueError:
        raise CheckFailed(f"its {name} is not JSON") from None


def _names(held: dict[str, bytes]) -> tuple[list[tuple[str, str]], Any]:
    """(every (name, where) the archive gives an image, its manifest.json's one entry)."""
    manifest, index, repositories = (_json(held, name) for name in HELD)
    if manifest is None:
        raise CheckFailed(f"holds no {MANIFEST}: not an archive `docker save` wrote")
    if not isinstance(manifest, list) or len(manifest) != 1 or not isinstance(manifest[0], dict):
        raise CheckFailed(
            f"its {MANIFEST} does not list exactly one image; a bundle's archive holds one")
    tags = manifest[0].get("RepoTags") or []
    names = [(tag, MANIFEST) for tag in tags] if isinstance(tags, list) else [(str(tags), MANIFEST)]
    if repositories is not None:
        if not isinstance(repositories, dict) \
                or not all(isinstance(t, dict) for t in repositories.values()):
            raise CheckFailed(f"its {REPOSITORIES} is not the object `docker save` writes")
        names += [(f"{repo}:{tag}", REPOSITORIES) for repo,
                  by_tag in repositories.items() for tag in by_tag]
    if index is not None:
        entries = index.get("manifests") if isinstance(index, dict) else None
        if not isinstance(entries, list) or len(entries) != 1 or not isinstance(entries[0], dict):
            raise CheckFailed(
                f"its {INDEX} does not list exactly one image; a bundle's archive holds one")
        notes = entries[0].get("annotations") or {}
        names += [(str(notes[key]), INDEX)
                  for key in ("io.containerd.image.name", "org.opencontainers.image.ref.name")
                  if isinstance(notes, dict) and key in notes]
    return names, manifest[0]


def check_names(held: dict[str, bytes], want: Expected, configs: dict[str, str]) -> None:
    """The archive names one image, the bundle's id, by the bundle's reference and by no other
    name."""
    names, entry = _names(held)
    own, own_tag = normalized_reference(want.ref), split_reference(want.ref)[1]
    for name, where in names:
        # OCI's ref.name may be the tag alone
        bare_tag = where == INDEX and "/" not in name and ":" not in name
        if not isinstance(name, str) \
                or (name != own_tag if bare_tag else normalized_reference(name) != own):
            raise CheckFailed(f"its {where} names the image {json.dumps(name)[:120]}, not only the "
                              f"bundle's own {want.ref!r}: loading it would set that name on this "
                              "engine")
    if not any(where == MANIFEST for _name, where in names):
        raise CheckFailed(f"its {MANIFEST} names no tag: loading it would leave an image without a "
                          f"name, not {want.ref!r}")
    config = entry.get("Config")
    hexid = want.image_id.removeprefix("sha256:")
    if not isinstance(config, str) or configs.get(posixpath.normpath(config)) != hexid:
        raise CheckFailed(f"its {MANIFEST} does not give the bundle's image {want.image_id} (its "
                          f"config {json.dumps(config)[:100]} is not that image's)")


class Counted:
    """Chunks passed on as they come, counted: the archive's length that `kdkit bundle` records
    (``image.archive_bytes``)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self.total = 0

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._chunks:
            self.total += len(chunk)
            yield chunk
