"""A build from the backend's PEP 751 lock (`kdkit build --lock-format pylock`): the lock split into
the image's two layers, and the pip that installs them.

pip installs from a pylock itself since 26.1 (``pip install -r pylock.toml``, experimental: pip's
changelog for 26.1, https://github.com/pypa/pip/pull/13876). For each package whose marker holds it
picks, of the package's files, the wheel whose tags the interpreter supports, takes exactly that
file from where the lock says (``path`` before ``url``), never from an index or ``--find-links``,
and checks it against the lock's hash (pip's src/pip/_internal/utils/pylock.py, req/constructors.py
and index/package_finder.py "locked links"). Such an install is not a direct URL one: pip writes no
``direct_url.json``, so the image's ``verify-env`` sees index installs, as for a requirements lock.
The builder's venv holds the base image's own pip (ensurepip's, older), so the pip of kdkit's
interpreter travels in the build context as its wheel (``pip download --only-binary :all:``) and the
venv's Python runs it from that file, ``python pip-X.whl/pip install``, a use pip supports (its
``__main__.py``): nothing of that pip lands in the venv.

The parts. As for a requirements lock (:mod:`kdkit.image.layers`), torch's part holds the seeds and
what they require: by the packages' ``dependencies`` tables where the lock has them (the
specification calls them informational; ``uv pip compile --no-deps`` writes none), and by the torch
part of the requirements lock the pylock was made from (its header's ``requirements-lock``;
pip-compile's ``# via``). Each part is the lock's top-level keys and its ``[[packages]]`` blocks,
each copied as written; the head's comment lines stay out (kdkit's header changes with every lock),
so a part's bytes change only when its packages do, which is what the builder's cache compares. Each
part is read back and must hold exactly the packages it was cut for.

With ``--wheelhouse``, pip would still fetch each locked file from its url; so each part names the
wheelhouse's files instead, by a ``path`` relative to the part (``wheels/<file>``, PEP 751: "path
... relative to the lock file"), written from the parsed lock: the packages whose marker holds for
the image, each with its files that the wheelhouse has.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.config.project import Project
from kdkit.core import proc
from kdkit.core.errors import BadInput, Unavailable
from kdkit.core.jsonio import read_text_file, sha256_file
from kdkit.core.lockfile import Lock, normalize_name
from kdkit.core.versions import InvalidVersion, Version
from kdkit.facts.platforms import image_environment
from kdkit.image.layers import ca_entries, is_seed, split_files, torch_keys

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import TypedDict

    from kdkit.core.report import Progress
    from kdkit.lock.locked import LockInput

    class FileName(TypedDict, total=False):
        """A located file's name key: a wheel's or sdist's table has one, an archive's none."""

        name: str

    class LocatedFile(FileName):
        """A package's file table in a wheelhouse part: the wheelhouse's file, by path and hash."""

        path: str  # wheels/<file>, relative to the part
        hashes: dict[str, str]  # {"sha256": hex}

# the first pip that installs from a pylock (its changelog, 26.1: "-r pylock.toml")
PIP_FLOOR = "26.1"
PYTHON_FLOOR = (3, 11)  # the image's verify-env reads the pylock with tomllib, new in Python 3.11
HEADER = ("# {part} of the project's PEP 751 lock, derived by `kdkit build` "
          "(kdkit.image.pylockparts); the builder installs it with pip >= " + PIP_FLOOR
          + ", --require-hashes --no-deps\n")
_PACKAGES = re.compile(r"^\[\[[ \t]*packages[ \t]*\]\][ \t]*(#.*)?$")
# [packages.vcs], [[packages.wheels]], ...
_PACKAGE_TABLE = re.compile(r"^\[\[?[ \t]*packages[ \t]*\.")
_FILE_KEYS = ("wheels", "sdist", "archive")
# what a wheelhouse part keeps of a package
_PACKAGE_KEYS = ("name", "version", "marker", "requires-python")


# ---------------------------------------------------------------- what a pylock build needs


def require_image_python(python: str, pylock: Path, requirements: Path) -> None:
    """BadInput unless the image's Python reads TOML: its verify-env checks the environment against
    the pylock."""
    try:
        release = Version.parse(python).release
    except InvalidVersion:
        return  # kdkit.json's schema reports it
    if release[:2] < PYTHON_FLOOR:
        raise BadInput(f"kdkit.json: \"python\" is {python}, but an image built from {pylock.name} "
                       "checks itself against it with verify-env, which reads a pylock with "
                       f"tomllib (Python 3.11 or newer); build from {requirements.name} "
                       "(--lock-format requirements), or set \"python\" to 3.11 or newer and "
                       "relock")


def installer_pip() -> str:
    """The version of the pip in kdkit's interpreter, the one the builder will run; Unavailable
    below 26.1."""
    from importlib import metadata

    fix = (f"upgrade it (`{sys.executable} -m pip install --upgrade 'pip>={PIP_FLOOR}'`), or build "
           "from the requirements lock (--lock-format requirements)")
    try:
        version = metadata.version("pip")
    except metadata.PackageNotFoundError:
        raise Unavailable(f"{sys.executable}: has no pip, and installing from a pylock needs pip "
                          f"{PIP_FLOOR} or newer; {fix}") from None
    if Version.parse(version) < Version.parse(PIP_FLOOR):
        raise Unavailable(f"{sys.executable}: pip {version} cannot install from a pylock (pip "
                          f"{PIP_FLOOR} or newer can); {fix}")
    return version


def check_pylock(lock: Lock, python: str, local_files_ok: bool,
                 data: Mapping[str, Any] | None = None) -> None:
    """BadInput for a package the image (CPython ``python``) would install but cannot prove or
    reach: one from a vcs or a directory (no file hash), or, without a wheelhouse, one whose file
    lies on this machine (a ``path``, a ``file:`` url)."""
    environment = image_environment(python, lock.header.get("platform", ""))
    for pin in (p for key in lock.candidates for p in lock.applying(key, environment)):
        if pin.source is not None and pin.source.kind in ("vcs", "directory"):
            raise BadInput(f"{lock.path}:{pin.line}: {pin.name} comes from {pin.source}, which no "
                           "file hash proves, and the image installs only hash-checked files; lock "
                           "a release of it, or build from the requirements lock (--lock-format "
                           "requirements)")
    if local_files_ok:
        return
    for package in applying_packages(lock,
                                     data if data is not None
                                     else _data(Path(lock.path)), environment):
        if any("path" in table or str(table.get("url", "")).lower().startswith("file:")
               for table in _file_tables(package)):
            raise BadInput(f"{lock.path}: {package['name']}: its file lies on this machine (a path "
                           "or a file: url), out of the builder's reach; pass --wheelhouse DIR "
                           "(`kdkit wheelhouse`), or lock against an index")


def plan_pylock_build(project: Project, pylock: LockInput, wheelhouse: bool) -> str:
    """What a build from the backend's pylock needs, checked before any build (its Python and
    freshness were, as it was read: kdkit.lock.locked.read_locked): every installed file hashed and
    reachable, and a pip that installs from it (its version, returned)."""
    check_pylock(pylock.lock, project.python, wheelhouse, _loads(pylock.text))
    return installer_pip()


def download_pip(dest: Path, version: str, report: Progress | None = None) -> Path:
    """pip ``version``'s wheel, fetched into ``dest`` by kdkit's own pip (its configuration: index,
    certificate, proxy)."""
    if report is not None:
        report(f"pip {version} for the builder, which installs from the pylock")
    done = proc.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                     "--only-binary=:all:",
                     "--dest", str(dest), f"pip=={version}"], timeout=600)
    wheels = sorted(dest.glob(f"pip-{version}-*.whl"))
    if not done.ok or not wheels:
        raise Unavailable(f"cannot download pip {version} for the image's builder "
                          f"({done.first_error_line()}); check the network and pip's configuration "
                          "(`pip config list`), or build from the requirements lock (--lock-format "
                          "requirements)")
    return wheels[0]


# ---------------------------------------------------------------- reading the pylock's text and
# data


def _data(path: Path) -> dict[str, Any]:
    return _loads(read_text_file(path, "lock"))


def _loads(text: str) -> dict[str, Any]:
    import tomllib  # a pylock was parsed before this is called: tomllib is there

    data: dict[str, Any] = tomllib.loads(text)
    return data


def applying_packages(lock: Lock, data: Mapping[str, Any],
                      environment: dict[str, str]) -> list[dict[str, Any]]:
    """The ``[[packages]]`` tables the image installs: those of a name and version whose marker
    holds there (:meth:`Lock.applying`, PEP 751's rules: no extra, the default dependency
    groups)."""
    wanted = {(pin.key, pin.version) for key in lock.candidates
              for pin in lock.applying(key, environment)}
    return [package for package in data["packages"]
            if (normalize_name(package["name"]), str(package.get("version", ""))) in wanted]


def _file_tables(package: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for key in _FILE_KEYS:
        value = package.get(key)
        for table in value if isinstance(value, list) else [value] if isinstance(value,
                                                                                 dict) else []:
            if isinstance(table, dict):
                yield table


# ---------------------------------------------------------------- the parts


def pylock_torch_keys(data: Mapping[str, Any], twin: Path | None,
                      twin_text: str | None = None) -> set[str]:
    """The normalized names of torch's part: the seeds, the torch part of the requirements lock
    ``twin`` (the one the pylock was made from, when given; ``twin_text``: its text, already read),
    and what their ``dependencies`` tables name, transitively."""
    children: dict[str, set[str]] = {}
    for package in data["packages"]:
        named = package.get("dependencies")
        tables = named if isinstance(named, list) else []
        children.setdefault(normalize_name(package["name"]), set()).update(
            normalize_name(table["name"]) for table in tables if isinstance(table, dict)
            and isinstance(table.get("name"), str))
    part = {key for key in children if is_seed(key)}
    if twin_text is None and twin is not None:
        twin_text = read_text_file(twin, "lock")
    if twin_text is not None:
        part |= torch_keys(twin_text) & children.keys()
    grown = set(part)
    while grown:
        grown = (set().union(*(children[key] for key in grown)) & children.keys()) - part
        part |= grown
    return part


def _pieces(text: str) -> tuple[list[str], list[str]]:
    """(the head's key lines, comments and blank lines left out; each ``[[packages]]`` block as
    written)."""
    head: list[str] = []
    blocks: list[list[str]] = []
    place = "head"
    for line in text.removeprefix("\ufeff").splitlines():
        package = _PACKAGES.match(line) is not None
        if package or (line.startswith("[") and not _PACKAGE_TABLE.match(line)):
            # other: a top-level table ([tool.x]), which no install needs
            place = "package" if package else "other"
            blocks += [[line]] if package else []
        elif place == "package":
            blocks[-1].append(line)
        elif place == "head" and line.strip() and not line.lstrip().startswith("#"):
            head.append(line)
    return head, ["\n".join(block).rstrip() + "\n" for block in blocks]


def _part_text(name: str, head: list[str], blocks: list[str]) -> str:
    return HEADER.format(part=name) + "".join(f"{line}\n"
                                              for line in head) + "".join(f"\n{b}" for b in blocks)


def _check_part(part: str, data: Mapping[str, Any],
                packages: list[dict[str, Any]], path: Path) -> None:
    """BadInput unless ``part`` reads as the lock's top-level keys and exactly ``packages``."""
    import tomllib

    expected = {key: value for key, value in data.items() if key not in ("packages", "tool")}
    try:
        read = tomllib.loads(part)
    except tomllib.TOMLDecodeError:
        read = {}
    if read.pop("packages", []) != packages or read != expected:
        raise BadInput(f"{path}: its text cannot be cut into the image's two layers as written (a "
                       "[[packages]] table or a top-level key kdkit did not find whole); write it "
                       "again with `kdkit lock`, or build from the requirements lock "
                       "(--lock-format requirements)")


