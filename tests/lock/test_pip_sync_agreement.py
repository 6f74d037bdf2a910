"""kdkit verify-env agrees with `pip-sync --dry-run` on the same venv and lock.

pip-sync's "Would install" is kdkit's missing + version findings; its "Would
uninstall" is kdkit's extra findings. Two cases are deliberately stricter in kdkit
and stated as such below: a lock pin without a local label is not satisfied by
an installed labelled build (pip-sync, following PEP 440, accepts it), and torch's
build is checked against its label (pip-sync reads only the version string).
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from kdkit.core import proc
from kdkit.core.lockfile import normalize_name
from tests.conftest import invoke
from tests.tinywheels import build_wheel, lock_line, make_venv, pip_install, torch_wheel

PIP_SYNC = shutil.which("pip-sync",
                        path=str(Path(__file__).resolve().parents[2] / ".venv"
                                 / "bin")) or "pip-sync"


@dataclass
class Venvs:
    wheels: Path
    w: dict[str, Path]
    # alpha 1.0, beta 2.0, gamma 3.0, torch 2.8.0+cpu (a CPU build), plus pip and setuptools
    main: Path
    lying: Path  # torch 2.8.0+cu128 whose torch/version.py says CPU-only


@pytest.fixture(scope="session")
def venvs(tmp_path_factory: pytest.TempPathFactory) -> Venvs:
    root = tmp_path_factory.mktemp("agreement")
    wheels = root / "wheels"
    w = {"alpha": build_wheel(wheels, "alpha", "1.0"), "beta": build_wheel(wheels, "beta", "2.0"),
         "beta21": build_wheel(wheels, "beta", "2.1"), "gamma": build_wheel(wheels, "gamma", "3.0"),
         "delta": build_wheel(wheels, "delta", "1.0"), "torch": torch_wheel(wheels, "2.8.0+cpu"),
         "torch-cu128": torch_wheel(root / "lying-wheels", "2.8.0+cu128", cuda=None)}
    main = make_venv(root / "main", with_pip=True)
    pip_install(main, wheels, ["alpha==1.0", "beta==2.0", "gamma==3.0", "torch==2.8.0+cpu"])
    lying = make_venv(root / "lying", with_pip=True)
    pip_install(lying, root / "lying-wheels", ["torch==2.8.0+cu128"])
    return Venvs(wheels, w, main, lying)


def pip_sync_plan(lock: Path, python: Path) -> tuple[set[str], set[str]]:
    """(would install, would uninstall) by normalized name, from pip-sync's dry run."""
    done = proc.run(
        [PIP_SYNC, "--dry-run", "--python-executable", str(python), str(lock)], timeout=300)
    assert done.returncode in (0, 1), done.stderr
    install: set[str] = set()
    uninstall: set[str] = set()
    current: set[str] | None = None
    for line in done.stdout.splitlines():
        if line.startswith("Would install"):
            current = install
        elif line.startswith("Would uninstall"):
            current = uninstall
        elif line.startswith("  ") and current is not None:
            current.add(normalize_name(re.split(r"[=<>!~ ;]", line.strip(), maxsplit=1)[0]))
    return install, uninstall


def kdkit_plan(
    lock: Path, python: Path) -> tuple[set[str], set[str], list[dict]]:  # type: ignore[type-arg]
    result = invoke("verify-env", "--lock", lock, "--python", python, "--json")
    findings = json.loads(result.stdout)["findings"]
    install = {normalize_name(f["where"]) for f in findings if f["name"] in ("missing", "version")}
    uninstall = {normalize_name(f["where"]) for f in findings if f["name"] == "extra"}
    return install, uninstall, findings


def write_lock(folder: Path, lines: list[str]) -> Path:
    path = folder / "lock.txt"
    path.write_text("".join(lines), encoding="utf-8")
    return path


def full(v: Venvs) -> list[str]:
    return [lock_line("alpha", "1.0", v.w["alpha"]), lock_line("beta", "2.0", v.w["beta"]),
            lock_line("gamma", "3.0", v.w["gamma"]), lock_line("torch", "2.8.0+cpu", v.w["torch"])]


CASES = {
    "all-match": (lambda v: full(v), set(), set()),
    "one-missing": (lambda v: [*full(v), lock_line("delta", "1.0", v.w["delta"])],
                    {"delta"}, set()),
    "version-mismatch": (lambda v: [full(v)[0], lock_line("beta", "2.1", v.w["beta21"]),
                                    *full(v)[2:]],
                         {"beta"}, set()),
    "one-extra": (lambda v: [ln for ln in full(v) if not ln.startswith("gamma")], set(), {"gamma"}),
    "marker-excludes-missing-line": (
        lambda v: [*full(v), lock_line("delta", "1.0", v.w["delta"], 'python_version < "3.0"')],
        set(), set()),
    "marker-excludes-installed-line": (
        lambda v: [lock_line("alpha", "1.0", v.w["alpha"], 'sys_platform == "win32"'),
                   *full(v)[1:]],
        set(), {"alpha"}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_agrees_with_pip_sync(venvs: Venvs, tmp_path: Path, case: str) -> None:
    make_lines, install, uninstall = CASES[case]
    lock = write_lock(tmp_path, make_lines(venvs))
    assert pip_sync_plan(lock, venvs.main) == (install, uninstall)
    ours_install, ours_uninstall, _findings = kdkit_plan(lock, venvs.main)
    assert (ours_install, ours_uninstall) == (install, uninstall)


def test_stricter_unlabelled_pin(venvs: Venvs, tmp_path: Path) -> None:
    """Deliberately stricter: `torch==2.8.0` with `2.8.0+cpu` installed. pip-sync (PEP 440) is satisfied;
    kdkit reports a version mismatch, because the label is the build."""
    lines = [*full(venvs)[:3], lock_line("torch", "2.8.0", venvs.w["torch"])]
    lock = write_lock(tmp_path, lines)
    assert pip_sync_plan(lock, venvs.main) == (set(), set())
    install, uninstall, findings = kdkit_plan(lock, venvs.main)
    assert (install, uninstall) == ({"torch"}, set())
    assert {(f["name"], f["verdict"])
            for f in findings} == {("version", "fail"), ("torch-build", "warn")}


def test_stricter_torch_build(venvs: Venvs, tmp_path: Path) -> None:
    """Deliberately stricter: the version string says +cu128, torch/version.py says CPU-only.
    pip-sync reads only the version and is satisfied; kdkit reports the build."""
    lock = write_lock(tmp_path, [lock_line("torch", "2.8.0+cu128", venvs.w["torch-cu128"])])
    assert pip_sync_plan(lock, venvs.lying) == (set(), set())
    install, uninstall, findings = kdkit_plan(lock, venvs.lying)
    assert (install, uninstall) == (set(), set())
    assert [(f["name"], f["verdict"]) for f in findings] == [("torch-build", "fail")]


def test_pip_and_setuptools_are_not_extras(venvs: Venvs, tmp_path: Path) -> None:
    """Both tools leave the installer's own packages alone (the venvs were made with pip)."""
    lock = write_lock(tmp_path, full(venvs))
    result = invoke("verify-env", "--lock", lock, "--python", venvs.main, "--json", "--strict")
    report = json.loads(result.stdout)
    # pip (and setuptools) are there
    assert result.exit_code == 0 and report["counts"]["installed"] >= 5
