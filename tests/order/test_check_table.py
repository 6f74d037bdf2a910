"""`kdkit check` verdicts for the cards people rent against the builds PyTorch published.

Each row is a card, a locked torch build and the CPU it was resolved for, with the verdict and the
reason the verdict must give (the fact of kdkit/data/pairings.json or of the catalog it rests on).
The locks are small hashed files as `kdkit lock` writes them, header included: `kdkit check`
reads only the pinned torch and the lock's platform.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import invoke

HASH = "sha256:" + "ab" * 32


def write_lock(project: Path, backend: str, torch: str, platform: str = "linux-x86_64") -> Path:
    """``torch`` "2.13.0 from PyPI": PyPI's plain torch, locked from https://pypi.org/simple (its build: the
    pairings' pypi facts)."""
    path = project / "requirements" / f"{backend}.txt"
    torch, pypi = torch.removesuffix(" from PyPI"), torch.endswith(" from PyPI")
    path.write_text("\n".join([
        "# kdkit: kdkit-version = 0.0.0", f"# kdkit: backend = {backend}",
        f"# kdkit: platform = {platform}",
        *(["--index-url https://pypi.org/simple"] if pypi else []),
        f"torch=={torch} \\", f"    --hash={HASH}"]) + "\n", encoding="utf-8")
    return path


def check(project: Path, gpu: str,
          backend: str | None = None) -> tuple[int, dict[str, dict[str, Any]]]:
    args = ["--gpu", gpu, "--json"] + (["--backend", backend] if backend else [])
    result = invoke("check", project, *args)
    report = json.loads(result.stdout)
    return result.exit_code, {p["name"]: p for p in report["points"]}


