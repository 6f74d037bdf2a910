"""Where each file of a lock pip-compile wrote can come from, and the index lines the lock carries.

pip-compile hashes every file of a pinned version that any source offers, so a lock's hashes say
where its files can come from. They are compared with the torch index's sha256 fragments and with
the machine-local sources of pip's configuration (find-links folders and ``file://`` indexes, where
only files named like a pin are hashed). A pin whose every hash is on this machine only cannot be
installed elsewhere from the lock; before calling it machine-local, kdkit asks the http(s) indexes
the lock names whether they serve one of its hashes (a local mirror holds copies of PyPI's files).

No click here; errors are kdkit errors with one-line messages.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from kdkit.core.errors import BadInput, Unavailable
from kdkit.core.jsonio import sha256_file
from kdkit.core.lockfile import Lock, Pin
from kdkit.core.versions import InvalidVersion, Version
from kdkit.lock.fetch import Network
from kdkit.lock.pages import and_list, local_path, parse_filename, parse_page, wheel_fits
from kdkit.lock.preflight import TorchPage

_HASH_PREFIX = "sha256:"


@dataclass(frozen=True)
class LocalSource:
    """A source of files on this machine: a find-links folder or a ``file://`` index."""

    kind: str  # "find-links" or "index"
    location: str  # the folder, or the index's file:// URL
    origin: str  # where it was named: "pip's configuration" or "--torch-find-links"

    def describe(self) -> str:
        return f"{self.kind} {self.location} ({self.origin})"


def is_remote(value: str) -> bool:
    return value.startswith(("http://", "https://"))


def local_sources(pip_config: dict[str, str], torch_links: Path | None) -> list[LocalSource]:
    """The machine-local sources pip resolves from: find-links folders and file:// indexes of its
    configuration."""
    sources = [
        LocalSource("find-links", str(torch_links), "--torch-find-links")] if torch_links else []
    for key in ("find-links", "index-url", "extra-index-url"):
        for token in pip_config.get(key, "").split():
            if is_remote(token):
                continue
            kind = "find-links" if key == "find-links" else "index"
            location = local_path(token) if kind == "find-links" else token
            sources.append(LocalSource(kind, location, "pip's configuration"))
    return sources


def _same_version(a: str, b: str) -> bool:
    """PEP 440 equality, the local label included (``2.13.0+cu130`` is not ``2.13.0+cpu``)."""
    try:
        return Version.parse(a) == Version.parse(b)
    except InvalidVersion:
        return a == b


def _sha256(path: Path) -> str:
    """sha256 of a local file, read once per process for the same file unchanged (a folder named by
    --torch-find-links and by pip's find-links holds one torch wheel, hundreds of MB)."""
    info = path.stat()
    return _sha256_of(path.resolve(), info.st_size, info.st_mtime_ns, info.st_ino)


@lru_cache(maxsize=256)
def _sha256_of(path: Path, _size: int, _mtime_ns: int, _inode: int) -> str:
    return sha256_file(path)


def _local_files(source: LocalSource, pin: Pin) -> Iterable[tuple[str, str]]:
    """(sha256, file name) of the files of ``source`` named like ``pin`` (name and exact
    version)."""
    if source.kind == "find-links":
        folder = Path(source.location)
        entries = sorted(folder.iterdir()) if folder.is_dir() else []
        for entry in entries:
            parsed = parse_filename(entry.name)
            if parsed and parsed[0] == pin.key and _same_version(parsed[1], pin.version) \
                    and entry.is_file():
                yield _sha256(entry), entry.name
        return
    root = local_path(source.location)
    page = Path(root) / pin.key / "index.html"
    if not page.is_file():
        return
    base = Path(page).parent.as_uri() + "/"
    for item in parse_page(page.read_text(encoding="utf-8", errors="replace"), base):
        parsed = parse_filename(item.filename)
        if not parsed or parsed[0] != pin.key or not _same_version(parsed[1], pin.version):
            continue
        if item.sha256:
            yield item.sha256, item.filename
        elif item.url.startswith("file:") and (path := Path(local_path(item.url))).is_file():
            yield _sha256(path), item.filename


