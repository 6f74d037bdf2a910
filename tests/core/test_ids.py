"""Issue 10 §11: an ID is checked as a whole string everywhere, so no control character (a final
newline above all: ``re.match("...$")`` lets one through) reaches a file name, a log line or an
image tag.

Every place that takes an ID or a name is tried with each character below, appended, prepended
and in the middle: exit 2, one line, nothing written.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from tests.conftest import invoke, tree_snapshot

BAD = ["\n", "\r", "\t", "\x00", "\x1b", "\x7f", " ", "\u2028", "\u00a0", "\u200b"]


def variants(good: str) -> list[str]:
    return [v for c in BAD for v in (good + c, c + good, good[:2] + c + good[2:])]


def _manifest_id(project: Path, value: str) -> tuple[Result, Result]:
    path = project / "data/pilot/manifest.json"
    data = json.loads(path.read_text())
    data["documents"][0]["id"] = value
    path.write_text(json.dumps(data))
    return invoke("pilot", project), invoke("validate", project)


def _project_name(project: Path, value: str) -> tuple[Result, ...]:
    path = project / "kdkit.json"
    data = json.loads(path.read_text())
    data["name"] = value
    path.write_text(json.dumps(data))
    return (invoke("validate", project),)


PLACES: dict[str, Callable[[Path, str], tuple[Result, ...]]] = {
    "manifest id": _manifest_id,
    "kdkit.json name": _project_name,
    "pilot --run-id": lambda p, v: (invoke("pilot", p, "--run-id", v),),
    "pilot --resume": lambda p, v: (invoke("pilot", p, "--resume", v),),
    "init --name": lambda p, v: (invoke("init", p.parent / "new", "--name", v),),
    "build --tag": lambda p, v: (invoke("build", p, "--tag", v),),
    "run --gpus": lambda p, v: (invoke("run", p, "--gpus", v, "--print"),),
    "run --resume": lambda p, v: (invoke("run", p, "--resume", v, "--print"),),
    "resume-test --module": lambda p, v: (invoke("resume-test", p, "--module", v),),
}
GOOD = {"manifest id": "doc-01", "kdkit.json name": "proj", "pilot --run-id": "run-1",
        "pilot --resume": "run-1",
        "init --name": "newproj", "build --tag": "proj:cpu", "run --gpus": "0",
        "run --resume": "run-1",
        "resume-test --module": "src.train"}
# --resume needs a real run to refuse (else "no such run" would hide the ID check): the appended variants only.
CASES = [(place, value) for place in PLACES
         for value in (variants(GOOD[place]) if place != "pilot --resume"
                       else [GOOD[place] + c for c in BAD])]


@pytest.mark.parametrize(("place", "value"), CASES, ids=[f"{p}-{v!a}" for p, v in CASES])
def test_control_characters_are_refused_in_every_id(project: Path, place: str, value: str) -> None:
    if place == "pilot --resume":
        assert invoke("pilot", project, "--run-id", "run-1").exit_code in (0, 1)
        (project / "runs" / "run-1" / "SHA256SUMS").unlink()  # not closed: resumable but for its ID
    before = tree_snapshot(project.parent)
    results = PLACES[place](project, value)
    for result in results:
        assert result.exit_code == 2, (place, ascii(value), result.output)
        lines = result.stderr.strip().splitlines()
        assert lines[-1].startswith("Error: "), lines
        # one line per problem (validate lists them all), each naming its file; the character shown escaped
        assert all(line.startswith(("Error: ", str(project))) for line in lines), lines
        assert not any(c in result.output for c in BAD
                       if c not in (" ", "\n")), ascii(result.output)
        assert "Traceback" not in result.output
    after = tree_snapshot(project.parent)
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    # only the edit itself
    assert changed <= {"proj/data/pilot/manifest.json", "proj/kdkit.json"}, changed


def test_the_good_ids_pass_the_same_checks(project: Path) -> None:
    """The variants above differ from a good ID only by the character: the good one is taken."""
    assert invoke("pilot", project, "--run-id", GOOD["pilot --run-id"]).exit_code in (0, 1)
    assert invoke("validate", project).exit_code == 0
    assert invoke("init", project.parent / "new", "--name", GOOD["init --name"]).exit_code == 0
