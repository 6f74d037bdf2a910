"""`kdkit run` of the embed and generate templates in the CPU image (issue 25, "Done means": the templates pass
`kdkit run` in the CPU image).

Each template is made by `kdkit init --template`, locked (torch from the local wheels, as tests/conftest.py's
``locked``), built offline from its own wheelhouse on the local base image under its own tag
(``kdkit-templates-e2e:<template>``, never the session's kdkit-e2e image), then run by `kdkit run`: the container
is confined as always (read-only root, no network, HOME a tmpfs), so the app's first-use training must need
nothing but memory. The second build reuses the first's layers (the same lock): only config/ and src/ differ.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy
import pytest

from kdkit.core.runverify import read_run
from tests.conftest import BASE, TORCH_WHEELS, invoke
from tests.probe.pilot.test_output_kinds import records, verified

pytestmark = pytest.mark.docker

TAG = "kdkit-templates-e2e"
# template: (inputs, accepted, the planned rejection's ID), as tests/project/test_init_templates.py's PILOTS
PILOTS = {"embed": (10, 9, "text-10"), "generate": (8, 7, "prompt-08")}


def _ready(tmp_path: Path, template: str) -> Path:
    """The template's project, locked, and its image built offline under TAG:template."""
    if not any(TORCH_WHEELS.glob("torch-*.whl")):
        pytest.skip(f"no torch wheel in {TORCH_WHEELS} (KDKIT_TEST_TORCH_WHEELS)")
    root = tmp_path / template
    steps = [("init", root, "--name", TAG, "--backend", "cpu", "--template", template),
             ("lock", root, "--backend", "cpu", "--torch-find-links", TORCH_WHEELS),
             ("wheelhouse", root, "--out", tmp_path / "wheelhouse", "--json"),
             ("build", root, "--backend", "cpu", "--base-image", BASE, "--wheelhouse",
              tmp_path / "wheelhouse",
              "--tag", f"{TAG}:{template}", "--json")]
    for step in steps:
        result = invoke(*step)
        assert result.exit_code == 0, f"kdkit {step[0]}: {result.output}"
    return root


@pytest.mark.parametrize("template", list(PILOTS))
def test_each_template_passes_kdkit_run_in_the_cpu_image(
    docker_engine: None, tmp_path: Path, template: str) -> None:
    root = _ready(tmp_path, template)
    result = invoke("run", root, "--image", f"{TAG}:{template}")
    assert result.exit_code == 0, result.output
    (run_dir,) = [p for p in (root / "runs").iterdir() if p.is_dir()]
    total, accepted, rejected_id = PILOTS[template]
    run = read_run(run_dir)
    assert (run.verdict, run.total, run.accepted, run.rejected) == ("pass", total, accepted, 1)
    kept = records(run_dir)
    assert len(kept) == total and kept[rejected_id]["outcome"] == "rejected"
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    assert summary["quality"] is not None and summary["quality"] >= 0.99
    if template == "embed":  # every accepted item's vector, once, in vectors.npy
        array = numpy.load(run_dir / "vectors.npy")
        assert array.shape == (accepted, 32)
        assert sorted(r["row"] for r in kept.values() if "row" in r) == list(range(accepted))
        assert numpy.allclose(numpy.linalg.norm(array, axis=1), 1.0, atol=1e-4)
    else:  # generated text kept in full in results.jsonl
        outputs = [r["output"] for r in kept.values() if r["outcome"] == "accepted"]
        assert len(outputs) == accepted and all(isinstance(o, str) and o for o in outputs)
    assert verified(run_dir) == []
    assert invoke("copy-out", run_dir, "--verify").exit_code == 0
