"""A project made by `kdkit init` before issue 25 (commit 7546dc7: top-level "categories", a folder of files with
its manifest, `predict(items)`), kept whole in tests/data/legacy-project with two runs that commit's pilot made:
`old-pass`, closed and passing, and `old-cut`, as a kill after its second batch leaves it (its last batch's lines
and its closing files gone). Today's kdkit validates it, pilots it to the same run identity, verifies the old run
and resumes the cut one to a pass, exactly once. (The machine paths in the runs' params.json and env.json were
rewritten to neutral ones, and old-pass's SHA256SUMS made again over them.)
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kdkit.core.pilotconfig import load_pilot, params_hash
from tests.conftest import REPO, invoke, valid_outside_git

LEGACY = REPO / "tests" / "data" / "legacy-project"
# 7546dc7's params_hash of this config
OLD_HASH = "d588ee6d0ddad6a86bc0861d749610aac6b8ee58856e807eccfe495f230d8274"


@pytest.fixture
def legacy(tmp_path: Path) -> Path:
    project = tmp_path / "legacy"
    shutil.copytree(LEGACY, project)
    return project


def test_the_legacy_config_has_the_run_identity_it_had(legacy: Path) -> None:
    cfg = load_pilot(legacy)
    assert (cfg.output.kind, cfg.jsonl, cfg.model,
            cfg.params, cfg.decode) == ("category", None, None, None, "utf-8")
    assert params_hash(cfg.resolved()) == OLD_HASH
    assert json.loads(
        (legacy / "runs" / "old-pass" / "params.json").read_text())["params_hash"] == OLD_HASH


def test_the_legacy_project_validates_and_pilots_as_before(legacy: Path) -> None:
    result = invoke("validate", legacy)
    assert result.exit_code == 0 and result.output.strip() == valid_outside_git(
        legacy), result.output
    result = invoke("pilot", legacy, "--run-id", "today", "--json")
    summary = json.loads(result.stdout)
    assert result.exit_code == 0 and summary["verdict"] == "pass", summary.get("problems")
    assert (summary["total"], summary["accepted"], summary["rejected"]) == (12, 11, 1)
    params = json.loads((legacy / "runs" / "today" / "params.json").read_text())
    # the same parameters: the same run, by today's rule too
    assert params["params_hash"] == OLD_HASH
    old = [json.loads(line)
           for line in (legacy / "runs" / "old-pass" / "results.jsonl").read_text().splitlines()]
    new = [json.loads(line)
           for line in (legacy / "runs" / "today" / "results.jsonl").read_text().splitlines()]
    assert [(r["id"], r["outcome"], r.get("category")) for r in new] == \
        [(r["id"], r["outcome"], r.get("category")) for r in old]


def test_the_old_run_verifies_and_the_cut_one_resumes_exactly_once(legacy: Path) -> None:
    assert invoke("copy-out", legacy / "runs" / "old-pass", "--verify").exit_code == 0
    result = invoke("pilot", legacy, "--resume", "old-cut", "--json")
    summary = json.loads(result.stdout)
    assert result.exit_code == 0 and summary["verdict"] == "pass", summary.get("problems")
    lines = [json.loads(line)
             for line in (legacy / "runs" / "old-cut" / "results.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in lines) == [f"doc-{n:02d}" for n in range(1, 13)]  # each once
    # the old batches kept, not redone
    assert [r["batch"] for r in lines[:8]] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert invoke("copy-out", legacy / "runs" / "old-cut", "--verify").exit_code == 0