# card, torch build, platform, point, status, what the reason must say
TABLE = [
    # Blackwell needs sm_100/sm_120 code, which no build before CUDA 12.8 carries.
    ("RTX 5090", "2.6.0+cu124", "x86_64", "kernels", "fail", "no code for RTX 5090's sm_120"),
    ("RTX 5090", "2.13.0+cu130", "x86_64", "kernels",
     "ok", "cubin sm_120, which runs on sm_120 (pairings: torch "
     "2.13 cu130, x86_64: pypi_2_13_0"),
    ("RTX 5090", "2.12.0+cu126", "x86_64", "kernels",
     "fail", "carries sm_50, sm_60, sm_70, sm_75, sm_80, sm_86, "
     "sm_90"),
    ("RTX 5090", "2.7.1+cu128", "x86_64", "kernels", "ok", "cubin sm_120"),
    ("B200", "2.6.0+cu126", "x86_64", "kernels", "fail", "no code for B200's sm_100"),
    ("B200", "2.7.1+cu128", "x86_64", "kernels", "ok", "cubin sm_100"),
    # B300 is compute capability 10.3: sm_100 cubins run on it (same major, older minor).
    ("B300", "2.13.0+cu130", "x86_64", "kernels", "ok", "cubin sm_100, which runs on sm_103"),
    ("RTX PRO 6000 Blackwell Server Edition", "2.9.1+cu130", "x86_64", "kernels",
     "ok", "torch 2.9 cu130 "
     "(experimental)"),
    # CUDA 13 dropped Volta: V100 needs a CUDA 12 build; 2.11 dropped sm_70 from cu128 as well.
    ("V100 SXM2 16GB", "2.13.0+cu130", "x86_64",
     "kernels", "fail", "no code for V100 SXM2 16GB's sm_70"),
    ("V100 SXM2 16GB", "2.13.0+cu126", "x86_64", "kernels", "ok", "cubin sm_70"),
    ("V100 SXM2 32GB", "2.11.0+cu128", "x86_64", "kernels", "fail", "sm_70 (Volta) dropped"),
    ("V100 SXM2 32GB", "2.10.0+cu128", "x86_64", "kernels", "ok", "cubin sm_70"),
    ("T4", "2.13.0+cu130", "x86_64", "kernels", "ok", "cubin sm_75, which runs on sm_75"),
    ("RTX 3090", "2.13.0+cu126", "x86_64", "kernels", "ok", "cubin sm_86"),
    # Ada (sm_89) runs the sm_86 cubin: same major, older minor.
    ("RTX 6000 Ada", "2.8.0+cu129", "x86_64", "kernels", "ok", "cubin sm_86, which runs on sm_89"),
    ("L4", "2.14.0+cu132", "x86_64", "kernels", "ok", "cubin sm_86, which runs on sm_89"),
    ("H100 SXM", "2.11.0+cu128", "x86_64", "kernels", "ok", "cubin sm_90"),
    # ROCm loads only the exact gfx target.
    ("RX 7900 XTX", "2.13.0+rocm7.2", "x86_64", "kernels", "ok", "code object for gfx1100"),
    ("MI300X", "2.13.0+rocm7.2", "x86_64", "kernels", "ok", "code object for gfx942"),
    ("MI355X", "2.13.0+rocm7.2", "x86_64", "kernels", "ok", "code object for gfx950"),
    ("MI355X", "2.5.1+rocm6.2", "x86_64", "kernels", "fail", "no code for MI355X's gfx950"),
    # rocm6.3: uv's list measured on the wheel agrees with the builder's, so it is complete (no gfx950).
    ("MI355X", "2.7.1+rocm6.3", "x86_64", "kernels", "fail", "no code for MI355X's gfx950"),
    ("MI250X", "2.14.0+rocm7.14", "x86_64",
     "kernels", "unknown", "no target is confirmed for the released wheel"),
    ("MI355X", "2.8.0+rocm6.4", "x86_64", "kernels", "unknown", "that list is partial"),
    # rocm6.4 of 2.9: uv measured no gfx950, the 6.4.4 builder lists it: the sources disagree, so unknown.
    ("MI355X", "2.9.1+rocm6.4", "x86_64", "kernels", "unknown", "that list is partial"),
    # Grace hosts are aarch64: an x86_64 lock does not install there; an aarch64 one is judged by its own list.
    ("GH200", "2.13.0+cu130", "x86_64", "cpu", "fail", "GH200 hosts are aarch64 (Grace)"),
    ("GH200", "2.13.0+cu130", "aarch64", "kernels",
     "ok", "cubin sm_90, which runs on sm_90 (pairings: torch 2.13 "
     "cu130 (aarch64), x86_64: pypi_2_13_0"),
    ("H200", "2.13.0+cu130", "aarch64", "cpu", "fail", "H200 hosts are x86_64"),
    ("GH200", "2.7.1+cu128", "aarch64",
     "kernels", "unknown", "kdkit's pairings know no aarch64 build of torch 2.7.1"),
    # The wrong backend, and releases kdkit does not know.
    ("RTX 4090", "2.13.0+cpu", "x86_64",
     "build", "fail", "a cpu build; RTX 4090 (sm_89) needs a cuda build"),
    ("A100 80GB SXM", "2.15.0+cu130", "x86_64",
     "kernels", "unknown", "kdkit knows torch releases 2.5, 2.6"),
    ("H100 PCIe", "2.13.0+cu128", "x86_64",
     "kernels", "unknown", "torch 2.13 is published for cpu, cu126, cu130"),
    # PyPI's plain torch is the build its artifact is (pairings pypi, read from the released wheels).
    ("RTX 5090", "2.13.0 from PyPI", "x86_64",
     "kernels", "ok", "torch 2.13.0+cu130 carries cubin sm_120"),
    ("V100 SXM2 16GB", "2.13.0 from PyPI", "x86_64",
     "kernels", "fail", "no code for V100 SXM2 16GB's sm_70"),
    ("V100 SXM2 16GB", "2.10.0 from PyPI", "x86_64",
     "kernels", "ok", "torch 2.10.0+cu128 carries cubin sm_70"),
    ("RTX 5090", "2.6.0 from PyPI", "x86_64", "kernels", "fail", "torch 2.6.0+cu124 carries sm_50"),
    ("GH200", "2.10.0 from PyPI", "aarch64", "build", "fail", "torch 2.10.0+cpu, a cpu build"),
    ("GH200", "2.13.0 from PyPI", "aarch64", "kernels", "ok", "cubin sm_90, which runs on sm_90"),
    # Offline (no wheel read), PyPI's build is judged from the PyPI artifact's own list: 2.15 is on PyPI only
    # (no download.pytorch.org row), and PyPI's cu130 of 2.12 has no compute_120 PTX where the index's has.
    ("RTX 5090", "2.15.0 from PyPI", "x86_64",
     "kernels", "ok", "torch 2.15.0+cu132 carries cubin sm_120"),
    ("B300", "2.12.0 from PyPI", "x86_64", "kernels", "ok", "pypi_artifacts"),
]


