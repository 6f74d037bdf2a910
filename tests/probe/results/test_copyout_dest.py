"""`kdkit copy-out`'s DEST is read before anything is copied: an empty one is refused, one line, exit 2."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import invoke


def test_copy_out_with_an_empty_destination_is_refused(project: Path) -> None:
    use = invoke("pilot", project, "--run-id", "e")
    assert use.exit_code in (0, 1)
    result = invoke("copy-out", project / "runs" / "e", "")
    assert result.exit_code == 2 and "DEST '': empty" in result.stderr
