"""pip's configuration as a lock reads it: the user's effective pip options, the index pip uses
when nothing is configured (asked of pip itself), and the local folder of torch wheels that
replaces the torch index (``--torch-find-links`` or ``KDKIT_TORCH_FIND_LINKS``).

:mod:`kdkit.lock.lock` hands these to the preflight, the resolver and the lock's provenance.
"""

from __future__ import annotations

import os
import re
import sys
from functools import lru_cache
from pathlib import Path

from kdkit.core import proc
from kdkit.core.errors import BadInput

TORCH_FIND_LINKS_ENV = "KDKIT_TORCH_FIND_LINKS"


def pip_configuration(python: str = sys.executable) -> dict[str, str]:
    """The user's effective pip options (``pip config list``): environment over install over
    global."""
    done = proc.run([python, "-m", "pip", "config", "list"], timeout=60)
    ranks = {":env:": 3, "install": 2, "global": 1}
    best: dict[str, tuple[int, str]] = {}
    for line in done.stdout.splitlines():
        match = re.match(r"^(?P<scope>[^.]+)\.(?P<key>[\w-]+)=(?P<value>.*)$", line.strip())
        if match is None or match.group("scope") not in ranks:
            continue
        rank, value = ranks[match.group("scope")], match.group("value").strip("'\"")
        if rank >= best.get(match.group("key"), (0, ""))[0]:
            best[match.group("key")] = (rank, value)
    config = {key: value for key, (_rank, value) in best.items()}
    if "index-url" not in config:
        config["index-url"] = pip_default_index(python)
    return config


def pip_default_index(python: str = sys.executable) -> str:
    """The index pip uses when nothing is configured, asked of pip itself (kdkit names no host)."""
    return _default_index(python)  # one cache entry per interpreter, however the caller passes it


@lru_cache(maxsize=4)
def _default_index(python: str) -> str:
    done = proc.run([
        python, "-c", "from pip._internal.models.index import PyPI; print(PyPI.simple_url)"],
                    timeout=60)
    return done.stdout.strip() if done.ok else ""


def torch_find_links(option: Path | None) -> Path | None:
    """The local folder replacing the torch index, from the option or KDKIT_TORCH_FIND_LINKS."""
    chosen = option or (Path(os.environ[TORCH_FIND_LINKS_ENV])
                        if os.environ.get(TORCH_FIND_LINKS_ENV) else None)
    if chosen is not None and not chosen.is_dir():
        raise BadInput(
            f"--torch-find-links {chosen}: not a folder; give the folder holding the torch wheels")
    return chosen.resolve() if chosen else None
