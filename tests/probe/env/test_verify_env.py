"""`kdkit verify-env`: a lock against real venvs holding tiny wheels built here.

The inspected venv is made with ``--without-pip`` and holds only the test wheels,
and one test runs verify-env inside it under ``python -I`` with nothing but a copy
of the kdkit package on sys.path: any import outside the standard library fails.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kdkit.core.lockfile import Pin
from kdkit.probe.env.verify import Installed, torch_build_finding
from tests.conftest import REPO, invoke, tree_snapshot
from tests.core.test_jsonio import _special
from tests.tinywheels import build_wheel, lock_line, make_venv, pip_install, torch_wheel


class Env:
    """One bare venv and the wheels it was built from."""

    def __init__(self, root: Path) -> None:
        self.wheels = root / "wheels"
        self.w = {
            "alpha": build_wheel(self.wheels, "alpha", "1.0"),
            "beta": build_wheel(self.wheels, "beta", "2.0"),
            "beta21": build_wheel(self.wheels, "beta", "2.1"),
            "gamma": build_wheel(self.wheels, "gamma", "3.0"),
            "delta": build_wheel(self.wheels, "delta", "1.0"),
            "zope": build_wheel(self.wheels, "zope.thing", "1.0"),
            "torch": torch_wheel(self.wheels, "2.8.0+cpu"),
        }
        self.python = make_venv(root / "venv", with_pip=False)
        pip_install(self.python, self.wheels,
                    ["alpha==1.0", "beta==2.0", "gamma==3.0", "zope.thing==1.0",
                     "torch==2.8.0+cpu"])

    def lock(self, folder: Path, *lines: str) -> Path:
        path = folder / "lock.txt"
        path.write_text("# kdkit: backend = cpu\n" + "".join(lines), encoding="utf-8")
        return path

    def all_lines(self) -> list[str]:
        return [lock_line("alpha", "1.0", self.w["alpha"]),
                lock_line("Beta", "2.0", self.w["beta"]),
                lock_line("gamma", "3.0", self.w["gamma"]),
                lock_line("Zope_Thing", "1.0", self.w["zope"]),
                lock_line("torch", "2.8.0+cpu", self.w["torch"])]


@pytest.fixture(scope="session")
def env(tmp_path_factory: pytest.TempPathFactory) -> Env:
    return Env(tmp_path_factory.mktemp("verify-env"))


def run_json(lock: Path, python: Path, *extra: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    result = invoke("verify-env", "--lock", lock, "--python", python, "--json", *extra)
    return result.exit_code, json.loads(result.stdout)


def kinds(report: dict) -> set[tuple[str, str, str]]:  # type: ignore[type-arg]
    return {(f["name"], f["where"], f["verdict"]) for f in report["findings"]}


def test_match_through_python_option(env: Env, tmp_path: Path) -> None:
    code, report = run_json(env.lock(tmp_path, *env.all_lines()), env.python)
    assert code == 0, report
    assert report["ok"] is True and report["findings"] == []
    assert report["counts"] == {"locked": 5, "installed": 5, "excluded_by_marker": 0,
                                "errors": 0, "warnings": 0}


def test_runs_isolated_inside_the_inspected_venv(env: Env, tmp_path: Path) -> None:
    """python -I in a venv that has nothing but the locked wheels: only the standard library is there."""
    copy = tmp_path / "probe"
    shutil.copytree(REPO / "kdkit", copy / "kdkit", ignore=shutil.ignore_patterns("__pycache__"))
    lock = env.lock(tmp_path, *env.all_lines()[:-1])  # torch left out of the lock: an extra
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from kdkit.probe.entry import main; "
            "sys.exit(main(['verify-env', '--lock', sys.argv[2]]))")
    done = subprocess.run([str(env.python), "-I", "-c", code, str(copy), str(lock)],
                          capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-2:] == [
        "  extra (warning)    torch 2.8.0+cpu is installed but not locked",
        "MATCH: 0 error(s), 1 warning(s) (4 locked, 5 installed, 0 excluded by markers)",
    ]


def test_cwd_is_no_part_of_the_environment(env: Env, tmp_path: Path) -> None:
    """`python -m kdkit.probe` puts the cwd first on sys.path; a stale click.egg-info there is not installed
    (https://docs.python.org/3/using/cmdline.html#cmdoption-m). kdkit itself comes from that cwd here."""
    shutil.copytree(REPO / "kdkit", tmp_path / "kdkit",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "click.egg-info").mkdir()
    (tmp_path / "click.egg-info"
     / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: click\nVersion: 7.0\n\n")
    lock = env.lock(tmp_path, *env.all_lines())
    done = subprocess.run([str(env.python), "-m", "kdkit.probe", "verify-env", "--lock", str(lock),
                           "--strict",
                           "--json"], capture_output=True, text=True, check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["counts"]["installed"] == 5


def test_each_planted_difference(env: Env, tmp_path: Path) -> None:
    lock = env.lock(
        tmp_path,
        lock_line("alpha", "1.0", env.w["alpha"]),
        lock_line("beta", "2.1", env.w["beta21"]),  # version mismatch
        lock_line("delta", "1.0", env.w["delta"]),  # missing
        lock_line("zope.thing", "1.0", env.w["zope"]),
        lock_line("torch", "2.8.0+cu128", env.w["torch"]),  # local label and build mismatch
    )  # gamma installed, not locked: extra
    code, report = run_json(lock, env.python)
    assert code == 1
    assert kinds(report) == {("version", "beta", "fail"), ("missing", "delta", "fail"),
                             ("version", "torch", "fail"), ("torch-build", "torch", "fail"),
                             ("extra", "gamma", "warn")}
    by_kind = {(f["name"], f["where"]): f for f in report["findings"]}
    assert by_kind[("version", "beta")] == {"section": "env", "name": "version", "where": "beta",
                                            "verdict": "fail",
                                            "why": "beta: locked 2.1 (line 4), installed 2.0",
                                            "threshold": "2.1",
                                            "reading": "2.0", "unit": "", "source": "line 4",
                                            "gpu": None,
                                            "fix": None, "provider": None}
    assert by_kind[("torch-build", "torch")]["why"] == (
        "locked +cu128 (a CUDA 12.8 build) but the installed torch is a CPU-only build "
        "(torch.version.cuda=None, hip=None); reinstall from the lock")


def test_text_report(env: Env, tmp_path: Path) -> None:
    lines = env.all_lines()
    lock = env.lock(tmp_path, *lines[:2], lock_line("delta", "1.0", env.w["delta"]), *lines[2:])
    result = invoke("verify-env", "--lock", lock, "--python", env.python)
    assert result.exit_code == 1
    assert result.stdout.splitlines()[2:] == [
        "  MISSING            delta==1.0 is locked (line 6) but not installed",
        "MISMATCH: 1 error(s), 0 warning(s) (6 locked, 5 installed, 0 excluded by markers)",
    ]


def test_strict_makes_extras_errors(env: Env, tmp_path: Path) -> None:
    lock = env.lock(tmp_path, *[line for line in env.all_lines() if not line.startswith("gamma")])
    assert run_json(lock, env.python)[0] == 0
    code, report = run_json(lock, env.python, "--strict")
    assert code == 1 and kinds(report) == {("extra", "gamma", "fail")}


def test_markers_evaluated_for_the_inspected_interpreter(env: Env, tmp_path: Path) -> None:
    lines = env.all_lines()
    lock = env.lock(tmp_path,
                    lines[0].replace("alpha==1.0", 'alpha==1.0 ; sys_platform == "win32"'),
                    *lines[1:], lock_line("delta", "1.0", env.w["delta"], 'python_version < "3.0"'))
    code, report = run_json(lock, env.python)
    assert code == 0
    assert kinds(report) == {("extra", "alpha", "warn")}  # excluded line, still installed
    assert [e["name"] for e in report["excluded_by_marker"]] == ["alpha", "delta"]


def torch_at(tmp_path: Path, cuda: str | None, hip: str | None,
             rocm: str | None = None) -> Installed:
    (tmp_path / "torch").mkdir(exist_ok=True)
    (tmp_path / "torch"
     / "version.py").write_text(f"__version__ = '2.8.0'\ncuda: str | None = {cuda!r}\n"
                                                   f"hip = {hip!r}\n"
                                + (f"rocm = {rocm!r}\n" if rocm else ""),
                                                   encoding="utf-8")
    return Installed("torch", "2.8.0", str(tmp_path))


def pin(version: str) -> Pin:
    public, _plus, local = version.partition("+")
    return Pin("torch", version, public, local or None, None, ["sha256:00"], 7)


@pytest.mark.parametrize(
    ("locked", "cuda", "hip", "verdict"),
    [
        ("2.8.0+cu128", "12.8", None, None),
        ("2.8.0+cu128", "12.6", None, "fail"),
        ("2.8.0+cu130", "13.0", None, None),
        ("2.8.0+rocm6.4", None, "6.4.43482-0f2d60242", None),
        ("2.8.0+rocm6.4", None, None, "fail"),
        ("2.8.0+cpu", None, None, None),
        ("2.8.0+cpu", "12.8", None, "fail"),
        ("2.8.0", "12.8", None, "warn"),  # no label: the build cannot be checked
    ],
)
def test_torch_build_against_label(tmp_path: Path, locked: str, cuda: str | None, hip: str | None,
                                   verdict: str | None) -> None:
    finding = torch_build_finding(pin(locked), torch_at(tmp_path, cuda, hip))
    assert (finding.verdict if finding else None) == verdict


@pytest.mark.parametrize(
    ("locked", "hip", "rocm", "verdict"),
    # HIP's third field is a build number, not ROCm's patch (vllm-project/vllm#10855: HIP 6.2.41133, ROCm 6.2.0)
    [
        ("2.6.0+rocm6.2.4", "6.2.41134-65d174c3e", None, None),  # pairings.json lists this build
        ("2.6.0+rocm6.2.4", "6.3.42131-fa1d09cbd", None, "fail"),
        ("2.9.1+rocm6.4", "6.4.43484-123", "6.4.0", None),  # torch 2.9+ writes rocm itself
        ("2.13.0+rocm7.2", "7.2.26015-1", "7.2.0", None),
        ("2.13.0+rocm7.2", "7.2.26015-1", "7.1.1", "fail"),
        ("2.6.0+rocm6.2.4", "6.2.41134-65d174c3e", "6.2.4", None),
    ],
)
def test_rocm_builds_by_their_rocm_version(tmp_path: Path, locked: str, hip: str, rocm: str | None,
                                           verdict: str | None) -> None:
    finding = torch_build_finding(pin(locked), torch_at(tmp_path, None, hip, rocm))
    assert (finding.verdict if finding else None) == verdict


def test_torch_build_message_rocm(tmp_path: Path) -> None:
    finding = torch_build_finding(pin("2.8.0+rocm6.4"), torch_at(tmp_path, "12.8", None))
    assert finding is not None and finding.why == (
        "locked +rocm6.4 (a ROCm 6.4 build) but the installed torch is a CUDA 12.8 build "
        "(torch.version.cuda='12.8', hip=None); reinstall from the lock")


def test_unreadable_lock_exit_2(env: Env, tmp_path: Path) -> None:
    lock = tmp_path / "lock.txt"
    lock.write_text("alpha==1.0\n", encoding="utf-8")
    before = tree_snapshot(tmp_path)
    result = invoke("verify-env", "--lock", lock, "--python", env.python)
    assert result.exit_code == 2 and tree_snapshot(tmp_path) == before
    assert result.stderr == (f"Error: {lock}:1: 'alpha==1.0' has no --hash; kdkit locks are always "
                             "hashed (regenerate with `kdkit lock`)\n")


@pytest.mark.parametrize("what", ["text-file", "missing", "not-python"])
def test_python_that_is_not_an_interpreter(env: Env, tmp_path: Path, what: str) -> None:
    watched = tmp_path
    lock = env.lock(watched, *env.all_lines())
    if what == "text-file":
        python = watched / "python"
        python.write_text("not a program\n", encoding="utf-8")
        reason = "not an executable file; give the path of a Python interpreter"
    elif what == "missing":
        python, reason = (watched
                          / "nope", "not an executable file; give the path of a Python interpreter")
    else:
        python, reason = Path(shutil.which("true")
                              or "/bin/true"), "not a Python interpreter (exit status 0, " \
            "no answer on stdout)"
    before = tree_snapshot(watched)
    result = invoke("verify-env", "--lock", lock, "--python", python)
    assert result.exit_code == 2 and tree_snapshot(watched) == before
    assert result.stderr == f"Error: --python {python}: {reason}\n"


def test_a_copy_shadowed_by_the_venvs_own_is_no_duplicate(env: Env, tmp_path: Path) -> None:
    """A folder joined to a venv's sys.path after its own site-packages (a .pth line, as the image joins
    /opt/kdkit/deps; or a venv's --system-site-packages) may hold another copy of a name: the first on
    sys.path is the installed one, as at import time, the later one is shadowed, not stale. A second
    metadata folder in the same folder is what an interrupted upgrade left, and is reported."""
    outer = make_venv(tmp_path / "outer", with_pip=False)
    pip_install(outer, env.wheels, ["beta==2.1"])
    outer_site = next((tmp_path / "outer" / "lib").glob("python3.*/site-packages"))
    inner = make_venv(tmp_path / "inner", with_pip=False)
    pip_install(inner, env.wheels, ["beta==2.0"])
    site = next((tmp_path / "inner" / "lib").glob("python3.*/site-packages"))
    (site / "joined.pth").write_text(f"{outer_site}\n", encoding="utf-8")
    lock = tmp_path / "lock.txt"
    lock.write_text(lock_line("beta", "2.0", env.w["beta"]), encoding="utf-8")
    code, report = run_json(lock, inner)
    assert (code, kinds(report)) == (0, set()), report["findings"]
    # the older is now stale
    shutil.copytree(outer_site / "beta-2.1.dist-info", site / "beta-2.1.dist-info")
    code, report = run_json(lock, inner)
    assert code == 1 and kinds(report) == {("version", "beta", "fail"),
                                           ("duplicate", "beta", "warn")}


# ---------------------------------------------------------------- regular files only: nothing blocks


@pytest.mark.parametrize("which", ["fifo", "/dev/zero", "folder"])
def test_verify_env_refuses_a_lock_that_is_not_a_regular_file(tmp_path: Path, which: str) -> None:
    lock = (_special(tmp_path)["fifo"] if which == "fifo" else Path(which) if which.startswith("/")
            else tmp_path)
    done = subprocess.run([sys.executable, "-m", "kdkit.probe", "verify-env", "--lock", str(lock)],
                          cwd=REPO,
                          capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