def split_pylock_text(text: str, data: Mapping[str, Any],
                      keys: set[str], path: Path) -> tuple[str, str]:
    """(torch's part, the rest) of a pylock's text, each a pylock of its own, every package block as
    written."""
    head, blocks = _pieces(text)
    packages: list[dict[str, Any]] = data["packages"]
    ours = [normalize_name(package["name"]) in keys for package in packages]
    if len(blocks) != len(packages):
        blocks = []  # an inline `packages = [...]`: _check_part refuses it with the file's name
    parts = []
    for name, which in (("torch's part", True), ("the rest", False)):
        chosen = [block for block, mine in zip(blocks, ours, strict=False) if mine == which]
        parts.append(_part_text(name, head, chosen))
        _check_part(parts[-1], data,
                    [p for p, mine in zip(packages, ours, strict=True) if mine == which], path)
    return parts[0], parts[1]


def _toml(value: Any) -> str:
    """TOML of a string, an array or an inline table (a JSON string is a TOML basic string)."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{key} = {_toml(item)}" for key, item in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def _located_files(package: Mapping[str, Any], key: str,
                   files: dict[str, Path]) -> list[LocatedFile]:
    """The package's ``key`` tables (wheels, sdist, archive) whose file the wheelhouse has, each
    naming that file by its path in the part's folder (an archive table has no name key)."""
    found: list[LocatedFile] = []
    for table in _file_tables({key: package.get(key)}):
        digest = str(table.get("hashes", {}).get("sha256", "")).lower()
        if digest in files:
            name: FileName = {} if key == "archive" else {"name": files[digest].name}
            found.append(
                {**name, "path": f"wheels/{files[digest].name}", "hashes": {"sha256": digest}})
    return found