@pytest.mark.parametrize(("gpu", "torch", "platform", "point", "status", "reason"), TABLE,
                         ids=[f"{row[0]}+{row[1]}@{row[2]}" for row in TABLE])
def test_verdict(project: Path, gpu: str, torch: str, platform: str, point: str,
                 status: str, reason: str) -> None:
    backend = "rocm" if "rocm" in torch else "cuda"
    write_lock(project, backend, torch, f"linux-{platform}")
    code, points = check(project, gpu, backend)
    assert points[point]["verdict"] == status, points[point]
    assert reason in points[point]["why"], points[point]["why"]
    failed = any(p["verdict"] in ("fail", "unknown") for p in points.values())
    assert code == (1 if failed else 0)
    if status in ("fail", "unknown"):
        assert points[point]["fix"], points[point]


def test_the_table_covers_twenty_pairs_and_every_verdict() -> None:
    assert len(TABLE) >= 20
    assert {row[4] for row in TABLE} == {"ok", "fail", "unknown"}


def test_a_failing_card_is_told_a_published_build_that_carries_it(project: Path) -> None:
    write_lock(project, "cuda", "2.13.0+cu130")
    _, points = check(project, "V100 SXM2 16GB")
    assert points["kernels"]["fix"] == (
        "lock torch 2.13.0 from cu126 (published builds that carry sm_70: cu118 2.5-2.7, cu121 "
        "2.5, cu124 2.5-2.6, cu126 2.6-2.14 (2.6 experimental), cu128 2.8-2.10, cu129 2.8 (2.8 "
        "experimental)): set backends.cuda.torch_index to https://download.pytorch.org/whl/cu126, "
        "pin torch==2.13.0 in requirements/base.in, then `kdkit lock --backend cuda`")
    write_lock(project, "cuda", "2.6.0+cu124")
    _, points = check(project, "RTX 5090")
    assert points["kernels"]["fix"].startswith(
        "lock torch 2.13.0 from cu130 (published builds that carry sm_120: cu128 2.7-2.11 (2.7 "
        "experimental), cu129 2.8 (2.8 experimental), cu130 2.9-2.14 (2.9, 2.10 experimental), "
        "cu132 2.12-2.14 (2.12, 2.13 experimental))")


def test_a_nightly_is_never_told_to_pin_itself_on_a_release_index(project: Path) -> None:
    write_lock(project, "cuda", "2.13.0.dev20260101+cu130")
    _, points = check(project, "V100 SXM2 16GB")
    assert points["kernels"]["fix"].startswith("lock torch 2.13.0 from cu126")


