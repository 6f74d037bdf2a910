"""A real local HTTP service for the serve-test tests and the benchmark: a project's predict behind
http.server on 127.0.0.1 (a free port), with the ways a service misbehaves under load made tunable.

    with LocalServer(root) as server:             # loads src.classify:predict from the project
        drive(server.url + "/predict", "json", ...)

Routes: POST /predict ({"text": ...} -> the app's first answer as JSON), POST /v1/completions and
/v1/chat/completions (OpenAI-like; ``stream: true`` answers server-sent events, the category name one
character a chunk, then ``data: [DONE]``, chunked). 413 when a body is over ``max_bytes``, 503 when more
than ``capacity`` requests are in flight, ``delay_s`` before every answer, ``token_delay_s`` between
streamed chunks, ``stall_s`` for any request whose text holds ``stall_marker``; a keep-alive connection
idle for ``idle_s`` is closed.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

Predict = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]


def load_app(root: Path, entry: str = "src.classify:predict") -> Predict:
    """The project's predict, imported as the pilot imports it, warmed by one call (the template app trains
    at first use)."""
    from kdkit.probe.pilot.harness import load_entry

    predict: Predict = load_entry(root, entry)
    predict([{"id": "warm", "text": "warm up", "sha256": ""}])
    return predict


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # headers and body are two writes: no 40 ms wait on the client's delayed ACK
    disable_nagle_algorithm = True
    server: _Server

    def setup(self) -> None:
        # an idle keep-alive connection is closed after this
        self.timeout = self.server.owner.idle_s
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        owner = self.server.owner
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        if owner.max_bytes is not None and length > owner.max_bytes:
            self._send(413, {"error": f"request of {length} bytes over {owner.max_bytes}"})
            return
        if not owner.enter():
            self._send(503, {"error": "at capacity"})
            return
        try:
            self._route(owner, body)
        finally:
            owner.leave()

    def _route(self, owner: LocalServer, raw: bytes) -> None:
        try:
            body = json.loads(raw)
        except ValueError:
            self._send(400, {"error": "not JSON"})
            return
        owner.seen(body)
        routes = {"/predict": self._predict, "/v1/completions": self._openai,
                  "/v1/chat/completions": self._openai}
        route = routes.get(self.path.split("?", 1)[0])
        if route is None:
            self._send(404, {"error": f"no route {self.path}"})
            return
        route(owner, body)

    def _predict(self, owner: LocalServer, body: Any) -> None:
        text = body.get("text") if isinstance(body, dict) else None
        if not isinstance(text, str):
            self._send(400, {"error": "give {\"text\": ...}"})
            return
        self._send(200, owner.answer(text))

    def _openai(self, owner: LocalServer, body: dict[str, Any]) -> None:
        chat = self.path.startswith("/v1/chat")
        text = body["messages"][-1]["content"] if chat else body["prompt"]
        category = str(owner.answer(text).get("category", "error"))
        if not body.get("stream"):
            choice = {
                "message": {"role": "assistant", "content": category}} if chat else {
                    "text": category}
            self._send(200,
                       {"object": "chat.completion" if chat else "text_completion",
                        "choices": [choice]})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if chat:  # a first chunk with the role only: not a token
            self._chunk({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})
        for char in category:
            time.sleep(owner.token_delay_s)
            self._chunk(
                {"choices": [{"index": 0, "delta": {"content": char}} if chat
                             else {"index": 0, "text": char}]})
        self._chunk("[DONE]")
        self.wfile.write(b"0\r\n\r\n")

    def _chunk(self, event: Any) -> None:
        data = f"data: {event if isinstance(event, str) else json.dumps(event)}\n\n".encode()
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _send(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024
    owner: LocalServer


class LocalServer:
    """The project's app behind HTTP on 127.0.0.1; a context manager (started on enter, stopped on exit).
    ``url`` is ``http://127.0.0.1:PORT``; ``bodies`` the first requests' JSON bodies; ``most_in_flight``
    the most requests it held at once."""

    def __init__(self, root: Path, entry: str = "src.classify:predict", *,
                 predict: Predict | None = None,
                 max_bytes: int | None = None, capacity: int | None = None, delay_s: float = 0.0,
                 token_delay_s: float = 0.0, stall_marker: str | None = None, stall_s: float = 1.0,
                 idle_s: float = 30.0) -> None:
        self.root, self.entry, self.predict = root, entry, predict
        self.max_bytes, self.capacity, self.delay_s = max_bytes, capacity, delay_s
        self.token_delay_s, self.stall_marker, self.stall_s = token_delay_s, stall_marker, stall_s
        self.idle_s = idle_s
        self.bodies: list[Any] = []
        self.in_flight = self.most_in_flight = self.requests = 0
        self._lock = threading.Lock()
        self._app_lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "the server is not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> LocalServer:
        if self.predict is None:
            self.predict = load_app(self.root, self.entry)
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.owner = self
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def enter(self) -> bool:
        """Count a request in; False (and not counted) when that would put more than ``capacity`` in flight."""
        with self._lock:
            if self.capacity is not None and self.in_flight >= self.capacity:
                return False
            self.in_flight += 1
            self.requests += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            return True

    def leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def seen(self, body: Any) -> None:
        with self._lock:
            if len(self.bodies) < 1000:
                self.bodies.append(body)

    def answer(self, text: str) -> dict[str, Any]:
        """The app's answer to one text, after the configured delay (and the stall, for a marked text)."""
        wait = self.delay_s + (self.stall_s if self.stall_marker and self.stall_marker in text
                               else 0.0)
        if wait:
            time.sleep(wait)
        assert self.predict is not None
        with self._app_lock:
            return self.predict([{"id": "r", "text": text, "sha256": ""}])[0]