def _wheelhouse_block(package: Mapping[str, Any], files: dict[str, Path]) -> str | None:
    """A package's block naming only the wheelhouse's files (sha256 -> file); None when it has none
    of them."""
    sources = [f"{key} = {_toml(found if key == 'wheels' else found[0])}" for key in _FILE_KEYS
               if (found := _located_files(package, key, files))]
    if not sources:
        return None
    keys = [f"{key} = {_toml(package[key])}" for key in _PACKAGE_KEYS
            if isinstance(package.get(key), str)]
    return "\n".join(["[[packages]]", *keys, *sources]) + "\n"


def wheelhouse_parts(text: str, data: Mapping[str, Any], applying: list[dict[str, Any]],
                     keys: set[str],
                     wheels: list[Path]) -> tuple[str, str]:
    """(torch's part, the rest) for a build from a wheelhouse: the packages the image installs, each
    naming the wheelhouse's files of it; BadInput for one that has none there."""
    files = {sha256_file(path): path for path in wheels}
    head = _pieces(text)[0]
    parts: dict[bool, list[str]] = {True: [], False: []}
    for package in applying:
        block = _wheelhouse_block(package, files)
        if block is None:
            version = f"=={package['version']}" if isinstance(package.get("version"), str) else ""
            raise BadInput("--wheelhouse: no file with a hash the pylock names for "
                           f"{package['name']}{version}, which the image installs; run `kdkit "
                           "wheelhouse` again")
        parts[normalize_name(package["name"]) in keys].append(block)
    return _part_text("torch's part", head, parts[True]), _part_text("the rest", head, parts[False])


