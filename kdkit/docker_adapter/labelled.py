"""kdkit's containers found by their labels (``kdkit status``, ``wait``, ``logs``), answered fast:
over the engine's unix socket, one HTTP/1.0 request written by hand (no SDK, no http.client: ``kdkit
status`` answers within its budget), through the SDK when DOCKER_HOST names another transport.
Re-exported by
:mod:`kdkit.docker_adapter`.
"""

from __future__ import annotations

import json
import os
import re
import socket
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

SOCKET = "/var/run/docker.sock"
EXITED = re.compile(r"^Exited \((?P<code>-?\d+)\)")
TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Labelled:
    """A container as the engine lists it."""

    id: str
    name: str
    state: str  # created, running, exited, dead...
    status: str  # the engine's words: "Up 3 minutes", "Exited (0) 2 seconds ago"
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def exit_code(self) -> int | None:
        match = EXITED.match(self.status)
        return int(match.group("code")) if match else None

    @property
    def ended(self) -> bool:
        return self.state in ("exited", "dead")


def _socket_path() -> str | None:
    """The engine's unix socket, or None when DOCKER_HOST names another transport (tcp, ssh)."""
    host = os.environ.get("DOCKER_HOST", "")
    if not host:
        return SOCKET
    return host[len("unix://"):] if host.startswith("unix://") else None


def _quoted(text: str) -> str:
    """Percent-encoding of a query value (urllib.parse.quote's, without importing it)."""
    keep = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~"
    return "".join(chr(b) if b in keep else f"%{b:02X}" for b in text.encode("utf-8"))


def _get(path: str, target: str) -> tuple[int, bytes]:
    """One HTTP/1.0 GET over the unix socket ``path`` (the engine closes the connection after its
    answer, so the body is everything after the headers); (status, body)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(TIMEOUT_S)
        sock.connect(path)
        sock.sendall(f"GET {target} HTTP/1.0\r\nHost: docker\r\n\r\n".encode("ascii"))
        chunks = []
        while chunk := sock.recv(1 << 16):
            chunks.append(chunk)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].split()
    if len(status_line) < 2 or not status_line[1].isdigit():
        raise ValueError("not an HTTP answer")
    return int(status_line[1]), body


def _listed(rows: list[Mapping[str, Any]]) -> list[Labelled]:
    return [Labelled(str(row.get("Id", "")), str((row.get("Names") or ["/"])[0]).lstrip("/"),
                     str(row.get("State", "")), str(row.get("Status", "")),
                     dict(row.get("Labels") or {}))
            for row in rows]


def labelled_containers(labels: dict[str, str]) -> list[Labelled] | None:
    """Every container (running or ended) carrying all of ``labels``; None when no engine
    answers."""
    filters = json.dumps({"label": [f"{key}={value}" for key, value in labels.items()]})
    path = _socket_path()
    if path is None:
        return _through_sdk(filters)
    try:
        status, body = _get(path, "/containers/json?all=1&filters=" + _quoted(filters))
        rows = json.loads(body) if status == 200 else None
    except (OSError, ValueError):
        return None
    return _listed(rows) if isinstance(rows, list) else None


def _through_sdk(filters: str) -> list[Labelled] | None:
    import docker

    try:
        rows = docker.from_env(timeout=TIMEOUT_S).api.containers(
            all=True, filters=json.loads(filters))
    # no engine answering (the SDK's and requests' errors alike): no containers known
    except Exception:
        return None
    return _listed(rows)
