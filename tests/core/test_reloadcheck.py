"""A copy of a closed run folder is reloadable, not only hashed (issue 26 §5): kdkit.core.reloadcheck.

Real run folders are closed by the real pilot (CPU, no Docker). Each damage below is covered the way someone
who edits a closed run and covers their tracks would (SHA256SUMS regenerated: tests.conftest.reseal), so only
reading the files back finds it: the emptied summary.md, a broken results.jsonl line (named by number), an ID
missing against the summary's counts, a summary that is not an object, vectors whose ID list lost a row.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kdkit.core.reloadcheck import reload_problems
from kdkit.core.runverify import read_run, read_sums, verify_folder
from tests.conftest import reseal
from tests.probe.pilot.test_pilot import passing_and_stopped


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Runs closed by the real pilot: one that passes, and one stopped by its stop rule (counts short of total)."""
    real, stopped = passing_and_stopped(tmp_path_factory.mktemp("made"), "real", "stopped")
    return {"real": real, "stopped": stopped}


@pytest.fixture
def copy(made: dict[str, Path], tmp_path: Path) -> Path:
    """A copy of the passing run, as copy-out leaves it (the original stays as the pilot closed it)."""
    return Path(shutil.copytree(made["real"], tmp_path / "copy" / "real", symlinks=True))


def _sealed_but(folder: Path) -> list[str]:
    """The damaged copy still verifies against its regenerated SHA256SUMS: only the reload check can see it."""
    reseal(folder)
    assert verify_folder(folder, read_sums(folder)) == []
    return reload_problems(folder)


def test_the_closed_runs_reload(made: dict[str, Path], copy: Path) -> None:
    assert read_run(made["stopped"]).verdict == "fail"
    assert reload_problems(made["real"]) == []
    assert reload_problems(made["stopped"]) == []
    assert reload_problems(copy) == []


def test_an_emptied_summary_md_is_refused(copy: Path) -> None:
    (copy / "summary.md").write_bytes(b"")
    problems = _sealed_but(copy)
    assert problems == [f"{copy / 'summary.md'}: empty (or only whitespace); a closed run folder's "
                        "summary.md is never empty"]


@pytest.mark.parametrize("text", [b" \n\t\n", b"\n" * 10])
def test_a_summary_md_of_only_whitespace_is_empty(copy: Path, text: bytes) -> None:
    (copy / "summary.md").write_bytes(text)
    assert _sealed_but(
        copy) == [f"{copy / 'summary.md'}: empty (or only whitespace); a closed run folder's "
                                 "summary.md is never empty"]


def test_params_json_names_its_run(copy: Path) -> None:
    params = json.loads((copy / "params.json").read_text(encoding="utf-8"))
    assert params["run_id"] == "real"  # what the real pilot writes
    del params["run_id"]
    (copy / "params.json").write_text(json.dumps(params), encoding="utf-8")
    problems = _sealed_but(copy)
    assert len(problems) == 1 and problems[0].startswith(
        f"{copy / 'params.json'}: $.run_id missing"), problems


