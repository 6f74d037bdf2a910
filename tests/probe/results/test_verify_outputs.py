"""copy-out --verify against a hostile editor of a closed run's outputs (issue 25): every vector row names the
model it came from, a gathering lists its files and counts, and a file-kind run's outputs/ agrees with the
per-file hashes its accepted records give, not only with SHA256SUMS.

Each case edits a real closed folder (a pilot in-process, `kdkit gather`) and covers its tracks the way someone
would (SHA256SUMS rewritten over the edited files: tests.conftest.reseal); the untouched folders still verify.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy

from kdkit.core.checksums import SUMS, write_sums
from kdkit.core.vectorfile import HEADER, header, model_reference, read_header
from tests.conftest import invoke, reseal
from tests.probe.pilot.test_file_output import make
from tests.probe.pilot.test_output_kinds import SIXTEEN, VECTOR_ANSWERS, VECTOR_DOCS, make_project, pilot, records

REVISION = "0123456789abcdef0123456789abcdef01234567"
HUB = {"hub": "org/encoder", "revision": REVISION}
VECTOR = {"kind": "vector", "dim": 4}


def verify(folder: Path) -> tuple[int, str]:
    result = invoke("copy-out", folder, "--verify")
    return result.exit_code, result.output


def ids(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / "vectors.ids.jsonl").read_text().splitlines()]


def write_ids(folder: Path, entries: list[dict[str, Any]]) -> None:
    (folder
     / "vectors.ids.jsonl").write_text(
         "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in entries))


def drop_sums_lines(folder: Path, prefix: str) -> None:
    """SHA256SUMS rewritten without the lines of the files under ``prefix`` (removed with their lines)."""
    names = [line.split("  ", 1)[1] for line in (folder / SUMS).read_text().splitlines()
             if "  " in line]
    write_sums(folder, [(name, folder / name) for name in names if not name.startswith(prefix)])


def vector_run(project: Path, model: dict[str, Any] | None = None) -> Path:
    make_project(project, VECTOR, VECTOR_ANSWERS, VECTOR_DOCS,
                 **({"model": model} if model else {}))
    code, summary = pilot(project)
    assert code == 0, summary.get("problems")
    return Path(summary["run_dir"])


def gathered(project: Path, *args: str) -> Path:
    for worker in (0, 1):
        code, summary = pilot(project, "--run-id", "W", "--worker", str(worker), "--workers",
                              "2", *args)
        assert code == 0, summary.get("problems")
    result = invoke("gather", *[project / "runs" / f"W-w{i}of2" for i in (0, 1)], "--json")
    summary = json.loads(result.stdout)
    assert result.exit_code == 0 and summary["verdict"] == "pass", summary["problems"]
    return Path(summary["out"])


# ---------------------------------------------------------------- (1) each vector row names its model


def test_every_row_names_its_hub_model_and_an_edited_reference_fails(project: Path) -> None:
    run_dir = vector_run(project, HUB)
    assert [e["model"] for e in ids(run_dir)] == [f"org/encoder@{REVISION}"] * len(VECTOR_DOCS)
    assert verify(run_dir)[0] == 0
    entries = ids(run_dir)
    entries[2]["model"] = "org/encoder@" + "f" * 40
    write_ids(run_dir, entries)
    reseal(run_dir)
    code, output = verify(run_dir)
    assert code == 1 and "vectors.ids.jsonl" in output and "model reference" in output


def test_every_row_names_its_folder_model_by_its_files_digest(project: Path) -> None:
    (project / "models" / "enc" / "sub").mkdir(parents=True)
    (project / "models" / "enc" / "weights.bin").write_bytes(b"\x00\x01weights")
    (project / "models" / "enc" / "sub" / "config.json").write_text('{"dim": 4}')
    run_dir = vector_run(project, {"path": "models/enc"})
    record = json.loads((run_dir / "params.json").read_text())["params"]["model"]
    listing = json.dumps(record["files"], sort_keys=True, separators=(",", ":")).encode()
    reference = f"models/enc sha256:{hashlib.sha256(listing).hexdigest()}"
    assert model_reference(record) == reference
    assert record["files"]["weights.bin"] == hashlib.sha256(b"\x00\x01weights").hexdigest()
    assert [e["model"] for e in ids(run_dir)] == [reference] * len(VECTOR_DOCS)
    assert verify(run_dir)[0] == 0
    entries = ids(run_dir)
    for entry in entries:
        # the reference stripped from every row: the rows no longer say what made them
        del entry["model"]
    write_ids(run_dir, entries)
    reseal(run_dir)
    code, output = verify(run_dir)
    assert code == 1 and "vectors.ids.jsonl" in output and "models/enc sha256:" in output


def test_without_a_model_no_row_names_one_and_the_reference_rules() -> None:
    assert model_reference(None) is None and model_reference({}) is None
    assert model_reference(HUB) == f"org/encoder@{REVISION}"
    both = {**HUB, "path": "m", "files": {"a": "0" * 64},
            "base": {"hub": "org/base", "revision": "1" * 40}}
    digest = hashlib.sha256(json.dumps({"a": "0" * 64}, separators=(",", ":")).encode()).hexdigest()
    assert model_reference(
        both) == f"org/encoder@{REVISION} + m sha256:{digest} base org/base@{'1' * 40}"


def test_a_run_without_a_model_has_no_reference_on_its_rows(project: Path) -> None:
    run_dir = vector_run(project)
    assert all("model" not in e for e in ids(run_dir)) and verify(run_dir)[0] == 0


def test_the_gathering_keeps_each_rows_model_reference(project: Path) -> None:
    make_project(project, VECTOR, VECTOR_ANSWERS, SIXTEEN, model=HUB)
    out = gathered(project)
    assert [e["model"] for e in ids(out)] == [f"org/encoder@{REVISION}"] * 16
    assert verify(out)[0] == 0
    entries = ids(out)
    entries[5]["model"] = "org/other@" + REVISION
    write_ids(out, entries)
    reseal(out)
    code, output = verify(out)
    assert code == 1 and "do not all name one model reference" in output


# ---------------------------------------------------------------- (2) a gathering verifies only whole


def test_a_gatherings_output_folder_removed_with_its_lines_fails(project: Path) -> None:
    make(project, SIXTEEN)
    out = gathered(project)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["outputs"] == 16 and "outputs/v-03/result.txt" in summary["files"]
    assert {"summary.json", "summary.md", "SHA256SUMS"} <= set(summary["files"])
    assert verify(out)[0] == 0
    for name in sorted((out / "outputs" / "v-03").rglob("*"), reverse=True):
        name.unlink() if name.is_file() else name.rmdir()
    (out / "outputs" / "v-03").rmdir()
    drop_sums_lines(out, "outputs/v-03/")
    code, output = verify(out)
    assert code == 1 and "outputs/v-03/result.txt: missing, and not listed in SHA256SUMS" in output


def test_a_gatherings_output_count_is_checked_without_its_files_list(project: Path) -> None:
    """A gathering written before summary.json listed its files: the count still catches a removed folder."""
    make(project, SIXTEEN)
    out = gathered(project)
    summary = json.loads((out / "summary.json").read_text())
    del summary["files"]
    (out / "summary.json").write_text(json.dumps(summary))
    reseal(out)
    assert verify(out)[0] == 0  # today's gatherings, without the new key, still verify
    for name in sorted((out / "outputs" / "v-07").rglob("*"), reverse=True):
        name.unlink() if name.is_file() else name.rmdir()
    (out / "outputs" / "v-07").rmdir()
    drop_sums_lines(out, "outputs/v-07/")
    code, output = verify(out)
    assert code == 1 and "says 16 items' output folders, but outputs/ holds 15" in output


def test_a_gatherings_last_vector_row_dropped_and_resealed_fails(project: Path) -> None:
    make_project(project, VECTOR, VECTOR_ANSWERS, SIXTEEN)
    out = gathered(project)
    assert json.loads((out / "summary.json").read_text())["vectors"] == 16 and verify(out)[0] == 0
    npy = out / "vectors.npy"
    data = npy.read_bytes()
    rows, dim = read_header(data[:HEADER], npy)
    npy.write_bytes(header(rows - 1, dim) + data[HEADER:HEADER + (rows - 1) * dim * 4])
    write_ids(out, ids(out)[:-1])
    reseal(out)
    assert numpy.load(npy).shape == (15, 4)  # a well-formed array: only the count tells
    code, output = verify(out)
    assert code == 1 and "says 16 vector rows, but vectors.npy holds 15" in output


# ---------------------------------------------------------------- (3) outputs/ against the records' hashes


def test_an_output_file_edited_with_its_sums_line_fixed_fails(project: Path) -> None:
    make(project, SIXTEEN[:4])
    code, summary = pilot(project)
    run_dir = Path(summary["run_dir"])
    assert code == 0 and verify(run_dir)[0] == 0
    (run_dir / "outputs" / "v-01" / "result.txt").write_text("edited")
    reseal(run_dir)
    code, output = verify(run_dir)
    assert code == 1 and "outputs/v-01/result.txt: results.jsonl names SHA-256" in output
    assert records(run_dir)["v-01"]["files"]["result.txt"][:12] in output


def test_an_output_file_no_record_names_fails_even_listed(project: Path) -> None:
    make(project, SIXTEEN[:4])
    code, summary = pilot(project)
    run_dir = Path(summary["run_dir"])
    (run_dir / "outputs" / "v-02" / "extra.txt").write_text("added after the run")
    names = [line.split("  ", 1)[1] for line in (run_dir / SUMS).read_text().splitlines()]
    write_sums(run_dir, [(name, run_dir / name) for name in [*names, "outputs/v-02/extra.txt"]])
    code, output = verify(run_dir)
    assert code == 1 and "outputs/v-02/extra.txt: named by no accepted record" in output


def test_a_whole_output_folder_removed_with_its_lines_and_files_entry_fails(project: Path) -> None:
    make(project, SIXTEEN[:4])
    code, summary = pilot(project)
    run_dir = Path(summary["run_dir"])
    for name in ("result.txt", "sub/meta.json"):
        os.unlink(run_dir / "outputs" / "v-00" / name)
    (run_dir / "outputs" / "v-00" / "sub").rmdir()
    (run_dir / "outputs" / "v-00").rmdir()
    kept = json.loads((run_dir / "summary.json").read_text())
    kept["files"] = [f for f in kept["files"] if not f.startswith("outputs/v-00/")]
    (run_dir / "summary.json").write_text(json.dumps(kept))
    drop_sums_lines(run_dir, "outputs/v-00/")
    code, output = verify(run_dir)
    assert code == 1 and "outputs/v-00/result.txt: results.jsonl names SHA-256" in output
    assert "SHA256SUMS does not list it" in output
