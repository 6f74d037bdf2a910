"""The build's preflight (kdkit.image.fetchable, issue 31 §1): each locked file is looked for where the build's
pip will look, through the certificate it will trust, before the first layer. Real HTTP servers on 127.0.0.1:
the PEP 503 stand-in of tests/localindex.py, and an HTTPS one whose certificate only its own file trusts."""

from __future__ import annotations

import hashlib
import http.server
import socket
import ssl
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from kdkit.core.errors import BadInput, KdkitError, Unavailable
from kdkit.core.lockfile import Lock, parse_lock_text
from kdkit.image.fetchable import check_fetchable
from kdkit.lock.pages import parse_page
from tests.localindex import Served, torch_index_server

__all__ = ["torch_index_server"]  # the session's index, a fixture

WHEEL = "demo-1.0-py3-none-any.whl"
OFFLINE = "`kdkit wheelhouse P --backend cpu`, then the `kdkit build` line it prints"


def lock_of(tmp_path: Path, text: str) -> tuple[Lock, Path]:
    path = tmp_path / "cpu.txt"
    path.write_text(text, encoding="utf-8")
    return parse_lock_text(text, str(path)), path


def served_torch(served: Served) -> tuple[str, str]:
    """(version, sha256) of the stand-in's CPU torch, read from its page as pip would."""
    page = f"{served.torch_index('cpu')}/torch/"
    with urllib.request.urlopen(page, timeout=60) as response:
        (file, *_rest) = parse_page(response.read().decode(), page)
    assert file.sha256
    return file.filename.split("-")[1].replace("%2B", "+"), file.sha256


def test_a_file_on_the_extra_index_is_found_after_the_first_index_lacks_it(
        torch_index_server: Served, tmp_path: Path) -> None:
    version, digest = served_torch(torch_index_server)
    extra = torch_index_server.torch_index("cpu")
    lock, path = lock_of(tmp_path,
                         f"--index-url {torch_index_server.simple}\n--extra-index-url {extra}\n"
                         f"torch=={version} --hash=sha256:{digest}\n")
    line = check_fetchable(lock, path, None, OFFLINE)
    assert line.startswith("preflight: each of the 1 pins has its file on "
                           f"{torch_index_server.simple}, {torch_index_server.torch_index('cpu')}, "
                           "read through ")
    assert {"/simple/torch/", "/whl/cpu/torch/"} <= set(torch_index_server.requests)


def test_a_hash_no_index_lists_is_named_and_nothing_is_built(
    torch_index_server: Served, tmp_path: Path) -> None:
    version, _digest = served_torch(torch_index_server)
    lock, path = lock_of(tmp_path, f"--index-url {torch_index_server.torch_index('cpu')}\n"
                                   f"torch=={version} --hash=sha256:{'0' * 64}\n")
    with pytest.raises(BadInput) as raised:
        check_fetchable(lock, path, None, OFFLINE)
    assert str(
        raised.value).startswith(f"{path}: 1 of 1 pins have no file on any index the build's pip "
                                        f"will read ({torch_index_server.torch_index('cpu')}): "
                                        f"torch=={version}; nothing was built: lock again")
    assert str(raised.value).endswith(f"or build offline from a wheelhouse instead: {OFFLINE}")


