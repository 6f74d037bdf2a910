"""A unix socket in front of the real Docker engine that passes every byte both ways unchanged, and sends a
signal to a process at one exact moment: when the engine answers a request that matches a pattern, before
that answer is passed on. So a test puts a signal where it wants it (the container exists, kdkit has not
heard so yet), with no sleep and no timing luck.

    with SignalingProxy(rb"^POST /v[0-9.]+/containers/create", signal.SIGTERM) as proxy:
        process = subprocess.Popen([...], env={**os.environ, "DOCKER_HOST": proxy.url})
        proxy.target(process.pid)
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import tempfile
import threading
from pathlib import Path
from types import TracebackType


def engine_socket() -> str:
    """The engine's unix socket (DOCKER_HOST, else Docker's default)."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        raise RuntimeError(f"DOCKER_HOST {host}: the proxy speaks to a unix socket only")
    return host[len("unix://"):]


class SignalingProxy:
    def __init__(self, pattern: bytes, signum: int) -> None:
        self.pattern, self.signum = re.compile(pattern, re.MULTILINE), signum
        # short: a socket path holds 108 bytes at most
        self.folder = Path(tempfile.mkdtemp(prefix="kd-proxy-"))
        self.path = self.folder / "engine.sock"
        self.fired = threading.Event()
        self._pid: int | None = None
        self._lock = threading.Lock()
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(self.path))
        self._server.listen(16)
        self._open: list[socket.socket] = []

    @property
    def url(self) -> str:
        return f"unix://{self.path}"

    def target(self, pid: int) -> None:
        self._pid = pid

    def __enter__(self) -> SignalingProxy:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._server.close()
        for sock in list(self._open):
            with contextlib.suppress(OSError):
                sock.close()
        with contextlib.suppress(OSError):
            self.path.unlink()
            self.folder.rmdir()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(engine_socket())
            self._open += [client, upstream]
            # this connection's last request matched: its answer fires the signal
            armed = threading.Event()
            threading.Thread(target=self._pump,
                             args=(client, upstream, armed, True), daemon=True).start()
            threading.Thread(target=self._pump,
                             args=(upstream, client, armed, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket,
              armed: threading.Event, asking: bool) -> None:
        try:
            while data := source.recv(1 << 16):
                if asking and not self.fired.is_set() and self.pattern.search(data):
                    armed.set()
                elif not asking and armed.is_set():
                    self._fire()
                    armed.clear()
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)

    def _fire(self) -> None:
        with self._lock:
            if self.fired.is_set() or self._pid is None:
                return
            os.kill(self._pid, self.signum)
            self.fired.set()


class RefusingProxy(SignalingProxy):
    """The same pass-through, except that a request matching ``pattern`` is answered by the proxy
    itself with HTTP 500, and the engine never sees it: an engine that fails one kind of call, while
    the real engine answers every other one.

        with RefusingProxy(rb"^POST /v[0-9.]+/containers/[0-9a-f]+/wait") as proxy:
            engine = docker.DockerClient(base_url=proxy.url)
    """

    BODY = b'{"message": "refused by the test proxy"}'
    ANSWER = (b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(BODY)).encode() + b"\r\nConnection: close\r\n\r\n" + BODY)

    def __init__(self, pattern: bytes) -> None:
        super().__init__(pattern, 0)
        self.refused = 0  # how many requests the proxy answered itself

    def _pump(self, source: socket.socket, sink: socket.socket,
              armed: threading.Event, asking: bool) -> None:
        if not asking:
            super()._pump(source, sink, armed, asking)
            return
        try:
            while data := source.recv(1 << 16):
                if self.pattern.search(data):
                    with self._lock:
                        self.refused += 1
                    source.sendall(self.ANSWER)
                    return
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_WR)
