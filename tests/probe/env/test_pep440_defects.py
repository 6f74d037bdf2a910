"""Four places where kdkit's PEP 440/508 code disagreed with pypa/packaging (issue 27, item 7), and an
empty PEP 751 lock; each case failed before its fix. tests/core/test_packaging_vectors.py holds packaging's own
vectors against kdkit, with packaging as the oracle."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kdkit.core.lockfile import parse_lock
from kdkit.core.markers import current_environment, evaluate
from kdkit.core.versions import InvalidVersion, Version, compare, satisfies, specifier_clauses
from kdkit.probe.env.installed import Installed
from kdkit.probe.env.verify import compare as verify_compare
from kdkit.probe.env.verify import same_version
from tests.conftest import invoke

HEAD = 'lock-version = "1.0"\ncreated-by = "uv"\n'
WHEEL = ('wheels = [{ url = '
         '"https://files.example/numpy-2.1.3-cp313-cp313-manylinux_2_17_x86_64.whl", hashes = { '
         'sha256 = "' + "ab" * 32 + '" } }]\n')

# ---------------------------------------------------------------- 1: the version is ASCII (re.ASCII)


@pytest.mark.parametrize("text", ["1.2.3prevıew1", "1.0+\u212a", "1.0.poſt1", "1.0.ᴅev1", "1.0rı"])
def test_a_letter_that_folds_to_ascii_is_not_a_version(text: str) -> None:
    # a dotless ı folds to i, a Kelvin sign to k, a long s to s under IGNORECASE: once KeyError
    with pytest.raises(InvalidVersion):
        Version.parse(text)
    with pytest.raises(InvalidVersion):
        specifier_clauses(f">={text}")
    assert not same_version("1.2.3rc1", text)


def test_such_a_version_in_a_pylock_is_one_line_exit_2(tmp_path: Path) -> None:
    lock = tmp_path / "pylock.toml"
    lock.write_text(HEAD + '[[packages]]\nname = "numpy"\nversion = "1.2.3prevıew1"\n'
                    + WHEEL, encoding="utf-8")
    result = invoke("verify-env", "--lock", lock, "--python", sys.executable)
    assert result.exit_code == 2, result.output
    assert "is not a PEP 440 version" in result.stderr and len(
        result.stderr.strip().splitlines()) == 1


def test_such_a_version_in_a_marker_is_compared_as_text() -> None:
    env = {**current_environment(), "python_full_version": "3.12.1"}
    # packaging: not a valid specifier clause, so the values compare as strings ("3" < "1" is false)
    assert evaluate("python_full_version < '1.2.3prevıew1'", env) is False
    assert evaluate("python_full_version != '1.2.3prevıew1'", env) is True


def test_such_an_installed_version_is_a_mismatch_not_a_traceback(tmp_path: Path) -> None:
    lock = tmp_path / "pylock.toml"
    lock.write_text(HEAD + '[[packages]]\nname = "numpy"\nversion = "1.2.3rc1"\n'
                    + WHEEL.replace("2.1.3", "1.2.3rc1"), encoding="utf-8")
    installed = {"numpy": Installed("numpy", "1.2.3prevıew1", str(tmp_path))}
    report = verify_compare(parse_lock(lock), installed, current_environment())
    assert [f.name for f in report.findings] == ["version"], report.findings


# ---------------------------------------------------------------- 2: PEP 440's exclusive < and >


@pytest.mark.parametrize(("version", "op", "spec", "expected"), [
    ("3.14.0rc2", "<", "3.14", False),  # a pre-release of V is not below V
    ("3.14.0.dev1", "<", "3.14", False),
    ("3.14.0rc2", "<", "3.14.0rc3", True),  # unless V is one
    ("3.13.9", "<", "3.14", True),
    ("1.0.post1", ">", "1.0", False),  # a post-release of V is not above V
    ("1.0+local", ">", "1.0", False),  # nor a local version of V
    ("1.0.post2", ">", "1.0.post1", True),  # unless V is a post-release
    ("1.0.post1+local", ">", "1.0.post1", False),
    ("1.0a1.post1", ">", "1.0a1", False),
    ("1.0a2", ">", "1.0a1", True),
])
def test_exclusive_ordered_comparison(version: str, op: str, spec: str, expected: bool) -> None:
    assert compare(version, op, spec) is expected


def test_a_uv_lock_on_python_314_rc_requires_nothing_below_314(tmp_path: Path) -> None:
    lock = tmp_path / "pylock.toml"
    lock.write_text(HEAD + '[[packages]]\nname = "numpy"\nversion = "2.1.3"\n'
                    'marker = "python_full_version < \'3.14\'"\n' + WHEEL, encoding="utf-8")
    markers = {**current_environment(),
               "python_full_version": "3.14.0rc2", "python_version": "3.14"}
    markers.pop("extra")
    report = verify_compare(parse_lock(lock), {}, markers)
    assert report.locked == 0 and report.ok, report.findings
    assert [entry["name"] for entry in report.excluded] == ["numpy"]


# ---------------------------------------------------------------- 3: ~= keeps the epoch


def test_compatible_release_keeps_the_epoch() -> None:
    assert compare("1!2.5", "~=", "1!2.0")
    assert not compare("2.5", "~=", "1!2.0")
    assert not compare("1!3.0", "~=", "1!2.0")
    assert satisfies("1!2.0.post1", "~=1!2.0")


# ---------------------------------------------------------------- 4: platform_release as a version


@pytest.mark.parametrize(("release", "marker", "expected"), [
    ("5.9", "platform_release >= '5.10'", False),  # as strings "5.9" >= "5.10"
    ("5.10.0", "platform_release == '5.10'", True),
    ("6.8.0", "platform_release < '6.10'", True),
    # not a PEP 440 version: packaging 26 says false for a valid clause, strings otherwise
    ("6.8.0-1015-azure", "platform_release >= '5.0'", False),
    ("6.8.0-1015-azure", "platform_release == '6.8.0-1015-azure'", True),
])
def test_platform_release_compares_as_packaging_does(release: str,
                                                     marker: str, expected: bool) -> None:
    assert evaluate(marker, {**current_environment(), "platform_release": release}) is expected


# ---------------------------------------------------------------- packages = [] (uv, no dependencies)


def test_an_empty_pylock_is_verifiable(tmp_path: Path) -> None:
    lock = tmp_path / "pylock.toml"
    lock.write_text(HEAD + 'requires-python = ">=3.10"\npackages = []\n', encoding="utf-8")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    result = invoke("verify-env", "--lock", lock, "--python", python)
    assert result.exit_code == 0, result.output
    assert "MATCH" in result.output and "0 locked" in result.output
    done = subprocess.run([str(python), "-m", "kdkit.probe", "verify-env", "--lock", str(lock)],
                          capture_output=True, text=True, check=False,
                          cwd=Path(__file__).resolve().parents[3])
    assert done.returncode == 0, done.stderr


# ---------------------------------------------------------------- hostile review: blanks before .*, local integers


def test_a_wildcard_clause_with_a_trailing_blank_matches_as_packaging_does() -> None:
    # packaging strips the clause's text before it looks for .*: once "3.11.* " was parsed as a version
    assert compare("3.11", "==", "3.11.* ")
    assert not compare("3.11", "!=", "3.11.* ")
    env = dict(current_environment(), python_version="3.11")
    assert evaluate('python_version == "3.11.* "', env)


@pytest.mark.parametrize(("text", "shown"), [("1.0+01", "1.0+1"), ("1.0+abc.007", "1.0+abc.7"),
                                              ("1.0+0", "1.0+0"), ("1.0+cu126", "1.0+cu126")])
def test_an_integer_local_segment_is_normalized_without_leading_zeros(
    text: str, shown: str) -> None:
    assert str(Version.parse(text)) == shown