def test_a_broken_results_line_is_named_by_its_number(copy: Path) -> None:
    lines = (copy / "results.jsonl").read_bytes().splitlines(keepends=True)
    lines[4] = lines[4][: len(lines[4]) // 2] + b"\n"  # line 5 torn in the middle
    (copy / "results.jsonl").write_bytes(b"".join(lines))
    problems = _sealed_but(copy)
    assert len(problems) == 1 and problems[0].startswith(
        f"{copy / 'results.jsonl'}:5: not valid JSON"), problems


def test_a_line_without_an_id_is_named(copy: Path) -> None:
    lines = (copy / "results.jsonl").read_bytes().splitlines(keepends=True)
    lines[2] = b'{"outcome":"accepted"}\n'
    (copy / "results.jsonl").write_bytes(b"".join(lines))
    problems = _sealed_but(copy)
    assert len(problems) == 1 and problems[0].startswith(
        f"{copy / 'results.jsonl'}:3: a record without"), problems


def test_an_id_missing_against_the_summary_is_refused(copy: Path) -> None:
    lines = (copy / "results.jsonl").read_bytes().splitlines(keepends=True)
    accepted = next(i for i, line in enumerate(lines) if json.loads(line)["outcome"] == "accepted")
    (copy / "results.jsonl").write_bytes(b"".join(lines[:accepted] + lines[accepted + 1:]))
    problems = _sealed_but(copy)
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{copy / 'results.jsonl'}: 11 line(s), 11 finished ID(s) (10 "
                                  "accepted, 1 rejected), but summary.json states pass with 12 "
                                  "ID(s) (11 accepted, 1 rejected)")


def test_a_repeated_line_counts_once_as_the_pilot_counts_it(copy: Path) -> None:
    """The first record of an ID decides (the pilot's accounting); a repeat adds no ID."""
    lines = (copy / "results.jsonl").read_bytes().splitlines(keepends=True)
    (copy / "results.jsonl").write_bytes(b"".join([*lines, lines[0]]))
    assert _sealed_but(copy) == []


def test_a_summary_that_is_not_an_object_and_an_empty_required_file(copy: Path) -> None:
    (copy / "summary.json").write_text("[1, 2]\n", encoding="utf-8")
    (copy / "env.json").write_text("{\"a\": 1,}", encoding="utf-8")
    problems = reload_problems(copy)
    assert problems[0] == f"{copy / 'summary.json'}:1:1: not a JSON object; the copy cannot be reloaded"
    assert problems[1].startswith(f"{copy / 'env.json'}:1:") and "malformed JSON" in problems[1]


def test_vectors_whose_id_list_lost_a_row(tmp_path: Path) -> None:
    import struct

    from kdkit.core.vectorfile import header

    folder = tmp_path / "gathered"
    folder.mkdir()
    (folder
     / "summary.json").write_text(
         json.dumps({"kind": "gathered", "verdict": "pass"}), encoding="utf-8")
    (folder / "summary.md").write_text("# gathered\n", encoding="utf-8")
    (folder / "vectors.npy").write_bytes(header(2, 2) + struct.pack("<4f", 1.0, 2.0, 3.0, 4.0))
    (folder
     / "vectors.ids.jsonl").write_text('{"row":0,"id":"a"}\n{"row":1,"id":"b"}\n', encoding="utf-8")
    assert reload_problems(folder) == []
    (folder / "vectors.ids.jsonl").write_text('{"row":0,"id":"a"}\n', encoding="utf-8")
    assert reload_problems(
        folder) == [f"{folder / 'vectors.ids.jsonl'}: lists 1 row(s), but vectors.npy's "
                                       "header names 2"]


@pytest.mark.slow
def test_a_million_lines_stream(tmp_path: Path) -> None:
    """A 1,000,000-line results.jsonl is read a block at a time: the peak traced memory stays below the file."""
    import tracemalloc

    folder = tmp_path / "big"
    folder.mkdir()
    sha = "0" * 64
    with (folder / "results.jsonl").open("w", encoding="ascii") as out:
        for n in range(1_000_000):
            outcome = "rejected" if n % 10 == 0 else "accepted"
            out.write(f'{{"id":"d{n:07d}","outcome":"{outcome}","category":"a","batch":{n // 64},'
                      f'"sha256":"{sha}","lines":64}}\n')
    summary = {"kind": "pilot", "verdict": "pass", "total": 1_000_000,
               "accepted": 900_000, "rejected": 100_000}
    for name, data in (("summary.json", summary), ("params.json", {"run_id": "big"}),
                       ("env.json", {})):
        (folder / name).write_text(json.dumps(data), encoding="utf-8")
    (folder / "summary.md").write_text("# big\n", encoding="utf-8")
    tracemalloc.start()
    try:
        assert reload_problems(folder) == []
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < (folder / "results.jsonl").stat().st_size
