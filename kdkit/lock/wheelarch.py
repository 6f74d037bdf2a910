"""The compiled architecture list of the torch wheel a lock names, read from the wheel itself on its
index without downloading it: HTTP range requests for the end of the zip (its
end-of-central-directory record, and the ZIP64 locator and record when present), its central
directory, then the local header and data of the one member that holds the list
(``torch/include/ATen/cuda/CUDAConfig.h`` for CUDA builds, parsed by
:func:`kdkit.probe.env.torcharch.parse_config_header`). Here are the HTTP ranges
(:class:`RangeReader`) and which wheel to read; the zip's structure is :mod:`kdkit.lock.zipindex`.

The wheel is the file of the lock's torch pin: the file of the index's ``torch/`` page (an index the
lock names with ``--index-url``/``--extra-index-url``) whose sha256 fragment is one of the pin's
hashes and that installs on the image. A server that ignores ``Range`` (200 with the whole body) is
told from its status and left after the headers: nothing of the body is read. Every request and the
central directory are bounded (:data:`kdkit.lock.zipindex.MAX_TAIL`, ``MAX_DIRECTORY``,
``MAX_MEMBER``), and so is their time (:data:`READ_BUDGET`). Whatever goes wrong is a
:class:`WheelReading` with no list and the reason, never an exception: ``kdkit check`` then takes
the pairings' answer and says why.

ROCm wheels: their gfx targets are compiled into ``torch/lib/libtorch_python.so`` (the string
``torch._C._cuda_getArchFlags()`` returns); kdkit knows no small member of a ROCm wheel that lists
them (its ``CUDAConfig.h`` says ``AT_ROCM_ENABLED() 1`` and holds no targets), so a ROCm wheel is
not read.
"""

from __future__ import annotations

import http.client
import os
import re
import struct
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from urllib.parse import urlsplit

from kdkit.core.builds import parse_label
from kdkit.core.credentials import redact
from kdkit.core.errors import KdkitError
from kdkit.core.lockfile import Lock
from kdkit.core.safetext import printable
from kdkit.core.versions import InvalidVersion, Version
from kdkit.facts.platforms import image_environment, linux_arch
from kdkit.lock.fetch import Network, without_userinfo
from kdkit.lock.pages import IndexFile, parse_filename, parse_page, wheel_fits
from kdkit.lock.zipindex import Unread, read_member

CUDA_MEMBER = "torch/include/ATen/cuda/CUDAConfig.h"
REQUEST_TIMEOUT = 10.0
# seconds all the range requests of one wheel may take by the wall clock (a trickle included)
READ_BUDGET = 30.0
_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+)$")


@dataclass(frozen=True)
class WheelReading:
    """What reading the locked wheel gave: its arch list, or None and the reason."""

    arch_list: tuple[str, ...] | None
    reason: str = ""
    wheel: str = ""  # the file name read (or meant)
    requests: int = 0
    received: int = 0  # bytes of the bodies read

    def where(self) -> str:
        """``the locked wheel torch-...whl (3 range requests, 70 kB)``."""
        many = "request" if self.requests == 1 else "requests"
        return (
            f"the locked wheel {self.wheel} ({self.requests} range {many}, "
            f"{max(1, round(self.received / 1000))} kB)")


