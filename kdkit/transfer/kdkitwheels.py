"""``kdkit-wheels/``: kdkit itself, for a rented host that has Docker and Python but no kdkit and no
index.

The folder holds kdkit's own wheel, the wheels its hashed runtime lock pins
(``requirements/runtime.txt``, shipped with kdkit), and ``requirements.txt``: that lock plus kdkit's
wheel with its hash. So, offline::

    python3 -m venv k && k/bin/pip install --no-index --find-links kdkit-wheels \\
        --require-hashes -r kdkit-wheels/requirements.txt

kdkit's wheel is written here from the running kdkit (:func:`write_kdkit_wheel`: the package, its
data files at their place in an installed wheel, the installed metadata), so it works from an
installed kdkit and from a checkout alike, and the same files give the same bytes. The locked wheels
are fetched with ``pip download --require-hashes --only-binary :all:`` for Linux on the lock's CPU
and for each CPython of :data:`PYTHONS` that has every one of them (a wheel with compiled code
exists per version, e.g. rpds-py); the Pythons served are recorded in bundle.json and said in
RUN.md. What is fetched is kept in kdkit's cache (:func:`cache_root`, keyed by the lock's hash and
the CPU), so later bundles copy it; each file is checked against the lock's hashes on every copy.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import shutil
import sys
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit import __version__
from kdkit.config.shipped import DATA_ITEMS, data_root, runtime_lock
from kdkit.core import layout, proc
from kdkit.core.credentials import refuse_credentials_in
from kdkit.core.errors import KdkitError, Unavailable
from kdkit.core.jsonio import atomic_write_json, load_json, sha256_file
from kdkit.core.layout import package_root
from kdkit.core.lockfile import Pin, normalize_name, parse_lock
from kdkit.core.report import Progress
from kdkit.core.staging import staged_beside
from kdkit.core.stalestaging import clean_stale

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import TypedDict

    class KdkitWheels(TypedDict):
        """bundle.json's ``kdkit_wheels``: kdkit and its runtime lock, to install offline."""

        folder: str
        requirements: str
        wheel: str
        arch: str
        pythons: list[str]
        pythons_missing: dict[str, str]  # a CPython served by no locked wheel: why
        files: list[str]

WHEELS = "kdkit-wheels"
REQUIREMENTS = "requirements.txt"
MANIFEST = "cache.json"  # in the cache: the Pythons served, those not and why, each file's sha256
# CPythons a rented host may have as python3 (kdkit needs >= 3.10: pyproject.toml's
# requires-python).
PYTHONS = ("3.10", "3.11", "3.12", "3.13", "3.14")
# manylinux tags pip is told the host accepts (glibc 2.17 and later covers every current GPU host
# OS).
MANYLINUX = ("manylinux_2_17", "manylinux2014", "manylinux_2_28", "manylinux_2_5", "manylinux1")
_EPOCH = (1980, 1, 1, 0, 0, 0)  # every member's time: the same files give the same wheel


def cache_root() -> Path:
    """``KDKIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/kdkit``, else ``~/.cache/kdkit`` (where pip keeps
    its own)."""
    explicit = os.environ.get("KDKIT_CACHE_DIR")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kdkit"


# ---------------------------------------------------------------- kdkit's own wheel


def _files(base: Path, prefix: str) -> list[tuple[str, Path]]:
    """(name in the wheel, file) below ``base`` (or ``base`` itself): regular files only, never a
    link (whatever it points at stays where it is), never a cache."""
    paths = sorted(base.rglob("*")) if base.is_dir() else [base]
    return [((f"{prefix}/{path.relative_to(base).as_posix()}" if base.is_dir() else prefix), path)
            for path in paths
            if path.is_file() and not path.is_symlink()
            and not any((base / p).is_symlink() for p in path.relative_to(base).parents)
            and "__pycache__" not in path.parts and path.suffix != ".pyc"]


def _wheel_members() -> list[tuple[str, Path]]:
    """(name in the wheel, file), sorted: the package's modules and data tables (layout.DATA), and
    the shipped data files at their place in an installed wheel. Nothing else under the package
    travels (a stray ``.env`` beside it, a link), and every data file is scanned for credentials
    first."""
    root = package_root()
    package = [(name, path) for name, path in _files(root, "kdkit")
               if path.suffix == ".py" and not name.startswith("kdkit/_data/")]
    package += [m for rel in layout.DATA for m in _files(root / rel, f"kdkit/{rel}")]
    data = [m for item in DATA_ITEMS for m in _files(data_root() / item, f"kdkit/_data/{item}")]
    for name, path in [m for m in package if not m[0].endswith(".py")] + data:
        refuse_credentials_in(path, name)
    return sorted(package + data)


