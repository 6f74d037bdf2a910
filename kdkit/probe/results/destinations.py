"""Where a copy goes: a local folder, ``[user@]host:path`` over SSH, or an rclone remote
``remote:path``.

The rule, in order (``kdkit copy-out --help`` says it too):

1. a DEST that starts with ``/``, ``./``, ``../`` or ``~``, or has no ``:``, or has a ``/`` before
   its first ``:`` is a local folder (``./a:b`` stays local);
2. an ``@`` before the first ``:`` is SSH (``user@host:path``);
3. ``name:path`` where ``name`` is one of the rclone config's remotes (``rclone listremotes``; the
   config is ``--rclone-config``, else RCLONE_CONFIG, else rclone's own default) is rclone;
4. anything else ``host:path`` is SSH (a host of ~/.ssh/config, or a name the resolver knows).

An empty path after ``:`` is the login folder (SSH) or the remote's root (rclone); ``~/`` before an
SSH path is dropped (ssh starts in the login folder), ``~user`` is refused. Refused without echo
(each may hold a secret): ``user:password@host:path``, rclone's on-the-fly
``:backend,options:path``, a URL, a control character. Standard library only.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from kdkit.core import proc
from kdkit.core.errors import BadInput, KdkitError
from kdkit.core.projectfiles import CONTROL_CHARACTER
from kdkit.core.safetext import printable

LOCAL, SSH, RCLONE = "local", "ssh", "rclone"
STAGING_SUFFIX = ".kdkit-partial"
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_PASSWORD = re.compile(r"[^/@:]+:[^/@]*@")  # user:pass@host:path


def staging_name(name: str) -> str:
    """The folder a copy of ``name`` is made in before it is verified: a hidden name only kdkit
    makes."""
    return f".{name}{STAGING_SUFFIX}"


@dataclass(frozen=True)
class Place:
    """A destination folder: ``kind`` local (``path`` a local path), ssh (``host`` is [user@]host)
    or rclone (``host`` the remote's name). ``rclone_config`` is the config file rclone is told to
    read, if any."""

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
        """(the folder holding this place, its last name): ``host:a/b/ID`` -> (``host:a/b``,
        ``ID``)."""
        stripped = self.path.rstrip("/")
        head, _, name = stripped.rpartition("/")
        if not name:
            raise BadInput(f"{self}: names no folder; give PLACE as DEST/<run-id>")
        parent = head if head or not stripped.startswith("/") else "/"
        return Place(self.kind, parent, self.host, self.rclone_config), name


def rclone_remotes(config: str | None) -> frozenset[str]:
    """The names of the rclone config's remotes (without the ':'); empty when rclone is absent or
    has none."""
    try:
        done = proc.run(["rclone", *config_args(config), "listremotes"], timeout=30)
    except KdkitError:
        return frozenset()
    return frozenset(line.strip().rstrip(":") for line in done.stdout.splitlines()
                     if line.strip()) if done.ok \
        else frozenset()


def config_args(config: str | None) -> list[str]:
    return ["--config", config] if config else []


def parse_place(text: str, rclone_config: str | None = None) -> Place:
    """The destination ``text`` names, by the rule of the module's docstring; BadInput when it is
    empty, holds a password, a control character or a URL, or its host would read as an option (a
    secret is never echoed)."""
    if not text.strip():
        raise BadInput(f"DEST {text!r}: empty; name the folder that receives the copy")
    # a local path: no shell, no remote; messages escape it
    if text.startswith(("/", "./", "../", "~")):
        return Place(LOCAL, text)
    _refuse_unsafe(text)
    if rclone_config and not os.path.isfile(rclone_config):
        raise BadInput(
            f"--rclone-config {printable(rclone_config)}: not found; name an existing rclone "
            "config file")
    config = rclone_config or os.environ.get("RCLONE_CONFIG") or None
    head, colon, rest = text.partition(":")
    if text.startswith(("/", "./", "../", "~")) or not colon or "/" in head:
        return Place(LOCAL, text)
    if head.startswith("-") or any(c.isspace() for c in head):
        raise BadInput(f"DEST {printable(text)!r}: the host {printable(head)!r} is not a host "
                       "name; write user@host:path")
    if "@" not in head and head in rclone_remotes(config):
        return Place(RCLONE, rest, head, config)
    return Place(SSH, _ssh_path(rest), head)


def _refuse_unsafe(text: str) -> None:
    """DEST forms refused before anything is run; none of them is echoed (each may hold a
    secret)."""
    if CONTROL_CHARACTER.search(text):
        raise BadInput(
            "DEST: holds a control character (a newline?); give the destination on one line")
    if text.startswith(":"):
        raise BadInput("DEST: an rclone on-the-fly remote (':backend,options:path') is not taken "
                       "(it may hold secrets); name a remote of your rclone config: remote:path")
    if _URL.match(text):
        raise BadInput(
            "DEST: a URL is not a destination; use user@host:path or an rclone remote:path")
    if _PASSWORD.match(text):
        raise BadInput("DEST: a password in DEST is never used; use an SSH key: user@host:path")


def _ssh_path(path: str) -> str:
    """An SSH path as the remote shell gets it: ``~/x`` is ``x`` (ssh starts in the home folder)."""
    if path == "~" or path.startswith("~/"):
        return path[2:]
    if path.startswith("~"):
        raise BadInput("DEST: '~user' paths are not expanded over SSH; write the folder's full "
                       "path (user@host:/home/user/path)")
    return path
