"""The installed distributions of an interpreter, as their metadata files say, read without pip and
without importing anything into it: each ``*.dist-info/METADATA`` (or ``.egg-info``) on its
``sys.path``, the PEP 610 ``direct_url.json`` beside it, and torch's build from ``torch/version.py``
read as text. Standard library only, and light: the in-container verify-env reads here at every
start-up (bench/bench_verify_env.py).

``direct_url.json`` is written by pip and uv beside a distribution installed from a URL, a local
file or folder or a VCS checkout, never for an index install:
https://packaging.python.org/en/latest/specifications/direct-url-data-structure/
"""

from __future__ import annotations

import os

from kdkit.core.lockfile import normalize_name
from kdkit.core.record import Record

TYPE_CHECKING = False  # typing is not imported at start-up (kdkit.core.record says why)
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any


class Installed(Record):
    """One installed distribution, as its metadata file says."""

    # the fields in their order
    __slots__ = ("name", "version", "location", "direct_url", "stale", "metadata",  # noqa: RUF023
                 "direct")

    def __init__(self, name: str, version: str, location: str, direct_url: str | None = None,
                 stale: tuple[str, ...] = (), metadata: str = "",
                 direct: dict[str, Any] | None = None) -> None:
        self.name, self.version = name, version
        self.location = location  # the sys.path folder it was found in
        self.direct_url = direct_url  # PEP 610: installed from this URL, not from an index
        self.stale = stale  # other metadata folders of the same name in the same folder
        self.metadata = metadata  # its own metadata folder (or PKG-INFO file)
        self.direct = direct  # its direct_url.json, parsed ({} when unreadable)


def read_direct_url(meta: str) -> tuple[str, dict[str, Any]] | None:
    """A .dist-info's PEP 610 direct_url.json (``meta`` is its METADATA file), when it has one: its
    ``url`` and its parsed content, or the file's own path and ``{}`` when it cannot be read or
    names no url."""
    path = os.path.join(os.path.dirname(meta), "direct_url.json")
    if os.path.basename(meta) != "METADATA" or not os.path.isfile(path):
        return None
    import json  # only for a distribution installed from a URL

    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("url"), str):
        return path, {}
    return data["url"], data


def _metadata_fields(path: str) -> tuple[str, str] | None:
    """Name and Version from the header of a METADATA / PKG-INFO file."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return _name_and_version(handle)
    except OSError:
        return None


def _name_and_version(lines: Iterable[str]) -> tuple[str, str] | None:
    """The Name and Version fields of a metadata header, read up to its first blank line."""
    name = version = None
    for line in lines:
        if not line.strip():
            break  # the header ends at the first blank line
        if line.startswith("Name:"):
            name = line[5:].strip()
        elif line.startswith("Version:"):
            version = line[8:].strip()
        if name and version:
            return name, version
    return None


def _metadata_file(entry: os.DirEntry[str]) -> str | None:
    if entry.name.endswith(".dist-info"):
        return os.path.join(entry.path, "METADATA")
    if entry.name.endswith(".egg-info"):
        return os.path.join(entry.path, "PKG-INFO") if entry.is_dir() else entry.path
    return None


def _second(first: Installed, other: Installed) -> Installed:
    """Two metadata folders of one name. In two folders of sys.path, the first wins, as at import
    time, and the other is not stale but shadowed (a venv made with --system-site-packages sees the
    system's copies after its own; neither pip nor uv reports them). In one folder, whose order is
    the file system's, the newer version wins and the older is stale: what an interrupted upgrade
    left."""
    if other.location != first.location:
        return first
    # two metadata folders of one name: rare
    from kdkit.core.versions import InvalidVersion, Version

    try:
        swap = Version.parse(other.version) > Version.parse(first.version)
    except InvalidVersion:
        swap = False
    if swap:
        return other._replace(stale=(*first.stale, first.metadata))
    return first._replace(stale=(*first.stale, other.metadata))


def read_installed(sys_path: list[str]) -> dict[str, Installed]:
    """Installed distributions by normalized name; the first on sys.path wins, as at import time,
    and the other metadata folders of that name are kept as ``stale``."""
    found: dict[str, Installed] = {}
    for folder in dict.fromkeys(os.path.abspath(entry) for entry in sys_path):  # each folder once
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue  # zip files, missing folders
        for entry in sorted(entries, key=lambda e: e.name):
            meta = _metadata_file(entry)
            fields = _metadata_fields(meta) if meta else None
            if not fields or meta is None:
                continue
            key = normalize_name(fields[0])
            url, direct = read_direct_url(meta) or (None, None)
            have = Installed(fields[0], fields[1], folder, url, (), entry.path, direct)
            found[key] = _second(found[key], have) if key in found else have
    return found


# ---------------------------------------------------------------- torch's build


_TORCH_FIELDS = ("cuda", "hip", "rocm", "__version__")  # rocm: torch 2.9 and later write it


def read_torch_build(location: str) -> dict[str, str | None] | None:
    """``cuda``/``hip``/``__version__`` from torch/version.py, read as text, not imported (nor
    parsed with ast, whose import costs more than the check). The file is generated by torch's build
    (pytorch/pytorch tools/generate_torch_version.py): top-level lines ``__version__ =
    '2.13.0+cu130'``, ``cuda: Optional[str] = '13.0'``, ``hip: Optional[str] = None``. None (the
    build is unknown) when the file cannot be read, has no ``__version__``, or gives one of these a
    value other than a plain string or None."""
    try:
        with open(os.path.join(location, "torch", "version.py"), encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    values: dict[str, str | None] = dict.fromkeys(_TORCH_FIELDS)
    for line in lines:
        target, equals, value = line.partition("=")
        name = target.partition(":")[0].strip()
        if not equals or name not in values or line[:1].isspace():
            continue
        value = value.strip()
        if value[:1] in ("'", '"'):
            end = value.find(value[0], 1)
            literal, rest = value[1:end], value[end + 1:].strip()
            if end < 0 or "\\" in literal or (rest and not rest.startswith("#")):
                return None  # an escape, a concatenation: never guessed
            values[name] = literal
        elif value.split("#", 1)[0].strip() == "None":
            values[name] = None
        else:
            # an expression kdkit does not evaluate: the build is unknown, never guessed
            return None
    return values if values["__version__"] else None