@pytest.mark.parametrize("platform", ["darwin-arm64", "win32-AMD64", "darwin-x86_64"])
def test_a_lock_made_on_another_system_fails_the_cpu_point(project: Path, platform: str) -> None:
    write_lock(project, "cuda", "2.13.0+cu130", platform)
    code, points = check(project, "GH200" if "arm" in platform else "H100 SXM")
    assert code == 1 and points["cpu"]["verdict"] == "fail"
    assert points["cpu"]["why"].startswith(
        f"requirements/cuda.txt was made on {platform}, not Linux")
    assert "kernels" not in points  # another system's wheels are not judged against the card


def test_a_lock_for_the_other_cpu_is_not_judged_further(project: Path) -> None:
    write_lock(project, "cuda", "2.8.0+cu129", "linux-aarch64")
    code, points = check(project, "T4")
    assert code == 1 and points["cpu"]["verdict"] == "fail" and set(points) == {
        "backend", "cpu", "memory"}


def test_driver_floor_of_the_cuda_major_and_of_the_card(project: Path) -> None:
    write_lock(project, "cuda", "2.13.0+cu130")
    _, points = check(project, "H100 SXM")
    assert points["driver"]["why"] == ("torch 2.13.0+cu130 (CUDA 13.0) on H100 SXM needs an NVIDIA "
                                          "host driver >= 580 (the floor of CUDA 13.x builds, "
                                          "pairings.json drivers)")
    write_lock(project, "cuda", "2.8.0+cu128")
    _, points = check(project, "RTX 5090")
    assert points["driver"]["why"].endswith("needs an NVIDIA host driver >= 570 (the floor of "
                                               "sm_120 cards, pairings.json drivers)")
    _, points = check(project, "RTX 4090")
    assert ">= 525.60.13 (the floor of CUDA 12.x builds" in points["driver"]["why"]


# ---------------------------------------------------------------- extensions (kdkit/data/extensions.json)

