"""The locked torch wheel's architecture list, read on its index with HTTP range requests (kdkit.lock.wheelarch)
and used by `kdkit check`, against a real HTTP server on 127.0.0.1.

The wheels are real zips in the layout of torch's: many members, CUDAConfig.h deflated near the start,
a large stored library after it (so a whole download would show in the bytes served), the dist-info
last. The server counts the bytes it writes.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import zipfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from kdkit.core.lockfile import Lock, parse_lock
from kdkit.lock.fetch import Network
from kdkit.lock.wheelarch import CUDA_MEMBER, read_locked_wheel, read_wheel_arch
from kdkit.lock.zipindex import MAX_TAIL
from tests.conftest import invoke
from tests.localindex import cuda_config_h, python_tag

PADDING = 40 << 20  # the stored "library": what a whole download would bring
# not what the pairings say of 2.13 cu130 (sm_75 ... sm_120): the wheel decides
ARCHES = ("sm_80", "sm_90")


def build_wheel(path: Path, arches: Sequence[str] = ARCHES, *, members: int = 2000,
                padding: int = PADDING,
                zip64: bool = False) -> Path:
    """A torch-like wheel: ``members`` small modules, the header, a stored padding library, the dist-info."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for number in range(members):
            archive.writestr(f"torch/_mod{number}.py", f"X = {number}\n" * 20)
        archive.writestr(CUDA_MEMBER, cuda_config_h(arches))
        info = zipfile.ZipInfo("torch/lib/libtorch_cuda.so", (1980, 1, 1, 0, 0, 0))
        # stored: its bytes are the file's
        with archive.open(info, "w", force_zip64=zip64) as handle:
            for _ in range(padding >> 20):
                handle.write(b"\x7fELF" + bytes((1 << 20) - 4))
        archive.writestr("torch-2.13.0+cu130.dist-info/RECORD", "torch/__init__.py,,\n" * 50)
    return path


@dataclass
class Server:
    """A file server on 127.0.0.1: Range honoured (206) or ignored (200), the bytes it wrote counted."""

    files: dict[str, bytes]
    honour_range: bool = True
    cut_short: bool = False  # announce the range's length, send half of it, close
    written: int = 0
    ranges: list[str] = field(default_factory=list)
    url: str = ""
    # path -> the Authorization values seen
    authorizations: dict[str, list[str]] = field(default_factory=dict)

    def handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                body = server.files.get(self.path.split("?")[0])
                server.authorizations.setdefault(self.path, []).append(
                    self.headers.get("Authorization", ""))
                if body is None:
                    self.send_error(404)
                    return
                server.ranges.append(self.headers.get("Range", ""))
                server.send(self, body)

        return Handler

    def send(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        asked = re.fullmatch(r"bytes=(\d*)-(\d*)", handler.headers.get("Range", ""))
        if asked and self.honour_range:
            first = len(body) - int(asked[2]) if not asked[1] else int(asked[1])
            last = len(body) - 1 if not asked[1] or not asked[2] else min(
                int(asked[2]), len(body) - 1)
            first = max(first, 0)
            handler.send_response(206)
            handler.send_header("Content-Range", f"bytes {first}-{last}/{len(body)}")
            part = body[first:last + 1]
        else:
            handler.send_response(200)
            part = body
        handler.send_header("Content-Length", str(len(part)))
        handler.end_headers()
        part = part[:len(part) // 2] if self.cut_short else part
        try:
            for at in range(0, len(part), 1 << 16):
                handler.wfile.write(part[at:at + (1 << 16)])
                self.written += len(part[at:at + (1 << 16)])
        except (BrokenPipeError, ConnectionResetError):
            return
        if self.cut_short:
            handler.close_connection = True


@contextmanager
def serving(server: Server) -> Iterator[Server]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), server.handler())
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    server.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        yield server
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return build_wheel(tmp_path_factory.mktemp("wheel") / "torch.whl").read_bytes()


def test_reads_the_header_with_a_few_range_requests(wheel: bytes) -> None:
    with serving(Server({"/torch.whl": wheel})) as server:
        reading = read_wheel_arch(f"{server.url}/torch.whl", Network(timeout=5))
    assert reading.arch_list == ARCHES, reading.reason
    assert reading.requests == 3 and server.ranges[0] == f"bytes=-{MAX_TAIL}"
    assert all(r.startswith("bytes=") for r in server.ranges)
    assert reading.received == server.written < 200_000 < len(wheel) // 100
    assert re.fullmatch(r"the locked wheel torch\.whl \(3 range requests, \d+ kB\)",
                        reading.where())


