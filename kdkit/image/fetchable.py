"""Each locked file where the build's pip will look, through the certificate it will trust: read from this
machine before the first layer, so a build that cannot install its lock stops in seconds with the cause.

The build's pip (Dockerfile.common) installs a requirements lock with ``--require-hashes`` from the lock's
own ``--index-url`` (pip's default, PyPI, when there is none) and ``--extra-index-url`` options, and any
``--find-links`` page; it has no pip configuration of this machine. It trusts the ``--ca-bundle`` file when
one is given (``PIP_CERT``), and otherwise a public CA list only: the check reads the pages the same way,
through pip's own CA list (its vendored certifi), so a TLS-intercepting proxy that this machine trusts and
the build does not is named here, with ``--ca-bundle``, instead of as ``Could not find a version`` at the
install layer. A locked file is found when an index page lists a file with one of its sha256 hashes, or,
on a page that gives no hashes, a file of its name and version (pip checks the hash when it installs).

Not checked: a build from a wheelhouse (``--wheelhouse``: kdkit.lock.wheelhouse checks every file there),
a pylock (it names each file by its URL), pins that came from this machine only (kdkit.image.preflight
refuses those first). An index that does not answer is ``Unavailable`` (exit 3); files on no index are
``BadInput`` (exit 2). No click here.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from kdkit.core.credentials import redact
from kdkit.core.errors import BadInput, Unavailable
from kdkit.core.lockfile import Lock, Pin
from kdkit.core.safetext import printable
from kdkit.core.versions import InvalidVersion, Version
from kdkit.lock.fetch import Network, without_userinfo
from kdkit.lock.pages import IndexFile, parse_filename, parse_page
from kdkit.lock.wheelarch import shown_url

# What pip uses when nothing names an index: PyPI.simple_url, pypa/pip src/pip/_internal/models/index.py
# (https://github.com/pypa/pip/blob/24.3.1/src/pip/_internal/models/index.py).
PIP_DEFAULT_INDEX = "https://pypi.org/simple/"
PAGE_WORKERS = 16  # index pages read at once (each waits on the network, not the CPU)
SHOWN_MISSING = 5  # locked files named in the message; the rest are counted


@dataclass(frozen=True)
class Sources:
    """Where the build's pip looks for a requirements lock's files: index roots and find-links pages."""

    indexes: tuple[str, ...]
    pages: tuple[str, ...]

    @classmethod
    def of(cls, lock: Lock) -> Sources:
        index, extras, pages, no_index = PIP_DEFAULT_INDEX, [], [], False
        for option, value in lock.options:
            if option in ("--index-url", "-i"):
                index = value
            elif option == "--extra-index-url":
                extras.append(value)
            elif option in ("--find-links", "-f") and value.startswith(("http://", "https://")):
                pages.append(value)
            no_index = no_index or option == "--no-index"
        return cls(tuple([] if no_index else [index, *extras]), tuple(pages))

    def shown(self) -> str:
        return ", ".join(shown_url(url) for url in (*self.indexes, *self.pages)) or "none (--no-index)"


def build_trust(ca_bundle: Path | None) -> tuple[str | None, str]:
    """The CA file the build's pip trusts, and its name for messages: --ca-bundle's, else pip's own list."""
    if ca_bundle is not None:
        return str(ca_bundle), f"--ca-bundle {ca_bundle}"
    try:
        from pip._vendor import certifi  # what a pip with no configuration trusts
    except ImportError:
        try:
            import certifi  # type: ignore[import-not-found,no-redef,unused-ignore]
        except ImportError:
            return None, "this machine's CA list (pip's own was not found here)"
    return str(certifi.where()), "pip's own CA list, as the build's pip has no --ca-bundle"


def _listed(pin: Pin, files: Sequence[IndexFile]) -> bool:
    """Whether ``files`` hold the pin's file: one of its sha256 hashes, or its name and version unhashed."""
    wanted = {h[7:].lower() for h in pin.hashes if h.startswith("sha256:")}
    if any(f.sha256 in wanted for f in files if f.sha256):
        return True
    for file in files:
        parsed = parse_filename(file.filename) if file.sha256 is None else None
        try:
            if parsed and parsed[0] == pin.key and Version.parse(parsed[1]) == Version.parse(pin.version):
                return True
        except InvalidVersion:
            continue
    return False


class _Reader:
    """Index pages read once each, through the build's trust; the first failure raised as Unavailable."""

    def __init__(self, network: Network, trust: str, offline: str) -> None:
        self.network, self.trust, self.offline = network, trust, offline

    def files(self, url: str) -> list[IndexFile]:
        shown = shown_url(url)
        try:
            text = self.network.get(url, f"read as the build's pip will, trusting {self.trust}", fix=self.offline,
                                    outcome="nothing was built")
        except Unavailable as exc:
            said = str(exc).replace(" or set pip's cert", "")  # the build's pip reads no configuration of here
            for raw in (url, without_userinfo(url)[0]):
                said = said.replace(raw, shown)
            raise Unavailable(printable(redact(said))) from None
        return parse_page(text or "", without_userinfo(url)[0])

    def found(self, pins: Sequence[Pin], sources: Sources, pages: Sequence[IndexFile]) -> list[Pin]:
        """The pins of one name that no index page nor find-links page lists."""
        missing = [pin for pin in pins if not _listed(pin, pages)]
        for index in sources.indexes:
            if not missing:
                break
            page = self.files(f"{index.rstrip('/')}/{missing[0].key}/")
            missing = [pin for pin in missing if not _listed(pin, page)]
        return missing


def check_fetchable(lock: Lock, lock_path: Path, ca_bundle: Path | None, offline: str) -> str:
    """Unavailable when an index the build's pip reads does not answer through its trust; BadInput naming the
    locked files on none of them; else the line that says what was checked. ``offline``: the commands that build
    from a wheelhouse instead (kdkit.lock.provenance.offline_build), for the messages."""
    sources = Sources.of(lock)
    cafile, trust = build_trust(ca_bundle)
    offline = f"build offline from a wheelhouse instead: {offline}"
    reader = _Reader(Network(cafile=cafile), trust, offline)
    flat = [f for page in sources.pages for f in reader.files(page)]
    by_name: dict[str, list[Pin]] = {}
    for pin in lock.every_pin():
        by_name.setdefault(pin.key, []).append(pin)
    with ThreadPoolExecutor(max_workers=PAGE_WORKERS, thread_name_prefix="kdkit-preflight") as pool:
        missing = [pin for pins in pool.map(lambda pins: reader.found(pins, sources, flat), by_name.values())
                   for pin in pins]
    count = sum(map(len, by_name.values()))
    if missing:
        named = ", ".join(printable(f"{pin.name}=={pin.version}") for pin in missing[:SHOWN_MISSING])
        more = f" and {len(missing) - SHOWN_MISSING} more" if len(missing) > SHOWN_MISSING else ""
        raise BadInput(f"{lock_path}: {len(missing)} of {count} pins have no file on any index the build's "
                       f"pip will read ({sources.shown()}): {named}{more}; nothing was built: lock again against "
                       f"an index that has them (`kdkit lock`), or {offline}")
    return f"preflight: each of the {count} pins has its file on {sources.shown()}, read through {trust}"
