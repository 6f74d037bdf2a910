"""The same locks and venvs through kdkit verify-env, `pip-sync --dry-run` and `uv pip sync --dry-run`.

Each tool's plan is reduced to (changes, removals) by normalized name: a name it would install or
reinstall, and a name it would only uninstall. kdkit's changes are its missing, version, direct-url and
duplicate findings; its removals its extra findings. Where the three disagree, the case names the
deliberate difference in ``DIFFERENCES``; everywhere else the plans must be equal.

uv comes from PyPI into the test venv (`pip install uv`); without it the uv column is skipped, loudly.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from kdkit.core import proc
from kdkit.core.lockfile import normalize_name
from tests.conftest import invoke
from tests.tinywheels import build_wheel, lock_line, make_venv, pip_install

BIN = Path(__file__).resolve().parents[2] / ".venv" / "bin"
PIP_SYNC = shutil.which("pip-sync", path=str(BIN)) or "pip-sync"
UV = shutil.which("uv", path=str(BIN)) or shutil.which("uv")
Plan = tuple[set[str], set[str]]


@dataclass
class Venvs:
    wheels: Path
    w: dict[str, Path]
    main: Path  # alpha 1.0, beta 2.0 from the index folder
    direct: Path  # the same, alpha installed from its file (PEP 610 direct_url.json)
    stale: Path  # the same, plus a stale beta-1.9.dist-info beside beta-2.0's


def _stale_copy(python: Path) -> None:
    site = next(python.parents[1].glob("lib/python*/site-packages"))
    shutil.copytree(site / "beta-2.0.dist-info", site / "beta-1.9.dist-info")
    meta = site / "beta-1.9.dist-info" / "METADATA"
    meta.write_text(
        meta.read_text(encoding="utf-8").replace("Version: 2.0", "Version: 1.9"), encoding="utf-8")


@pytest.fixture(scope="session")
def venvs(tmp_path_factory: pytest.TempPathFactory) -> Venvs:
    root = tmp_path_factory.mktemp("lock-agreement")
    wheels = root / "wheels"
    w = {"alpha": build_wheel(wheels, "alpha", "1.0"),
         "alpha09": build_wheel(wheels, "alpha", "0.9"),
         "beta": build_wheel(wheels, "beta", "2.0")}
    pythons = {}
    for name in ("main", "direct", "stale"):
        pythons[name] = make_venv(root / name, with_pip=True)  # pip-sync runs the target's own pip
        pip_install(pythons[name], wheels,
                    ["beta==2.0"] + ([] if name == "direct" else ["alpha==1.0"]))
    subprocess.run([sys.executable, "-m", "pip", "--python", str(pythons["direct"]), "install",
                    "-q",
                    "--no-index", "--no-deps", str(w["alpha"])], check=True)
    _stale_copy(pythons["stale"])
    return Venvs(wheels, w, pythons["main"], pythons["direct"], pythons["stale"])


def _names(lines: list[str]) -> set[str]:
    return {normalize_name(re.split(r"[=<>!~ ;@]", line.strip(), maxsplit=1)[0]) for line in lines
            if line.strip()}


def pip_sync_plan(lock: Path, python: Path, _v: Venvs) -> Plan:
    done = proc.run(
        [PIP_SYNC, "--dry-run", "--python-executable", str(python), str(lock)], timeout=300)
    assert done.returncode in (0, 1), done.stderr
    section: dict[str, list[str]] = {"install": [], "uninstall": []}
    current: list[str] | None = None
    for line in done.stdout.splitlines():
        if line.startswith(("Would install", "Would uninstall")):
            current = section["uninstall" if line.startswith("Would uninstall") else "install"]
        elif line.startswith("  ") and current is not None:
            current.append(line)
    install = _names(section["install"])
    return install, _names(section["uninstall"]) - install


def uv_plan(lock: Path, python: Path, v: Venvs) -> Plan:
    done = proc.run([str(UV), "pip", "sync", "--dry-run", "--offline", "--no-index", "--find-links",
                     str(v.wheels),
                     "--python", str(python), str(lock)], timeout=300)
    assert done.returncode == 0, done.stderr
    said = (done.stdout + done.stderr).splitlines()
    install = _names([line[3:] for line in said if line.startswith(" + ")])
    return install, _names([line[3:] for line in said if line.startswith(" - ")]) - install


def kdkit_plan(lock: Path, python: Path, _v: Venvs) -> Plan:
    result = invoke("verify-env", "--lock", lock, "--python", python, "--json")
    assert result.exit_code in (0, 1), result.stdout
    findings = json.loads(result.stdout)["findings"]
    changes = {"missing", "version", "direct-url", "duplicate"}
    return ({normalize_name(f["where"]) for f in findings if f["name"] in changes},
            {normalize_name(f["where"]) for f in findings if f["name"] == "extra"})


def _alpha(v: Venvs, marker: str | None = None) -> str:
    return lock_line("alpha", "1.0", v.w["alpha"], marker)


def _beta(v: Venvs) -> str:
    return lock_line("beta", "2.0", v.w["beta"])


WIN, LINUX = 'sys_platform == "win32"', 'sys_platform == "linux"'
# case -> (venv, lock lines, the plan all three agree on)
CASES = {
    "all-match": ("main", lambda v: [_alpha(v), _beta(v)], (set(), set())),
    "same-pin-two-markers": ("main", lambda v: [_alpha(v, WIN), _alpha(v, LINUX), _beta(v)],
                             (set(), set())),
    "same-pin-two-markers-reversed": ("main",
                                      lambda v: [_alpha(v, LINUX), _alpha(v, WIN), _beta(v)],
                                      (set(), set())),
    "universal-two-versions": ("main",
                               lambda v: [lock_line("alpha", "0.9",
                                                    v.w["alpha09"], 'python_version < "3"'),
                                          _alpha(v, 'python_version >= "3"'), _beta(v)],
                               (set(), set())),
    "universal-other-version-applies": (
        "main", lambda v: [lock_line("alpha", "0.9", v.w["alpha09"], 'python_version >= "3"'),
                           _alpha(v, 'python_version < "3"'), _beta(v)], ({"alpha"}, set())),
    "require-hashes-and-bom": ("main", lambda v: ["\ufeff--require-hashes\n", _alpha(v), _beta(v)],
                               (set(), set())),
    "direct-url-install": ("direct", lambda v: [_alpha(v), _beta(v)], ({"alpha"}, set())),
    "stale-second-dist-info": ("stale", lambda v: [_alpha(v), _beta(v)], ({"beta"}, set())),
}
# (case, tool) -> the plan that tool makes instead, and why it differs on purpose
DIFFERENCES: dict[tuple[str, str], tuple[Plan, str]] = {
    ("direct-url-install", "uv"): ((set(), set()),
                                   "uv keeps a file install whose version and hash match; "
                                   "kdkit follows pip-sync: the lock names an index release"),
    ("stale-second-dist-info", "pip-sync"): ((set(), set()),
                                             "pip-sync sees one beta; kdkit follows uv: the "
                                             "stale metadata can win at import time"),
}
TOOLS = {"kdkit": kdkit_plan, "pip-sync": pip_sync_plan, "uv": uv_plan}


@pytest.mark.parametrize("tool", list(TOOLS))
@pytest.mark.parametrize("case", list(CASES))
def test_three_tools_agree(venvs: Venvs, tmp_path: Path, case: str, tool: str) -> None:
    if tool == "uv" and UV is None:
        pytest.skip(
            "uv is not installed in the test venv (`pip install uv`): the uv column is NOT checked")
    where, make_lines, agreed = CASES[case]
    lock = tmp_path / "lock.txt"
    lock.write_text("".join(make_lines(venvs)), encoding="utf-8")
    expected = DIFFERENCES.get((case, tool), (agreed, ""))[0]
    assert TOOLS[tool](lock, getattr(venvs, where), venvs) == expected


def test_direct_url_and_stale_are_errors_with_strict(venvs: Venvs, tmp_path: Path) -> None:
    lock = tmp_path / "lock.txt"
    lock.write_text(_alpha(venvs) + _beta(venvs), encoding="utf-8")
    for python, kind, name in ((venvs.direct, "direct-url", "alpha"),
                               (venvs.stale, "duplicate", "beta")):
        plain = json.loads(
            invoke("verify-env", "--lock", lock, "--python", python, "--json").stdout)
        assert [(f["name"], f["where"], f["verdict"])
                for f in plain["findings"]] == [(kind, name, "warn")]
        assert plain["ok"] is True
        strict = invoke("verify-env", "--lock", lock, "--python", python, "--json", "--strict")
        assert strict.exit_code == 1 and json.loads(
            strict.stdout)["findings"][0]["verdict"] == "fail"