class RangeReader:
    """Byte ranges of one URL, each a request answered 206 with its Content-Range; counts what
    came."""

    def __init__(self, url: str, network: Network, authorization: str | None = None) -> None:
        self.url, own = without_userinfo(url)
        # the index's credentials, when the wheel is on its host
        self.authorization = own or authorization
        self.shown = shown_url(self.url)
        self.network = network
        self.deadline = time.monotonic() + READ_BUDGET
        self.size: int | None = None
        self.requests = 0
        self.received = 0

    def tail(self, length: int) -> tuple[int, bytes]:
        """(offset, bytes) of the last ``length`` bytes (all of a smaller file)."""
        return self._get(f"bytes=-{length}", length)

    def read(self, start: int, length: int) -> bytes:
        if length <= 0:
            return b""
        offset, data = self._get(f"bytes={start}-{start + length - 1}", length)
        if offset != start or len(data) != length:
            raise Unread(f"the server answered bytes {offset}-{offset + len(data) - 1} for "
                         f"{start}-{start + length - 1}")
        return data

    def _get(self, ranged: str, length: int) -> tuple[int, bytes]:
        request = urllib.request.Request(self.url, headers={"Range": ranged, "User-Agent": "kdkit",
                                                            "Accept-Encoding": "identity"})
        if self.authorization:
            request.add_unredirected_header("Authorization", self.authorization)
        self.requests += 1
        opener = self.network._opener(urlsplit(self.url).hostname or "")
        try:
            with opener.open(request, timeout=self.network.timeout) as response:
                return self._body(response.status,
                                  response.headers.get("Content-Range", ""), response, length)
        except urllib.error.HTTPError as exc:
            raise Unread(f"HTTP {exc.code} {exc.reason} for a range of {self.shown}") from None
        except http.client.HTTPException as exc:  # a body cut short, a malformed status line
            raise Unread(
                f"{self.shown} answered a broken response ({type(exc).__name__})") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            raise Unread(f"{self.shown} did not answer ({reason})") from None

    def _body(self, status: int, content_range: str,
              response: object, length: int) -> tuple[int, bytes]:
        """The body of a 206 answer, at most ``length`` bytes read; a 200 is left unread."""
        if status != 206:
            raise Unread(f"the server ignores Range (HTTP {status} instead of 206 Partial "
                         "Content); the wheel was not downloaded")
        match = _CONTENT_RANGE.fullmatch(content_range.strip())
        if match is None:
            raise Unread(f"a 206 answer without a readable Content-Range ({content_range[:60]!r})")
        first, last, size = (int(g) for g in match.groups())
        if self.size is not None and size != self.size:
            raise Unread(f"the file changed size between requests ({self.size} then {size} bytes)")
        self.size = size
        if last < first or last - first + 1 > length:
            raise Unread(
                f"the server answered {last - first + 1} bytes where at most {length} were asked")
        data, wanted = bytearray(), last - first + 1
        while len(data) < wanted \
                and (chunk := response.read1(wanted - len(data))):  # type: ignore[attr-defined]
            data += chunk
            self.received += len(chunk)
            if time.monotonic() > self.deadline:
                raise Unread(
                    f"the wheel's ranges took over {READ_BUDGET:g} s ({self.received} bytes came)")
        if len(data) != wanted:
            raise Unread(f"the answer ended after {len(data)} of {wanted} bytes")
        return first, bytes(data)


def read_wheel_arch(url: str, network: Network, wheel: str = "",
                    authorization: str | None = None) -> WheelReading:
    """The CUDA arch list of the wheel at ``url`` (its CUDAConfig.h), or None and the reason.
    ``authorization`` (a Basic value) goes with every range request."""
    from kdkit.probe.env.torcharch import parse_config_header

    wheel = wheel or url.rsplit("/", 1)[-1]
    try:
        reader = RangeReader(url, network, authorization)
    except ValueError as exc:  # urlsplit: "Invalid IPv6 URL", a bad port
        return WheelReading(
            None, f"{wheel}: {shown_url(url)} is not a URL kdkit can read ({exc})", wheel)
    try:
        text = read_member(reader, CUDA_MEMBER).decode("utf-8", errors="replace")
        tokens = tuple(parse_config_header(text))
    except (Unread, ValueError, struct.error) as exc:
        why = f"a truncated zip structure ({exc})" if isinstance(exc, struct.error) else \
            str(exc) if isinstance(exc, Unread) else f"{CUDA_MEMBER}: {exc}"
        return WheelReading(None, f"{wheel}: {why}", wheel, reader.requests, reader.received)
    return WheelReading(tokens, "", wheel, reader.requests, reader.received)


# ---------------------------------------------------------------- which wheel: the lock's, on its
# index


def shown_url(url: str) -> str:
    """``url`` fit to print: no ``user:password@``, the query (a token) redacted, no fragment; never
    raises. Nothing before the URL's last ``@`` is shown, so a password holding ``/``, ``#`` or
    ``?`` (a URL no parser splits as its writer meant) never shows either."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    rest = rest.rpartition("@")[2]
    base, query, _rest = rest.split("#", 1)[0].partition("?")
    return printable(redact(f"{scheme}{sep}{base}" + ("?<redacted>" if query else "")))


def _same_origin(a: str, b: str) -> bool:
    """Whether two URLs share scheme, host and port (pip sends an index's credentials to such URLs
    only)."""
    ports = {"http": 80, "https": 443}
    first, second = urlsplit(a), urlsplit(b)
    return (first.scheme.lower(), first.hostname,
            first.port or ports.get(first.scheme.lower())) == \
        (second.scheme.lower(), second.hostname, second.port or ports.get(second.scheme.lower()))


def _carries(filename: str, version: str) -> bool:
    """Whether the distribution file is of ``version`` (PEP 440 equality, the local label
    included)."""
    parsed = parse_filename(filename)
    try:
        # local included
        return parsed is not None and Version.parse(parsed[1]) == Version.parse(version)
    except InvalidVersion:
        return False


@dataclass(frozen=True)
class _Wanted:
    """What the lock's torch pin asks of an index file."""

    hashes: frozenset[str]
    version: str
    python: str
    target: tuple[str, str]
    named: str  # the lock header's torch-source file name, preferred among equals


