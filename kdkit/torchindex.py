"""The package indexes of `kdkit lock`, read the way pip reads them: before pip-compile, whether the
backend's torch index answers and serves a torch build the project can install; after it, where
each locked file really came from.

Before (:func:`preflight`). pip waits minutes on an index that does not answer (its timeout times
its retries, for every page), then takes whatever a find-links folder of its configuration holds.
kdkit asks first, with the standard library (pip's ``cert``, ``proxy`` and ``trusted-host`` options
and the proxy variables honoured, at most :data:`TIMEOUT` seconds a request): the torch index's
``torch/`` page (PEP 503), filtered by the requirement on torch in the input files, the project's
Python and the image's platform. An index that does not answer is ``Unavailable`` (exit 3), one
that answers without such a build is ``BadInput`` (exit 2) naming the builds the index family
offers: the ``torch/`` page beside the label (``.../whl/torch/`` for ``.../whl/cu130``) lists them
all, as download.pytorch.org does.

After (:func:`provenance`). pip-compile hashes every file of a pinned version that any source
offers, so a lock's hashes say where its files can come from. They are compared with the torch
index's sha256 fragments and with the machine-local sources of pip's configuration (find-links
folders and ``file://`` indexes, where only files named like a pin are hashed). A pin whose every
hash is on this machine only cannot be installed elsewhere from the lock; before calling it
machine-local, kdkit asks the http(s) indexes the lock names whether they serve one of its hashes
(a local mirror holds copies of PyPI's files).

No click here; errors are kdkit errors with one-line messages.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import re
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit
from urllib.request import url2pathname

from kdkit.core.builds import TORCH_INDEX_URL, index_label, label_backend, parse_label, split_version
from kdkit.core.errors import BadInput, Unavailable
from kdkit.core.lockfile import Lock, Pin, normalize_name
from kdkit.core.markers import InvalidMarker, evaluate
from kdkit.core.versions import InvalidVersion, Version, compare

TIMEOUT = 10.0  # seconds a request may take; pip's own timeout applies when it is shorter
RETRIES = 1  # what pip-compile's pip gets (--retries): the preflight already knows the index answers
_CLAUSE = re.compile(r"^\s*(===|==|!=|~=|<=|>=|<|>)\s*(\S+)\s*$")
_REQUIREMENT = re.compile(r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(?P<rest>[^;]*?)\s*"
                          r"(?:;\s*(?P<marker>.*))?$")
_HASH_PREFIX = "sha256:"
MAX_PAGE = 32 << 20  # bytes: download.pytorch.org's every-build torch/ page is a few MB; more is not an index
GRACE = 0.5  # seconds past the timeout the fetch may take (the socket's own timeout fires first)
TORCH_FIX = ("check the URL, the network and the proxy (HTTPS_PROXY, pip's proxy), or lock from a local folder "
             "with --torch-find-links")
INDEX_FIX = "check the URL, the network and the proxy (HTTPS_PROXY, pip's proxy), or change pip's configuration"


# ---------------------------------------------------------------- the network, as pip would reach it


@dataclass(frozen=True)
class Network:
    """How to reach an index: the timeout and what pip's configuration says about TLS and proxies."""

    timeout: float = TIMEOUT
    cafile: str | None = None
    proxy: str | None = None
    trusted_hosts: frozenset[str] = frozenset()

    @classmethod
    def from_pip(cls, pip_config: dict[str, str], ca_bundle: Path | None = None) -> Network:
        """From pip's timeout (when under :data:`TIMEOUT`), cert (or --ca-bundle), proxy and trusted-host."""
        timeout = TIMEOUT
        for key in ("timeout", "default-timeout"):
            try:
                timeout = min(timeout, float(pip_config[key]))
            except (KeyError, ValueError):
                continue
        cafile = str(ca_bundle) if ca_bundle else pip_config.get("cert") or None
        trusted = frozenset(h.split(":")[0] for h in pip_config.get("trusted-host", "").split())
        return cls(max(timeout, 0.5), cafile, pip_config.get("proxy") or None, trusted)

    def pip_args(self) -> str:
        """pip-compile's ``--pip-args``: pip bounded like the preflight, never minutes per page."""
        return f"--timeout {self.timeout:g} --retries {RETRIES}"

    def _opener(self, host: str) -> urllib.request.OpenerDirector:
        context = ssl.create_default_context(cafile=self.cafile) if self.cafile else ssl.create_default_context()
        if host in self.trusted_hosts:  # pip's trusted-host: no certificate check for that host
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.proxy:  # pip's --proxy holds for every host: NO_PROXY does not apply to it (urllib's would)
            return urllib.request.build_opener(urllib.request.ProxyHandler({}), _EveryHost(self.proxy),
                                               urllib.request.HTTPSHandler(context=context))
        proxies = urllib.request.getproxies()  # HTTP(S)_PROXY and their lower-case forms; NO_PROXY applies
        return urllib.request.build_opener(urllib.request.ProxyHandler(proxies),
                                           urllib.request.HTTPSHandler(context=context))

    def proxy_for(self, url: str) -> tuple[str, str] | None:
        """(proxy URL without userinfo, where it was set) that a request for ``url`` goes through, or None."""
        if self.proxy:
            return _without_userinfo(self.proxy if "://" in self.proxy else f"http://{self.proxy}")[0], "pip's proxy"
        parts = urlsplit(url)
        proxy = urllib.request.getproxies().get(parts.scheme)
        if not proxy or urllib.request.proxy_bypass(parts.netloc):
            return None
        return _without_userinfo(proxy)[0], f"{parts.scheme.upper()}_PROXY"

    def get(self, url: str, what: str, *, body: bool = True, fix: str = TORCH_FIX) -> str | None:
        """The text at ``url``; None when the server answers 404/410; Unavailable when it does not answer,
        or not all of the page within the timeout (however slowly it trickles), or a page over MAX_PAGE.

        ``what`` names the URL's place in messages (``backends.cuda.torch_index in kdkit.json``)."""
        url, authorization = _without_userinfo(url)
        host = urlsplit(url).hostname or ""
        request = urllib.request.Request(url, headers={"Accept": "text/html", "User-Agent": "kdkit"})
        if authorization:  # as pip does: the URL's user and password go as Basic auth, to that host only
            request.add_unredirected_header("Authorization", authorization)
        fetch = _Fetch()
        # in a thread: the socket's timeout holds per read, and a byte every few seconds resets it; the join
        # bounds the whole fetch (name lookup, connection, every read) by the wall clock
        worker = threading.Thread(target=fetch.run, args=(self._opener(host), request, self.timeout, body),
                                  name="kdkit-index-fetch", daemon=True)
        worker.start()
        worker.join(self.timeout + GRACE)
        if worker.is_alive():
            fetch.stop.set()
            reason = (f"the page was not complete after {self.timeout:g} s ({fetch.received} bytes came)"
                      if fetch.answered else f"no answer after {self.timeout:g} s")
        elif fetch.error is None:
            return fetch.text
        elif isinstance(fetch.error, _TooLarge):
            reason = f"the page is over {MAX_PAGE >> 20} MiB, no index page is that large"
        elif isinstance(fetch.error, urllib.error.HTTPError):
            if fetch.error.code in (404, 410):
                return None
            reason = f"HTTP {fetch.error.code} {fetch.error.reason}"
        elif isinstance(fetch.error, (urllib.error.URLError, OSError, ValueError, http.client.HTTPException)):
            reason = self._reason(fetch.error, host, self.proxy_for(url))
        else:
            raise fetch.error
        raise Unavailable(f"{url} ({what}): {reason}; nothing was locked: {fix}")

    def _reason(self, exc: BaseException, host: str, proxy: tuple[str, str] | None = None) -> str:
        if isinstance(exc, urllib.error.URLError) and isinstance(exc.reason, BaseException):
            exc = exc.reason
        if proxy is not None and isinstance(exc, ConnectionRefusedError):
            return f"the proxy {proxy[0]} ({proxy[1]}) refused the connection"
        if proxy is not None and isinstance(exc, OSError) and exc.__class__.__name__ == "gaierror":
            return f"cannot resolve the host of the proxy {proxy[0]} ({proxy[1]})"
        if isinstance(exc, TimeoutError):
            return f"no answer after {self.timeout:g} s"
        if isinstance(exc, ConnectionRefusedError):
            return "connection refused"
        if isinstance(exc, OSError) and exc.__class__.__name__ == "gaierror":
            return f"cannot resolve host {host}"
        if isinstance(exc, ssl.SSLCertVerificationError):
            return (f"TLS certificate not trusted ({exc.verify_message}); pass the proxy's CA with --ca-bundle FILE "
                    "or set pip's cert")
        if isinstance(exc, urllib.error.URLError):
            return str(exc.reason)
        if isinstance(exc, OSError) and exc.strerror:  # a missing cert file names itself
            return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
        return str(exc) or type(exc).__name__