@dataclass
class Provenance:
    """Where the lock's files came from: the header's torch-source and machine-local fields, and
    warnings."""

    torch_source: str
    machine_local: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _hashes(pin: Pin) -> set[str]:
    return {h[len(_HASH_PREFIX):].lower() for h in pin.hashes if h.startswith(_HASH_PREFIX)}


class _Remote:
    """The http(s) indexes a lock names, asked at most once per page; an index that fails is not
    asked again."""

    def __init__(self, indexes: Sequence[str], network: Network) -> None:
        self.indexes = [i.rstrip("/") for i in indexes if is_remote(i)]
        self.network = network
        self.down: set[str] = set()

    def serving(self, name: str, hashes: set[str]) -> tuple[str, str] | None:
        """(index, file name) of the first index whose page of ``name`` carries one of
        ``hashes``."""
        for index in self.indexes:
            if index in self.down:
                continue
            url = f"{index}/{name}/"
            try:
                text = self.network.get(url, "an index the lock names")
            except Unavailable:
                self.down.add(index)
                continue
            for item in parse_page(text or "", url):
                if item.sha256 in hashes:
                    return index, item.filename
        return None


def provenance(lock: Lock, page: TorchPage | None, indexes: Sequence[str],
               sources: Sequence[LocalSource],
               torch_links: Path | None, network: Network, python: str,
               target: tuple[str, str]) -> Provenance:
    """Compare the lock's hashes with the torch page and the machine-local sources; BadInput when
    torch's file is only on this machine and the user did not name that folder with
    --torch-find-links."""
    remote = _Remote(indexes, network)
    local: dict[str, dict[str, LocalSource]] = {}
    for pin in lock.pins.values():
        for source in sources:
            for digest, _name in _local_files(source, pin):
                local.setdefault(pin.key, {}).setdefault(digest, source)
    result = Provenance("find-links (replaces torch-index)" if torch_links else "")
    torch = lock.pins.get("torch")
    if torch is not None and torch_links is not None:
        _from_the_folder(lock, torch, torch_links, local.get("torch", {}))
    if torch is not None and torch_links is None:
        result.torch_source = _torch_source(lock, torch, page, local.get("torch", {}),
                                            remote, python, target)
        result.warnings += _torch_strays(lock, torch, page, local.get("torch", {}), sources)
    served = set(page.by_hash()) if page is not None else set()
    result.machine_local = [pin.key for pin in sorted(lock.pins.values(), key=lambda p: p.key)
                            if _only_here(pin, local.get(pin.key, {}), served, remote)]
    if result.machine_local:
        where = and_list(
            sorted({s.describe() for key in result.machine_local for s in local[key].values()}))
        result.warnings.append(f"{lock.name}: {and_list(result.machine_local)} came only from this "
                               f"machine ({where}); another machine cannot install this lock from "
                               "its indexes: publish those files on an index, or build the image "
                               f"here offline: {_offline(lock)}")
    return result


def _offline(lock: Lock) -> str:
    """kdkit.lock.wheelhouse.offline_build for ``lock`` (``P/requirements/B.txt``)."""
    from kdkit.lock.wheelhouse import offline_build

    path = Path(lock.path)
    return offline_build(path.parent.parent, path.stem)


def _torch_strays(lock: Lock, torch: Pin, page: TorchPage | None, local: dict[str, LocalSource],
                  sources: Sequence[LocalSource]) -> list[str]:
    """Warnings when pip may install, on this machine, a file of torch other than the torch
    index's."""
    served = set(page.by_hash()) if page else set()
    strays = {s.describe() for d, s in local.items() if d in _hashes(torch) - served}
    if strays and served & _hashes(torch):
        return [f"{lock.name}: torch=={torch.version} also matches a file of this machine that the "
                f"torch index does not serve ({and_list(sorted(strays))}); pip may install that "
                "one here: remove it from pip's configuration (`pip config list`)"]
    if page is not None and not served and (here := _torch_files_here(torch, sources)):
        return [f"{lock.name}: {page.url} gives no sha256 of its files, so "
                f"torch=={torch.version}'s hashes cannot be attributed to the torch index; "
                f"{and_list(here)} {'is a file' if len(here) == 1 else 'are files'} of this "
                "machine that pip may install here instead: remove it from pip's configuration "
                "(`pip config list`)"]
    return []


