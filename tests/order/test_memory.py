"""`kdkit estimate-memory`: the lower bound's arithmetic, its verdicts, and the pilot's measured peak."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kdkit.core.errors import BadInput
from kdkit.facts.catalog import load_catalog
from kdkit.order.memory import DOES_NOT_FIT, MAY_FIT, KvShape, MemoryJob, estimate, estimate_memory, parse_params
from tests.conftest import invoke, tree_snapshot

B = 1_000_000_000


def _items(job: MemoryJob) -> dict[str, int]:
    return {i["item"]: i["bytes"] for i in estimate(job)["items"]}


def _json(*args: str | Path) -> dict[str, Any]:
    result = invoke("estimate-memory", *args, "--json")
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def test_weights_are_parameters_times_dtype_bytes() -> None:
    assert _items(MemoryJob(7 * B, "bf16")) == {"weights": 14 * B}
    assert _items(MemoryJob(7 * B, "fp32")) == {"weights": 28 * B}
    assert _items(MemoryJob(7 * B, "int4")) == {"weights": 3_500_000_000}


def test_adam_under_mixed_precision_is_16_bytes_per_parameter() -> None:
    items = _items(MemoryJob(B, "bf16", "adam"))
    assert items == {"weights": 2 * B, "gradients": 2 * B, "fp32 master weights": 4 * B,
                     "Adam moments": 8 * B}
    assert estimate(MemoryJob(B, "bf16", "adam"))["lower_bound_bytes"] == 16 * B


def test_fp32_adam_has_no_master_copy() -> None:
    assert _items(MemoryJob(B, "fp32", "adam")) == {"weights": 4 * B, "gradients": 4 * B,
                                                    "Adam moments": 8 * B}


def test_sgd_counts_gradients_and_lists_momentum_as_unmeasured() -> None:
    report = estimate(MemoryJob(B, "fp16", "sgd"))
    assert {i["item"] for i in report["items"]} == {"weights", "gradients", "fp32 master weights"}
    assert "SGD momentum, if used: one more fp32 buffer (3.73 GiB)" in report["unmeasured"]


def test_kv_cache_is_2_layers_heads_dim_seq_batch_bytes() -> None:
    job = MemoryJob(B, "bf16", kv=KvShape.parse("32,8,128,4096,4"))
    assert _items(job)["KV cache"] == 2 * 32 * 8 * 128 * 4096 * 4 * 2
    assert "KV cache of generation (not given: pass --kv)" not in estimate(job)["unmeasured"]


def test_unmeasured_items_are_always_listed() -> None:
    unmeasured = estimate(MemoryJob(B))["unmeasured"]
    assert unmeasured[:4] == [
        "activations (they grow with batch size and sequence length)",
        "CUDA/ROCm context and library workspaces (cuBLAS, cuDNN, MIOpen, NCCL)",
        "allocator caching and fragmentation",
        "temporary buffers inside individual operations",
    ]


def test_verdict_is_does_not_fit_or_may_fit_never_fits() -> None:
    catalog = load_catalog()
    big = estimate_memory(MemoryJob(70 * B, "bf16"), catalog.find("RTX 4090"))
    assert big["against"]["verdict"] == DOES_NOT_FIT
    small = estimate_memory(MemoryJob(B, "bf16"), catalog.find("RTX 4090"))
    assert small["against"]["verdict"] == MAY_FIT == "may fit — to be measured by the pilot"
    # One B200 card has 180 GB: a lot's two cards never pool into 360.
    assert estimate_memory(MemoryJob(100 * B, "bf16"),
                           catalog.find("B200"))["against"]["verdict"] == DOES_NOT_FIT


@pytest.mark.parametrize(("text", "count"),
                         [("7B", 7 * B), ("350m", 350_000_000), ("1.5e9", 1_500_000_000),
                          ("124000000", 124_000_000), ("1.5B", 1_500_000_000)])
def test_parameter_counts(text: str, count: int) -> None:
    assert parse_params(text) == count


@pytest.mark.parametrize("text", ["seven", "-3", "0", "1.5", "7X"])
def test_bad_parameter_counts(text: str) -> None:
    with pytest.raises(BadInput, match=rf"^--params {text!r}: "):
        parse_params(text)


def test_cli_prints_items_unmeasured_and_verdict() -> None:
    result = invoke("estimate-memory", "--params", "7B", "--train", "adam", "--gpu", "H100 SXM")
    assert result.exit_code == 0
    assert "Against one H100 SXM (80 GB): does not fit" in result.stdout
    assert "allocator caching and fragmentation" in result.stdout
    assert " fits" not in result.stdout.replace("does not fit", "")


def test_cli_json_without_a_card_has_no_verdict(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    report = _json("--params", "1B", "--dtype", "fp16", "--kv", "2,2,64,128,1")
    assert report["against"] is None and report["pilot_peak"] is None
    assert report["lower_bound_bytes"] == 2 * B + 2 * 2 * 2 * 64 * 128 * 2


def test_from_config_reads_kdkit_json_and_flags_win(project: Path) -> None:
    config = json.loads((project / "kdkit.json").read_text())
    config["memory"] = {"parameters": 3 * B, "dtype": "fp32", "train": "adam",
                        "kv": {"layers": 2, "kv_heads": 2, "head_dim": 64, "seq": 128, "batch": 1}}
    (project / "kdkit.json").write_text(json.dumps(config))
    report = _json(project, "--from-config")
    assert (report["parameters"], report["dtype"], report["train"]) == (3 * B, "fp32", "adam")
    assert report["kv"] == {"layers": 2, "kv_heads": 2, "head_dim": 64, "seq": 128, "batch": 1}
    assert _json(project, "--from-config", "--dtype", "bf16")["dtype"] == "bf16"


def _run(project: Path, run_id: str, summary: object) -> Path:
    folder = project / "runs" / run_id
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(summary if isinstance(summary, str)
                                         else json.dumps(summary))
    return folder


def test_the_newest_pilot_peak_is_shown_beside_the_estimate(project: Path) -> None:
    _run(project, "20250101T000000Z-aaaaaa", {"peak_memory": {"bytes": 2**30, "device": "cpu"}})
    _run(project, "20250102T000000Z-bbbbbb",
         {"peak_memory": {"bytes": 3 * 2**30, "device": "cuda:0"}})
    # torn by a crash: skipped
    _run(project, "20250103T000000Z-cccccc", '{"peak_memory": {"bytes": 12')
    report = _json(project, "--params", "1B")
    assert report["pilot_peak"] == {"run_id": "20250102T000000Z-bbbbbb", "peak_bytes": 3 * 2**30,
                                    "peak_gib": 3.0,
                                    "device": "cuda:0",
                                    "file": str(project / "runs" / "20250102T000000Z-bbbbbb"
                                                / "summary.json")}
    text = invoke("estimate-memory", project, "--params", "1B").stdout
    assert "Pilot 20250102T000000Z-bbbbbb measured a peak of 3.0 GiB on cuda:0 (estimate: 1.86 GiB)." in text


def test_a_gpu_peak_above_the_card_does_not_fit(project: Path) -> None:
    _run(project, "20250101T000000Z-aaaaaa",
         {"peak_memory": {"bytes": 30 * 2**30, "device": "cuda:0"}})
    assert _json(project, "--params",
                 "1B", "--gpu", "RTX 4090")["against"]["verdict"] == DOES_NOT_FIT
    _run(project, "20250102T000000Z-bbbbbb",
         {"peak_memory": {"bytes": 30 * 2**30, "device": "cpu"}})
    # A CPU peak says nothing about a card.
    assert _json(project, "--params", "1B", "--gpu", "RTX 4090")["against"]["verdict"] == MAY_FIT


@pytest.mark.parametrize(("args", "message"), [
    ([], "estimate-memory: give exactly one of --params N or --from-config"),
    (["--params", "7B", "--from-config"],
     "estimate-memory: give exactly one of --params N or --from-config"),
    (["--params", "lots"], "--params 'lots': expected a parameter count such as 7B, 350M or 1.5e9"),
    (["--params", "7B", "--kv", "1,2,3"],
     "--kv '1,2,3': expected five positive integers layers,kv_heads,head_dim,seq,batch (e.g. "
     "32,8,128,4096,1)"),
    (["--params", "7B", "--gpu", "GeForce RTX-3090 24GB"],
     "--gpu 'GeForce RTX-3090 24GB': no such offer in the catalog; did you mean 'RTX 3090'? pass "
     "that name (or add your own with a project catalog.json or --catalog FILE)"),
])
def test_bad_input_exits_2(project: Path, args: list[str], message: str) -> None:
    before = tree_snapshot(project)
    result = invoke("estimate-memory", project, *args)
    assert result.exit_code == 2
    assert result.stderr.strip() == f"Error: {message}"
    assert tree_snapshot(project) == before


def test_from_config_without_a_memory_section_exits_2(project: Path) -> None:
    result = invoke("estimate-memory", project, "--from-config")
    assert result.exit_code == 2
    assert result.stderr.startswith(f"Error: {project / 'kdkit.json'}: $.memory: missing;")