def _without_userinfo(url: str) -> tuple[str, str | None]:
    """``url`` without ``user:password@`` (urllib would take it for part of the host), and the Basic
    ``Authorization`` value it stands for (None without userinfo)."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    netloc = parts.netloc.rpartition("@")[2]
    credentials = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
    return (parts._replace(netloc=netloc).geturl(),
            "Basic " + base64.b64encode(credentials.encode("utf-8")).decode("ascii"))


class _EveryHost(urllib.request.BaseHandler):
    """pip's ``proxy`` option: every request goes through it, whatever NO_PROXY says (pip ignores it for --proxy)."""

    handler_order = 100  # before the HTTP(S) handlers, as urllib's ProxyHandler

    def __init__(self, proxy: str) -> None:
        bare, self.authorization = _without_userinfo(proxy if "://" in proxy else f"http://{proxy}")
        parts = urlsplit(bare)
        self.scheme, self.hostport = parts.scheme, parts.netloc

    def _through(self, request: urllib.request.Request) -> None:
        if self.authorization:
            request.add_header("Proxy-authorization", self.authorization)
        request.set_proxy(self.hostport, self.scheme)

    def http_open(self, request: urllib.request.Request) -> None:
        self._through(request)  # None: the HTTP handler then opens it, through the proxy

    def https_open(self, request: urllib.request.Request) -> None:
        self._through(request)  # a CONNECT tunnel