def test_a_zip64_archive(tmp_path: Path) -> None:
    """Over 65535 members: zipfile writes the ZIP64 end record and its locator."""
    data = build_wheel(tmp_path / "big.whl", ("sm_120",), members=66_000,
                       padding=1 << 20, zip64=True).read_bytes()
    assert b"PK\x06\x06" in data[-200:] and b"PK\x06\x07" in data[-200:]
    with serving(Server({"/big.whl": data})) as server:
        reading = read_wheel_arch(f"{server.url}/big.whl", Network(timeout=5))
    assert reading.arch_list == ("sm_120",), reading.reason
    assert reading.received < len(data)


def test_a_server_that_ignores_range_is_left_unread(wheel: bytes) -> None:
    with serving(Server({"/torch.whl": wheel}, honour_range=False)) as server:
        reading = read_wheel_arch(f"{server.url}/torch.whl", Network(timeout=5))
    assert reading.arch_list is None
    assert "ignores Range (HTTP 200 instead of 206 Partial Content); the wheel was not downloaded" in reading.reason
    assert reading.received == 0 and reading.requests == 1
    assert server.written < len(wheel) // 2  # the connection closed after the headers


@pytest.mark.parametrize(("body", "cut", "reason"), [
    (b"<html>not a wheel</html>"
     * 100, False, "no end-of-central-directory record: not a zip file"),
    (b"junk" * 10 + b"PK\x05\x06" + bytes(4) + b"\x01\x00\x01\x00" + (30).to_bytes(4, "little")
     + bytes(6), False,
     "torch.whl: the central directory is damaged at byte 0"),
    (None, True, "torch.whl: the answer ended after 32817 of 65634 bytes"),
])
def test_garbage_and_truncated_answers_fall_back(wheel: bytes, body: bytes | None,
                                                 cut: bool, reason: str) -> None:
    with serving(
        Server({"/torch.whl": body if body is not None else wheel}, cut_short=cut)) as server:
        reading = read_wheel_arch(f"{server.url}/torch.whl", Network(timeout=5))
    assert reading.arch_list is None and reason in reading.reason, reading.reason


def test_a_wheel_without_the_header(tmp_path: Path) -> None:
    path = tmp_path / "cpu.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("torch/__init__.py", "")
    with serving(Server({"/cpu.whl": path.read_bytes()})) as server:
        reading = read_wheel_arch(f"{server.url}/cpu.whl", Network(timeout=5))
    assert reading.reason == f"cpu.whl: the wheel has no {CUDA_MEMBER}"


# ---------------------------------------------------------------- the lock's wheel on its index


def _index(wheel: bytes, python: str, digest: str | None = None) -> tuple[str, dict[str, bytes]]:
    name = f"torch-2.13.0+cu130-{python_tag(python)}-{python_tag(python)}-manylinux_2_28_x86_64.whl"
    sha = digest or hashlib.sha256(wheel).hexdigest()
    page = (
        '<html><body><a '
        f'href="../../files/{name.replace("+", "%2B")}#sha256={sha}">{name}</a></body></html>')
    return name, {"/simple/torch/": page.encode(), f"/files/{name.replace('+', '%2B')}": wheel}


def write_lock(project: Path, index: str, digest: str) -> Path:
    path = project / "requirements" / "cuda.txt"
    path.write_text("\n".join(["# kdkit: backend = cuda", "# kdkit: platform = linux-x86_64",
                               f"--index-url {index}",
                               "torch==2.13.0+cu130 \\", f"    --hash=sha256:{digest}"])
                    + "\n", encoding="utf-8")
    return path


def _python(project: Path) -> str:
    return str(json.loads((project / "kdkit.json").read_text(encoding="utf-8"))["python"])


def test_a_hash_the_page_does_not_list(project: Path, wheel: bytes) -> None:
    python = _python(project)
    _name, files = _index(wheel, python, digest="cd" * 32)
    with serving(Server(files)) as server:
        lock = write_lock(project, f"{server.url}/simple", hashlib.sha256(wheel).hexdigest())
        reading = read_locked_wheel(parse_lock(lock), python, "cu130", Network(timeout=5))
    assert reading.arch_list is None
    assert reading.reason == (f"{server.url}/simple/torch/ lists no torch wheel with the lock's "
                              f"sha256 for Python {python} on linux x86_64")
    assert server.ranges == [""]  # the page only


