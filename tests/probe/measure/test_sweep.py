"""`kdkit sweep`: every group at every batch size, limits and failures shown, order checked, plotted."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kdkit.probe.measure.cells import split_groups
from kdkit.probe.measure.sweep import parse_batch_sizes
from tests.conftest import DATA, invoke, tree_snapshot


def _use_app(project: Path, function: str) -> Path:
    shutil.copyfile(DATA / "sweep" / "sweepapp.py", project / "src" / "sweepapp.py")
    config = project / "config" / "pilot.json"
    data = json.loads(config.read_text(encoding="utf-8"))
    data["entry"] = f"src.sweepapp:{function}"
    config.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return project


def _sweep(project: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    result = invoke("sweep", project, "--json", *args)
    return result.exit_code, json.loads(result.stdout), result.stderr


def _cells(report: dict[str, Any]) -> list[tuple[str, int]]:
    return [(row["group"], row["batch_size"]) for row in report["rows"]]


def test_sweep_measures_each_group_at_each_batch_size(project: Path) -> None:
    code, report, _ = _sweep(_use_app(project, "predict_ok"), "--batch-sizes", "2,4")
    assert code == 0 and report["ok"] is True
    assert report["batch_sizes"] == [1, 2, 4]  # batch 1 added: the reference order
    assert [g["name"] for g in report["groups"]] == ["short", "usual", "near the limit"]
    assert [len(g["ids"]) for g in report["groups"]] == [4, 4, 3]
    sizes = [(g["min_bytes"], g["max_bytes"]) for g in report["groups"]]
    assert sizes[0][1] <= sizes[1][0] and sizes[1][1] <= sizes[2][0]
    assert report["skipped"][0]["id"] == "doc-12" and "not valid UTF-8" in report["skipped"][0]["reason"]
    assert _cells(report) == [(g, b) for g in ("short", "usual", "near the limit")
                              for b in (1, 2, 4)]
    for row in report["rows"]:
        assert row["completed"] == row["inputs"] and row["errors"] == 0 and row["limit"] is None
        assert row["same_as_batch_1"] is True and row["items_per_second"] > 0 and row["peak_memory_bytes"] > 0
    saved = json.loads(Path(report["out"]).read_text(encoding="utf-8"))
    assert saved["rows"] == report["rows"]


def test_out_of_memory_is_the_limit_and_larger_batches_are_not_tried(project: Path) -> None:
    code, report, _ = _sweep(_use_app(project, "predict_oom"), "--batch-sizes", "1,2,4,8")
    assert code == 0
    # The 3 longest inputs never fill a batch of 4, so that group meets no limit.
    assert _cells(report) == [(g, b) for g in ("short", "usual") for b in (1, 2, 4)] + [
        ("near the limit", b) for b in (1, 2, 4, 8)]
    limits = [row for row in report["rows"] if row["limit"]]
    assert [(row["group"], row["batch_size"]) for row in limits] == [("short", 4), ("usual", 4)]
    assert limits[0]["limit"] == ("out of memory at batch 0 (OutOfMemoryError: CUDA out of memory. "
                                  "Tried to allocate 20.00 GiB)")
    assert limits[0]["completed"] == 0 and limits[0]["same_as_batch_1"] is None
    shown = invoke("sweep", project, "--batch-sizes", "1,2,4,8").stdout.splitlines()
    oom_rows = [line for line in shown if "out of memory at batch 0" in line]
    # counted
    assert len(oom_rows) == 2 and all(" 1 out of memory at batch 0 " in line for line in oom_rows)


def test_scrambled_order_is_caught(project: Path) -> None:
    result = invoke("sweep", _use_app(project, "predict_scrambled"), "--batch-sizes", "1,2")
    assert result.exit_code == 1
    assert "NO: output 1:" in result.stdout
    assert result.stderr.splitlines()[-1].startswith(
        "Error: sweep: group 'short' at batch size 2: outputs differ from batch 1 (output 1: doc-")


def test_failures_are_shown_per_row_never_averaged(project: Path) -> None:
    code, report, stderr = _sweep(
        _use_app(project, "predict_fails_batched"), "--batch-sizes", "1,2")
    assert code == 1
    failed = [row for row in report["rows"] if row["batch_size"] == 2]
    assert [row["completed"] for row in failed] == [0, 0, 1]  # 3 inputs: the last batch holds one
    assert failed[0]["errors"] == 2 and failed[0]["first_error"] == "batch 0: ValueError: padding mismatch in batch"
    assert stderr.splitlines()[-1] == ("Error: sweep: group 'short' at batch size 2: batch 0: "
                                       "ValueError: padding mismatch in batch")


def test_plot_is_a_png(project: Path, tmp_path: Path) -> None:
    plot = tmp_path / "sweep.png"
    result = invoke("sweep", _use_app(project, "predict_oom"), "--batch-sizes",
                    "1,2,4", "--plot", plot)
    assert result.exit_code == 0, result.stderr
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Table" not in result.stdout and "near the limit" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--batch-sizes", "1,0"],
         "Error: --batch-sizes 1,0: '0' is not a positive integer; give e.g. 1,2,4\n"),
        (["--batch-sizes", "1,two"],
         "Error: --batch-sizes 1,two: 'two' is not a positive integer; give e.g. 1,2,4\n"),
        (["--batch-sizes", "-2"],
         "Error: --batch-sizes -2: '-2' is not a positive integer; give e.g. 1,2,4\n"),
        (["--batch-sizes", "1,²"],
         "Error: --batch-sizes 1,²: '²' is not a positive integer; give e.g. 1,2,4\n"),
        (["--batch-sizes", "1,1e3"],
         "Error: --batch-sizes 1,1e3: '1e3' is not a positive integer; give e.g. 1,2,4\n"),
        (["--batch-sizes", "1," + "9" * 5000], "' is not a positive integer; give e.g. 1,2,4\n"),
        (["--batch-sizes", "1,1000001"],
         "Error: --batch-sizes 1,1000001: 1000001 is more than 1,000,000; give batch "
         "sizes a card can hold, e.g. 1,2,4,8\n"),
        (["--groups", "12"],
         "Error: --groups 12: must be between 1 and the number of readable inputs (11)\n"),
        (["--plot", "nowhere/sweep.png"], "folder"),
        (["--plot", "sweep.svg"],
         "Error: --plot sweep.svg: the plot is a PNG; give a path ending in .png\n"),
    ],
)
def test_bad_input_exits_2_and_writes_nothing(project: Path, args: list[str], message: str) -> None:
    _use_app(project, "predict_ok")
    before = tree_snapshot(project)
    result = invoke("sweep", project, *args)
    assert result.exit_code == 2
    assert message in result.stderr and len(result.stderr.splitlines()) == 1
    if message == "folder":
        assert "does not exist; create it first" in result.stderr
    assert tree_snapshot(project) == before


def test_parse_and_split_helpers() -> None:
    assert parse_batch_sizes("4, 2,2") == [1, 2, 4]
    with pytest.raises(Exception, match="must be between 1"):
        split_groups([], 3)


def test_torch_without_numpy_gives_one_note_not_its_warning(project: Path, tmp_path: Path) -> None:
    """Issue 31: a lock without numpy (the template's) made torch print "Failed to initialize NumPy" on every
    host sweep. The stand-in for an environment without numpy is a numpy that cannot be imported, first on the
    path: torch warns as it does without one (checked first), and the sweep says it once, in its own words."""
    absent = tmp_path / "absent" / "numpy"
    absent.mkdir(parents=True)
    (absent
     / "__init__.py").write_text(
         'raise ModuleNotFoundError("No module named numpy", name="numpy")\n')
    env = {**os.environ, "PYTHONPATH": str(absent.parent)}
    plain = subprocess.run([sys.executable, "-c", "import torch"], env=env,
                           capture_output=True, text=True)
    # the stand-in does what a missing numpy does
    assert "UserWarning: Failed to initialize NumPy" in plain.stderr
    done = subprocess.run([sys.executable, "-m", "kdkit", "sweep",
                           str(project), "--batch-sizes", "1"], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "UserWarning" not in done.stderr and done.stderr.count(
        "sweep: note: numpy is not importable") == 1
