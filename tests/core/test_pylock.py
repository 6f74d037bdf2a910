"""verify-env against PEP 751 locks (pylock.toml), on real venvs holding tiny wheels built here.

The locks are written by the real tools where they write them (`uv pip compile --format pylock.toml`,
`pip lock`, both from the test venv), by hand for what they do not write (environments, versions
under markers, requires-python, dependency groups, newer and unknown lock-versions). A package from
a git commit is a real git repository here, built by a build backend of the standard library only,
so pip and uv install and lock it offline. pip and uv run with no configuration of this machine.

The agreement test runs each case through kdkit and `uv pip sync --dry-run --offline` (uv reads
pylock.toml; pip-sync does not), reduced to (changes, removals) as in test_lock_agreement.py, or
"refused" when the tool will not install from that lock in that environment. Spec:
https://packaging.python.org/en/latest/specifications/pylock-toml/
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kdkit.core import layout
from kdkit.core.lockfile import parse_lock
from kdkit.core.markers import evaluate
from tests.conftest import invoke, tree_snapshot
from tests.lock.test_lock_agreement import UV, _names
from tests.tinywheels import build_wheel, make_venv, pip_install, sha256

BACKEND = '''"""A build backend of the standard library only: one module, one wheel, no download."""
import base64, hashlib, os, zipfile

def _hash(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    info = "gamma-3.0.dist-info"
    files = {"gamma/__init__.py": open("gamma.py", "rb").read(),
             info + "/METADATA": b"Metadata-Version: 2.1\\nName: gamma\\nVersion: 3.0\\n\\n",
             info + "/WHEEL": b"Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"}
    record = "".join(f"{p},{_hash(d)},{len(d)}\\n" for p, d in files.items()) + info + "/RECORD,,\\n"
    files[info + "/RECORD"] = record.encode()
    with zipfile.ZipFile(os.path.join(wheel_directory, "gamma-3.0-py3-none-any.whl"), "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return "gamma-3.0-py3-none-any.whl"
'''
PYPROJECT = '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n\n' \
            '[project]\nname = "gamma"\nversion = "3.0"\n'


def tool_env(root: Path) -> dict[str, str]:
    """pip and uv without this machine's configuration: no PIP_* or UV_* variable, PIP_CONFIG_FILE=/dev/null
    (no user file) and an empty XDG_CONFIG_DIRS (no global one; https://pip.pypa.io/en/stable/topics/
    configuration/), uv's cache in the test folder and no uv.toml (UV_NO_CONFIG)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    (root / "no-config").mkdir(exist_ok=True)
    env.update(PIP_CONFIG_FILE=os.devnull, XDG_CONFIG_DIRS=str(root / "no-config"), HOME=str(root),
               UV_CACHE_DIR=str(root / "uv-cache"), UV_NO_CONFIG="1")
    return env


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c",
                           "user.email=t@t", *args],
                          capture_output=True, text=True, check=True).stdout.strip()


@dataclass
class World:
    root: Path
    wheels: Path
    w: dict[str, Path]
    repo: Path
    commits: tuple[str, str]
    env: dict[str, str]
    main: Path  # alpha 1.0, beta 2.0 from the wheels folder
    git: Path  # the same, and gamma from the repository's first commit
    pipdirect: Path  # alpha from its wheel file, gamma from the repository's folder, by pip
    uvdirect: Path  # the same, by uv (which stamps them, so uv keeps them)

    def run(self, *args: str | Path) -> None:
        done = subprocess.run([str(a) for a in args], capture_output=True, text=True, env=self.env,
                              cwd=self.root)
        assert done.returncode == 0, done.stdout + done.stderr

    def requirements(self, out: Path, lines: list[str]) -> Path:
        path = out.with_name(out.name.replace(".toml", ".in"))
        path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
        return path

    def uv_lock(self, out: Path, *lines: str) -> Path:
        """`uv pip compile --format pylock.toml`, hashed, from the wheels folder only."""
        self.run(UV, "pip", "compile", self.requirements(out, list(lines)), "--no-deps", "--format",
                 "pylock.toml",
                 "--generate-hashes", "-o", out, "--no-index", "--find-links", self.wheels,
                 "--python", sys.executable)
        return out

    def pip_lock(self, out: Path, *lines: str) -> Path:
        """`pip lock` (experimental in pip 25.1+), from the wheels folder only."""
        self.run(sys.executable, "-m", "pip", "lock", "--no-deps", "--no-index", "--find-links",
                 self.wheels,
                 "-r", self.requirements(out, list(lines)), "-o", out)
        return out