def test_a_closed_port_is_unavailable_and_names_the_way_out(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed when the block ends: nothing listens there
    lock, path = lock_of(tmp_path, f"--index-url http://user:secret@127.0.0.1:{port}/simple\n"
                                   f"demo==1.0 --hash=sha256:{'1' * 64}\n")
    with pytest.raises(Unavailable) as raised:
        check_fetchable(lock, path, None, OFFLINE)
    said = str(raised.value)
    assert said.startswith(
        f"http://127.0.0.1:{port}/simple/demo/ (read as the build's pip will, trusting ")
    assert f"connection refused; nothing was built: build offline from a wheelhouse instead: {OFFLINE}" in said
    assert "secret" not in said


@pytest.fixture
def https_index(tmp_path: Path) -> Iterator[tuple[str, Path, str]]:
    """(index URL, the certificate that alone trusts it, the demo wheel's sha256) of an HTTPS index whose
    pages give no hashes: what a proxy's own certificate looks like to a pip that lacks it."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out",
                    str(cert), "-days", "1", "-subj",
                    "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=120)
    root = tmp_path / "served"
    (root / "simple" / "demo").mkdir(parents=True)
    (root / "simple" / "demo"
     / "index.html").write_text(f'<a href="../../{WHEEL}">{WHEEL}</a>\n', encoding="utf-8")
    (root / WHEEL).write_bytes(b"not really a wheel")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield (f"https://127.0.0.1:{server.server_address[1]}/simple/", cert,
               hashlib.sha256(b"x").hexdigest())
    finally:
        server.shutdown()


def test_a_certificate_the_build_would_not_trust_is_named_with_ca_bundle(
        https_index: tuple[str, Path, str], tmp_path: Path) -> None:
    index, cert, digest = https_index
    lock, path = lock_of(tmp_path, f"--index-url {index}\ndemo==1.0 --hash=sha256:{digest}\n")
    with pytest.raises(Unavailable) as raised:
        # pip's own CA list, as a build without --ca-bundle has
        check_fetchable(lock, path, None, OFFLINE)
    said = str(raised.value)
    assert said.startswith(
        f"{index}demo/ (read as the build's pip will, trusting pip's own CA list")
    assert "TLS certificate not trusted" in said and "pass the proxy's CA with --ca-bundle FILE;" in said
    assert "pip's cert" not in said  # the build's pip reads no pip configuration of this machine
    # With the certificate as --ca-bundle, the page is read; it gives no hashes, so name and version suffice.
    assert check_fetchable(lock, path, cert, OFFLINE) == (
        f"preflight: each of the 1 pins has its file on {index}, read through --ca-bundle {cert}")
    other, other_path = (
        lock_of(tmp_path, f"--index-url {index}\ndemo==1.1 --hash=sha256:{digest}\n"))
    with pytest.raises(BadInput, match=r"1 of 1 pins have no file on any index .*: demo==1\.1;"):
        check_fetchable(other, other_path, cert, OFFLINE)


def test_no_index_and_no_pages_finds_nothing(tmp_path: Path) -> None:
    lock, path = lock_of(tmp_path, f"--no-index\ndemo==1.0 --hash=sha256:{'2' * 64}\n")
    with pytest.raises(BadInput, match=r"will read \(none \(--no-index\)\): demo==1\.0;"):
        check_fetchable(lock, path, None, OFFLINE)


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # closed when the block ends: nothing listens there


def test_what_pip_accepts_the_preflight_accepts(
    https_index: tuple[str, Path, str], tmp_path: Path) -> None:
    """A hostile review's finds, each a build pip would run that the preflight refused: the lock's --trusted-host
    (no certificate check for that host), an index that does not answer while another lists the file (pip skips
    it), a pin hashed with sha512 only, and a --find-links URL naming the file itself (never fetched)."""
    index, _cert, digest = https_index
    trusted = f"--index-url {index}\n--trusted-host 127.0.0.1\n"
    lock, path = lock_of(tmp_path, f"{trusted}demo==1.0 --hash=sha256:{digest}\n")
    first = check_fetchable(lock, path, None, OFFLINE)
    assert first.startswith(f"preflight: each of the 1 pins has its file on {index}")
    port = closed_port()
    lock, path = lock_of(tmp_path,
                         f"--index-url http://127.0.0.1:{port}/simple\n--extra-index-url {index}\n"
                         f"--trusted-host 127.0.0.1\ndemo==1.0 --hash=sha256:{digest}\n")
    line = check_fetchable(lock, path, None, OFFLINE)
    assert line.startswith(f"preflight: each of the 1 pins has its file on {index}, read through ")
    assert line.endswith(f"; not read: http://127.0.0.1:{port}/simple/demo/ (read as the build's "
                         "pip will, trusting pip's own CA list, as the build's pip has no "
                         "--ca-bundle): connection refused")
    lock, path = lock_of(tmp_path, f"{trusted}demo==1.0 --hash=sha512:{'c' * 128}\n")
    assert check_fetchable(lock, path, None, OFFLINE).startswith("preflight: each of the 1 pins")
    direct = f"http://127.0.0.1:{closed_port()}/files/{WHEEL}"
    lock, path = lock_of(tmp_path, f"--no-index\n-f {direct}\ndemo==1.0 --hash=sha256:{digest}\n")
    assert check_fetchable(lock,
                           path, None,
                           OFFLINE) == (f"preflight: each of the 1 pins has its file on {direct}, "
                                                          "read through pip's own CA list, as the "
                                                          "build's pip has no --ca-bundle")


@pytest.mark.parametrize("password", ["pa/ssW0rdXY", "se#cretW0rdXY", "se?cretW0rdXY"])
def test_a_password_no_url_parser_splits_right_is_never_shown(
    password: str, tmp_path: Path) -> None:
    lock, path = lock_of(tmp_path,
                         f"--index-url http://user:{password}@127.0.0.1:{closed_port()}/simple/\n"
                         f"demo==1.0 --hash=sha256:{'3' * 64}\n")
    with pytest.raises(KdkitError) as raised:
        check_fetchable(lock, path, None, OFFLINE)
    assert "W0rdXY" not in str(raised.value) and password[:3] not in str(raised.value).replace(
        str(path), "")


def test_a_malformed_declaration_keeps_the_links_before_it() -> None:
    """html.parser raised AssertionError on `<![ x` (a traceback from kdkit build and kdkit lock)."""
    files = parse_page(f'<a href="{WHEEL}">{WHEEL}</a>\n<![ foo', "http://127.0.0.1/simple/demo/")
    assert [f.filename for f in files] == [WHEEL]


@pytest.mark.slow
def test_finding_pips_ca_list_leaves_torch_compile_working() -> None:
    """Importing pip, or asking the import system for it, in kdkit's process made setuptools' distutils shim
    disable the stdlib's distutils, and torch.compile failed later in that process (seen in the full suite: a
    build's preflight, then diagnose --deep in-process)."""
    code = ("from kdkit.image.fetchable import build_trust; import sys; build_trust(None); "
            "assert 'pip' not in sys.modules; import torch\n"
            "def tiny(x):\n    return torch.sin(x) * 2 + x\n"
            "x = torch.linspace(-3, 3, 64); assert torch.allclose(torch.compile(tiny)(x), "
            "tiny(x))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
