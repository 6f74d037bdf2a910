"""A build's pip failure says its first real cause (kdkit.image.pipcause), read from real pip runs: one against a
local HTTPS index whose certificate nothing trusts (what a TLS-intercepting proxy looks like without its CA), one
against a port where nothing listens. pip ends both with `Could not find a version`, which names neither."""

from __future__ import annotations

import http.server
import os
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from kdkit.image.pipcause import first_cause


def _pip_download(index: str, tmp_path: Path, retries: int = 0) -> list[str]:
    """pip's output; with ``retries`` 0 a refused connection is not even mentioned (pip's default is 5)."""
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INPUT": "1"}
    env.pop("PIP_FIND_LINKS", None)
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--retries",
                           str(retries),
                           "--timeout", "5", "--dest", str(tmp_path / "dl"),
                           "--index-url", index, "filelock==3.0"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode != 0
    lines = (done.stdout + done.stderr).splitlines()
    # what the old message showed
    assert any("Could not find a version" in line for line in lines), lines
    return lines


@pytest.fixture
def untrusted_index(tmp_path: Path) -> Iterator[str]:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out",
                    str(cert), "-days", "1", "-subj", "/CN=127.0.0.1"], check=True,
                   capture_output=True, timeout=120)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}/simple"
    finally:
        server.shutdown()


def test_a_certificate_pip_cannot_verify_is_named_with_ca_bundle(
    untrusted_index: str, tmp_path: Path) -> None:
    cause = first_cause(_pip_download(untrusted_index, tmp_path))
    assert cause is not None and cause.startswith(
        "pip inside the build could not verify the index's TLS certificate "
        f"(CERTIFICATE_VERIFY_FAILED: a TLS-intercepting proxy?) ({untrusted_index}/filelock/)")
    assert "--ca-bundle FILE" in cause and "--wheelhouse DIR" in cause


def test_an_index_nothing_answers_on_is_named_as_unreachable(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed when the block ends: nothing listens there
    cause = first_cause(_pip_download(f"http://127.0.0.1:{port}/simple", tmp_path, retries=1))
    assert cause == ("pip inside the build could not reach its index (Failed to establish a new "
                     "connection); check the network the build uses (--network host), or build "
                     "offline with --wheelhouse DIR (kdkit wheelhouse)")


def test_a_transcript_without_such_a_line_keeps_the_first_error() -> None:
    assert first_cause(
        ["Step 11/31 : RUN pip install", "ERROR: Could not find a version that satisfies"]) is None