def _metadata() -> tuple[str, str]:
    """kdkit's installed METADATA and entry points, checked to be this kdkit's."""
    from importlib import metadata

    try:
        dist = metadata.distribution("kdkit")
    except metadata.PackageNotFoundError:
        raise Unavailable("kdkit: not installed as a package here, so it cannot pack its own "
                          "wheel; `pip install .` in a kdkit checkout") from None
    if dist.version != __version__:
        raise Unavailable(f"kdkit: installed metadata says {dist.version} but the code is "
                          f"{__version__}; reinstall kdkit (`pip install .`)")
    return dist.read_text("METADATA") or "", dist.read_text("entry_points.txt") or ""


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def write_kdkit_wheel(folder: Path) -> Path:
    """``kdkit-VERSION-py3-none-any.whl`` in ``folder``, from the running kdkit (PEP 427 layout)."""
    metadata_text, entry_points = _metadata()
    info = f"kdkit-{__version__}.dist-info"
    members = [(name, path.read_bytes()) for name, path in _wheel_members()]
    members += [(f"{info}/METADATA", metadata_text.encode()),
                (f"{info}/entry_points.txt", entry_points.encode()),
                (f"{info}/WHEEL",
                 f"Wheel-Version: 1.0\nGenerator: kdkit {__version__}\nRoot-Is-Purelib: true\n"
                 "Tag: py3-none-any\n".encode())]
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n"
                     for name, data in members) + f"{info}/RECORD,,\n"
    target = folder / f"kdkit-{__version__}-py3-none-any.whl"
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as wheel:
        for name, data in [*members, (f"{info}/RECORD", record.encode())]:
            member = zipfile.ZipInfo(name, date_time=_EPOCH)
            member.external_attr = 0o644 << 16
            member.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(member, data)
    return target


# ---------------------------------------------------------------- the locked wheels


def _download(dest: Path, lock: Path, python: str, arch: str) -> proc.Completed:
    platforms = [part for tag in MANYLINUX for part in ("--platform", f"{tag}_{arch}")]
    return proc.run([sys.executable, "-m", "pip", "download", "--quiet",
                     "--disable-pip-version-check",
                     "--no-deps", "--require-hashes", "--only-binary", ":all:", "--dest", dest,
                     "-r", lock,
                     "--python-version", python, "--implementation", "cp", *platforms], timeout=600)


def _pin_of(wheel: str, pins: dict[str, Pin]) -> Pin | None:
    """The pin a wheel file is for, by its distribution name (PEP 427: the name before the first
    ``-``)."""
    return pins.get(normalize_name(wheel.split("-", 1)[0]))


def _fill_cache(cached: Path, lock: Path, arch: str, say: Progress) -> None:
    """Fetch the locked wheels into ``cached`` with its MANIFEST (staged beside it, renamed when
    complete; when another kdkit's copy got there first, that one is kept and used)."""
    for path in clean_stale(cached):  # said even when the fetch then cannot start
        say(f"removed {path}, left by a killed fetch")
    # removed, whatever fails, unless published
    with staged_beside(cached, clean=False, parents=True) as staged:
        served, missing = [], {}
        for python in PYTHONS:
            say(f"{WHEELS}: pip download of kdkit's runtime lock for CPython {python} on {arch}")
            done = _download(staged.path, lock, python, arch)
            if done.ok:
                served.append(python)
            else:
                missing[python] = done.first_error_line()
        if not served:
            raise Unavailable(f"{lock}: pip download found no complete set of wheels "
                              f"({missing[PYTHONS[-1]]}); reach an index (pip config) or pass "
                              "--no-kdkit-wheels")
        files = {p.name: sha256_file(p) for p in sorted(staged.path.glob("*.whl")) if p.is_file()}
        atomic_write_json(staged.path / MANIFEST,
                          {"pythons": served, "missing": missing, "files": files})
        # Another kdkit filled the cache meanwhile (two bundles at once): its copy is kept and used.
        with contextlib.suppress(FileExistsError):
            staged.publish(replace=False)


