"""`kdkit check` judges the extensions kdkit.json lists and the ones the lock pins (kdkit/data/extensions.json).

The locks are hashed files as `kdkit lock` writes them; the verdicts are those the sourced facts support:
ok, fail naming the reason, or unknown ("your diagnose will import it on the machine"), never ok for an
extension kdkit knows nothing about.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kdkit.core.errors import BadInput
from kdkit.facts.extensions import load_extension_facts, parse_facts
from tests.conftest import invoke

HASH = "sha256:" + "ab" * 32


def write_lock(project: Path, backend: str, torch: str, *pins: str) -> None:
    lines = [
        "# kdkit: kdkit-version = 0.0.0", f"# kdkit: backend = {backend}",
        "# kdkit: platform = linux-x86_64"]
    for pin in (f"torch=={torch}", *pins):
        lines += [f"{pin} \\", f"    --hash={HASH}"]
    (project / "requirements"
     / f"{backend}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")


def list_extensions(project: Path, *modules: str) -> None:
    path = project / "kdkit.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config["extensions"] = [{"module": m} for m in modules]
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")


def check(project: Path, gpu: str, backend: str,
          *extra: str) -> tuple[int, dict[str, dict[str, Any]], str]:
    result = invoke("check", project, "--gpu", gpu, "--backend", backend, *extra)
    if "--json" not in extra:
        return result.exit_code, {}, result.stdout + result.stderr
    return result.exit_code, {p["name"]: p for p in json.loads(result.stdout)["points"]}, ""


def test_mi300x_with_flash_attn_listed_is_judged_not_passed(project: Path) -> None:
    list_extensions(project, "flash_attn")
    write_lock(project, "rocm", "2.13.0+rocm7.2")
    code, points, _ = check(project, "MI300X", "rocm", "--json")
    point = points["extension flash-attn"]
    # releases before 2.6.2 have no ROCm build: the pin decides
    assert point["verdict"] == "unknown", point
    assert "fail in releases <2.6.2" in point["why"]
    assert "requirements/rocm.txt pins no flash-attn" in point["why"]
    assert "your diagnose will import it on the machine" in point["why"] and point["fix"]
    assert code == 0
    code, _, text = check(project, "MI300X", "rocm")
    assert code == 0 and "every point holds" not in text
    assert "1 unknown (extension flash-attn)" in " ".join(text.split())


def test_mi300x_with_a_pinned_flash_attn_that_builds_gfx942_is_ok(project: Path) -> None:
    list_extensions(project, "flash_attn")
    write_lock(project, "rocm", "2.13.0+rocm7.2", "flash-attn==2.8.3")
    code, points, _ = check(project, "MI300X", "rocm", "--json")
    assert points["extension flash-attn"]["verdict"] == "ok"
    assert "flash-attn 2.8.3: flash-attn builds kernels for gfx942 (extensions.json: fa_rocm_28)" in \
        points["extension flash-attn"]["why"]
    assert code == 0


def test_t4_with_flash_attn_2_fails_naming_sm_80(project: Path) -> None:
    write_lock(project, "cuda", "2.13.0+cu130", "flash-attn==2.8.3")
    code, points, _ = check(project, "T4", "cuda", "--json")
    point = points["extension flash-attn"]
    assert point["verdict"] == "fail" and "needs sm_80 or newer, and sm_75 is older" in point["why"]
    assert point["fix"] and code == 1


def test_torchvision_of_another_torch_minor_fails(project: Path) -> None:
    write_lock(project, "cuda", "2.13.0+cu130", "torchvision==0.27.0+cu130")
    code, points, _ = check(project, "H100 SXM", "cuda", "--json")
    point = points["extension torchvision"]
    assert point["verdict"] == "fail" and "torch 2.13 pairs with torchvision 0.28.*" in point["why"]
    assert code == 1
    write_lock(project, "cuda", "2.13.0+cu130", "torchvision==0.28.0+cu130")
    code, points, _ = check(project, "H100 SXM", "cuda", "--json")
    assert points["extension torchvision"]["verdict"] == "ok" and code == 0


def test_an_extension_without_facts_is_unknown_never_ok(project: Path) -> None:
    list_extensions(project, "my_fused_ops", "xformers")
    write_lock(project, "cuda", "2.13.0+cu130")
    code, points, _ = check(project, "H100 SXM", "cuda", "--json")
    assert points["extension my_fused_ops"]["verdict"] == "unknown"
    assert points["extension my_fused_ops"]["why"] == ("no facts for my_fused_ops; your diagnose "
                                                          "will import it on the machine")
    assert points["extension xformers"]["verdict"] == "unknown"
    assert code == 0  # unknown alone: diagnose proves it on arrival


def test_a_submodule_is_not_judged_by_its_parent_package_facts(project: Path) -> None:
    list_extensions(project, "flash_attn.cute")  # FlashAttention-4, distributed as flash-attn-4
    write_lock(project, "cuda", "2.13.0+cu130")
    _, points, _ = check(project, "A100 80GB SXM", "cuda", "--json")
    assert points["extension flash_attn.cute"]["verdict"] == "unknown"


def test_a_fail_among_unknowns_is_exit_1(project: Path) -> None:
    list_extensions(project, "my_fused_ops")
    write_lock(project, "cuda", "2.13.0+cu130", "flash-attn==2.8.3")
    code, _, text = check(project, "T4", "cuda")
    assert code == 1 and "extension flash-attn" in text


def test_every_shipped_rule_names_a_source() -> None:
    facts = load_extension_facts()
    for ext in facts.extensions.values():
        assert all(rule["source"] in facts.sources for rule in ext.rules), ext.name
        assert not (ext.torch_pairs or ext.source) or ext.source in facts.sources


def test_a_rule_without_a_source_is_refused() -> None:
    data = {"sources": {},
            "extensions": {"x": {"modules": ["x"], "rules": [{"backend": "cuda", "min_sm": 80,
                                                                "source": "nowhere"}]}}}
    with pytest.raises(BadInput, match=r"\$\.extensions\.x\.rules\[0\]\.source"):
        parse_facts(data, "extensions.json")


# ---------------------------------------------------------------- hostile review: labels, releases past the facts, many


@pytest.mark.parametrize(("pin", "said"), [
    ("flash-attn==2.8.3+cu12torch2.6cxx11abiFALSE",
     "is built for torch 2.6 (its local label), and the lock's torch "
     "is 2.13.0+cu130"),
    ("flash-attn==2.8.3+cu12torch2.13",
     "is built for CUDA 12 (its local label), and the lock's torch 2.13.0+cu130 "
     "is CUDA 13"),
    ("torchvision==0.28.0+cu126", "is built for CUDA 12 (its local label)"),
])
def test_a_local_label_naming_another_torch_or_cuda_fails(
    project: Path, pin: str, said: str) -> None:
    write_lock(project, "cuda", "2.13.0+cu130", pin)
    code, points, _ = check(project, "H100 SXM", "cuda", "--json")
    point = points["extension " + pin.split("==")[0]]
    assert point["verdict"] == "fail" and said in point["why"], point
    assert code == 1


def test_a_local_label_that_agrees_is_judged_by_the_rules(project: Path) -> None:
    write_lock(project, "cuda", "2.13.0+cu130", "flash-attn==2.8.3+cu13torch2.13")
    code, points, _ = check(project, "H100 SXM", "cuda", "--json")
    assert points["extension flash-attn"]["verdict"] == "ok" and code == 0


@pytest.mark.parametrize("version", ["99999999999999999999999.0", "2.8.4"])
def test_a_release_newer_than_the_facts_is_unknown(project: Path, version: str) -> None:
    write_lock(project, "cuda", "2.13.0+cu130", f"flash-attn=={version}")
    code, points, _ = check(project, "H100 SXM", "cuda", "--json")
    point = points["extension flash-attn"]
    assert point["verdict"] == "unknown", point
    assert "kdkit's facts were read through flash-attn 2.8.3 (extensions.json: fa_rocm_28)" in point["why"]
    assert code == 0


def test_checked_through_needs_a_source() -> None:
    data = {"sources": {},
            "extensions": {"x": {"modules": ["x"], "checked_through": {"version": "1.0",
                                                                        "source": "nowhere"}}}}
    with pytest.raises(BadInput, match=r"\$\.extensions\.x\.checked_through"):
        parse_facts(data, "extensions.json")


def test_the_summary_names_five_unknowns_then_a_count(project: Path) -> None:
    list_extensions(project, *(f"ext_{i:04d}" for i in range(1000)))
    write_lock(project, "cuda", "2.13.0+cu130")
    code, _, text = check(project, "H100 SXM", "cuda")
    summary = [line for line in text.splitlines() if "no point fails" in line
               or "unknown (" in line]
    joined = " ".join(text.split())
    assert code == 0 and "1000 unknown (extension ext_0000, extension ext_0001, extension ext_0002, extension " \
        "ext_0003, extension ext_0004, +995 more)" in joined, summary
    assert "ext_0005," not in joined.split("1000 unknown", 1)[1]
