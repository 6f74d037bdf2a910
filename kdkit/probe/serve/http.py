"""``kdkit serve-test --url``: a service the user already runs, driven over HTTP with the same
open-loop arrivals and judged by the same statistics as the in-process mode.

Three kinds of API: ``json`` (a POST of a JSON body made from a template, ``"{{text}}"`` in any
string value replaced by the request's text), ``completions`` and ``chat`` (OpenAI-compatible
``/v1/completions`` and ``/v1/chat/completions``, streamed: the time to the first token and between
tokens are recorded too). The URL is checked before anything is sent (BadInput, exit 2) and probed
(Unavailable, exit 3, when nothing answers there). Standard library only.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from kdkit.core.errors import BadInput, Unavailable
from kdkit.core.jsonio import parse_json
from kdkit.core.safetext import printable
from kdkit.core.serviceconfig import Objective
from kdkit.core.textfile import read_text_file
from kdkit.probe.serve.httprun import Run

API_KINDS = ("json", "completions", "chat")
PLACEHOLDER = "{{text}}"
DEFAULT_TEMPLATE: dict[str, str] = {"text": PLACEHOLDER}
ENDPOINTS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
MAX_TEMPLATE_BYTES = 1 << 20
DEFAULT_CONNECTIONS = 512


@dataclass(frozen=True)
class ParsedUrl:
    """An http(s) URL taken apart: where to connect and what to ask for."""

    url: str  # as given
    scheme: str  # http or https
    host: str  # without brackets for IPv6
    port: int
    target: str  # path and query, at least "/"

    @property
    def tls(self) -> bool:
        return self.scheme == "https"

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == (443 if self.tls else 80) else f"{host}:{self.port}"


def check_url(url: str) -> ParsedUrl:
    """``url`` as an http or https URL with a host; BadInput (exit 2), one line, on anything
    else."""
    shown = printable(" ".join(url.split())[:200])
    if not url.isascii():
        raise BadInput(f"--url {shown!r}: holds characters beyond ASCII; percent-encode them (an "
                       "IDN host as its xn-- form)")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise BadInput(f"--url {shown!r}: not a URL ({exc}); give http://HOST:PORT/PATH") from exc
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise BadInput(
            f"--url {shown!r}: only http:// and https:// URLs can be driven; give "
            "http://HOST:PORT/PATH")
    if not parts.hostname:
        raise BadInput(f"--url {shown!r}: names no host; give http://HOST:PORT/PATH")
    if parts.username is not None or parts.password is not None:
        raise BadInput(
            f"--url {shown!r}: credentials in the URL are not sent; give the URL without "
            "user:password@")
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in url):
        raise BadInput(f"--url {shown!r}: holds spaces or control characters; percent-encode them")
    if port == 0:
        raise BadInput(f"--url {shown!r}: port 0 is no service's port; give the port it listens on")
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return ParsedUrl(url, scheme, parts.hostname,
                     port or (443 if scheme == "https" else 80), target)


def probe(url: str, timeout: float = 5.0) -> ParsedUrl:
    """``url`` checked, then connected to (and its TLS handshake made, for https) within ``timeout``
    seconds; Unavailable (exit 3), one line naming the URL, when nothing answers there."""
    parsed = check_url(url)
    try:
        with socket.create_connection((parsed.host, parsed.port), timeout=timeout) as sock:
            if parsed.tls:
                with ssl.create_default_context().wrap_socket(sock, server_hostname=parsed.host):
                    pass
    except (OSError, ValueError) as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else " ".join(str(exc).split())[:120]
        raise Unavailable(f"{parsed.url}: nothing answers there ({type(exc).__name__}: {reason}); "
                          "start the service or correct --url") from exc
    return parsed


def load_template(path: Path) -> Any:
    """A JSON template (``"{{text}}"`` in at least one string value); BadInput (exit 2) naming the
    file."""
    # the strict reader: a regular file (a FIFO would block), UTF-8, finite numbers, no key twice,
    # not too deep
    data = parse_json(read_text_file(path, "request template", limit=MAX_TEMPLATE_BYTES), str(path))
    if not _uses_placeholder(data):
        raise BadInput(
            f"{path}: no string value holds \"{PLACEHOLDER}\"; put it where the request's text "
            "goes")
    return data


def _uses_placeholder(data: Any) -> bool:
    if isinstance(data, str):
        return PLACEHOLDER in data
    if isinstance(data, dict):
        return any(_uses_placeholder(v) for v in data.values())
    if isinstance(data, list):
        return any(_uses_placeholder(v) for v in data)
    return False


def fill(template: Any, text: str) -> Any:
    """The template with ``"{{text}}"`` replaced by ``text`` in every string value (keys are left
    alone)."""
    if isinstance(template, str):
        return template.replace(PLACEHOLDER, text)
    if isinstance(template, dict):
        return {key: fill(value, text) for key, value in template.items()}
    if isinstance(template, list):
        return [fill(value, text) for value in template]
    return template


def request_body(api: str, text: str, template: Any = None, model: str | None = None,
                 max_tokens: int = 16) -> bytes:
    """One request's JSON body (UTF-8) for an API kind; a model given as None is left out of the
    body."""
    if api == "json":
        body = fill(DEFAULT_TEMPLATE if template is None else template, text)
    elif api in ENDPOINTS:
        body = {"prompt": text} if api == "completions" else {
            "messages": [{"role": "user", "content": text}]}
        body.update({"max_tokens": max_tokens, "stream": True})
        if model is not None:
            body = {"model": model, **body}
    else:
        raise BadInput(f"--api {api!r}: not a kind of API; give one of {', '.join(API_KINDS)}")
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def endpoint(parsed: ParsedUrl, api: str) -> str:
    """The request target: the URL's own for ``json``; for the OpenAI kinds, the URL's when it
    already ends in the endpoint, else the endpoint under the URL's path (``http://h:8000`` and
    ``http://h:8000/v1`` alike)."""
    if api not in ENDPOINTS:
        return parsed.target
    path, _, query = parsed.target.partition("?")
    suffix = ENDPOINTS[api]
    if not path.rstrip("/").endswith(suffix):
        base = path.rstrip("/")
        path = base + (suffix[3:] if base.endswith("/v1") else suffix)
    return path + (f"?{query}" if query else "")