def _repo(root: Path) -> tuple[Path, tuple[str, str]]:
    repo = root / "gamma-repo"
    repo.mkdir()
    for name, text in {"pyproject.toml": PYPROJECT,
                       "backend.py": BACKEND, "gamma.py": "ONE = 1\n"}.items():
        (repo / name).write_text(text, encoding="utf-8")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "one")
    first = git(repo, "rev-parse", "HEAD")
    (repo / "gamma.py").write_text("ONE = 1\nTWO = 2\n", encoding="utf-8")
    git(repo, "commit", "-qam", "two")
    return repo, (first, git(repo, "rev-parse", "HEAD"))


@pytest.fixture(scope="session")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    if UV is None:
        pytest.skip(
            "uv is not installed in the test venv: the pylock tests need it to write and read "
            "locks")
    root = tmp_path_factory.mktemp("pylock")
    wheels = root / "wheels"
    w = {"alpha": build_wheel(wheels, "alpha", "1.0"),
         "alpha09": build_wheel(wheels, "alpha", "0.9"),
         "beta": build_wheel(wheels, "beta", "2.0"), "beta21": build_wheel(wheels, "beta", "2.1"),
         "zope": build_wheel(wheels, "zope.thing", "1.0")}
    repo, commits = _repo(root)
    pythons = {name: make_venv(root / name, with_pip=False)
               for name in ("main", "git", "pipdirect", "uvdirect")}
    world = World(root, wheels, w, repo, commits, tool_env(root), *pythons.values())
    for name in ("main", "git"):
        pip_install(pythons[name], wheels, ["alpha==1.0", "beta==2.0"])
    pip = [sys.executable, "-m", "pip", "--python"]
    world.run(*pip, world.git, "install", "-q",
              "--no-index", "--no-deps", f"gamma @ git+{repo.as_uri()}@{commits[0]}")
    world.run(*pip, world.pipdirect, "install", "-q", "--no-index", "--no-deps", w["alpha"], repo)
    pip_install(world.pipdirect, wheels, ["beta==2.0"])
    direct = world.uv_lock(root / "pylock.direct.toml", f"alpha @ {w['alpha'].as_uri()}",
                           f"gamma @ {repo.as_uri()}",
                           "beta==2.0")
    world.run(UV, "pip", "sync", "--offline", "--python", world.uvdirect, direct)
    return world


# ---------------------------------------------------------------- hand-written locks