# card, torch build, packages the lock pins beside torch, modules kdkit.json lists, status, what the reason must say
EXTENSION_TABLE = [
    # flash-attn on ROCm: composable_kernel targets per release (setup.py allowed_archs), none before 2.6.2.
    ("MI300X", "2.13.0+rocm7.2", ("flash-attn==2.8.3",), (),
     "flash-attn", "ok", "builds kernels for gfx942"),
    ("MI300X", "2.13.0+rocm7.2", (), ("flash_attn",),
     "flash-attn", "unknown", "depends on its release"),
    ("MI355X", "2.13.0+rocm7.2", ("flash-attn==2.7.4",), (),
     "flash-attn", "fail", "not for gfx950"),
    ("MI355X", "2.13.0+rocm7.2", ("flash-attn==2.8.3",), (),
     "flash-attn", "ok", "builds kernels for gfx950"),
    ("RX 7900 XTX", "2.13.0+rocm7.2", ("flash-attn==2.8.3",), (),
     "flash-attn", "fail", "not for gfx1100"),
    ("MI250X", "2.13.0+rocm7.2", ("flash-attn==2.5.9",), (),
     "flash-attn", "fail", "has no rocm build at all"),
    # flash-attn 2 on CUDA: Ampere or newer; FlashAttention-3: Hopper only.
    ("T4", "2.13.0+cu130", ("flash-attn==2.8.3",), (), "flash-attn",
     "fail", "needs sm_80 or newer, and sm_75 is "
     "older"),
    ("RTX 4090", "2.13.0+cu130", ("flash-attn==2.8.3",), (),
     "flash-attn", "ok", "needs sm_80 or newer; sm_89 is"),
    ("H100 SXM", "2.13.0+cu130", (), ("flash_attn_3",),
     "flash-attn-3", "ok", "runs on sm_90 only; sm_90 is one"),
    ("A100 80GB SXM", "2.13.0+cu130", (), ("flash_attn_3",),
     "flash-attn-3", "fail", "not on sm_80"),
    # vLLM: compute capability 7.0+ in the 0.11-0.14 docs, 7.5+ in 0.31's; nothing read in between.
    ("V100 SXM2 16GB", "2.13.0+cu126", ("vllm==0.10.0",), (),
     "vllm", "ok", "needs sm_70 or newer; sm_70 is"),
    ("V100 SXM2 16GB", "2.13.0+cu126", ("vllm==0.31.0",), (),
     "vllm", "fail", "needs sm_75 or newer, and sm_70"),
    ("V100 SXM2 32GB", "2.13.0+cu126", ("vllm==0.20.0",), (),
     "vllm", "unknown", "no facts for vllm 0.20.0 on cuda"),
    ("MI300X", "2.13.0+rocm7.2", ("vllm==0.12.0",), (), "vllm", "ok", "builds kernels for gfx942"),
    # bitsandbytes: CC 6.0+ from 0.48; its ROCm libraries per release and per ROCm version of the torch build.
    ("H100 SXM", "2.13.0+cu130", ("bitsandbytes==0.48.2",), (),
     "bitsandbytes", "ok", "needs sm_60 or newer"),
    ("MI300X", "2.13.0+rocm7.2", ("bitsandbytes==0.48.2",), (),
     "bitsandbytes", "ok", "builds kernels for gfx942"),
    ("MI355X", "2.13.0+rocm7.2", ("bitsandbytes==0.50.0",), (),
     "bitsandbytes", "ok", "builds kernels for gfx950"),
    ("MI355X", "2.9.1+rocm6.4", ("bitsandbytes==0.50.0",), (),
     "bitsandbytes", "fail", "not for gfx950"),
    ("MI250X", "2.7.1+rocm6.3", ("bitsandbytes==0.50.0",), (), "bitsandbytes",
     "unknown", "no facts for bitsandbytes "
     "0.50.0 on rocm 6.3"),
    # DeepSpeed compiles its ops just in time: a note to confirm, not a verdict on the card.
    ("H200", "2.13.0+cu130", ("deepspeed==0.17.0",), (),
     "deepspeed", "note", "compiled just in time"),
    # torchvision and torchaudio belong to one torch minor each.
    ("H100 SXM", "2.13.0+cu130", ("torchvision==0.28.0+cu130",), (),
     "torchvision", "ok", "belongs to torch 2.13"),
    ("H100 SXM", "2.13.0+cu130", ("torchvision==0.27.0+cu130",), (), "torchvision",
     "fail", "pairs with torchvision "
     "0.28.*"),
    ("RTX 5090", "2.9.1+cu128", ("torchaudio==2.9.1+cu128",), (),
     "torchaudio", "ok", "belongs to torch 2.9"),
    ("H100 SXM", "2.13.0+cu130", ("torchaudio==2.13.0+cu130",), (), "torchaudio",
     "unknown", "no facts for the "
     "torchaudio of torch 2.13"),
    # No facts: unknown, never ok.
    ("H100 SXM", "2.13.0+cu130", ("triton==3.7.1",), (),
     "triton", "unknown", "torch pins its own triton"),
    ("MI300X", "2.13.0+rocm7.2", ("pytorch-triton-rocm==3.7.1",), (), "triton",
     "unknown", "no facts for triton on "
     "rocm"),
    ("L4", "2.13.0+cu130", (), ("xformers",),
     "xformers", "unknown", "your diagnose will import it"),
    ("L4", "2.13.0+cu130", (), ("my_fused_ops",),
     "my_fused_ops", "unknown", "no facts for my_fused_ops"),
]


def _lock_with(project: Path, backend: str, torch: str, pins: tuple[str, ...]) -> None:
    path = write_lock(project, backend, torch)
    path.write_text(path.read_text(encoding="utf-8")
                    + "".join(f"{pin} \\\n    --hash={HASH}\n" for pin in pins),
                    encoding="utf-8")


@pytest.mark.parametrize(("gpu", "torch", "pins", "modules", "name", "status", "reason"),
                         EXTENSION_TABLE,
                         ids=[f"{row[0]}+{row[1]}+{'+'.join(row[2] + row[3])}"
                              for row in EXTENSION_TABLE])