def request_bytes(parsed: ParsedUrl, api: str, body: bytes) -> bytes:
    """The whole HTTP/1.1 request: head and body."""
    accept = "text/event-stream" if api in ENDPOINTS else "application/json"
    head = (f"POST {endpoint(parsed, api)} HTTP/1.1\r\nHost: {parsed.host_header}\r\nUser-Agent: "
            f"kdkit-serve-test\r\nAccept: {accept}\r\nContent-Type: "
            f"application/json\r\nContent-Length: {len(body)}\r\n\r\n")
    return head.encode("latin-1") + body


def drive(url: str, api: str, template: Any, texts: Sequence[tuple[str, str]],
          arrivals: Sequence[float], *,
          max_request_bytes: int, timeout_s: float, max_seconds: float,
          objectives: Sequence[Objective],
          model: str | None = None, max_tokens: int = 16,
          concurrency_limit: int = DEFAULT_CONNECTIONS) -> list[dict[str, Any]]:
    """Send request ``i`` at ``arrivals[i]`` seconds from the start (text ``i % len(texts)``), open
    loop, and return one record per planned request (see kdkit.probe.serve.stats). ``template`` is a
    loaded template (:func:`load_template`), a path to one, or None for ``{"text": "{{text}}"}``;
    ``json`` only."""
    parsed = check_url(url)
    if api not in API_KINDS:
        raise BadInput(f"--api {api!r}: not a kind of API; give one of {', '.join(API_KINDS)}")
    if not texts:
        raise BadInput("serve-test: no inputs to send")
    if isinstance(template, Path):
        template = load_template(template)
    bodies = [request_body(api, text, template, model, max_tokens) for _, text in texts]
    requests = [request_bytes(parsed, api, body) for body in bodies]
    run = Run(parsed.host, parsed.port, tls=parsed.tls, streaming=api in ENDPOINTS,
              ids=[key for key, _ in texts],
              requests=requests, sizes=[len(body) for body in bodies], arrivals=list(arrivals),
              max_request_bytes=max_request_bytes, timeout_s=timeout_s, max_seconds=max_seconds,
              objectives=tuple(objectives), connections=max(1, concurrency_limit))
    return asyncio.run(run.go())