def _cached(cached: Path, say: Progress) -> dict[str, Any] | None:
    """The cache's MANIFEST when every file it lists is there, else None (an incomplete cache is
    removed)."""
    if not (cached / MANIFEST).is_file():
        return None
    manifest: dict[str, Any] = load_json(cached / MANIFEST, what="kdkit's wheel cache")
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if isinstance(files, dict) and files and all((cached / name).is_file() for name in files):
        return manifest
    say(f"{cached}: incomplete, fetching it again")
    shutil.rmtree(cached)
    return None


def _wheels_source(lock: Path, arch: str,
                   scratch: Path, say: Progress) -> tuple[Path, dict[str, Any]]:
    """The folder of the locked wheels and its manifest: kdkit's cache (filled first if need be),
    or, where that cache cannot be read or written (another user's, a read-only HOME), ``scratch``
    for this bundle only."""
    cached = cache_root() / WHEELS / f"{sha256_file(lock)[:16]}-{arch}"
    try:
        manifest = _cached(cached, say)
        if manifest is None:
            _fill_cache(cached, lock, arch, say)
            manifest = load_json(cached / MANIFEST, what="kdkit's wheel cache")
        return cached, manifest
    except OSError as exc:
        say(f"{cached}: kdkit's cache is not usable ({exc.strerror or exc}); fetching for this "
            "bundle only")
    _fill_cache(scratch, lock, arch, say)
    return scratch, load_json(scratch / MANIFEST, what="kdkit's wheel cache")


def _copy_checked(source: Path, names: list[str], lock: Path, folder: Path) -> None:
    """Each wheel into ``folder``, after its hash is found among its own pin's in the lock."""
    pins = parse_lock(lock).pins
    for name in names:
        pin = _pin_of(name, pins)
        if pin is None or f"sha256:{sha256_file(source / name)}" not in pin.hashes:
            raise KdkitError(f"{source / name}: its hash is not the lock's for it ({lock}); remove "
                             f"{source} and bundle again")
        shutil.copyfile(source / name, folder / name)


def add_kdkit_wheels(bundle: Path, arch: str, progress: Progress | None = None) -> KdkitWheels:
    """Write ``bundle/kdkit-wheels``; return what bundle.json records of it."""
    say = progress or (lambda _m: None)
    lock = runtime_lock()
    scratch = bundle / f".{WHEELS}-fetch"
    folder = bundle / WHEELS
    try:
        source, manifest = _wheels_source(lock, arch, scratch, say)
        folder.mkdir()
        _copy_checked(source, sorted(manifest["files"]), lock, folder)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for python, why in manifest.get("missing", {}).items():
        say(f"{WHEELS}: none for CPython {python} ({why}); there, RUN.md's Docker-only way needs "
            "no kdkit")
    own = write_kdkit_wheel(folder)
    (folder / REQUIREMENTS).write_text(lock.read_text(encoding="utf-8")
                                       + f"kdkit=={__version__} \\\n"
                                       f"    --hash=sha256:{sha256_file(own)}\n", encoding="utf-8")
    return {"folder": WHEELS, "requirements": f"{WHEELS}/{REQUIREMENTS}", "wheel": own.name,
            "arch": arch,
            "pythons": manifest["pythons"], "pythons_missing": manifest.get("missing", {}),
            "files": sorted(path.name for path in folder.iterdir())}


def folder_files(info: Mapping[str, Any], key: str, folder: str) -> list[str] | None:
    """The files bundle.json's ``key`` (an object naming its ``files`` in ``folder``) says the
    bundle holds ([] when it carries none), None if malformed: kdkit-wheels/ here, local-wheels/
    (kdkit.transfer.localwheels)."""
    carried = info.get(key)
    if carried is None:
        return []
    files = carried.get("files") if isinstance(carried, dict) else None
    if not isinstance(files, list) \
            or not all(isinstance(f, str) and f and "/" not in f for f in files):
        return None
    return [f"{folder}/{name}" for name in files]


def listed_files(info: Mapping[str, Any]) -> list[str] | None:
    """The files bundle.json's ``kdkit_wheels`` says the bundle holds ([] when it carries none),
    None if malformed."""
    return folder_files(info, "kdkit_wheels", WHEELS)