def _check(project: Path, gpu: str, *args: str) -> tuple[int, dict[str, Any]]:
    result = invoke("check", project, "--gpu", gpu, "--json", *args)
    return result.exit_code, {p["name"]: p for p in json.loads(result.stdout)["points"]}


def test_check_reads_the_locked_wheel(project: Path, wheel: bytes,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KDKIT_OFFLINE")
    name, files = _index(wheel, _python(project))
    with serving(Server(files)) as server:
        write_lock(project, f"{server.url}/simple", hashlib.sha256(wheel).hexdigest())
        code, points = _check(project, "A100 SXM4 80GB")
        assert code == 0 and points["kernels"]["source"] == "wheel", points["kernels"]
        assert points["kernels"]["why"].startswith(
            "torch 2.13.0+cu130 carries cubin sm_80, which runs on sm_80 (read from the locked "
            f"wheel {name} (3 range requests, ")
        # The pairings say 2.13 cu130 carries sm_120; this wheel does not, and the wheel decides.
        code, points = _check(project, "RTX 5090")
        assert code == 1 and points["kernels"]["verdict"] == "fail" and points["kernels"]["source"] == "wheel"
        assert "torch 2.13.0+cu130 carries sm_80, sm_90 (read from the locked wheel" in points["kernels"]["why"]
        assert server.written < len(wheel) // 50
        code, points = _check(project, "RTX 5090", "--offline")
    assert code == 0 and points["kernels"]["source"] == "facts"
    # offline is the user's choice: the source says it
    assert "locked wheel" not in points["kernels"]["why"]
    assert points["cpu"]["source"] is None  # only the kernels point names its evidence


def test_check_without_the_index_takes_the_pairings(project: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KDKIT_OFFLINE")
    with serving(Server({})) as server:
        closed = server.url  # nothing listens there once the block ends
    write_lock(project, f"{closed}/simple", "ab" * 32)
    code, points = _check(project, "RTX 5090")
    kernels = points["kernels"]
    assert code == 0 and kernels["verdict"] == "ok" and kernels["source"] == "facts"
    assert kernels["why"].startswith(
        "torch 2.13.0+cu130 carries cubin sm_120, which runs on sm_120 (pairings:")
    assert kernels["why"].endswith(f"; the locked wheel was not read ({closed}/simple/torch/: "
                                      "connection refused), so this is the pairings' answer")


def test_a_rocm_wheel_is_not_read_and_says_why(tmp_path: Path) -> None:
    reading = read_locked_wheel(Lock(tmp_path / "none.txt", {}, {}, [], {}), "3.11", "rocm7.2")
    assert reading.arch_list is None and reading.requests == 0
    assert reading.reason == ("a rocm7.2 wheel lists its targets only inside "
                              "torch/lib/libtorch_python.so; kdkit reads the header of CUDA wheels "
                              "only")


# ---------------------------------------------------------------- hostile review: URLs, labels, credentials, tokens


@pytest.mark.parametrize("option", ["--index-url", "--extra-index-url"])
def test_a_malformed_index_url_is_a_reason_not_a_traceback(project: Path, option: str) -> None:
    lock = project / "requirements" / "cuda.txt"
    lock.write_text("\n".join(["# kdkit: backend = cuda", "# kdkit: platform = linux-x86_64",
                                f"{option} http://[::1/simple", "torch==2.13.0+cu130 \\",
                                f"    --hash=sha256:{'ab' * 32}"]) + "\n", encoding="utf-8")
    reading = read_locked_wheel(parse_lock(lock), _python(project), "cu130", Network(timeout=5))
    assert reading.arch_list is None
    assert reading.reason == "http://[::1/simple is not a URL kdkit can read (Invalid IPv6 URL)"


def test_a_malformed_href_on_the_page_is_a_reason(project: Path, wheel: bytes) -> None:
    python = _python(project)
    page = b'<a href="http://[::1/torch-2.13.0+cu130-cp311-cp311-manylinux_2_28_x86_64.whl">x</a>'
    with serving(Server({"/simple/torch/": page})) as server:
        lock = write_lock(project, f"{server.url}/simple", hashlib.sha256(wheel).hexdigest())
        reading = read_locked_wheel(parse_lock(lock), python, "cu130", Network(timeout=5))
    assert reading.arch_list is None and "is not a URL kdkit can read (Invalid IPv6 URL)" in reading.reason


def test_a_labelled_pin_with_the_plain_wheels_hashes_is_not_read(
    project: Path, wheel: bytes) -> None:
    python = _python(project)
    tag = python_tag(python)
    plain = f"torch-2.13.0-{tag}-{tag}-manylinux_2_28_x86_64.whl"
    sha = hashlib.sha256(wheel).hexdigest()
    page = f'<a href="../../files/{plain}#sha256={sha}">{plain}</a>'.encode()
    with serving(Server({"/simple/torch/": page, f"/files/{plain}": wheel})) as server:
        lock = write_lock(project, f"{server.url}/simple", sha)
        lock.write_text(
            lock.read_text(encoding="utf-8").replace("+cu130", "+cu126"), encoding="utf-8")
        reading = read_locked_wheel(parse_lock(lock), python, "cu126", Network(timeout=5))
    assert reading.arch_list is None and reading.requests == 0
    assert reading.reason == (f"the index file with the locked hash is {plain}, not torch "
                              "2.13.0+cu126: the lock's pin and hashes disagree")


def test_the_index_credentials_go_to_its_own_host_only(project: Path, wheel: bytes) -> None:
    python = _python(project)
    name, files = _index(wheel, python)
    with serving(Server(files)) as server:
        authed = server.url.replace("http://", "http://alice:pw@")
        lock = write_lock(project, f"{authed}/simple", hashlib.sha256(wheel).hexdigest())
        reading = read_locked_wheel(parse_lock(lock), python, "cu130", Network(timeout=5))
        seen = dict(server.authorizations)
    assert reading.arch_list == ARCHES, reading.reason
    basic = "Basic " + base64.b64encode(b"alice:pw").decode()
    wheel_path = f"/files/{name.replace('+', '%2B')}"
    assert seen["/simple/torch/"] == [basic] and seen[wheel_path] == [basic] * 3
    # another host (localhost is not 127.0.0.1 by name): no credentials go there
    other = _index(wheel, python)[1]
    with serving(
        Server({"/files/" + name.replace("+", "%2B"): wheel})) as far, serving(
            Server(other)) as near:
        page = (
            f'<a href="{far.url}/files/{name.replace("+", "%2B")}#sha256={hashlib.sha256(wheel).hexdigest()}">x</a>')
        near.files["/simple/torch/"] = page.encode()
        authed = near.url.replace("http://", "http://alice:pw@")
        lock = write_lock(project, f"{authed}/simple", hashlib.sha256(wheel).hexdigest())
        reading = read_locked_wheel(parse_lock(lock), python, "cu130", Network(timeout=5))
        assert reading.arch_list is not None, reading.reason
        assert near.authorizations["/simple/torch/"] == [basic]
        assert set(far.authorizations[wheel_path]) == {""}
    assert "pw" not in reading.reason


def test_a_token_in_the_index_query_is_not_printed(project: Path, wheel: bytes) -> None:
    python = _python(project)
    with serving(Server({})) as server:
        lock = write_lock(project, f"{server.url}/simple?token=s3cr3tvalue",
                          hashlib.sha256(wheel).hexdigest())
        reading = read_locked_wheel(parse_lock(lock), python, "cu130", Network(timeout=5))
        asked = list(server.authorizations)
    # the page on the path, the query kept after it
    assert asked == ["/simple/torch/?token=s3cr3tvalue"]
    assert "s3cr3tvalue" not in reading.reason
    assert reading.reason.startswith(f"{server.url}/simple/torch/?<redacted> lists no torch wheel")
    with serving(Server({})) as closed:
        gone = closed.url  # nothing listens there once the block ends
    lock = write_lock(project, f"{gone}/simple?token=s3cr3tvalue",
                      hashlib.sha256(wheel).hexdigest())
    reading = read_locked_wheel(parse_lock(lock), python, "cu130", Network(timeout=5))
    assert reading.reason == f"{gone}/simple/torch/?<redacted>: connection refused"
