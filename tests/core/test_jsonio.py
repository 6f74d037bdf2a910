"""kdkit.core.jsonio (issue 10): a JSON file kdkit reads means one thing (a key given twice and a string holding a
lone surrogate are refused, naming the place), a write never fails on a lone surrogate, and kdkit writes over
regular files only. (NaN and Infinity are tests/core/test_json_numbers.py.)"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kdkit.core.errors import BadInput
from kdkit.core.jsonio import atomic_write_text, parse_json
from tests.conftest import invoke, tree_snapshot

# ---------------------------------------------------------------- a lone surrogate is data, never a crash


@pytest.mark.parametrize("text",
                         ['{"a": "\\udc80"}', '{"\\ud800": 1}', '["ok", {"x": ["\\udfff"]}]'])
def test_a_file_holding_a_lone_surrogate_is_refused_where_it_is_read(text: str) -> None:
    with pytest.raises(BadInput, match="a string holds a lone surrogate"):
        parse_json(text, "f.json")


def test_a_pair_of_surrogates_is_one_character_and_reads() -> None:
    assert parse_json('{"a": "\\ud83d\\ude00"}', "f.json") == {"a": "\U0001f600"}


def test_a_writer_never_fails_on_a_lone_surrogate(tmp_path: Path) -> None:
    atomic_write_text(tmp_path / "x.txt", "a\udc80b")
    assert (tmp_path / "x.txt").read_bytes() == b"a\\udc80b"


# ---------------------------------------------------------------- one thing per key


@pytest.mark.parametrize(("text", "key"), [
    ('{"min_quality": 0.9, "min_quality": 0.0}', "min_quality"),
    ('{"documents": [], "documents": [{"id": "x"}]}', "documents"),
    ('{"stop": {"max_seconds": 1, "max_seconds": 2}}', "max_seconds"),
])
def test_a_key_given_twice_is_refused_with_its_place(text: str, key: str) -> None:
    with pytest.raises(BadInput, match=rf'^f.json:1:\d+: key "{key}" appears twice in one object'):
        parse_json(text, "f.json")


def test_validate_and_pilot_refuse_a_config_with_a_key_twice(project: Path) -> None:
    path = project / "config/pilot.json"
    path.write_text(
        path.read_text().replace('"min_quality": 0.9,', '"min_quality": 0.9, "min_quality": 0.0,'))
    before = tree_snapshot(project)
    for command in ("validate", "pilot"):
        result = invoke(command, project)
        assert result.exit_code == 2 and 'key "min_quality" appears twice' in result.stderr, result.output
    assert tree_snapshot(project) == before


# ---------------------------------------------------------------- writes never replace what is not a file


def _special(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "victim.txt").write_text("keep")
    made = {"fifo": tmp_path / "fifo", "link": tmp_path / "link", "folder": tmp_path / "folder"}
    os.mkfifo(made["fifo"])
    made["link"].symlink_to(tmp_path / "victim.txt")
    made["folder"].mkdir()
    try:
        os.mknod(tmp_path / "null", 0o20666, os.makedev(1, 3))
        made["device"] = tmp_path / "null"
    except PermissionError:
        pass
    return made


def test_an_out_path_that_is_not_a_regular_file_is_never_replaced(tmp_path: Path) -> None:
    for kind, path in _special(tmp_path).items():
        before = os.lstat(path)
        result = invoke("diagnose", "--expect", "cpu", "--out", path)
        assert result.exit_code == 2, (kind, result.output)
        assert "kdkit writes over regular files only" in result.stderr, (kind, result.stderr)
        after = os.lstat(path)
        assert (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino), kind
    assert (tmp_path / "victim.txt").read_text() == "keep"
