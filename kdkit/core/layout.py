"""Which of kdkit's files run inside the container: the packages and data files copied into every
image and into kdkit.pyz. Everything in them imports only the standard library (torch lazily, where
present) and each other; the tests prove it from this list, and the image and the zipapp copy it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

# Sub-packages of kdkit that travel; kdkit/__init__.py goes with them.
PACKAGES = ("core", "probe")
# Packages they may import besides the standard library and each other: optional, imported lazily
# where a command needs them (torch to compute, matplotlib for `sweep --plot`), never at start-up.
OPTIONAL = ("torch", "matplotlib")
# Data files of kdkit they read (kdkit.core.builds, kdkit.probe.diagnose.nominal).
DATA = ("data/pairings.json", "data/catalog.json", "data/acceptance.json")


def package_root() -> Path:
    """The folder of the installed kdkit package."""
    return Path(__file__).resolve().parent.parent


def files(root: Path | None = None) -> Iterator[tuple[str, Path]]:
    """(path relative to kdkit/, file) for each source and data file that travels, sorted; caches
    (__pycache__, .pyc) never travel."""
    base = package_root() if root is None else root
    yield "__init__.py", base / "__init__.py"
    for package in PACKAGES:
        for path in sorted((base / package).rglob("*.py")):
            if "__pycache__" not in path.relative_to(base).parts:
                yield path.relative_to(base).as_posix(), path
    for name in DATA:
        yield name, base / name


def modules(root: Path | None = None) -> list[str]:
    """The dotted names of the modules that travel (kdkit, kdkit.core, kdkit.core.errors, ...)."""
    names = []
    for rel, _path in files(root):
        if rel.endswith(".py"):
            dotted = "kdkit." + rel.removesuffix(".py").replace("/", ".")
            names.append(dotted.removesuffix(".__init__"))
    return names


def copy_to(target: Path) -> None:
    """Copy what travels into ``target``/kdkit/ (``target`` is a folder on sys.path there)."""
    import shutil

    for rel, path in files():
        copy = target / "kdkit" / rel
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, copy)
