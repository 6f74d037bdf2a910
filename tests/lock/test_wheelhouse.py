"""`kdkit build --wheelhouse DIR` picks the wheelhouse's files by the lock's hashes, for every candidate of a
universal lock (one name pinned to several versions under disjoint markers, as `uv pip compile
--universal` writes), and requires a file only for the pins that apply everywhere."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kdkit.core.errors import BadInput
from kdkit.lock.wheelhouse import wheelhouse_files
from tests.conftest import invoke
from tests.tinywheels import build_wheel, lock_line

OLD, NEW = 'python_version < "3.11"', 'python_version >= "3.11"'


@pytest.fixture
def universal(tmp_path: Path) -> tuple[Path, dict[str, Path]]:
    wheels = tmp_path / "wheels"
    files = {"six-old": build_wheel(wheels, "six", "1.16.0"),
             "six-new": build_wheel(wheels, "six", "1.17.0"),
             "idna": build_wheel(wheels, "idna", "3.10")}
    lock = tmp_path / "cpu.txt"
    lock.write_text(lock_line("idna", "3.10", files["idna"])
                    + lock_line("six", "1.16.0", files["six-old"], OLD)
                    + lock_line("six", "1.17.0", files["six-new"], NEW), encoding="utf-8")
    # a file of a locked name that no pin's hash names: left out
    build_wheel(wheels, "six", "1.15.0")
    return lock, files


def test_every_candidate_of_a_universal_lock_is_taken(
    universal: tuple[Path, dict[str, Path]]) -> None:
    lock, files = universal
    chosen = wheelhouse_files(files["idna"].parent, lock)
    assert chosen == sorted(files.values())


def test_a_pin_under_a_marker_may_be_absent_an_unmarked_one_may_not(
    universal: tuple[Path, dict[str, Path]]) -> None:
    lock, files = universal
    # the Python 3.10 candidate: an image for another Python does not need it
    files["six-old"].unlink()
    assert wheelhouse_files(files["idna"].parent, lock) == sorted([files["idna"], files["six-new"]])
    files["idna"].unlink()
    with pytest.raises(
        BadInput, match=r"^--wheelhouse \S+: no file with a locked hash for idna==3\.10; run "):
        wheelhouse_files(files["six-new"].parent, lock)


def test_kdkit_wheelhouse_parses_its_lock_once(locked: Path, tmp_path: Path,
                                               lock_parses: list[str]) -> None:
    """Issue 30 §1: the freshness check and the hashes each downloaded file is held to come from one read of
    the lock (before: two parses)."""
    result = invoke("wheelhouse", locked, "--out", tmp_path / "wh", "--json")
    assert result.exit_code == 0, result.output
    assert lock_parses.count(
        os.path.realpath(locked / "requirements" / "cpu.txt")) == 1, lock_parses
