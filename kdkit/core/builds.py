"""What a torch build is, read once: backends, local labels, driver floors.

Every fact about published torch builds lives in ``kdkit/data/pairings.json`` with its public
source (which builds each release has, their compiled architectures, the driver each CUDA major
and each GPU architecture needs, the scaffold's defaults). This module is the one place that
reads the shipped file and the one parser of the names those facts use, so the host side
(``kdkit check``, ``kdkit lock``, ``kdkit build``) and the in-container side (``kdkit diagnose``)
apply the same table. Standard library only: it runs inside the image and in kdkit.pyz, where
pairings.json travels beside the package (kdkit.core.layout.DATA).
"""

from __future__ import annotations

import os

# verify-env reads a lock's torch label here at every start-up of the in-container check: the labels
# are parsed with string methods, and json (the data tables) is loaded only when a table is read.
TYPE_CHECKING = False  # typing is not imported at start-up (kdkit.core.commands says why)
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

# The backends a project declares (kdkit.json "backends"), in the order `--backend all` locks them.
BACKENDS = ("cuda", "rocm", "cpu")
GPU_BACKENDS = ("cuda", "rocm")
PAIRINGS = "data/pairings.json"  # inside the kdkit package
# PyTorch's wheel index of one build label
TORCH_INDEX_URL = "https://download.pytorch.org/whl/{label}"
# PyPI's torch is a plain version; its build is read from the facts
PYPI_SIMPLE = "https://pypi.org/simple"
# the lock header line naming the build of a torch without a local label
BUILD_HEADER = "torch-build"

_DIGITS = frozenset("0123456789")


def parse_label(label: str) -> tuple[str, str | None] | None:
    """What a torch local label or wheel index name promises.

    ``cu130`` -> ("cuda", "13.0"), ``cu118`` -> ("cuda", "11.8"), ``rocm7.2`` -> ("rocm", "7.2"),
    ``rocm6.2.4`` -> ("rocm", "6.2.4"), ``cpu`` -> ("cpu", None); anything else -> None.
    """
    if label == "cpu":
        return ("cpu", None)
    digits = label[2:]
    # cu118 ... cu132: 11.8 ... 13.2
    if label.startswith("cu") and len(digits) == 3 and set(digits) <= _DIGITS:
        return ("cuda", f"{digits[:2]}.{digits[2]}")
    parts = label[4:].split(".")
    if label.startswith("rocm") and len(parts) in (2, 3) \
            and all(p and set(p) <= _DIGITS for p in parts):
        return ("rocm", ".".join(parts))  # rocm7.2, rocm6.2.4
    return None


def label_backend(label: str) -> str | None:
    """The backend of a label (``cu130`` -> cuda), or None for a label kdkit cannot read."""
    parsed = parse_label(label)
    return parsed[0] if parsed else None


def index_label(url: str) -> str | None:
    """The build label a PyTorch wheel index serves: its last path segment (``.../whl/cu130`` ->
    cu130)."""
    from urllib.parse import urlsplit

    tail = urlsplit(url).path.rstrip("/").rsplit("/", 1)[-1]
    return tail if parse_label(tail) is not None else None


def is_pypi(url: str, mirrors: tuple[str, ...] = ()) -> bool:
    """Whether ``url`` is PyPI's simple index (or one of ``mirrors``, e.g. the index-url pip's
    configuration names): its torch wheels carry no local label, so the build is the pairings'
    ``pypi`` fact."""
    wanted = {_index_key(u) for u in (PYPI_SIMPLE, *mirrors) if u}
    return _index_key(url) in wanted


def _index_key(url: str) -> str:
    """An index URL as one place: scheme and host in lower case, no user or password, no trailing
    slash."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url.strip())
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:  # not a URL: only itself
        return url
    return (
        f"{parts.scheme.lower()}://{(parts.hostname or '').lower()}{port}{parts.path.rstrip('/')}")


def header_build(header: dict[str, str]) -> str | None:
    """The build label a lock's ``# kdkit: torch-build = cu130 (...)`` line names, or None."""
    label = header.get(BUILD_HEADER, "").split(" ", 1)[0]
    return label if label and parse_label(label) is not None else None


def split_version(version: str) -> tuple[str, str | None]:
    """``"2.13.0+cu130"`` -> ("2.13.0", "cu130"); ``"2.13.0"`` -> ("2.13.0", None)."""
    public, plus, local = version.partition("+")
    return public, (local or None) if plus else None


def torch_minor(version: str) -> str:
    """``"2.13.0+cu130"`` -> ``"2.13"``: pairings are kept per minor release."""
    return ".".join(split_version(version)[0].split(".")[:2])


def version_tuple(text: str) -> tuple[int, ...]:
    """``"570.86.15"`` -> ``(570, 86, 15)``; a non-numeric tail ends the tuple."""
    parts = []
    for piece in text.strip().split("."):
        digits = piece[:len(piece) - len(piece.lstrip("0123456789"))]
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def minor_key(minor: str) -> tuple[int, ...]:
    """Sort key of ``"2.9"`` < ``"2.10"``."""
    return version_tuple(minor)


# ---------------------------------------------------------------- the shipped facts


_SHIPPED: dict[str, dict[str, Any]] = {}


def shipped_data(member: str) -> dict[str, Any]:
    """A data table kdkit ships (``data/pairings.json``, ``data/catalog.json``), read from the
    package folder or from inside kdkit.pyz, once; the host side layers the user's files over it
    (kdkit.facts.pairings)."""
    if member in _SHIPPED:
        return _SHIPPED[member]
    import json

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(__file__))), member)
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    else:  # inside a zipapp: pkgutil reads the archive member (lighter than importlib.resources)
        import pkgutil

        raw = pkgutil.get_data("kdkit", member)
        if raw is None:
            raise FileNotFoundError(f"kdkit/{member} is missing from this kdkit")
        text = raw.decode("utf-8")
    data: dict[str, Any] = json.loads(text)
    _SHIPPED[member] = data
    return data


def shipped_pairings() -> dict[str, Any]:
    """kdkit/data/pairings.json as shipped."""
    return shipped_data(PAIRINGS)


def floor_value(entry: Any) -> str:
    """A driver entry is ``{"minimum": "580", "source": ...}`` (or, in older files, the bare
    string)."""
    return str(entry["minimum"] if isinstance(entry, dict) else entry)


def driver_floor(cuda_version: str, architecture: str | None = None,
                 pairings: Mapping[str, Any] | None = None) -> tuple[str, str] | None:
    """The oldest Linux driver that runs a CUDA ``cuda_version`` build on ``architecture`` (sm_XY).

    Returns (minimum, why): the floor of the CUDA major (minor-version compatibility), raised by
    the architecture's own floor where it has one (Blackwell needs R570+ whatever the toolkit),
    or None when kdkit knows no floor for that CUDA major.
    """
    data = shipped_pairings() if pairings is None else pairings
    major = version_tuple(cuda_version)[:1]
    entry = data.get("drivers", {}).get(str(major[0])) if major else None
    if entry is None:
        return None
    best = (floor_value(entry), f"CUDA {major[0]}.x builds")
    arch_entry = data.get("architecture_drivers", {}).get(architecture or "")
    if arch_entry is not None and version_tuple(floor_value(arch_entry)) > version_tuple(best[0]):
        best = (floor_value(arch_entry), f"{architecture} cards")
    return best