class _TooLarge(Exception):
    pass


class _Fetch:
    """One request run in a worker thread: what came back, or the exception, and how far it got."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.answered = False
        self.received = 0
        self.text: str | None = None
        self.error: BaseException | None = None

    def run(self, opener: urllib.request.OpenerDirector, request: urllib.request.Request, timeout: float,
            body: bool) -> None:
        try:
            with opener.open(request, timeout=timeout) as response:
                self.answered = True
                if not body:
                    self.text = ""
                    return
                chunks = []
                while not self.stop.is_set() and (chunk := response.read1(1 << 16)):  # what has come, at once
                    self.received += len(chunk)
                    if self.received > MAX_PAGE:
                        raise _TooLarge
                    chunks.append(chunk)
                self.text = b"".join(chunks).decode("utf-8", errors="replace")
        except BaseException as exc:  # handed to the caller's thread, which reports it
            self.error = exc


# ---------------------------------------------------------------- PEP 503 pages and file names


@dataclass(frozen=True)
class IndexFile:
    """One anchor of a PEP 503 project page."""

    filename: str
    url: str
    sha256: str | None
    requires_python: str | None = None
    yanked: bool = False  # PEP 592 data-yanked: pip takes it only for a requirement pinned with ==


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.found.append(dict(attrs))


def parse_page(text: str, page_url: str) -> list[IndexFile]:
    """The files a PEP 503 page links to, with their sha256 fragments (``#sha256=HEX``) where given."""
    parser = _Anchors()
    parser.feed(text)
    files = []
    for attrs in parser.found:
        href = attrs.get("href")
        if not href:
            continue
        url = urljoin(page_url, href)
        parts = urlsplit(url)
        name = unquote(parts.path.rsplit("/", 1)[-1])
        digest = parts.fragment[len("sha256="):].lower() if parts.fragment.startswith("sha256=") else None
        if name and parse_filename(name) is not None:
            files.append(IndexFile(name, url.split("#", 1)[0], digest, attrs.get("data-requires-python"),
                                   "data-yanked" in attrs))
    return files


def parse_filename(filename: str) -> tuple[str, str, tuple[str, str, str] | None] | None:
    """(normalized name, version, wheel tags or None for an sdist) of a distribution file name."""
    if filename.endswith(".whl"):
        parts = filename[:-4].split("-")
        if len(parts) not in (5, 6):
            return None
        return normalize_name(parts[0]), parts[1], (parts[-3], parts[-2], parts[-1])
    for ext in (".tar.gz", ".zip", ".tar.bz2", ".tgz"):
        if filename.endswith(ext):
            name, _sep, version = filename[: -len(ext)].rpartition("-")
            return (normalize_name(name), version, None) if name and version else None
    return None


def fits(tags: tuple[str, str, str], python: str, target: tuple[str, str]) -> bool:
    """Whether a wheel with ``tags`` installs on CPython ``python`` (``"3.11"``) on ``target`` (linux, x86_64)."""
    major, minor = [*python.split("."), "0"][:2]
    pythons = {f"cp{major}{minor}", f"py{major}{minor}", f"py{major}", f"cp{major}"}
    abis = {f"cp{major}{minor}", "abi3", "none"}
    system, machine = target
    platforms = re.compile(rf"any|(?:many)?{re.escape(system)}(?:\d+|_\d+_\d+)?_{re.escape(machine)}")
    python_tags, abi_tags, platform_tags = (tag.split(".") for tag in tags)
    if "abi3" in abi_tags:  # the stable ABI of CPython 3.N holds for every later 3.x
        pythons |= {f"cp{major}{n}" for n in range(2, int(minor) + 1)} if minor.isdigit() else set()
    return (any(t in pythons for t in python_tags) and any(t in abis for t in abi_tags)
            and any(platforms.fullmatch(t) for t in platform_tags))


# ---------------------------------------------------------------- what the inputs ask of torch


@dataclass(frozen=True)
class Requirement:
    """The clauses the input files put on torch (``==2.13.0``, ``>=2.12,<2.14``); none means any release."""

    clauses: tuple[tuple[str, str], ...]

    def allows(self, version: str) -> bool:
        try:
            return all(compare(version, op, spec) for op, spec in self.clauses)
        except InvalidVersion:
            return False

    def pinned(self) -> bool:
        """One ``==`` (or ``===``) clause without a wildcard: pip then takes a yanked file too (PEP 592)."""
        return len(self.clauses) == 1 and self.clauses[0][0] in ("==", "===") and "*" not in self.clauses[0][1]

    def text(self) -> str:
        """``torch 2.13.0`` for one exact pin, ``torch>=2.12,<2.14`` otherwise."""
        if len(self.clauses) == 1 and self.clauses[0][0] == "==" and not self.clauses[0][1].endswith("*"):
            return f"torch {self.clauses[0][1]}"
        return "torch" + ",".join(op + spec for op, spec in self.clauses) if self.clauses else "torch"


def _logical_lines(path: Path) -> Iterable[str]:
    pending = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = re.sub(r"(^|\s)#.*$", "", raw).rstrip()
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        yield pending + line
        pending = ""
    if pending:
        yield pending


def torch_requirement(files: Sequence[Path], python: str, target: tuple[str, str]) -> Requirement | None:
    """What the input files (``kdkit.locking.input_files``) require of torch for the image (markers evaluated
    for it); None when they do not name torch, or name it by URL (``torch @ https://...``, no index needed)."""
    environment = {"python_version": python, "python_full_version": f"{python}.0", "sys_platform": target[0],
                   "platform_system": target[0].capitalize(), "platform_machine": target[1], "os_name": "posix",
                   "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}
    clauses: list[tuple[str, str]] = []
    named = False
    for path in files:
        for line in _logical_lines(path):
            if not line.strip() or line.lstrip().startswith("-"):
                continue
            match = _REQUIREMENT.match(line)
            if match is None or normalize_name(match.group("name")) != "torch":
                continue
            marker = match.group("marker")
            try:
                if marker and not evaluate(marker, environment):
                    continue
            except InvalidMarker:
                pass  # pip-compile will say what is wrong with it
            rest = match.group("rest").strip()
            if rest.startswith("@"):
                return None
            named = True
            for piece in filter(None, (p.strip() for p in rest.strip("()").split(","))):
                clause = _CLAUSE.match(piece)
                if clause:
                    clauses.append((clause.group(1), clause.group(2)))
    return Requirement(tuple(clauses)) if named else None


# ---------------------------------------------------------------- before pip-compile


@dataclass(frozen=True)
class TorchPage:
    """The torch index's ``torch/`` page as the preflight read it."""

    index: str
    url: str
    files: tuple[IndexFile, ...]
    builds: tuple[str, ...] = ()  # versions of the torch builds that fit the requirement, Python and label

    def newest(self) -> str | None:
        """The newest of :attr:`builds` (``2.12.0+cu128``), or None."""
        try:
            return max(self.builds, key=Version.parse, default=None)
        except InvalidVersion:
            return self.builds[-1] if self.builds else None

    def by_hash(self) -> dict[str, IndexFile]:
        return {f.sha256: f for f in self.files if f.sha256}


def python_allows(requires_python: str | None, python: str) -> bool:
    """Whether a file's Requires-Python (``>=3.12``) admits CPython ``python`` (``3.11``: some 3.11.x does);
    a specifier kdkit cannot read admits it (pip will say)."""
    clauses = [_CLAUSE.match(piece) for piece in (requires_python or "").split(",") if piece.strip()]
    if not all(clauses):
        return True
    try:
        return any(all(compare(full, c.group(1), c.group(2)) for c in clauses if c)
                   for full in (f"{python}.0", f"{python}.999"))
    except InvalidVersion:
        return True


def _torch_builds(files: Iterable[IndexFile], requirement: Requirement, python: str,
                  target: tuple[str, str], *, requires_python: bool = True) -> list[tuple[str, IndexFile]]:
    """(version, file) of the torch wheels that ``requirement`` allows and the image can install, as pip
    chooses them: a yanked file only for an exact pin, a file whose Requires-Python excludes ``python``
    never (unless ``requires_python`` is False)."""
    found = []
    for item in files:
        parsed = parse_filename(item.filename)
        if parsed is None or parsed[0] != "torch" or parsed[2] is None:
            continue
        if item.yanked and not requirement.pinned():
            continue
        if requires_python and not python_allows(item.requires_python, python):
            continue
        if requirement.allows(parsed[1]) and fits(parsed[2], python, target):
            found.append((parsed[1], item))
    return found


def _label_key(label: str) -> tuple[int, ...]:
    parsed = parse_label(label)
    number = parsed[1] if parsed else None
    return tuple(int(n) for n in re.findall(r"\d+", number or ""))


def _and(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


_FAMILY = {"cuda": "CUDA index (cuXYZ, e.g. cu130)", "rocm": "ROCm index (rocmX.Y, e.g. rocm7.2)", "cpu": "cpu index"}


def example_index(backend: str, project_root: Path | None = None) -> str:
    """The torch index `kdkit init` would write for ``backend`` (the pairings' template build)."""
    from kdkit.pairings import load_pairings

    try:
        return TORCH_INDEX_URL.format(label=load_pairings(project_root).template_build(backend).label)
    except BadInput:
        return TORCH_INDEX_URL.format(label={"cuda": "cu130", "rocm": "rocm7.2"}.get(backend, "cpu"))


def refuse_foreign_index(torch_index: str, backend: str, config_file: Path, *, torch_needed: bool = True) -> None:
    """BadInput unless ``torch_index`` is a plain URL whose build label is of ``backend``'s family: a cuda
    backend with ``.../whl/cpu`` would lock +cpu torch, one with ``.../whl/xpu`` +xpu. An index whose label
    kdkit cannot read is refused only when ``torch_needed`` (the inputs name torch): without torch it is any
    package index."""
    place = f"{config_file}: $.backends.{backend}.torch_index {torch_index}"
    example = example_index(backend, config_file.parent)
    parts = urlsplit(torch_index)
    if parts.query or parts.fragment:
        extra = ("?" + parts.query if parts.query else "") + ("#" + parts.fragment if parts.fragment else "")
        raise BadInput(f"{place} has a query or fragment ({extra}), which no index URL takes: give the index's "
                       f"plain URL, e.g. {example}")
    label = index_label(torch_index)
    family = label_backend(label) if label else None
    if family == backend or (label is None and not torch_needed):
        return
    want = f"a {backend} backend needs a {_FAMILY.get(backend, backend + ' index')}, e.g. {example}"
    if family is not None:
        raise BadInput(f"{place} is a {_FAMILY[family].split(' (')[0]} (+{label} builds): {want}")
    tail = parts.path.rstrip("/").rsplit("/", 1)[-1] or parts.path
    raise BadInput(f"{place} ends in {tail!r}, not a build label kdkit can read (cuXYZ, rocmX.Y, cpu): {want}")


def preflight(torch_index: str, backend: str, requirement: Requirement | None, python: str,
              target: tuple[str, str], network: Network, config_file: Path) -> TorchPage:
    """Refuse, before pip-compile runs, an index that does not answer (Unavailable) or serves no build of
    ``requirement`` for ``python`` on ``target`` (BadInput); ``requirement`` None: the index must only answer."""
    refuse_foreign_index(torch_index, backend, config_file, torch_needed=requirement is not None)
    place = f"backends.{backend}.torch_index in {config_file}"
    index = torch_index.rstrip("/")
    page_url = f"{index}/torch/"
    text = network.get(page_url, place)
    files = tuple(parse_page(text, page_url)) if text is not None else ()
    wanted = requirement or Requirement(())
    label = index_label(index)
    builds = _torch_builds(files, wanted, python, target)
    if label is not None:
        builds = [(v, f) for v, f in builds if split_version(v)[1] == label]
    if requirement is None or builds:
        return TorchPage(index, page_url, files, tuple(sorted({v for v, _f in builds})))
    for_what = f"{wanted.text()} for Python {python} on {'-'.join(target)}"
    served = "has no torch/ page" if text is None else f"serves no {for_what}"
    message = f"{config_file}: backends.{backend}.torch_index {index} {served}"
    excluded = sorted({f"{item.filename} has Requires-Python {item.requires_python}"
                       for version, item in _torch_builds(files, wanted, python, target, requires_python=False)
                       if label is None or split_version(version)[1] == label})
    if excluded:
        raise BadInput(f"{message}: {_and(excluded)} (data-requires-python), and kdkit.json's python is {python}; "
                       "change kdkit.json's python or the torch requirement in the input files")
    if label is None:
        raise BadInput(f"{message}; point it at the PyTorch index of the build you want (e.g. .../whl/cu130)")
    family = index[: -len(label)].rstrip("/")
    listing = f"{family}/torch/"
    try:
        every = network.get(listing, f"the torch builds beside {place}")
    except Unavailable:
        every = None
    labels = sorted({split_version(v)[1] or "" for v, _f in _torch_builds(parse_page(every or "", listing), wanted,
                                                                        python, target)} - {""}, key=_label_key)
    mine = [lb for lb in labels if (parse_label(lb) or ("",))[0] == backend]
    if mine:
        raise BadInput(f"{message}; {wanted.text()} has {_and(['+' + lb for lb in mine])} at {listing}; "
                       f"set backends.{backend}.torch_index to {family}/{mine[-1]}")
    if labels:
        raise BadInput(f"{message}; {listing} has {wanted.text()} only as {_and(['+' + lb for lb in labels])}; "
                       f"change the torch requirement in the input files or the backend")
    if every is None:
        raise BadInput(f"{message}, and {listing} lists no builds: point it at a PyTorch wheel index "
                       f"(.../whl/<label>, e.g. cu130, rocm7.2, cpu)")
    raise BadInput(f"{message}; {listing} lists no {backend} build of it for that Python either: change the torch "
                   "requirement in the input files or kdkit.json's python")


def check_find_links(folder: Path, label: str | None, requirement: Requirement | None, python: str,
                     target: tuple[str, str]) -> None:
    """BadInput unless the folder of ``--torch-find-links`` holds a torch wheel that ``requirement`` allows,
    with the backend's ``label``, for ``python`` on ``target``: pip would take torch from anywhere else."""
    if requirement is None:
        return
    files = [IndexFile(entry.name, entry.as_uri(), None) for entry in sorted(folder.iterdir()) if entry.is_file()]
    builds = _torch_builds(files, requirement, python, target)
    if any(label is None or split_version(version)[1] == label for version, _f in builds):
        return
    torch = [f.filename for f in files if (parsed := parse_filename(f.filename)) and parsed[0] == "torch"]
    holds = f"it holds {_and(torch)}" if torch else "it holds no torch wheel"
    build = f" +{label}" if label else ""
    raise BadInput(f"--torch-find-links {folder}: no {requirement.text()}{build} wheel for Python {python} on "
                   f"{'-'.join(target)} ({holds}); put that wheel there, or lock from the torch index without "
                   "--torch-find-links")


def check_answers(url: str, place: str, network: Network) -> None:
    """Unavailable unless the index at ``url`` answers (any HTTP status does): pip would wait minutes on it."""
    network.get(f"{url.rstrip('/')}/torch/", place, body=False, fix=INDEX_FIX)


# ---------------------------------------------------------------- after pip-compile


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
    """The machine-local sources pip resolves from: find-links folders and file:// indexes of its configuration."""
    sources = [LocalSource("find-links", str(torch_links), "--torch-find-links")] if torch_links else []
    for key in ("find-links", "index-url", "extra-index-url"):
        for token in pip_config.get(key, "").split():
            if is_remote(token):
                continue
            kind = "find-links" if key == "find-links" else "index"
            location = url2pathname(urlsplit(token).path) if kind == "find-links" and token.startswith("file:") \
                else token
            sources.append(LocalSource(kind, location, "pip's configuration"))
    return sources


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _same_version(a: str, b: str) -> bool:
    """PEP 440 equality, the local label included (``2.13.0+cu130`` is not ``2.13.0+cpu``)."""
    try:
        return Version.parse(a) == Version.parse(b)
    except InvalidVersion:
        return a == b


def _local_files(source: LocalSource, pin: Pin) -> Iterable[tuple[str, str]]:
    """(sha256, file name) of the files of ``source`` named like ``pin`` (name and exact version)."""
    if source.kind == "find-links":
        folder = Path(source.location)
        entries = sorted(folder.iterdir()) if folder.is_dir() else []
        for entry in entries:
            parsed = parse_filename(entry.name)
            if parsed and parsed[0] == pin.key and _same_version(parsed[1], pin.version) and entry.is_file():
                yield _sha256_of(entry), entry.name
        return
    root = url2pathname(urlsplit(source.location).path) if source.location.startswith("file:") else source.location
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
        elif item.url.startswith("file:") and (path := Path(url2pathname(urlsplit(item.url).path))).is_file():
            yield _sha256_of(path), item.filename


@dataclass
class Provenance:
    """Where the lock's files came from: the header's torch-source and machine-local fields, and warnings."""

    torch_source: str
    machine_local: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _hashes(pin: Pin) -> set[str]:
    return {h[len(_HASH_PREFIX):].lower() for h in pin.hashes if h.startswith(_HASH_PREFIX)}


class _Remote:
    """The http(s) indexes a lock names, asked at most once per page; an index that fails is not asked again."""

    def __init__(self, indexes: Sequence[str], network: Network) -> None:
        self.indexes = [i.rstrip("/") for i in indexes if is_remote(i)]
        self.network = network
        self.down: set[str] = set()

    def serving(self, name: str, hashes: set[str]) -> tuple[str, str] | None:
        """(index, file name) of the first index whose page of ``name`` carries one of ``hashes``."""
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


def provenance(lock: Lock, page: TorchPage | None, indexes: Sequence[str], sources: Sequence[LocalSource],
               torch_links: Path | None, network: Network, python: str, target: tuple[str, str]) -> Provenance:
    """Compare the lock's hashes with the torch page and the machine-local sources; BadInput when torch's
    file is only on this machine and the user did not name that folder with --torch-find-links."""
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
        result.torch_source = _torch_source(lock, torch, page, local.get("torch", {}), remote, python, target)
        served = set(page.by_hash()) if page else set()
        strays = {s.describe() for d, s in local.get("torch", {}).items() if d in _hashes(torch) - served}
        if strays and served & _hashes(torch):
            result.warnings.append(f"{lock.path.name}: torch=={torch.version} also matches a file of this machine "
                                   f"that the torch index does not serve ({_and(sorted(strays))}); pip may install "
                                   "that one here: remove it from pip's configuration (`pip config list`)")
        elif page is not None and not served and (here := _torch_files_here(torch, sources)):
            result.warnings.append(f"{lock.path.name}: {page.url} gives no sha256 of its files, so "
                                   f"torch=={torch.version}'s hashes cannot be attributed to the torch index; "
                                   f"{_and(here)} {'is a file' if len(here) == 1 else 'are files'} of this machine "
                                   "that pip may install here instead: remove it from pip's configuration "
                                   "(`pip config list`)")
    for pin in sorted(lock.pins.values(), key=lambda p: p.key):
        hashes = _hashes(pin)
        mine = local.get(pin.key, {})
        if not hashes or not hashes <= set(mine):
            continue
        if pin.key == "torch" and page is not None and hashes & set(page.by_hash()):
            continue
        if remote.serving(pin.key, hashes) is not None:
            continue
        result.machine_local.append(pin.key)
    if result.machine_local:
        where = _and(sorted({s.describe() for key in result.machine_local for s in local[key].values()}))
        result.warnings.append(f"{lock.path.name}: {_and(result.machine_local)} came only from this machine ({where}); "
                               "another machine cannot install this lock from its indexes: publish those files on an "
                               "index, or build the image here with `kdkit wheelhouse`")
    return result


def _from_the_folder(lock: Lock, torch: Pin, folder: Path, local: dict[str, LocalSource]) -> None:
    """BadInput unless one of torch's hashes is a file of the --torch-find-links ``folder``."""
    hashes = _hashes(torch)
    mine = {digest for digest, source in local.items() if source.origin == "--torch-find-links"}
    if hashes & mine:
        return
    others = sorted({local[digest].describe() for digest in hashes if digest in local})
    where = _and(others) if others else "an index of pip's configuration"
    raise BadInput(f"{lock.path}: torch=={torch.version} came only from {where}, not from --torch-find-links "
                   f"{folder}; nothing was written: remove that source from pip's configuration (`pip config list`), "
                   "or put the torch you want in the folder")


def _torch_files_here(torch: Pin, sources: Sequence[LocalSource]) -> list[str]:
    """``NAME in SOURCE`` for each file of this machine whose hash the torch pin carries."""
    hashes = _hashes(torch)
    return sorted({f"{name} in {source.describe()}" for source in sources
                   for digest, name in _local_files(source, torch) if digest in hashes})


def _torch_source(lock: Lock, torch: Pin, page: TorchPage | None, local: dict[str, LocalSource], remote: _Remote,
                  python: str, target: tuple[str, str]) -> str:
    hashes = _hashes(torch)
    if page is not None:
        on_page = [f for digest, f in page.by_hash().items() if digest in hashes]
        if on_page:
            best = sorted(on_page, key=lambda f: (not _fits_file(f.filename, python, target), f.filename))[0]
            return f"{page.index} ({best.filename})"
    if hashes and hashes <= set(local):
        sources = _and(sorted({s.describe() for s in local.values()}))
        index = page.index if page else "the backend's torch index"
        raise BadInput(f"{lock.path}: torch=={torch.version} came only from {sources}, not from {index}; nothing was "
                       "written (another machine could not install it): remove that source from pip's configuration "
                       "(`pip config list`), or lock from it on purpose with --torch-find-links FOLDER")
    served = remote.serving("torch", hashes)
    if served is not None:
        return f"{served[0]} ({served[1]}, not the torch index)"
    if page is not None:
        named = sorted(f.filename for f in page.files if (p := parse_filename(f.filename)) and p[0] == "torch"
                       and _same_version(p[1], torch.version) and _fits_file(f.filename, python, target))
        if named:
            return f"{page.index} ({named[0]}, unverified: the index gives no sha256 of it)"
    return "unknown (no index the lock names serves its hash)"


def _fits_file(filename: str, python: str, target: tuple[str, str]) -> bool:
    parsed = parse_filename(filename)
    return bool(parsed and parsed[2] and fits(parsed[2], python, target))


def emitted_indexes(torch_index: str, pip_config: dict[str, str], default_index: str, *,
                    torch_from_index: bool = True) -> list[tuple[str, str]]:
    """The index options a lock carries, as (option, URL): the torch index first when torch came from it,
    then the http(s) indexes of pip's configuration (the user's index only when it is not pip's default,
    as pip-compile does, unless the torch index needs it beside it).

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
    return [("--index-url" if n == 0 and primary else "--extra-index-url", url) for n, url in enumerate(unique)]


def option_lines(indexes: Sequence[tuple[str, str]]) -> str:
    """The index options kdkit writes at the top of a lock (pip-compile writes none: --no-emit-index-url)."""
    return "".join(f"{option} {url}\n" for option, url in indexes) + ("\n" if indexes else "")
