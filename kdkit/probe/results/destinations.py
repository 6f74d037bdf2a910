"""Where a copy goes: a local folder, ``[user@]host:path`` over SSH, or an rclone remote ``remote:path``.

The rule, in order (``kdkit copy-out --help`` says it too):

1. a DEST that starts with ``/``, ``./``, ``../`` or ``~``, or has no ``:``, or has a ``/`` before its first ``:``
   is a local folder (``./a:b`` stays local);
2. an ``@`` before the first ``:`` is SSH (``user@host:path``);
3. ``name:path`` where ``name`` is one of the rclone config's remotes (``rclone listremotes``; the config is
   ``--rclone-config``, else RCLONE_CONFIG, else rclone's own default) is rclone;
4. anything else ``host:path`` is SSH (a host of ~/.ssh/config, or a name the resolver knows).

An empty path after ``:`` is the login folder (SSH) or the remote's root (rclone). Standard library only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from kdkit.core import proc
from kdkit.core.errors import BadInput, KdkitError

LOCAL, SSH, RCLONE = "local", "ssh", "rclone"


@dataclass(frozen=True)
class Place:
    """A destination folder: ``kind`` local (``path`` a local path), ssh (``host`` is [user@]host) or rclone
    (``host`` the remote's name). ``rclone_config`` is the config file rclone is told to read, if any."""

    kind: str
    path: str
    host: str = ""
    rclone_config: str | None = None

    def __str__(self) -> str:
        return self.path if self.kind == LOCAL else f"{self.host}:{self.path}"

    def child(self, name: str) -> Place:
        """The place ``name`` inside this one (``DEST/<run-id>``)."""
        if self.kind == LOCAL:
            return Place(LOCAL, str(Path(self.path) / name))
        base = self.path.rstrip("/")
        joined = f"{base}/{name}" if base or self.path.startswith("/") else name
        return Place(self.kind, joined, self.host, self.rclone_config)

    def parent_and_name(self) -> tuple[Place, str]:
        """(the folder holding this place, its last name): ``host:a/b/ID`` -> (``host:a/b``, ``ID``)."""
        stripped = self.path.rstrip("/")
        head, _, name = stripped.rpartition("/")
        if not name:
            raise BadInput(f"{self}: names no folder; give PLACE as DEST/<run-id>")
        parent = head if head or not stripped.startswith("/") else "/"
        return Place(self.kind, parent, self.host, self.rclone_config), name


def rclone_remotes(config: str | None) -> frozenset[str]:
    """The names of the rclone config's remotes (without the ':'); empty when rclone is absent or has none."""
    try:
        done = proc.run(["rclone", *config_args(config), "listremotes"], timeout=30)
    except KdkitError:
        return frozenset()
    return frozenset(line.strip().rstrip(":") for line in done.stdout.splitlines() if line.strip()) if done.ok \
        else frozenset()


def config_args(config: str | None) -> list[str]:
    return ["--config", config] if config else []


def parse_place(text: str, rclone_config: str | None = None) -> Place:
    """The destination ``text`` names, by the rule of the module's docstring; BadInput when it is empty or its
    host would read as an option."""
    if not text.strip():
        raise BadInput(f"DEST {text!r}: empty; name the folder that receives the copy")
    config = rclone_config or os.environ.get("RCLONE_CONFIG") or None
    head, colon, rest = text.partition(":")
    if text.startswith(("/", "./", "../", "~")) or not colon or "/" in head or not head:
        return Place(LOCAL, text)
    if head.startswith("-") or any(c.isspace() for c in head):
        raise BadInput(f"DEST {text!r}: the host {head!r} is not a host name; write user@host:path")
    if "@" in head:
        return Place(SSH, rest, head)
    if head in rclone_remotes(config):
        return Place(RCLONE, rest, head, config)
    return Place(SSH, rest, head)
