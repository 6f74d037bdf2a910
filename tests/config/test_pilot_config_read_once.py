"""A host command reads the pilot config once (issue 30 §1): `kdkit bundle` asked Project.pilot_config() five
times (the essentials twice, the inputs folder twice, the mounts) and the allow-list once more, each a new parse
of the file held to the pilot's model. The Project a command makes where it starts now keeps what it read, so
every part of one command sees one config, whatever happens to the file meanwhile."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from kdkit.core import jsonio
from tests.conftest import invoke
from tests.transfer.test_bundle import ready_to_bundle


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Each path read as JSON text (kdkit.core.jsonio.read_text_file, under load_json and load_object)."""
    seen: list[str] = []
    original = jsonio.read_text_file

    def counted(path: Path, what: str = "file") -> str:
        seen.append(str(path))
        return original(path, what)

    monkeypatch.setattr(jsonio, "read_text_file", counted)
    yield seen


def test_a_bundle_reads_the_pilot_config_once(project: Path, tmp_path: Path,
                                              reads: list[str]) -> None:
    ready_to_bundle(project)
    result = invoke("bundle", project, "--out", tmp_path / "bundle", "--no-image", "--json")
    assert result.exit_code == 0, result.stderr
    assert reads.count(str(project / "config" / "pilot.json")) == 1, reads
    assert json.loads(result.stdout)["inputs"] == "data/pilot"


def test_one_project_keeps_the_config_it_read(project: Path) -> None:
    from kdkit.config.project import load_project

    loaded = load_project(project)
    first = loaded.pilot_config()
    config = project / "config" / "pilot.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "batch_size": 7}))
    assert loaded.pilot_config() is first and first["batch_size"] != 7
    assert load_project(project).pilot_config()["batch_size"] == 7  # the next command reads it anew
