"""`kdkit diagnose --accept` as a user runs it: the verdict, the evidence files and the paragraph for the
provider, on this machine (no GPU: a clear refusal), as a CPU acceptance (`--expect cpu`: the load runs
for real on torch's CPU build), and against recorded drivers (tests/smi_standin.py on PATH: the driver sees
cards that torch, a CPU build here, does not). Bad input is one line, exit 2, nothing written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, tree_snapshot

from tests.smi_standin import install

SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"  # no nvidia-smi here; kdkit itself is run by path


def accept(*args: str | os.PathLike[str], path: str = SYSTEM_PATH, cwd: Path | None = None,
           entry: tuple[str, ...] = ("-m", "kdkit")) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": path}
    return subprocess.run([sys.executable, *entry, "diagnose", "--accept", *map(str, args)], capture_output=True,
                          text=True, timeout=600, check=False, env=env, cwd=cwd)


def evidence(folder: Path) -> dict[str, Any]:
    assert sorted(p.name for p in folder.iterdir()) == ["acceptance.json", "acceptance.md"]
    data: dict[str, Any] = json.loads((folder / "acceptance.json").read_text(encoding="utf-8"))
    return data


def test_this_machine_has_no_gpu_and_is_refused_with_evidence(tmp_path: Path) -> None:
    done = accept("--seconds", "2", "--out", tmp_path / "evidence", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "VERDICT: REFUSE" in done.stdout and "no GPU: no nvidia-smi, amd-smi or rocm-smi on PATH" in done.stdout
    report = evidence(tmp_path / "evidence")
    assert report["verdict"] == "refuse" and [r["name"] for r in report["reasons"]] == ["gpu.present"]
    assert not any(p["section"] == "load" for p in report["points"])  # nothing to load
    assert report["provider_message"].startswith(f"On {report['started']} the machine ")
    assert "shows no GPU at all" in report["provider_message"]
    markdown = (tmp_path / "evidence" / "acceptance.md").read_text(encoding="utf-8")
    assert markdown.startswith("# Acceptance: REFUSE\n") and "## For the provider" in markdown
    assert "kdkit diagnose --accept --seconds 2 --out " in markdown  # the command that reproduces it


def test_a_cpu_machine_is_judged_by_its_load(tmp_path: Path) -> None:
    done = accept("--expect", "cpu", "--seconds", "2", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["verdict"] == "accept" and report["provider_message"] is None
    names = {p["name"]: p["verdict"] for p in report["points"]}
    assert names["load.gemm.bitwise"] == "ok" and names["load.memory.fill"] == "ok"
    assert names["load.gemm.sustained"] in ("ok", "degraded")  # a shared machine may be noisy; it is judged
    assert 1.5 <= report["seconds_under_load"] <= 30
    assert [s["name"] for s in report["steps"]["steps"]][:3] == ["interpreter", "environment", "torch import"]


@pytest.mark.parametrize(("scenario", "verdict", "reason"), [
    ("h100x8-healthy", "incomplete", None),  # the driver sees 8 H100, torch (CPU build) none: not the card's fault
    ("a100x4-remap-ecc", "refuse", "ecc.volatile_uncorrected"),  # a refusal stands whatever else failed
    ("h100pcie-gen3x8", "incomplete", None),
    ("mi300x8-xgmi-down", "incomplete", None),
])
def test_recorded_drivers_and_a_cpu_torch(tmp_path: Path, scenario: str, verdict: str, reason: str | None) -> None:
    bin_dir = install(tmp_path / "bin", scenario)
    done = accept("--seconds", "1", "--out", tmp_path / "evidence", path=f"{bin_dir}:{SYSTEM_PATH}", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    report = evidence(tmp_path / "evidence")
    assert report["verdict"] == verdict, report["reasons"]
    assert report["machine"]["gpus"] and report["machine"]["driver"]
    if verdict == "incomplete":
        assert report["incomplete"].startswith(f"the driver sees {len(report['machine']['gpus'])} x ")
        assert "torch sees none: the environment is at fault, not the card" in report["incomplete"]
        assert report["provider_message"] is None  # nothing to tell the provider: the environment is ours
    else:
        assert reason in [r["name"] for r in report["reasons"]]
        assert "please replace the card or the machine" in report["provider_message"]
    assert any(line.startswith(("nvidia-smi --query-gpu=", "amd-smi static --json")) for line in report["reproduce"])


@pytest.mark.parametrize(("args", "said"), [
    (["--seconds", "0"], "--seconds '0': outside (0, 3600]; the acceptance test runs in the provider's first hour"),
    (["--seconds", "-5"], "--seconds '-5': outside (0, 3600]; the acceptance test runs in the provider's first hour"),
    (["--seconds", "1e9"], "--seconds '1e9': outside (0, 3600]; the acceptance test runs in the provider's first "
                           "hour"),
    (["--seconds", "nan"], "--seconds 'nan': not a finite number; give a real figure"),
    (["--deep"], "--deep and --accept: the acceptance test measures under load already; drop --deep"),
    (["--order", "missing.json"], "missing.json: order (kdkit plan --save) not found; create it or pass the right "
                                  "path"),
])
def test_bad_input_is_one_line_and_nothing_written(tmp_path: Path, args: list[str], said: str) -> None:
    before = tree_snapshot(tmp_path)
    done = accept(*args, "--out", "evidence", cwd=tmp_path)
    assert (done.returncode, done.stderr) == (2, f"Error: {said}\n")
    assert tree_snapshot(tmp_path) == before and not (tmp_path / "evidence").exists()


def test_seconds_without_accept_and_an_out_that_is_no_folder(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "kdkit", "diagnose", "--seconds", "5"], capture_output=True,
                          text=True, timeout=120, check=False, cwd=tmp_path)
    assert (done.returncode, done.stderr) == (2, "Error: --seconds and --order belong to the acceptance test; add "
                                                 "--accept\n")
    (tmp_path / "a-file").write_text("x", encoding="utf-8")
    for out, said in ((tmp_path / "a-file", f"{tmp_path / 'a-file'}: not a folder; --out with --accept names the "
                                            "folder for acceptance.json and acceptance.md"),
                      (tmp_path / "a-file" / "below", f"{tmp_path / 'a-file' / 'below'}: {tmp_path / 'a-file'} is "
                                                      "not a folder; move it away or choose another folder for --out")):
        before = tree_snapshot(tmp_path)
        done = accept("--seconds", "1", "--out", out, cwd=tmp_path)
        assert (done.returncode, done.stderr) == (2, f"Error: {said}\n")
        assert tree_snapshot(tmp_path) == before


def test_an_order_holds_the_machine_to_its_card(tmp_path: Path) -> None:
    """The order `kdkit plan --save` wrote names 4 H100s; the recorded driver shows 8 H100s."""
    plan = subprocess.run([sys.executable, "-m", "kdkit", "plan", "--gpu", "H100 SXM", "--days", "3", "--lots", "1",
                           "--price", "100", "--save", str(tmp_path / "order.json")], capture_output=True, text=True,
                          timeout=120, check=False, cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    bin_dir = install(tmp_path / "bin", "h100x8-healthy")
    done = accept("--seconds", "1", "--order", tmp_path / "order.json", "--json", path=f"{bin_dir}:{SYSTEM_PATH}",
                  cwd=tmp_path)
    report = json.loads(done.stdout)
    order = json.loads((tmp_path / "order.json").read_text(encoding="utf-8"))
    assert report["order"] == {"card": order["offer"]["name"], "count": order["cards"]}
    judged = [p for p in report["points"] if p["name"].startswith("gpu.") and p["verdict"] != "info"]
    assert judged, [p["name"] for p in report["points"]]


def test_the_zipapp_and_the_container_entry_run_it(tmp_path: Path) -> None:
    from kdkit.transfer.zipapp import build_zipapp

    build_zipapp(tmp_path / "kdkit.pyz")
    for entry, cwd in (((str(tmp_path / "kdkit.pyz"),), tmp_path), (("-m", "kdkit.probe"), REPO)):
        done = accept("--expect", "cpu", "--seconds", "1", "--out", tmp_path / f"ev-{len(entry)}", entry=entry,
                      cwd=cwd)
        assert done.returncode == 0 and "VERDICT: ACCEPT" in done.stdout, done.stdout + done.stderr
        assert evidence(tmp_path / f"ev-{len(entry)}")["verdict"] == "accept"


def test_a_projects_threshold_is_laid_over_the_shipped_one(tmp_path: Path) -> None:
    """kdkit.json "acceptance" overrides a rule (validate accepts it); the report names kdkit.json as its source."""
    from kdkit.project.init import init_project

    project = init_project(tmp_path / "proj", name="proj", backend="cpu")
    config = json.loads((project / "kdkit.json").read_text(encoding="utf-8"))
    config["acceptance"] = {"load": {"load.gemm.sustained": {"value": 5.0}}}  # 500 % of the first 10 %: never met
    (project / "kdkit.json").write_text(json.dumps(config), encoding="utf-8")
    assert subprocess.run([sys.executable, "-m", "kdkit", "validate", str(project)], capture_output=True,
                          timeout=120, check=False).returncode == 0
    done = accept("--expect", "cpu", "--seconds", "1", "--project", project, "--json", cwd=tmp_path)
    report = json.loads(done.stdout)
    (sustained,) = [p for p in report["points"] if p["name"] == "load.gemm.sustained"]
    assert (done.returncode, report["verdict"], sustained["verdict"]) == (1, "degraded", "degraded")
    assert sustained["source"] == "kdkit.json (this project)"
    config["acceptance"] = {"load": ["not", "rules"]}
    (project / "kdkit.json").write_text(json.dumps(config), encoding="utf-8")
    assert subprocess.run([sys.executable, "-m", "kdkit", "validate", str(project)], capture_output=True,
                          timeout=120, check=False).returncode == 2