def _only_here(pin: Pin, mine: dict[str, LocalSource], served: set[str], remote: _Remote) -> bool:
    """Whether every file of ``pin`` is on this machine only: no torch page (for torch) nor index
    the lock names serves one of its hashes."""
    hashes = _hashes(pin)
    if not hashes or not hashes <= set(mine):
        return False
    if pin.key == "torch" and hashes & served:
        return False
    return remote.serving(pin.key, hashes) is None


def _from_the_folder(lock: Lock, torch: Pin, folder: Path, local: dict[str, LocalSource]) -> None:
    """BadInput unless one of torch's hashes is a file of the --torch-find-links ``folder``."""
    hashes = _hashes(torch)
    mine = {digest for digest, source in local.items() if source.origin == "--torch-find-links"}
    if hashes & mine:
        return
    others = sorted({local[digest].describe() for digest in hashes if digest in local})
    where = and_list(others) if others else "an index of pip's configuration"
    raise BadInput(f"{lock.path}: torch=={torch.version} came only from {where}, not from "
                   f"--torch-find-links {folder}; nothing was written: remove that source from "
                   "pip's configuration (`pip config list`), or put the torch you want in the "
                   "folder")


def _torch_files_here(torch: Pin, sources: Sequence[LocalSource]) -> list[str]:
    """``NAME in SOURCE`` for each file of this machine whose hash the torch pin carries."""
    hashes = _hashes(torch)
    return sorted({f"{name} in {source.describe()}" for source in sources
                   for digest, name in _local_files(source, torch) if digest in hashes})


def _torch_source(lock: Lock, torch: Pin, page: TorchPage | None, local: dict[str, LocalSource],
                  remote: _Remote,
                  python: str, target: tuple[str, str]) -> str:
    hashes = _hashes(torch)
    if page is not None:
        on_page = [f for digest, f in page.by_hash().items() if digest in hashes]
        if on_page:
            best = sorted(on_page,
                          key=lambda f: (not wheel_fits(f.filename, python, target), f.filename))[0]
            return f"{page.index} ({best.filename})"
    if hashes and hashes <= set(local):
        sources = and_list(sorted({s.describe() for s in local.values()}))
        index = page.index if page else "the backend's torch index"
        raise BadInput(f"{lock.path}: torch=={torch.version} came only from {sources}, not from "
                       f"{index}; nothing was written (another machine could not install it): "
                       "remove that source from pip's configuration (`pip config list`), or lock "
                       "from it on purpose with --torch-find-links FOLDER")
    served = remote.serving("torch", hashes)
    if served is not None:
        return f"{served[0]} ({served[1]}, not the torch index)"
    if page is not None:
        named = sorted(f.filename for f in page.files if (p := parse_filename(f.filename))
                       and p[0] == "torch"
                       and _same_version(p[1], torch.version)
                       and wheel_fits(f.filename, python, target))
        if named:
            return f"{page.index} ({named[0]}, unverified: the index gives no sha256 of it)"
    return "unknown (no index the lock names serves its hash)"


def emitted_indexes(torch_index: str, pip_config: dict[str, str], default_index: str, *,
                    torch_from_index: bool = True) -> list[tuple[str, str]]:
    """The index options a lock carries, as (option, URL): the torch index first when torch came
    from it, then the http(s) indexes of pip's configuration (the user's index only when it is not
    pip's default, as pip-compile does, unless the torch index needs it beside it).

    file:// indexes and find-links are paths of this machine; another machine cannot use them."""
    urls = [torch_index] if torch_from_index else []
    user = pip_config.get("index-url", "")
    if is_remote(user) and (torch_from_index or user.rstrip("/") != default_index.rstrip("/")):
        urls.append(user)
    urls += [value for value in pip_config.get("extra-index-url", "").split() if is_remote(value)]
    unique: list[str] = []
    for url in urls:
        if url.rstrip("/") not in {u.rstrip("/") for u in unique}:
            unique.append(url)
    primary = bool(unique) and (torch_from_index or unique[0] == user)
    return [("--index-url" if n == 0 and primary else "--extra-index-url", url) for n,
            url in enumerate(unique)]


def option_lines(indexes: Sequence[tuple[str, str]]) -> str:
    """The index options kdkit writes at the top of a lock (pip-compile writes none:
    --no-emit-index-url)."""
    return "".join(f"{option} {url}\n" for option, url in indexes) + ("\n" if indexes else "")
