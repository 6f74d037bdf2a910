"""Tiny wheels built at test time (no binaries in the repository), venvs to install them in,
and hashed lock lines naming them. Shared by the verify-env tests, the pip-sync agreement
test and bench/bench_verify_env.py."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import venv
import zipfile
from pathlib import Path


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_wheel(dest: Path, name: str, version: str, files: dict[str, str] | None = None) -> Path:
    """A pure-Python wheel ``name-version-py3-none-any.whl`` in ``dest``; ``files`` maps path -> text."""
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    contents = dict(files
                    or {f"{dist.lower()}/__init__.py": f'"""{name} {version}, a test wheel."""\n'})
    contents[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n"
    contents[f"{info}/WHEEL"] = (
        "Wheel-Version: 1.0\nGenerator: kdkit-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    record = [f"{path},{_record_hash(text.encode())},{len(text.encode())}" for path,
              text in contents.items()]
    contents[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    dest.mkdir(parents=True, exist_ok=True)
    wheel = dest / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in contents.items():
            archive.writestr(path, text)
    return wheel


def torch_wheel(dest: Path, version: str, cuda: str | None = None, hip: str | None = None) -> Path:
    """A fake torch whose torch/version.py says which build it is (never imported by kdkit)."""
    version_py = f"__version__ = {version!r}\ncuda = {cuda!r}\nhip = {hip!r}\n"
    return build_wheel(dest, "torch", version,
                       {"torch/__init__.py": "", "torch/version.py": version_py})


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def lock_line(name: str, version: str, wheel: Path, marker: str | None = None) -> str:
    """One hashed pin as pip-compile writes it."""
    spec = f"{name}=={version}" + (f" ; {marker}" if marker else "")
    return f"{spec} \\\n    --hash=sha256:{sha256(wheel)}\n"


def make_venv(path: Path, with_pip: bool) -> Path:
    """A venv at ``path``; returns its python."""
    venv.EnvBuilder(with_pip=with_pip, symlinks=True, clear=True).create(path)
    return path / "bin" / "python"


def pip_install(python: Path, wheels: Path, requirements: list[str]) -> None:
    """Install from the local folder only (--no-index), with the host's pip aimed at ``python``."""
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--no-index",
                    "--no-deps", "--find-links", str(wheels), *requirements], check=True)