def toml(value: Any) -> str:
    """The TOML of a string, a boolean, an array or an inline table (JSON strings are TOML strings)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(toml(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{key} = {toml(item)}" for key, item in value.items()) + " }"
    return json.dumps(value)


def wheel(path: Path) -> dict[str, Any]:
    return {"name": path.name, "url": path.as_uri(), "hashes": {"sha256": sha256(path)}}


def package(name: str, version: str, path: Path, **keys: Any) -> dict[str, Any]:
    return {"name": name, "version": version, **{k.replace("_", "-"): v for k, v in keys.items()},
            "wheels": [wheel(path)]}


def write_pylock(path: Path, packages: list[dict[str, Any]], **top: Any) -> Path:
    head = {"lock-version": "1.0", "created-by": "kdkit-tests",
            **{k.replace("_", "-"): v for k, v in top.items()}}
    lines = [f"{key} = {toml(value)}" for key, value in head.items()]
    for table in packages:
        lines += ["", "[[packages]]", *(f"{key} = {toml(value)}" for key, value in table.items())]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def alpha(v: World, **keys: Any) -> dict[str, Any]:
    return package("alpha", "1.0", v.w["alpha"], **keys)


def beta(v: World, **keys: Any) -> dict[str, Any]:
    return package("beta", "2.0", v.w["beta"], **keys)


def run_json(lock: Path, python: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    result = invoke("verify-env", "--lock", lock, "--python", python, "--json", *extra)
    return result.exit_code, json.loads(result.stdout)


def kinds(report: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {(f["name"], f["where"], f["verdict"]) for f in report["findings"]}


# ---------------------------------------------------------------- the lock model


@pytest.mark.parametrize("tool", ["uv", "pip"])
def test_the_tools_locks_read_as_pins(world: World, tmp_path: Path, tool: str) -> None:
    lock_with = world.uv_lock if tool == "uv" else world.pip_lock
    lock = parse_lock(
        lock_with(tmp_path / f"pylock.{tool}.toml", "alpha==1.0", "beta==2.0", "zope.thing==1.0"))
    assert lock.format == "pylock" and lock.warnings == () and lock.header == {}
    assert [(p.name, p.version, p.hashes, p.source) for p in lock.every_pin()] == [
        ("alpha", "1.0", [f"sha256:{sha256(world.w['alpha'])}"], None),
        ("beta", "2.0", [f"sha256:{sha256(world.w['beta'])}"], None),
        ("zope-thing", "1.0", [f"sha256:{sha256(world.w['zope'])}"], None)]
    text = (tmp_path / f"pylock.{tool}.toml").read_text(encoding="utf-8").splitlines()
    # the header's own line
    assert all(text[pin.line - 1] == "[[packages]]" for pin in lock.every_pin())


def test_vcs_entries_of_both_tools(world: World, tmp_path: Path) -> None:
    spec = f"gamma @ git+{world.repo.as_uri()}@{world.commits[0]}"
    # pip writes no version for a VCS
    for lock_with, version in ((world.uv_lock, "3.0"), (world.pip_lock, "")):
        pin = parse_lock(
            lock_with(tmp_path / f"pylock.{'uv' if version else 'pip'}.toml", spec)).pins["gamma"]
        assert (pin.version, pin.hashes,
                str(pin.source)) == (version, [], f"git {world.repo.as_uri()}@"
                                                                         f"{world.commits[0]}")


def test_set_valued_markers_only_where_a_lock_defines_them() -> None:
    env: dict[str, str | frozenset[str]] = {"extras": frozenset(),
                                            "dependency_groups": frozenset({"Dev_Tools"})}
    # names compared PEP 503-normalized
    assert evaluate('"dev-tools" in dependency_groups', env) is True
    assert evaluate('"x" not in extras', env) is True
    # no other comparison of a set holds
    assert evaluate('dependency_groups == "dev-tools"', env) is False
    with pytest.raises(ValueError, match="unknown marker variable 'extras'"):
        evaluate('"x" in extras', {"sys_platform": "linux"})  # a requirements lock defines no sets


# ---------------------------------------------------------------- verdicts on real venvs


@pytest.mark.parametrize("tool", ["uv", "pip"])
def test_verdicts_on_the_tools_locks(world: World, tmp_path: Path, tool: str) -> None:
    lock_with = world.uv_lock if tool == "uv" else world.pip_lock
    match = lock_with(tmp_path / "pylock.match.toml", "alpha==1.0", "beta==2.0")
    code, report = run_json(match, world.main)
    assert (code, report["findings"], report["format"], report["warnings"]) == (0, [], "pylock", [])
    code, report = run_json(lock_with(tmp_path / "pylock.more.toml",
                                      "alpha==1.0", "beta==2.1", "zope.thing==1.0"),
                            world.main)
    assert code == 1 and kinds(report) == {("version", "beta", "fail"),
                                           ("missing", "zope-thing", "fail")}
    extra = lock_with(tmp_path / "pylock.less.toml", "alpha==1.0")
    assert kinds(run_json(extra, world.main)[1]) == {("extra", "beta", "warn")}
    assert run_json(extra, world.main, "--strict")[0] == 1


def test_text_report_of_a_pylock(world: World, tmp_path: Path) -> None:
    lock = world.uv_lock(tmp_path / "pylock.cpu.toml", "alpha==1.0", "beta==2.0", "zope.thing==1.0")
    result = invoke("verify-env", "--lock", lock, "--python", world.main)
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [
        f"Lock:   {lock} (PEP 751)", f"Python: {world.main}",
        "  MISSING            zope-thing==1.0 is locked (line 17) but not installed",
        "MISMATCH: 1 error(s), 0 warning(s) (3 locked, 2 installed, 0 excluded by markers)"]


def test_environments_none_of_which_holds(world: World, tmp_path: Path) -> None:
    lock = write_pylock(tmp_path / "pylock.toml", [alpha(world), beta(world)],
                        environments=["sys_platform == 'win32'", "sys_platform == 'darwin'"])
    code, report = run_json(lock, world.main)
    assert code == 1 and kinds(report) == {("environment", "python", "fail")}
    finding = report["findings"][0]
    assert finding["threshold"] == "sys_platform == 'win32' | sys_platform == 'darwin'"
    assert finding["reading"].startswith(f"{sys.platform} ")
    write_pylock(lock, [alpha(world), beta(world)], environments=["sys_platform == 'win32'",
                                                                  "sys_platform == "
                                                                  f"'{sys.platform}'"])
    assert run_json(lock, world.main) == (0, {**report, "ok": True, "findings": [], "counts": {
        **report["counts"], "errors": 0}})


def test_requires_python_of_the_lock_and_of_a_package(world: World, tmp_path: Path) -> None:
    here = ".".join(map(str, sys.version_info[:3]))
    lock = write_pylock(tmp_path / "pylock.toml",
                        [alpha(world), beta(world)], requires_python=">=3.99")
    code, report = run_json(lock, world.main)
    assert code == 1 and report["findings"] == [{
        "section": "env", "name": "requires-python", "where": "python", "verdict": "fail",
        "threshold": ">=3.99",
        "reading": here, "unit": "", "source": None, "gpu": None, "fix": None, "provider": None,
        "why": f"the lock requires Python >=3.99 and this interpreter is {here}; use a Python "
               "that meets it, or relock on this one"}]
    write_pylock(lock,
                 [alpha(world, requires_python=">=3.99"), beta(world)], requires_python=f"=={here}")
    code, report = run_json(lock, world.main)
    assert code == 1 and kinds(report) == {("requires-python", "alpha", "fail")}
    write_pylock(lock,
                 [alpha(world, requires_python=">=3.99", marker='sys_platform == "win32"'),
                  beta(world)])
    # its marker is false: skipped
    assert kinds(run_json(lock, world.main)[1]) == {("extra", "alpha", "warn")}


def test_versions_under_markers_and_dependency_groups(world: World, tmp_path: Path) -> None:
    old = package("alpha", "0.9", world.w["alpha09"], marker='python_version < "3"')
    lock = write_pylock(tmp_path / "pylock.toml",
                        [old, alpha(world, marker='python_version >= "3"'), beta(world)])
    code, report = run_json(lock, world.main)
    assert code == 0 and report["findings"] == [] and report["counts"]["excluded_by_marker"] == 1
    dev = beta(world, marker='"dev" in dependency_groups')
    write_pylock(lock, [alpha(world), dev], default_groups=["dev"])
    # dependency_groups is the default groups
    assert run_json(lock, world.main)[1]["findings"] == []
    write_pylock(lock, [alpha(world), dev])
    assert kinds(run_json(lock, world.main)[1]) == {("extra", "beta", "warn")}
    write_pylock(lock, [alpha(world), beta(world, marker='"gpu" in extras')], extras=["gpu"])
    # no extra is selected
    assert kinds(run_json(lock, world.main)[1]) == {("extra", "beta", "warn")}


def test_vcs_entry_against_the_installed_commit(world: World, tmp_path: Path) -> None:
    url = world.repo.as_uri()
    same = world.uv_lock(tmp_path / "pylock.same.toml", f"gamma @ git+{url}@{world.commits[0]}",
                         "alpha==1.0",
                         "beta==2.0")
    code, report = run_json(same, world.git)
    assert code == 0 and kinds(report) == {("direct-source", "gamma", "warn")}
    assert report["findings"][0]["threshold"] == f"git {url}@{world.commits[0]}"
    assert run_json(same, world.git, "--strict")[0] == 1
    other = world.pip_lock(tmp_path / "pylock.other.toml", f"gamma @ git+{url}@{world.commits[1]}",
                           "alpha==1.0",
                           "beta==2.0")
    code, report = run_json(other, world.git)
    line = parse_lock(other).pins["gamma"].line  # pip sorts the packages by name
    assert code == 1 and [(f["name"], f["why"]) for f in report["findings"]] == [
        ("source",
         f"gamma: locked from git {url}@{world.commits[1]} (line {line}) but the installed git "
         f"commit is {world.commits[0]}; reinstall it from the lock")]
    assert kinds(run_json(other, world.main)[1]) == {("missing", "gamma", "fail")}


def test_directory_and_archive_entries(world: World, tmp_path: Path) -> None:
    lock = world.uv_lock(tmp_path / "pylock.toml", f"alpha @ {world.w['alpha'].as_uri()}",
                         f"gamma @ {world.repo.as_uri()}", "beta==2.0")
    for python in (world.pipdirect, world.uvdirect):
        code, report = run_json(lock, python)
        assert code == 0 and kinds(report) == {("direct-source", "alpha", "warn"),
                                               ("direct-source", "gamma", "warn")}
    code, report = run_json(lock, world.main)  # alpha from the index, gamma absent
    assert code == 1 and kinds(report) == {("source", "alpha", "fail"),
                                           ("missing", "gamma", "fail")}
    archive = {"path": str(world.w["alpha09"]), "hashes": {"sha256": sha256(world.w["alpha"])}}
    moved = write_pylock(tmp_path / "pylock.moved.toml", [
        {"name": "gamma", "directory": {"path": "elsewhere"}}, beta(world),
        {"name": "alpha", "archive": archive}])
    code, report = run_json(moved, world.pipdirect)
    assert code == 1 and {(f["name"], f["where"], f["reading"]) for f in report["findings"]} == {
        ("source", "gamma", world.repo.as_uri()), ("source", "alpha", world.w["alpha"].as_uri())}


def test_newer_minor_is_read_with_a_warning(world: World, tmp_path: Path) -> None:
    lock = write_pylock(tmp_path / "pylock.toml", [alpha(world, future="x"), beta(world)],
                        lock_version="1.3",
                        signed_by="someone")
    warning = (f"{lock}: lock-version 1.3 is newer than the 1.0 kdkit knows; keys it does not know "
               "were ignored: signed-by, packages.future")
    result = invoke("verify-env", "--lock", lock, "--python", world.main, "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["warnings"] == [warning]
    assert result.stderr == f"warning: {warning}\n"
    text = invoke("verify-env", "--lock", lock, "--python", world.main)
    assert text.exit_code == 0 and text.stdout.splitlines()[2] == f"  lock (warning)     {warning}"


def test_direct_source_and_format_in_json(world: World, tmp_path: Path) -> None:
    lock = world.uv_lock(tmp_path
                         / "pylock.toml", f"gamma @ git+{world.repo.as_uri()}@{world.commits[0]}")
    code, report = run_json(lock, world.git)
    assert code == 0 and report["format"] == "pylock" and report["warnings"] == []
    assert [f for f in report["findings"] if f["name"] == "direct-source"] == [{
        "section": "env", "name": "direct-source", "where": "gamma", "verdict": "warn",
        "threshold": str(parse_lock(
            lock).pins["gamma"].source), "reading": world.repo.as_uri(), "unit": "",
        "source": "line 7", "gpu": None,
        "fix": None, "provider": None,
        "why": f"gamma 3.0 is installed from git {world.repo.as_uri()}@{world.commits[0]}, as "
               "locked (line 7); no index release and hash prove that code, only where it came "
               "from"}]
    requirements = tmp_path / "lock.txt"
    requirements.write_text(
        f"alpha==1.0 --hash=sha256:{sha256(world.w['alpha'])}\n", encoding="utf-8")
    assert run_json(requirements, world.main)[1]["format"] == "requirements"


# ---------------------------------------------------------------- bad input: one line, exit 2


def _hashless(v: World) -> str:
    return (
        '[[packages]]\nname = "alpha"\nversion = "1.0"\nwheels = [{ url = '
        f'"{v.w["alpha"].as_uri()}" }}]\n')


def _hashed(v: World) -> str:
    return _hashless(v).replace(" }]", f', hashes = {{ sha256 = "{sha256(v.w["alpha"])}" }} }}]')


HEAD = 'lock-version = "1.0"\ncreated-by = "t"\n'
# case -> (file name, content (bytes, or text made from the world), the line after "Error: <path>")
BAD: dict[str, tuple[str, Any, str]] = {
    "not-utf8": ("pylock.toml",
                 b'lock-version = "1.0"\n# \xff\xfe\n', ": lock is not UTF-8 (byte at offset 23); "
                 "save it as UTF-8"),
    "binary": ("pylock.toml",
               b"\x00\x01PK\x03\x04" * 40, ": a binary file (NUL bytes), not a lock; give "
               "requirements/<backend>.txt or a pylock.toml"),
    "toml-syntax": ("pylock.toml",
                    lambda v: HEAD
                    + '[[packages]]\nname = "alpha\n', ":4:14: not valid TOML (Illegal "
                    "character '\\n'); fix the file or write it again with the tool that made it"),
    "pyproject-named-pylock": ("pylock.toml", lambda v: '[project]\nname = "x"\nversion = "1"\n',
                               ": this is a "
                               "pyproject.toml (project metadata), not a PEP 751 lock: it has no "
                               "lock-version key; give the lock (pylock.toml, or "
                               "requirements/<backend>.txt)"),
    "no-lock-version": ("pylock.x.toml",
                        lambda v: 'created-by = "t"\n[[packages]]\nname = "alpha"\n', ": this is "
                        "TOML, not a PEP 751 lock: it has no lock-version key; give the lock "
                        "(pylock.toml, or requirements/<backend>.txt)"),
    "unknown-major": ("pylock.toml", lambda v: 'lock-version = "2.0"\n',
                      ": lock-version '2.0' is not one kdkit "
                      "reads (major 1, 1.x); write the lock with a tool that writes lock-version "
                      "1.0, or use a kdkit that knows it"),
    "no-packages": ("pylock.toml",
                    lambda v: HEAD, ": no packages array in it; PEP 751 requires one ([[packages]] "
                    "tables, or packages = [] for no dependencies): write it again with the tool "
                    "that made it"),
    "no-name": ("pylock.toml",
                lambda v: HEAD + '\n[[packages]]\nversion = "1.0"\n', ":4: package without a name; "
                'every [[packages]] entry needs name = "..."'),
    "two-sources": ("pylock.toml",
                    lambda v: HEAD + _hashless(v).replace(" }]", ', hashes = { sha256 = "'
                    + sha256(v.w["alpha"]) + '" } }]')
                    + 'vcs = { type = "git", url = "https://x", commit-id = "ab" '
                    '}\n',
                    ":3: alpha: two sources (vcs and wheels); vcs excludes every other, keep one"),
    "no-hashes": ("pylock.toml",
                  lambda v: HEAD + _hashless(v), ":3: alpha: wheel 1 has no hashes; a PEP 751 lock "
                  "hashes every file (relock with `uv pip compile --generate-hashes` or `pip "
                  "lock`)"),
    "bad-hash": ("pylock.toml",
                 lambda v: HEAD + _hashless(v).replace(" }]", ', hashes = { sha256 = "abc" } }]'),
                 ":3: alpha: wheel 1 has a bad sha256 hash 'abc'; expected 64 hex digits"),
    "bad-version": ("pylock.toml",
                    lambda v: HEAD + _hashless(v).replace('"1.0"', '"one"'), ":3: alpha: version "
                    "'one' is not a PEP 440 version; fix it or relock"),
    "bad-marker": ("pylock.toml",
                   lambda v: HEAD + '[[packages]]\nname = "alpha"\nmarker = "extra == \'x\'"\n',
                   ":3: alpha: marker: unknown marker variable 'extra' in \"extra == 'x'\"; fix "
                   "the marker or relock"),
    # what uv refuses too (the hostile round): a version its wheel's name contradicts, none and no named file,
    # no file at all, no created-by (required by the specification), a nesting no lock has
    "version-vs-wheel": ("pylock.toml",
                         lambda v: HEAD
                         + _hashed(v).replace('"1.0"', '"2.0"'), ":3: alpha: version "
                         "2.0 and files named 1.0 disagree; relock"),
    "no-version-no-name": ("pylock.toml",
                           lambda v: HEAD + _hashed(v).replace('version = "1.0"\n', "").replace(
                           v.w["alpha"].as_uri(), "https://x/dl?id=1"),
                           ":3: alpha: no version, and not every file's "
                           'name says one; add version = "..." (PEP 751) or relock'),
    "empty-wheels": ("pylock.toml",
                     lambda v: HEAD
                     + '[[packages]]\nname = "alpha"\nversion = "1.0"\nwheels = []\n',
                     ":3: alpha: no file (wheels is empty and there is no sdist); name where the "
                     "package comes from"),
    "no-created-by": ("pylock.toml",
                      lambda v: 'lock-version = "1.0"\n' + _hashed(v), ": no created-by; PEP 751 "
                      "requires the name of the tool that wrote the lock (write it again with that "
                      "tool)"),
    "too-deep": ("pylock.toml",
                 lambda v: HEAD + "x = " + "[" * 3000 + "]" * 3000 + "\n", ": its tables or arrays "
                 "nest too deep to be a lock; write it again with the tool that made it"),
    "toml-not-named-pylock": ("lock.toml",
                              lambda v: HEAD,
                              ": looks like TOML, not a requirements lock; a PEP 751 "
                              "lock must be named pylock.toml or pylock.<name>.toml"),
    "pyproject-given": ("pyproject.toml", lambda v: '[build-system]\nrequires = []\n',
                        ": this is a pyproject.toml "
                        "(project metadata), not a lock; give the lock: "
                        "requirements/<backend>.txt, or a PEP 751 pylock.toml"),
    "binary-requirements-lock": ("lock.txt",
                                 b"\x00" * 300, ": a binary file (NUL bytes), not a lock; give "
                                 "requirements/<backend>.txt or a pylock.toml"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_one_line_exit_2(world: World, tmp_path: Path, case: str) -> None:
    name, content, said = BAD[case]
    watched = tmp_path / "watched"
    watched.mkdir()
    lock = watched / name
    data = content if isinstance(content, bytes) else content(world).encode()
    lock.write_bytes(data)
    before = tree_snapshot(watched)
    expected = f"Error: {lock}{said}\n"
    done = subprocess.run([sys.executable, "-m", "kdkit.probe", "verify-env", "--lock", str(lock)],
                          capture_output=True, text=True, check=False, cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", expected)
    result = invoke("verify-env", "--lock", lock, "--python", world.main)
    assert (result.exit_code, result.stdout, result.stderr) == (2, "", expected)
    assert tree_snapshot(watched) == before


def test_two_entries_that_both_apply_exit_2(world: World, tmp_path: Path) -> None:
    lock = write_pylock(tmp_path / "pylock.toml", [
        package("alpha", "0.9", world.w["alpha09"], marker='python_version >= "3"'),
        alpha(world, marker=f'sys_platform == "{sys.platform}"'), beta(world)])
    result = invoke("verify-env", "--lock", lock, "--python", world.main)
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert re.match(fr"Error: {re.escape(str(lock))}:\d+: alpha is pinned to 0.9 \(line 4\) and "
                    r"1.0 and both markers "
                    "hold for this interpreter", result.stderr)


def test_python_310_has_no_tomllib(world: World, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Python 3.10 has no tomllib: the import fails as it does there (None in sys.modules)."""
    lock = write_pylock(tmp_path / "pylock.toml", [alpha(world), beta(world)])
    requirements = tmp_path / "lock.txt"
    requirements.write_text("".join(f"{n}=={v} --hash=sha256:{sha256(world.w[k])}\n"
                                    for n, v,
                                    k in (("alpha", "1.0", "alpha"), ("beta", "2.0", "beta"))))
    monkeypatch.setitem(sys.modules, "tomllib", None)
    result = invoke("verify-env", "--lock", lock, "--python", world.main)
    assert (result.exit_code, result.stderr) == (3,
                                                 f"Error: {lock}: reading a pylock.toml needs "
                                                 "Python 3.11 or newer (tomllib); on this Python "
                                                 "use the requirements lock kdkit writes beside it "
                                                 "(requirements/<backend>.txt)\n")
    assert invoke("verify-env", "--lock", requirements, "--python", world.main).exit_code == 0


