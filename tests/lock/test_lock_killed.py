"""SIGKILL of `kdkit lock` while its resolver runs: the resolver dies with it, and the next `kdkit lock` removes
the scratch folder it left and says so.

Real processes and a real index: kdkit in its own process, its real resolver (pip-compile, or uv), asking an
index on 127.0.0.1 that answers kdkit's own check at once and holds every resolver's request open forever,
a byte a second (so no read timeout of the resolver ever ends it: only its death closes the connection).
The moment is exact: kdkit is killed once the index has the resolver's request. The resolver is found by a
marker in its environment (/proc/PID/environ), never by its name.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.conftest import REPO, TORCH_WHEELS, invoke

MARKER = "KDKIT_TEST_LOCK_MARKER"


class Holding:
    """What the index saw: a resolver's request (held), and that request's connection closed by the resolver."""

    def __init__(self) -> None:
        self.asked = threading.Event()
        self.closed = threading.Event()
        self.release = threading.Event()


@contextmanager
def holding_index() -> Iterator[tuple[str, Holding]]:
    seen = Holding()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            # kdkit's own check: any answer will do
            if self.headers.get("User-Agent", "").startswith("kdkit"):
                self.send_error(404)
                return
            seen.asked.set()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            try:
                while not seen.release.is_set():
                    self.wfile.write(b" ")  # a byte a second: the resolver's read never times out
                    self.wfile.flush()
                    seen.release.wait(1)
            except OSError:  # the resolver is gone: its end of the connection closed
                seen.closed.set()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple/", seen
    finally:
        seen.release.set()
        server.shutdown()
        server.server_close()


def marked(marker: str) -> list[int]:
    """The live processes whose environment carries ``marker`` (kdkit and what it started)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                environ = Path(f"/proc/{entry}/environ").read_bytes()
            except OSError:
                continue
            if f"{MARKER}={marker}".encode() in environ.split(b"\0"):
                found.append(int(entry))
    return found


def until(condition: object, what: str, timeout: float = 120) -> None:
    """Wait for ``condition()`` (a hang guard only: the outcome never depends on the clock)."""
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {timeout} s")
        time.sleep(0.05)


@pytest.mark.skipif(
    not any(TORCH_WHEELS.glob("torch-*.whl")), reason=f"no torch wheel in {TORCH_WHEELS}")
@pytest.mark.parametrize("resolver", ["pip-tools", "uv"])
def test_sigkill_of_lock_kills_its_resolver_and_the_next_lock_removes_its_folder(project: Path,
                                                                                 tmp_path: Path,
                                                                               resolver: str) -> None:
    marker = uuid.uuid4().hex
    lock = project / "requirements" / "cpu.txt"
    with holding_index() as (url, seen):
        env = {key: value for key, value in os.environ.items() if not key.startswith("PIP_")}
        env.update({"PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": url, MARKER: marker})
        process = subprocess.Popen([sys.executable, "-m", "kdkit", "lock", str(project),
                                    "--backend", "cpu",
                                    "--resolver", resolver, "--torch-find-links",
                                    str(TORCH_WHEELS)], cwd=REPO,
                                   env=env, stdout=subprocess.DEVNULL,
                                   stderr=(tmp_path / "lock.err").open("wb"))
        until(lambda: seen.asked.is_set() or process.poll() is not None, "the resolver's request")
        assert process.poll() is None, (tmp_path / "lock.err").read_text()
        scratch = lock.parent / f".{lock.name}.partial-{process.pid}"
        assert scratch.is_dir()  # the resolver works in the lock's staging, beside it
        resolvers = [pid for pid in marked(marker) if pid != process.pid]
        assert resolvers, "no resolver process found"
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
        # it died, or never will
        until(seen.closed.is_set, "the resolver's end of its connection closing")
        until(lambda: not marked(marker), "every process of the killed lock ending")
    # nothing written; the folder waits for the next lock
    assert not lock.exists() and scratch.is_dir()

    again = invoke("lock", project, "--backend", "cpu", "--torch-find-links", TORCH_WHEELS)
    assert again.exit_code == 0, again.output
    assert f"removed {scratch} (staging left by a process that no longer runs)" in again.stderr
    assert not scratch.exists() and lock.is_file()
    assert [p.name for p in lock.parent.iterdir() if p.name.startswith(".")] == []