def _index_file(index: str,
                wanted: _Wanted, network: Network) -> tuple[IndexFile, str | None] | str:
    """The index's file of the pin and the Basic credentials it may carry, or why not (one line)."""
    from kdkit.core.errors import Unavailable

    bare, authorization = without_userinfo(index)
    parts = urlsplit(index)  # the query (a token) stays on the request, after the page's path
    request_url = parts._replace(path=f"{parts.path.rstrip('/')}/torch/").geturl()
    page_url = urlsplit(bare)._replace(path=f"{parts.path.rstrip('/')}/torch/").geturl()
    shown = shown_url(page_url)
    try:
        text = network.get(request_url, "the lock's index", fix="")
    except Unavailable as exc:
        said = str(exc).split(" (the lock's index): ", 1)[-1].split("; nothing was locked", 1)[0]
        for raw in (without_userinfo(request_url)[0], page_url):
            said = said.replace(raw, shown)
        return f"{shown}: {printable(redact(said))}"
    hashed = [f for f in parse_page(text or "", page_url)
              if f.sha256 in wanted.hashes and wheel_fits(f.filename, wanted.python, wanted.target)]
    found = [f for f in hashed if _carries(f.filename, wanted.version)]
    if found:
        chosen = sorted(found, key=lambda f: (f.filename not in wanted.named, f.filename))[0]
        return chosen, authorization if authorization and _same_origin(chosen.url, bare) else None
    if hashed:
        return (f"the index file with the locked hash is {printable(hashed[0].filename)}, not "
                f"torch {printable(wanted.version)}: the lock's pin and hashes disagree")
    return (f"{shown} lists no torch wheel with the lock's sha256 for Python {wanted.python} on "
            f"{wanted.target[0]} {wanted.target[1]}")


def _locked_file(lock: Lock, python: str, network: Network) -> tuple[IndexFile, str | None] | str:
    """The index file of the lock's torch pin for the image and the credentials it may carry, or why
    there is none (one line). A URL urlsplit refuses (``http://[::1/simple``) is a reason, never a
    traceback."""
    name = os.path.basename(lock.path)
    try:
        platform = lock.header.get("platform", "")
        pin = lock.pin_for("torch", image_environment(python, platform))
    except KdkitError as exc:
        return str(exc)
    hashes = frozenset(h[7:].lower() for h in (pin.hashes if pin else [])
                       if h.startswith("sha256:"))
    if pin is None or not hashes:
        return f"{name} gives no sha256 of its torch file"
    indexes = [value for option,
               value in lock.options if option in ("--index-url", "-i", "--extra-index-url")
               and value.startswith(("http://", "https://"))]
    if not indexes:
        return f"{name} names no http(s) index to read the wheel from"
    wanted = _Wanted(hashes, pin.version, python, ("linux", linux_arch(platform)[0] or "x86_64"),
                     lock.header.get("torch-source", ""))
    failures = []
    for index in indexes:
        try:
            found = _index_file(index, wanted, network)
        except ValueError as exc:  # urlsplit/urljoin on the lock's URL or the page's hrefs
            found = f"{shown_url(index)} is not a URL kdkit can read ({printable(exc)})"
        if not isinstance(found, str):
            return found
        failures.append(found)
    return "; ".join(failures)


def read_locked_wheel(lock: Lock, python: str, label: str,
                      network: Network | None = None) -> WheelReading:
    """The arch list of the torch wheel the parsed ``lock`` pins for the image (CPython ``python``),
    read from its index with range requests; None and the reason when the index, the wheel or the
    member is not there."""
    parsed = parse_label(label)
    if parsed is None or parsed[0] != "cuda":
        return WheelReading(None,
                            f"a {label} wheel lists its targets only inside "
                            "torch/lib/libtorch_python.so; kdkit reads the header of CUDA wheels "
                            "only")
    network = network or Network(timeout=REQUEST_TIMEOUT)
    found = _locked_file(lock, python, network)
    if isinstance(found, str):
        return WheelReading(None, found)
    return read_wheel_arch(found[0].url, network, found[0].filename, found[1])
