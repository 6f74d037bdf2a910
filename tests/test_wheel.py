"""`pip install .` (not editable) gives a working kdkit: schemas, template, Dockerfiles ship inside."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow


def run(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True,
                          text=True, check=False)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding kdkit installed from a wheel built from this checkout."""
    work = tmp_path_factory.mktemp("wheel")
    built = run(sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir",
                work / "dist", REPO,
                cwd=work)
    assert built.returncode == 0, built.stdout + built.stderr
    wheel = next((work / "dist").glob("kdkit-*.whl"))
    venv = work / "venv"
    assert run(sys.executable, "-m", "venv", venv, cwd=work).returncode == 0
    pip = venv / "bin" / "pip"
    deps = run(pip, "install", "-q", "--require-hashes", "-r",
               REPO / "requirements" / "runtime.txt", cwd=work)
    assert deps.returncode == 0, deps.stderr
    done = run(pip, "install", "-q", wheel, cwd=work)
    assert done.returncode == 0, done.stderr
    return venv


def test_wheel_carries_the_data_files(installed: Path) -> None:
    code = (
        "from kdkit.config import shipped as r\n"
        "import kdkit\n"
        "assert '/site-packages/' in kdkit.__file__, kdkit.__file__\n"
        "for p in (r.schema_path('kdkit'), r.schema_path('pilot'), r.schema_path('manifest'),\n"
        "          r.dockerfile('cuda'), r.dockerfile('rocm'), r.template_dir() / 'kdkit.json',\n"
        "          r.template_dir() / 'dot-gitignore', r.template_dir() / "
        "'data/pilot/doc-12.txt'):\n    assert p.is_file(), p\n"
        "print('ok')\n"
    )
    result = run(installed / "bin" / "python", "-c", code, cwd=installed)
    assert result.stdout.strip() == "ok", result.stderr


def test_installed_kdkit_inits_and_validates(installed: Path, tmp_path: Path) -> None:
    kdkit = installed / "bin" / "kdkit"
    created = run(kdkit, "init", "demo", "--backend", "cpu", cwd=tmp_path)
    assert created.returncode == 0, created.stderr
    checked = run(kdkit, "validate", "demo", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # outside git: a tmp folder
    assert checked.stdout.strip() == f"{tmp_path / 'demo'}: valid (1 warning(s))"