def pylock_builder_entries(pylock: LockInput, twin: LockInput, python: str, ca_bundle: bytes | None,
                           wheels: list[Path],
                           pip_wheel: Path) -> Iterator[tuple[str, Path | bytes]]:
    """The builder stage's part of the build context for a pylock: build/ca/, and build/torch/ and
    build/rest/ each with its ``pylock.toml``, the pip that installs it (``pip/``) and, with a
    wheelhouse, its ``wheels/``. ``pylock`` and ``twin`` (its requirements lock) as the build read
    them, once."""
    text, data, lock = pylock.text, _loads(pylock.text), pylock.lock
    keys = pylock_torch_keys(data, None, twin.text)
    if wheels:
        environment = image_environment(python, lock.header.get("platform", ""))
        parts = wheelhouse_parts(text, data,
                                 applying_packages(lock, data, environment), keys, wheels)
        split = split_files(wheels, lock, keys)
    else:
        parts, split = split_pylock_text(text, data, keys, pylock.path), ([], [])
    yield from ca_entries(ca_bundle)
    for folder, part, files in zip(("torch", "rest"), parts, split, strict=True):
        yield f"build/{folder}/pylock.toml", part.encode("utf-8")
        yield f"build/{folder}/pip/{pip_wheel.name}", pip_wheel
        for wheel in files:
            yield f"build/{folder}/wheels/{wheel.name}", wheel
