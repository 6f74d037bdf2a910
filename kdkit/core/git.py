"""Reading a git checkout, with the standard library only: one way to ask git, and what the host
asks of it (an image's revision and source, a bundle's committed state)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from kdkit.core import proc
from kdkit.core.errors import Unavailable

if TYPE_CHECKING:
    from typing import TypedDict

    class CodeState(TypedDict):
        """A run's code revision: the commit, whether the tree had changes, why git could not
        tell."""

        revision: str | None
        dirty: bool | None
        note: str | None


def ask(root: Path, *args: str, timeout: float = 60) -> tuple[str | None, str | None]:
    """(output, None) of ``git -C root ARGS``, whitespace kept (porcelain lines start with a space);
    (None, why) when git is absent, ``root`` is not in a repository, the command fails or it gives
    no answer in ``timeout`` seconds.

    Paths come quoted with octal escapes (``core.quotePath``), so the output is ASCII whatever the
    names hold; :func:`git_path` reads them back.
    """
    try:
        done = proc.run(
            ["git", "-C", str(root), "-c", "core.quotePath=true", *args], timeout=timeout)
    except Unavailable as exc:
        return None, str(exc)  # no git on this host (or no answer): the caller goes on without it
    return (done.stdout, None) if done.ok else (None, done.first_error_line())


def git_output(root: Path, *args: str, timeout: float = 60) -> str | None:
    """The output of ``git -C root ARGS`` (see :func:`ask`); None where git cannot answer."""
    return ask(root, *args, timeout=timeout)[0]


def code_state(root: Path) -> CodeState:
    """The code revision of a run (``revision``, ``dirty``); None with a ``note`` where git cannot
    tell."""
    head, why = ask(root, "rev-parse", "HEAD", timeout=30)
    revision = (head or "").strip()
    if head is None or not re.fullmatch(r"[0-9a-f]{40,64}", revision):
        note = why if head is None else f"unexpected git output {revision[:60]!r}"
        return {"revision": None, "dirty": None, "note": note}
    status, why = ask(root, "status", "--porcelain")
    return {"revision": revision,
            "dirty": bool(status.strip()) if status is not None else None, "note": why}


_GIT_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


def git_path(text: str) -> str:
    """A path as git prints it (C-quoted when unusual) back to the name (non-UTF-8 bytes as
    surrogates)."""
    if len(text) < 2 or text[0] != '"' or text[-1] != '"':
        return text
    body, out, i = text[1:-1], bytearray(), 0
    while i < len(body):
        char = body[i]
        if char == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            if nxt in "01234567":
                out.append(int(body[i + 1:i + 4], 8) & 0xFF)
                i += 4
                continue
            out.append(_GIT_ESCAPES.get(nxt, ord(nxt)))
            i += 2
            continue
        out += char.encode("utf-8")
        i += 1
    return out.decode("utf-8", errors="surrogateescape")


def public_url(url: str) -> str:
    """A remote URL without credentials (``https://token@host/x`` -> ``https://host/x``)."""
    parts = urlsplit(url)
    if parts.scheme and "@" in parts.netloc:
        return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
    return url


def provenance(root: Path) -> tuple[str, str]:
    """(revision, source) of the checkout holding ``root``; ("unknown", "") outside one. The
    revision ends in ``-dirty`` when the tree has uncommitted changes; the source carries no
    credentials."""
    revision = (git_output(root, "describe", "--always", "--dirty", "--abbrev=40", "--match=NeVeR")
                or "").strip()
    source = (git_output(root, "config", "--get", "remote.origin.url") or "").strip()
    return revision or "unknown", public_url(source)


def checkout_state(root: Path) -> dict[str, Any] | None:
    """Revision, source, ``prefix`` (``root`` inside the repository) and uncommitted paths (relative
    to ``root``) of the checkout holding ``root``; None outside git."""
    if git_output(root, "rev-parse", "--verify", "--quiet", "HEAD") is None:
        return None
    revision, source = provenance(root)
    prefix = (git_output(root, "rev-parse", "--show-prefix") or "").strip()
    # Porcelain paths are relative to the repository's top, whatever the current folder.
    status = git_output(root, "status", "--porcelain", "--untracked-files=all",
                        "--no-renames", "--", ".") or ""
    paths = [git_path(line[3:]) for line in status.splitlines() if line.strip()]
    return {"revision": revision.removesuffix("-dirty"), "source": source, "prefix": prefix,
            "uncommitted": [p.removeprefix(prefix) for p in paths if p.startswith(prefix)]}
