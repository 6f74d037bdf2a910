"""The network of `kdkit lock`'s index checks, reached as pip reaches it: pip's ``cert``, ``proxy``
and ``trusted-host`` options and the proxy variables honoured, the URL's ``user:password@`` sent as
Basic auth to that host only, at most :data:`TIMEOUT` seconds a request by the wall clock (a page
that trickles a byte every few seconds does not reset it) and :data:`MAX_PAGE` bytes a page.

An index that does not answer is ``Unavailable`` (exit 3) naming the URL, its place and the reason.
No click here.
"""

from __future__ import annotations

import base64
import http.client
import ssl
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from kdkit.core.errors import Unavailable

TIMEOUT = 10.0  # seconds a request may take; pip's own timeout applies when it is shorter
# what pip-compile's pip gets (--retries): the preflight already knows the index answers
RETRIES = 1
# bytes: download.pytorch.org's every-build torch/ page is a few MB; more is not an index
MAX_PAGE = 32 << 20
GRACE = 0.5  # seconds past the timeout the fetch may take (the socket's own timeout fires first)
TORCH_FIX = ("check the URL, the network and the proxy (HTTPS_PROXY, pip's proxy), or lock from a "
             "local folder with --torch-find-links")
INDEX_FIX = (
    "check the URL, the network and the proxy (HTTPS_PROXY, pip's proxy), or change pip's "
    "configuration")


@dataclass(frozen=True)
class Network:
    """How to reach an index: the timeout and what pip's configuration says about TLS and
    proxies."""

    timeout: float = TIMEOUT
    cafile: str | None = None
    proxy: str | None = None
    trusted_hosts: frozenset[str] = frozenset()

    @classmethod
    def from_pip(cls, pip_config: dict[str, str], ca_bundle: Path | None = None) -> Network:
        """From pip's timeout (when under :data:`TIMEOUT`), cert (or --ca-bundle), proxy and
        trusted-host."""
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
        context = ssl.create_default_context(
            cafile=self.cafile) if self.cafile else ssl.create_default_context()
        if host in self.trusted_hosts:  # pip's trusted-host: no certificate check for that host
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        # pip's --proxy holds for every host: NO_PROXY does not apply to it (urllib's would)
        if self.proxy:
            return urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                               _EveryHost(self.proxy),
                                               urllib.request.HTTPSHandler(context=context))
        # HTTP(S)_PROXY and their lower-case forms; NO_PROXY applies
        proxies = urllib.request.getproxies()
        return urllib.request.build_opener(urllib.request.ProxyHandler(proxies),
                                           urllib.request.HTTPSHandler(context=context))

    def proxy_for(self, url: str) -> tuple[str, str] | None:
        """(proxy URL without userinfo, where it was set) that a request for ``url`` goes through,
        or None."""
        if self.proxy:
            return without_userinfo(self.proxy if "://" in self.proxy
                                    else f"http://{self.proxy}")[0], "pip's proxy"
        parts = urlsplit(url)
        proxy = urllib.request.getproxies().get(parts.scheme)
        if not proxy or urllib.request.proxy_bypass(parts.netloc):
            return None
        return without_userinfo(proxy)[0], f"{parts.scheme.upper()}_PROXY"

    def get(self, url: str, what: str, *, body: bool = True, fix: str = TORCH_FIX,
            outcome: str = "nothing was locked") -> str | None:
        """The text at ``url``; None when the server answers 404/410; Unavailable when it does not
        answer, or not all of the page within the timeout (however slowly it trickles), or a page
        over MAX_PAGE.

        ``what`` names the URL's place in messages (``backends.cuda.torch_index in kdkit.json``)."""
        url, authorization = without_userinfo(url)
        host = urlsplit(url).hostname or ""
        request = urllib.request.Request(url,
                                         headers={"Accept": "text/html", "User-Agent": "kdkit"})
        # as pip does: the URL's user and password go as Basic auth, to that host only
        if authorization:
            request.add_unredirected_header("Authorization", authorization)
        fetch = self._fetch(request, host, body)
        if fetch.done and fetch.error is None:
            return fetch.text
        if fetch.done and isinstance(fetch.error, urllib.error.HTTPError) \
                and fetch.error.code in (404, 410):
            return None
        raise Unavailable(f"{url} ({what}): {self._failure(fetch, host, url)}; {outcome}: {fix}")

    def _fetch(self, request: urllib.request.Request, host: str, body: bool) -> _Fetch:
        """The request run in a thread: the socket's timeout holds per read, and a byte every few
        seconds resets it; the join bounds the whole fetch (name lookup, connection, every read) by
        the wall clock."""
        fetch = _Fetch()
        worker = threading.Thread(target=fetch.run,
                                  args=(self._opener(host), request, self.timeout, body),
                                  name="kdkit-index-fetch", daemon=True)
        worker.start()
        worker.join(self.timeout + GRACE)
        fetch.done = not worker.is_alive()
        if not fetch.done:
            fetch.stop.set()
        return fetch

    def _failure(self, fetch: _Fetch, host: str, url: str) -> str:
        """Why a fetch that did not return a page failed, for the message; an unexpected error is
        raised."""
        if not fetch.done:
            return (f"the page was not complete after {self.timeout:g} s ({fetch.received} bytes "
                    "came)"
                    if fetch.answered else f"no answer after {self.timeout:g} s")
        if isinstance(fetch.error, _TooLarge):
            return f"the page is over {MAX_PAGE >> 20} MiB, no index page is that large"
        if isinstance(fetch.error, urllib.error.HTTPError):
            return f"HTTP {fetch.error.code} {fetch.error.reason}"
        if isinstance(fetch.error,
                      (urllib.error.URLError, OSError, ValueError, http.client.HTTPException)):
            return self._reason(fetch.error, host, self.proxy_for(url))
        assert fetch.error is not None
        raise fetch.error

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
            return (f"TLS certificate not trusted ({exc.verify_message}); pass the proxy's CA with "
                    "--ca-bundle FILE or set pip's cert")
        if isinstance(exc, urllib.error.URLError):
            return str(exc.reason)
        if isinstance(exc, OSError) and exc.strerror:  # a missing cert file names itself
            return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
        return str(exc) or type(exc).__name__


def without_userinfo(url: str) -> tuple[str, str | None]:
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
    """pip's ``proxy`` option: every request goes through it, whatever NO_PROXY says (pip ignores it
    for --proxy)."""

    handler_order = 100  # before the HTTP(S) handlers, as urllib's ProxyHandler

    def __init__(self, proxy: str) -> None:
        bare, self.authorization = without_userinfo(proxy if "://" in proxy else f"http://{proxy}")
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
        self.done = False  # the worker ended within the wall clock
        self.answered = False
        self.received = 0
        self.text: str | None = None
        self.error: BaseException | None = None

    def run(self, opener: urllib.request.OpenerDirector, request: urllib.request.Request,
            timeout: float,
            body: bool) -> None:
        try:
            with opener.open(request, timeout=timeout) as response:
                self.answered = True
                if not body:
                    self.text = ""
                    return
                chunks = []
                # what has come, at once
                while not self.stop.is_set() and (chunk := response.read1(1 << 16)):
                    self.received += len(chunk)
                    if self.received > MAX_PAGE:
                        raise _TooLarge
                    chunks.append(chunk)
                self.text = b"".join(chunks).decode("utf-8", errors="replace")
        except BaseException as exc:  # handed to the caller's thread, which reports it
            self.error = exc
