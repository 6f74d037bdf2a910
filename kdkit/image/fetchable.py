"""Each locked file where the build's pip will look, through the certificate it will trust: read
from this machine before the first layer, so a build that cannot install its lock stops in seconds
with the cause.

The build's pip (Dockerfile.common) installs a requirements lock with ``--require-hashes`` from the
lock's own ``--index-url`` (pip's default, PyPI, when there is none) and ``--extra-index-url``
options, and any ``--find-links`` page; it has no pip configuration of this machine. It trusts the
``--ca-bundle`` file when one is given (``PIP_CERT``), and otherwise a public CA list only: the
check reads the pages the same way, through pip's own CA list (its vendored certifi), so a
TLS-intercepting proxy that this machine trusts and the build does not is named here, with
``--ca-bundle``, instead of as ``Could not find a version`` at the install layer. A locked file is
found when an index page lists a file with one of its sha256 hashes, or, on a page that gives no
hashes, a file of its name and version (pip checks the hash when it installs).

Not checked: a build from a wheelhouse (``--wheelhouse``: kdkit.lock.wheelhouse checks every file
there), a pylock (it names each file by its URL), pins that came from this machine only
(kdkit.image.preflight refuses those first). An index that does not answer is ``Unavailable`` (exit
3); files on no index are ``BadInput`` (exit 2). No click here.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from kdkit.core.credentials import redact
from kdkit.core.errors import BadInput, Unavailable
from kdkit.core.lockfile import Lock, Pin
from kdkit.core.safetext import printable
from kdkit.core.versions import InvalidVersion, Version
from kdkit.lock.fetch import Network, without_userinfo
from kdkit.lock.pages import IndexFile, parse_filename, parse_page
from kdkit.lock.wheelarch import shown_url

# What pip uses when nothing names an index: PyPI.simple_url, pypa/pip
# src/pip/_internal/models/index.py
# (https://github.com/pypa/pip/blob/24.3.1/src/pip/_internal/models/index.py).
PIP_DEFAULT_INDEX = "https://pypi.org/simple/"
# index pages read at once (each waits on the network; a page is parsed whole, up to 32 MiB)
PAGE_WORKERS = 8
SHOWN_MISSING = 5  # locked files named in the message; the rest are counted


@dataclass(frozen=True)
class Sources:
    """Where the build's pip looks for a requirements lock's files: index roots, find-links pages
    (or files), and the hosts the lock trusts without a certificate check (``--trusted-host``)."""

    indexes: tuple[str, ...]
    pages: tuple[str, ...]
    trusted: frozenset[str] = frozenset()

    @classmethod
    def of(cls, lock: Lock, lock_path: Path) -> Sources:
        """From the lock's option lines, as pip reads them: the last --index-url wins over pip's
        default."""
        options = lock.options
        index = [value for option,
                 value in options if option in ("--index-url", "-i")][-1:] or [PIP_DEFAULT_INDEX]
        extras = [value for option, value in options if option == "--extra-index-url"]
        pages = [value for option, value in options
                 if option in ("--find-links", "-f") and value.startswith(("http://", "https://"))]
        for url in (*index, *extras, *pages):
            _checked_url(url, lock_path)
        trusted = frozenset(value.split(":")[0] for option,
                            value in options if option == "--trusted-host")
        no_index = any(option == "--no-index" for option, _value in options)
        return cls(tuple([] if no_index else [*index, *extras]), tuple(pages), trusted)


def _checked_url(url: str, lock_path: Path) -> None:
    """Nothing when ``url`` is an http(s) URL with a host and a port a request can use; else
    BadInput, naming it without its credentials (a password with a ``/`` in it reads as a port to a
    URL parser)."""
    try:
        parts = urlsplit(url)
        usable = parts.scheme in ("http", "https") and bool(parts.hostname) \
            and (parts.port or 0) >= 0
    except ValueError:
        usable = False
    if not usable:
        raise BadInput(f"{lock_path}: {shown_url(url)} is not an http(s) URL with a host the "
                       "build's pip can read; fix the lock's index line (a character of a password "
                       "such as / # ? @ is written %XX)")


def build_trust(ca_bundle: Path | None) -> tuple[str | None, str]:
    """The CA file the build's pip trusts, and its name for messages: --ca-bundle's, else pip's own
    list."""
    if ca_bundle is not None:
        return str(ca_bundle), f"--ca-bundle {ca_bundle}"
    found = _public_ca_list()
    if found is None:
        return None, "this machine's CA list (pip's own was not found here)"
    return str(found), "pip's own CA list, as the build's pip has no --ca-bundle"


def _public_ca_list() -> Path | None:
    """certifi's cacert.pem, pip's vendored copy or the package's, looked for on sys.path as files:
    neither imported nor asked of the import system (setuptools' distutils shim, asked for pip,
    disables the stdlib's distutils in this process, and torch.compile then fails:
    tests/probe/diagnose/test_diagnose.py::test_deep_compiles_on_cpu)."""
    for entry in sys.path:
        for below in (("pip", "_vendor", "certifi"), ("certifi",)):
            candidate = Path(entry or ".").joinpath(*below, "cacert.pem")
            if candidate.is_file():
                return candidate
    return None


def _same_release(pin: Pin, filename: str) -> bool:
    parsed = parse_filename(filename)
    try:
        return (parsed is not None and parsed[0] == pin.key
                and Version.parse(parsed[1]) == Version.parse(pin.version))
    except InvalidVersion:
        return False


def _listed(pin: Pin, files: Sequence[IndexFile]) -> bool:
    """Whether ``files`` hold the pin's file: one of its sha256 hashes, or, where the page gives no
    sha256 or the pin has none (sha384, sha512 only), its name and version (pip checks the hash when
    it installs)."""
    wanted = {h[7:].lower() for h in pin.hashes if h.startswith("sha256:")}
    if any(f.sha256 in wanted for f in files if f.sha256):
        return True
    return any(_same_release(pin, f.filename) for f in files if f.sha256 is None or not wanted)


def _direct_file(url: str) -> IndexFile | None:
    """A find-links URL naming one distribution file, as pip takes it (a candidate, not a page):
    never fetched."""
    path = urlsplit(url).path
    name = unquote(path.rsplit("/", 1)[-1])
    if parse_filename(name) is None:
        return None
    fragment = urlsplit(url).fragment
    digest = fragment[len("sha256="):].lower() if fragment.startswith("sha256=") else None
    return IndexFile(name, url.split("#", 1)[0], digest, None, False)


class _Reader:
    """Index pages read once each, through the build's trust. An index that does not answer is
    skipped, as the build's pip skips it (its reason kept): only a file that no answering source
    lists can make it matter."""

    def __init__(self, network: Network, trust: str, offline: str) -> None:
        self.network, self.trust, self.offline = network, trust, offline
        # index or page -> why it was not read (one line, no credentials)
        self.down: dict[str, str] = {}
        self.read: set[str] = set()

    def files(self, url: str, source: str) -> list[IndexFile]:
        if source in self.down:
            return []
        shown = shown_url(url)
        try:
            text = self.network.get(url, f"read as the build's pip will, trusting {self.trust}",
                                    fix=self.offline,
                                    outcome="nothing was built")
        except Unavailable as exc:
            # the build's pip reads no configuration of here
            said = str(exc).replace(" or set pip's cert", "")
            for raw in (url, without_userinfo(url)[0]):
                said = said.replace(raw, shown)
            self.down.setdefault(source, printable(redact(said)))
            return []
        self.read.add(source)
        return parse_page(text or "", without_userinfo(url)[0])

    def page(self, url: str) -> list[IndexFile]:
        direct = _direct_file(url)
        if direct is not None:
            self.read.add(url)
            return [direct]
        return self.files(url, url)

    def found(self, pins: Sequence[Pin], sources: Sources, pages: Sequence[IndexFile]) -> list[Pin]:
        """The pins of one name that no index page nor find-links page lists."""
        missing = [pin for pin in pins if not _listed(pin, pages)]
        for index in sources.indexes:
            if not missing:
                break
            page = self.files(f"{index.rstrip('/')}/{missing[0].key}/", index)
            missing = [pin for pin in missing if not _listed(pin, page)]
        return missing

    def shown(self, sources: Sources) -> str:
        read = [shown_url(url) for url in (*sources.indexes, *sources.pages) if url in self.read]
        return ", ".join(read) or ("none (--no-index)" if not sources.indexes and not sources.pages
                                   else "none")


def check_fetchable(lock: Lock, lock_path: Path, ca_bundle: Path | None, offline: str) -> str:
    """Unavailable when a locked file is on no source that answered and one did not (through the
    build's trust); BadInput naming the locked files no source lists; else the line that says what
    was checked. ``offline``: the commands that build from a wheelhouse instead
    (kdkit.lock.wheelhouse.offline_build), for the messages."""
    sources = Sources.of(lock, lock_path)
    cafile, trust = build_trust(ca_bundle)
    offline = f"build offline from a wheelhouse instead: {offline}"
    reader = _Reader(Network(cafile=cafile, trusted_hosts=sources.trusted), trust, offline)
    flat = [f for page in sources.pages for f in reader.page(page)]
    by_name: dict[str, list[Pin]] = {}
    for pin in lock.every_pin():
        by_name.setdefault(pin.key, []).append(pin)
    with ThreadPoolExecutor(max_workers=PAGE_WORKERS, thread_name_prefix="kdkit-preflight") as pool:
        missing = [pin
                   for pins in pool.map(lambda pins: reader.found(pins, sources, flat),
                                        by_name.values())
                   for pin in pins]
    count = sum(map(len, by_name.values()))
    if missing and reader.down:
        raise Unavailable(next(iter(reader.down.values())))
    if missing:
        named = ", ".join(printable(f"{pin.name}=={pin.version}")
                          for pin in missing[:SHOWN_MISSING])
        more = f" and {len(missing) - SHOWN_MISSING} more" if len(missing) > SHOWN_MISSING else ""
        raise BadInput(f"{lock_path}: {len(missing)} of {count} pins have no file on any index the "
                       f"build's pip will read ({reader.shown(sources)}): {named}{more}; nothing "
                       "was built: lock again against an index that has them (`kdkit lock`), or "
                       f"{offline}")
    skipped = "".join(f"; not read: {why.split('; nothing was built', 1)[0]}"
                      for why in reader.down.values())
    return (
        f"preflight: each of the {count} pins has its file on {reader.shown(sources)}, read "
        f"through {trust}{skipped}")