def test_in_container_form_in_a_venv_of_the_standard_library_only(
    world: World, tmp_path: Path) -> None:
    """The travelling files alone (kdkit.core.layout), run by the inspected venv's python -I: nothing outside the
    standard library is there. With tomllib taken away, as on Python 3.10, the same call exits 3 in one line."""
    layout.copy_to(tmp_path / "code")
    lock = world.uv_lock(tmp_path / "pylock.cpu.toml", "alpha==1.0", "beta==2.0")
    code = ("import sys; sys.path.insert(0, sys.argv[1]); sys.modules.update({} if sys.argv[3] == "
            "'keep' else {'tomllib': None}); from kdkit.probe.entry import main; "
            "sys.exit(main(['verify-env', '--lock', sys.argv[2], '--json']))")
    done = subprocess.run([str(world.main), "-I", "-c", code, str(tmp_path / "code"),
                           str(lock), "keep"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["format"] == "pylock" and json.loads(
        done.stdout)["counts"]["locked"] == 2
    done = subprocess.run([str(world.main), "-I", "-c", code, str(tmp_path / "code"),
                           str(lock), "drop"],
                          capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout) == (3, "")
    assert done.stderr == (f"Error: {lock}: reading a pylock.toml needs Python 3.11 or newer "
                           "(tomllib); on this Python use the requirements lock kdkit writes "
                           "beside it (requirements/<backend>.txt)\n")


def test_a_requirements_lock_loads_neither_tomllib_nor_the_pylock_reader(
    world: World, tmp_path: Path) -> None:
    requirements = tmp_path / "lock.txt"
    requirements.write_text(
        f"alpha==1.0 --hash=sha256:{sha256(world.w['alpha'])}\n", encoding="utf-8")
    pylock = write_pylock(tmp_path / "pylock.toml", [alpha(world)])
    loaded = {}
    for lock in (requirements, pylock):
        done = subprocess.run([sys.executable, "-X", "importtime", "-m", "kdkit.probe",
                               "verify-env", "--lock",
                               str(lock), "--python", str(world.main)], capture_output=True,
                              text=True, check=False)
        assert done.returncode in (0, 1), done.stderr
        loaded[lock.name] = {line.split("|")[-1].strip() for line in done.stderr.splitlines()
                             if "|" in line}
    assert {"tomllib", "kdkit.core.pylock", "kdkit.probe.env.pylockcheck"} <= loaded["pylock.toml"]
    assert not {"tomllib", "kdkit.core.pylock", "kdkit.probe.env.pylockcheck"} & loaded["lock.txt"]


# ---------------------------------------------------------------- agreement with uv


Plan = tuple[set[str], set[str]] | str
CHANGES = {"missing", "version", "direct-url", "duplicate", "source"}
REFUSALS = {"environment", "requires-python"}


def kdkit_plan(lock: Path, python: Path, _v: World) -> Plan:
    result = invoke("verify-env", "--lock", lock, "--python", python, "--json")
    if result.exit_code == 2:
        return "refused"
    findings = json.loads(result.stdout)["findings"]
    if {f["name"] for f in findings} & REFUSALS:
        return "refused"
    return ({f["where"] for f in findings if f["name"] in CHANGES},
            {f["where"] for f in findings if f["name"] == "extra"})


def uv_plan(lock: Path, python: Path, v: World) -> Plan:
    done = subprocess.run([str(UV), "pip", "sync", "--dry-run", "--offline", "--python",
                           str(python), str(lock)],
                          capture_output=True, text=True, check=False, env=v.env)
    said = (done.stdout + done.stderr).splitlines()
    if done.returncode != 0:
        assert any(line.startswith("error:") for line in said), said
        return "refused"
    # ~: reinstalled in place
    install = _names([line[3:] for line in said if line.startswith((" + ", " ~ "))])
    return install, _names([line[3:] for line in said if line.startswith(" - ")]) - install


def _git(v: World, tmp: Path, commit: int) -> Path:
    return v.uv_lock(tmp / "pylock.toml", f"gamma @ git+{v.repo.as_uri()}@{v.commits[commit]}",
                     "alpha==1.0",
                     "beta==2.0")


def _direct(v: World, tmp: Path) -> Path:
    return v.uv_lock(tmp / "pylock.toml",
                     f"alpha @ {v.w['alpha'].as_uri()}", f"gamma @ {v.repo.as_uri()}", "beta==2.0")


def _hand(*packages: Any, **top: Any) -> Any:
    return lambda v, tmp: write_pylock(tmp / "pylock.toml", [make(v) for make in packages], **top)


def _old(marker: str) -> Any:
    return lambda v: package("alpha", "0.9", v.w["alpha09"], marker=marker)


NONE: Plan = (set(), set())
# case -> (venv, how the lock is made, the plan both agree on)
CASES: dict[str, tuple[str, Any, Plan]] = {
    "uv-lock-match": ("main", lambda v,
                      t: v.uv_lock(t / "pylock.toml", "alpha==1.0", "beta==2.0"), NONE),
    "pip-lock-match": ("main", lambda v,
                       t: v.pip_lock(t / "pylock.toml", "alpha==1.0", "beta==2.0"), NONE),
    "missing": ("main", lambda v,
                t: v.uv_lock(t / "pylock.toml", "alpha==1.0", "beta==2.0", "zope.thing==1.0"),
                ({"zope-thing"}, set())),
    "version": ("main", lambda v, t: v.pip_lock(t / "pylock.toml", "alpha==1.0", "beta==2.1"),
                ({"beta"}, set())),
    "extra": ("main", lambda v, t: v.uv_lock(t / "pylock.toml", "alpha==1.0"), (set(), {"beta"})),
    "environment-not-matching": ("main",
                                 _hand(alpha, beta, environments=["sys_platform == 'win32'"]),
                                 "refused"),
    "requires-python-not-met": ("main", _hand(alpha, beta, requires_python=">=3.99"), "refused"),
    "package-requires-python": ("main",
                                _hand(lambda v: alpha(v, requires_python=">=3.99"), beta),
                                "refused"),
    "package-requires-python-marker-false": (
        "main",
        _hand(lambda v: alpha(v, requires_python=">=3.99", marker='python_version < "3"'), beta),
        (set(), {"alpha"})),
    "two-versions-under-markers": ("main", _hand(_old('python_version < "3"'),
                                                 lambda v: alpha(v, marker='python_version >= "3"'),
                                                 beta), NONE),
    "the-other-version-applies": ("main", _hand(_old('python_version >= "3"'),
                                                lambda v: alpha(v, marker='python_version < "3"'),
                                                beta),
                                  ({"alpha"}, set())),
    "both-versions-apply": ("main",
                            _hand(_old('python_version >= "3"'),
                                  lambda v: alpha(v, marker='os_name != "x"'),
                                  beta), "refused"),
    "default-dependency-group": ("main",
                                 _hand(alpha,
                                       lambda v: beta(v, marker='"dev" in dependency_groups'),
                                       default_groups=["dev"]), NONE),
    "extra-not-selected": ("main",
                           _hand(alpha, lambda v: beta(v, marker='"gpu" in extras'),
                                 extras=["gpu"]),
                           (set(), {"beta"})),
    "newer-minor-lock-version": ("main", _hand(alpha, beta, lock_version="1.1"), NONE),
    "unknown-major-lock-version": ("main", _hand(alpha, beta, lock_version="2.0"), "refused"),
    "vcs-same-commit": ("git", lambda v, t: _git(v, t, 0), NONE),
    "vcs-other-commit": ("git", lambda v, t: _git(v, t, 1), ({"gamma"}, set())),
    "directory-and-archive-installed-by-uv": ("uvdirect", _direct, NONE),
    "directory-and-archive-installed-by-pip": ("pipdirect", _direct, NONE),
    "index-lock-file-install": ("pipdirect", lambda v,
                                t: v.uv_lock(t / "pylock.toml", "alpha==1.0", "beta==2.0"),
                                (set(), {"gamma"})),
}
# (case, tool) -> the plan that tool makes instead, and why it differs on purpose
DIFFERENCES: dict[tuple[str, str], tuple[Plan, str]] = {
    ("directory-and-archive-installed-by-pip", "uv"): (
        ({"alpha", "gamma"}, set()),
        "uv reinstalls a local folder or file it did not stamp itself (its "
        "uv_cache.json beside the metadata) in case it changed; kdkit proves the place named in "
        "direct_url.json and says, with direct-source, that no hash proves the code"),
    ("index-lock-file-install", "kdkit"): (
        ({"alpha"}, {"gamma"}),
        "alpha is locked from index files but installed from its file: direct-url, as for a "
        "requirements lock; uv keeps a file install whose version and hash match"),
}


@pytest.mark.parametrize("tool", ["kdkit", "uv"])
@pytest.mark.parametrize("case", list(CASES))
def test_kdkit_and_uv_agree(world: World, tmp_path: Path, case: str, tool: str) -> None:
    where, make_lock, agreed = CASES[case]
    lock = make_lock(world, tmp_path)
    expected = DIFFERENCES.get((case, tool), (agreed, ""))[0]
    plan = {"kdkit": kdkit_plan, "uv": uv_plan}[tool](lock, getattr(world, where), world)
    assert plan == expected
