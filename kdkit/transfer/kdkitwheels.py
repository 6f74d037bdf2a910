"""``kdkit-wheels/``: kdkit itself, for a rented host that has Docker and Python but no kdkit and no index.

The folder holds kdkit's own wheel, the wheels its hashed runtime lock pins (``requirements/runtime.txt``,
shipped with kdkit), and ``requirements.txt``: that lock plus kdkit's wheel with its hash. So, offline::

    python3 -m venv k && k/bin/pip install --no-index --find-links kdkit-wheels \\
        --require-hashes -r kdkit-wheels/requirements.txt

kdkit's wheel is written here from the running kdkit (:func:`write_kdkit_wheel`: the package, its data
files at their place in an installed wheel, the installed metadata), so it works from an installed kdkit
and from a checkout alike, and the same files give the same bytes. The locked wheels are fetched with
``pip download --require-hashes --only-binary :all:`` for Linux on the lock's CPU and for each CPython
of :data:`PYTHONS` that has every one of them (a wheel with compiled code exists per version, e.g.
rpds-py); the Pythons served are recorded in bundle.json and said in RUN.md. What is fetched is kept in
kdkit's cache (:func:`cache_root`, keyed by the lock's hash and the CPU), so later bundles copy it; each
file is checked against the lock's hashes on every copy.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import sys
import zipfile
from pathlib import Path
from typing import Any

from kdkit import __version__
from kdkit.config.shipped import DATA_ITEMS, data_root, runtime_lock
from kdkit.core import proc
from kdkit.core.errors import KdkitError, Unavailable
from kdkit.core.jsonio import sha256_file
from kdkit.core.layout import package_root
from kdkit.core.lockfile import parse_lock
from kdkit.core.report import Progress
from kdkit.core.staging import staging_for

WHEELS = "kdkit-wheels"
REQUIREMENTS = "requirements.txt"
# CPythons a rented host may have as python3 (kdkit needs >= 3.10: pyproject.toml's requires-python).
PYTHONS = ("3.10", "3.11", "3.12", "3.13", "3.14")
# manylinux tags pip is told the host accepts (glibc 2.17 and later covers every current GPU host OS).
MANYLINUX = ("manylinux_2_17", "manylinux2014", "manylinux_2_28", "manylinux_2_5", "manylinux1")
_EPOCH = (1980, 1, 1, 0, 0, 0)  # every member's time: the same files give the same wheel


def cache_root() -> Path:
    """``KDKIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/kdkit``, else ``~/.cache/kdkit`` (where pip keeps its own)."""
    explicit = os.environ.get("KDKIT_CACHE_DIR")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kdkit"


# ---------------------------------------------------------------- kdkit's own wheel


def _wheel_members() -> list[tuple[str, Path]]:
    """(name in the wheel, file) for the package and its data files, sorted; caches never travel."""
    def walk(base: Path, prefix: str) -> list[tuple[str, Path]]:
        found = []
        for path in sorted(base.rglob("*")) if base.is_dir() else [base]:
            rel = path.relative_to(base).as_posix() if base.is_dir() else ""
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                found.append((f"{prefix}/{rel}".rstrip("/"), path))
        return found

    package = [m for m in walk(package_root(), "kdkit") if not m[0].startswith("kdkit/_data/")]
    data = [m for item in DATA_ITEMS for m in walk(data_root() / item, f"kdkit/_data/{item}")]
    return sorted(package + data)


def _metadata() -> tuple[str, str]:
    """kdkit's installed METADATA and entry points, checked to be this kdkit's."""
    from importlib import metadata

    try:
        dist = metadata.distribution("kdkit")
    except metadata.PackageNotFoundError:
        raise Unavailable("kdkit: not installed as a package here, so it cannot pack its own wheel; "
                          "`pip install .` in a kdkit checkout") from None
    if dist.version != __version__:
        raise Unavailable(f"kdkit: installed metadata says {dist.version} but the code is {__version__}; "
                          "reinstall kdkit (`pip install .`)")
    return dist.read_text("METADATA") or "", dist.read_text("entry_points.txt") or ""


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def write_kdkit_wheel(folder: Path) -> Path:
    """``kdkit-VERSION-py3-none-any.whl`` in ``folder``, from the running kdkit (PEP 427 layout)."""
    metadata_text, entry_points = _metadata()
    info = f"kdkit-{__version__}.dist-info"
    members = [(name, path.read_bytes()) for name, path in _wheel_members()]
    members += [(f"{info}/METADATA", metadata_text.encode()), (f"{info}/entry_points.txt", entry_points.encode()),
                (f"{info}/WHEEL", f"Wheel-Version: 1.0\nGenerator: kdkit {__version__}\nRoot-Is-Purelib: true\n"
                                  "Tag: py3-none-any\n".encode())]
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in members) + f"{info}/RECORD,,\n"
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
    return proc.run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
                     "--no-deps", "--require-hashes", "--only-binary", ":all:", "--dest", dest, "-r", lock,
                     "--python-version", python, "--implementation", "cp", *platforms], timeout=600)


def _fill_cache(cached: Path, lock: Path, arch: str, say: Progress) -> None:
    """Fetch the locked wheels into ``cached`` (staged beside it, renamed when complete)."""
    staging = staging_for(cached)
    staging.mkdir(parents=True)
    try:
        served, last = [], None
        for python in PYTHONS:
            say(f"{WHEELS}: pip download of kdkit's runtime lock for CPython {python} on {arch}")
            done = _download(staging, lock, python, arch)
            if done.ok:
                served.append(python)
            else:
                last = done.first_error_line()
        if not served:
            raise Unavailable(f"{lock}: pip download found no complete set of wheels ({last}); reach an index "
                              "(pip config) or pass --no-kdkit-wheels")
        (staging / "pythons").write_text(" ".join(served) + "\n", encoding="utf-8")
        os.replace(staging, cached)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _wheels_source(lock: Path, arch: str, scratch: Path, say: Progress) -> Path:
    """The folder of the locked wheels: kdkit's cache (filled first if need be), or, where that cache
    cannot be read or written (another user's, a read-only HOME), ``scratch`` filled for this bundle only."""
    cached = cache_root() / WHEELS / f"{sha256_file(lock)[:16]}-{arch}"
    try:
        if not (cached / "pythons").is_file():
            _fill_cache(cached, lock, arch, say)
        return cached
    except OSError as exc:
        say(f"{cached}: kdkit's cache is not usable ({exc.strerror or exc}); fetching for this bundle only")
    _fill_cache(scratch, lock, arch, say)
    return scratch


def add_kdkit_wheels(bundle: Path, arch: str, progress: Progress | None = None) -> dict[str, Any]:
    """Write ``bundle/kdkit-wheels``; return what bundle.json records of it."""
    say = progress or (lambda _m: None)
    lock = runtime_lock()
    scratch = bundle / f".{WHEELS}-fetch"
    try:
        source = _wheels_source(lock, arch, scratch, say)
        folder = bundle / WHEELS
        folder.mkdir()
        allowed = {h for pin in parse_lock(lock).pins.values() for h in pin.hashes}
        for wheel in sorted(source.glob("*.whl")):
            if f"sha256:{sha256_file(wheel)}" not in allowed:
                raise KdkitError(f"{wheel}: its hash is not in {lock}; remove {source} and bundle again")
            shutil.copyfile(wheel, folder / wheel.name)
        pythons = (source / "pythons").read_text(encoding="utf-8").split()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    own = write_kdkit_wheel(folder)
    (folder / REQUIREMENTS).write_text(lock.read_text(encoding="utf-8") + f"kdkit=={__version__} \\\n"
                                       f"    --hash=sha256:{sha256_file(own)}\n", encoding="utf-8")
    return {"folder": WHEELS, "requirements": f"{WHEELS}/{REQUIREMENTS}", "wheel": own.name, "arch": arch,
            "pythons": pythons, "files": sorted(path.name for path in folder.iterdir())}


def listed_files(info: dict[str, Any]) -> list[str] | None:
    """The files bundle.json's ``kdkit_wheels`` says the bundle holds ([] when it carries none), None if malformed."""
    wheels = info.get("kdkit_wheels")
    if wheels is None:
        return []
    files = wheels.get("files") if isinstance(wheels, dict) else None
    if not isinstance(files, list) or not all(isinstance(f, str) and f and "/" not in f for f in files):
        return None
    return [f"{WHEELS}/{name}" for name in files]