def test_extension_verdict(project: Path, gpu: str, torch: str, pins: tuple[str, ...],
                           modules: tuple[str, ...],
                           name: str, status: str, reason: str) -> None:
    from kdkit.order.extensions import blocks

    backend = "rocm" if "rocm" in torch else "cuda"
    config_path = project / "kdkit.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config_path.write_text(
        json.dumps({**config, "extensions": [{"module": m} for m in modules]}), encoding="utf-8")
    _lock_with(project, backend, torch, pins)
    code, points = check(project, gpu, backend)
    point = points[f"extension {name}"]
    assert point["verdict"] == status, point
    assert reason in point["why"], point["why"]
    assert code == (1 if any(blocks(p["name"], p["verdict"]) for p in points.values()) else 0)
    if status in ("fail", "unknown"):
        assert point["fix"], point


def test_the_tables_hold_thirty_card_and_build_verdicts_with_extensions() -> None:
    assert len(TABLE) + len(EXTENSION_TABLE) >= 30
    assert {row[5] for row in EXTENSION_TABLE} == {"ok", "fail", "unknown", "note"}


def test_a_bare_name_of_one_architecture_is_judged_on_it(project: Path) -> None:
    """`--gpu V100` fits three offers (SXM2 16/32 GB, PCIe 16 GB), all sm_70: the kernels point fails on sm_70
    for a CUDA 13 build, memory is judged on the smallest, and a note names the choices."""
    write_lock(project, "cuda", "2.13.0+cu130")
    code, points = check(project, "V100")
    assert code == 1 and points["kernels"]["verdict"] == "fail" and "sm_70" in points["kernels"]["why"]
    assert "V100 SXM2 16GB, V100 SXM2 32GB, V100 PCIe 16GB" in points["choices"]["why"]
    assert points["choices"]["verdict"] == "note" and "smallest (V100 SXM2 16GB, 16 GB)" in points["choices"]["why"]
    write_lock(project, "cuda", "2.13.0+cu126")
    code, points = check(project, "V100")
    assert points["kernels"]["verdict"] == "ok" and "choices" in points


def test_a_bare_name_of_several_architectures_is_still_refused(project: Path) -> None:
    write_lock(project, "cuda", "2.13.0+cu130")
    # RTX 6000 Ada (sm_89) or RTX PRO 6000 (sm_120)
    result = invoke("check", project, "--gpu", "RTX 6000", "--json")
    assert result.exit_code == 2 and "RTX 6000 Ada" in result.stderr and "RTX PRO 6000" in result.stderr


def test_a_projects_pypi_fact_decides_a_plain_pin_without_the_header(project: Path) -> None:
    """A lock of PyPI's plain torch without kdkit's torch-build line: the build comes from the pairings'
    pypi facts, the project's own pairings.json over kdkit's, for the build and the kernels points alike."""
    write_lock(project, "cuda", "2.13.0 from PyPI")
    (project / "pairings.json").write_text(json.dumps(
        {"pypi": {"2.13": {"x86_64": {"label": "cu126", "source": "a project's own reading"}}}}),
                                           encoding="utf-8")
    code, points = check(project, "RTX 5090")
    assert "2.13.0+cu126" in points["build"]["why"], points["build"]
    assert code == 1 and points["kernels"]["verdict"] == "fail" and "sm_120" in points["kernels"]["why"]


@pytest.mark.parametrize("gpu", ["V100 A100", "V100 H100", "V100 x", "V100\x1b[31m"])
def test_a_name_that_is_more_than_a_bare_name_is_not_taken_for_it(project: Path, gpu: str) -> None:
    write_lock(project, "cuda", "2.13.0+cu130")
    result = invoke("check", project, "--gpu", gpu, "--json")
    assert result.exit_code == 2 and result.stdout == "" and "\x1b" not in result.stderr, result.output
