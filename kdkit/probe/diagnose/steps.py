"""The steps of `kdkit diagnose` that use torch: import, build, devices, arch, compute, memory,
libraries, extensions.

Each step reads what earlier steps put in the context, records facts, and returns
ok, warn or skip, or raises StepFailed with the fix. The rules themselves live in
gpurules.py, so they are tested without a GPU; these functions gather the facts.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from kdkit.core import builds, gpurules
from kdkit.core.errors import KdkitError
from kdkit.core.finding import Finding
from kdkit.core.projectfiles import extensions
from kdkit.probe.diagnose.core import (
    Context,
    StepFailed,
    captured_warnings,
    env,
    import_torch,
    ok,
    project_on_path,
    skip,
    synchronize,
    warn,
    warning_text,
)

if TYPE_CHECKING:
    from kdkit.probe.diagnose.step_records import ComputeCheck, DeviceFacts, MemoryCheck

# dtype name -> tolerance on the error relative to the largest reference value
PRECISIONS = {"float32": 1e-4, "float16": 5e-3, "bfloat16": 3e-2}


# ---------------------------------------------------------------- torch


def torch_import(ctx: Context) -> Finding:
    try:
        with captured_warnings():
            torch = import_torch()
    except Exception as exc:  # ImportError, or OSError for a missing libcudart/libamdhip64
        raise StepFailed(
            f"`import torch` failed in {sys.executable}: {type(exc).__name__}: "
            f"{str(exc).splitlines()[0]}",
            "install the project's locked packages into this interpreter (pip install "
            "--require-hashes -r requirements/<backend>.txt), or run the interpreter that has them "
            "(check `which python`)",
        ) from exc
    ctx.torch = torch
    ctx.facts["torch"] = {"version": str(torch.__version__),
                          "file": str(getattr(torch, "__file__", ""))}
    return ok(f"torch {torch.__version__} from {torch.__file__}")


def build_of(torch: Any) -> str:
    if getattr(torch.version, "hip", None):
        return "rocm"
    return "cuda" if getattr(torch.version, "cuda", None) else "cpu"


def build(ctx: Context) -> Finding:
    torch = ctx.torch
    kind = build_of(torch)
    cuda, hip = getattr(torch.version, "cuda", None), getattr(torch.version, "hip", None)
    ctx.facts["build"] = {"backend": kind, "cuda": cuda, "hip": hip}
    described = {"cuda": f"CUDA {cuda} build",
                 "rocm": f"ROCm/HIP {hip} build", "cpu": "CPU-only build"}[kind]
    if ctx.expected is None:  # auto, and no GPU device node: a GPU build that sees a GPU decides
        with captured_warnings():
            ctx.expected = kind if kind != "cpu" and torch.cuda.is_available() else "cpu"
    detail = f"{described} (torch {torch.__version__}); expected {ctx.expected}"
    if kind == ctx.expected or ctx.expected == "cpu":
        return ok(detail)
    index = builds.shipped_pairings().get("template", {}).get("builds", {}).get(
        ctx.expected, ctx.expected)
    cause = (f"torch {torch.__version__} is a {described}, not a {ctx.gpu_kind} build: install the "
             f"{ctx.expected} lock (pip install --require-hashes -r "
             f"requirements/{ctx.expected}.txt, torch from the index in kdkit.json, e.g. "
             f"{builds.TORCH_INDEX_URL.format(label=index)})")
    if kind != "cpu":  # the wrong GPU vendor's build: nothing later can work
        raise StepFailed(detail, cause)
    ctx.causes.append(cause)
    return warn(detail + "; a CPU build sees no GPU")


# ---------------------------------------------------------------- devices and arch


def devices(ctx: Context) -> Finding:
    torch = ctx.torch
    if not ctx.gpu_expected:
        with captured_warnings():
            seen = torch.cuda.device_count() if build_of(torch) != "cpu" else 0
        return skip(f"cpu expected; torch sees {seen} GPU(s)")
    with captured_warnings() as caught:
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        said = warning_text(caught)
        default = ("make the GPU visible: docker run --gpus all (NVIDIA), and check `nvidia-smi` "
                   "lists it"
                   if ctx.expected == "cuda" else
                   "make the GPU visible: `kdkit run --backend rocm` passes /dev/kfd and the GPU's "
                   "/dev/dri/renderD* node with their groups (by hand: docker run --device "
                   "/dev/kfd --device /dev/dri/renderD128 --group-add <their gid>), and check "
                   "`rocm-smi` lists it")
        raise StepFailed(f"torch sees no {ctx.gpu_kind} device"
                         + (f" (torch said: {said})" if said else ""),
                         "; ".join(ctx.causes) or default)
    listed = [_device_facts(torch, i) for i in range(count)]
    ctx.device_ids = list(range(count))
    ctx.facts["devices"] = listed
    names = ", ".join(f"cuda:{d['index']} {d['name']} ({gpurules.gib(d['total_memory'])}, "
                      f"{d['arch']})"
                      for d in listed)
    return ok(f"{count} device(s): {names}")


def _device_facts(torch: Any, index: int) -> DeviceFacts:
    props = torch.cuda.get_device_properties(index)
    gcn = getattr(props, "gcnArchName", None) if build_of(torch) == "rocm" else None
    arch = gpurules.gfx_base(gcn) if gcn else f"sm_{props.major}{props.minor}"
    return {
        "index": index,
        "name": str(props.name),
        "total_memory": int(props.total_memory),
        "capability": [int(props.major), int(props.minor)],
        "gcn_arch": gcn,
        "arch": arch,
        "multiprocessors": int(getattr(props, "multi_processor_count", 0)),
    }


def arch(ctx: Context) -> Finding:
    if (skipped := ctx.need_gpu("the arch check")) is not None:
        return skipped
    with captured_warnings():
        arch_list = [str(a) for a in ctx.torch.cuda.get_arch_list()]
    ctx.facts["arch_list"] = arch_list
    if not arch_list:
        return warn("the build lists no architectures; cannot check before the first kernel")
    found = []
    for dev in ctx.facts["devices"]:
        verdict = _arch_verdict(ctx, dev, arch_list)
        if not verdict.ok:
            raise _arch_failure(ctx, dev, arch_list, verdict.how)
        found.append(f"cuda:{dev['index']} {dev['arch']}: {verdict.how}")
    return ok("; ".join(found))


def _arch_verdict(ctx: Context, dev: DeviceFacts, arch_list: list[str]) -> gpurules.ArchVerdict:
    if ctx.expected == "rocm":
        return gpurules.rocm_arch_verdict(dev["gcn_arch"] or "", arch_list,
                                          env("HSA_OVERRIDE_GFX_VERSION"))
    return gpurules.cuda_arch_verdict((dev["capability"][0], dev["capability"][1]), arch_list)


def _arch_failure(ctx: Context, dev: DeviceFacts, arch_list: list[str], how: str) -> StepFailed:
    listed = ", ".join(arch_list)
    if ctx.expected == "rocm":
        return StepFailed(
            f"{dev['name']} ({dev['arch']}): {how} in this build ({listed}); its first kernel "
            "would fail with \"HIP error: invalid device function\" (hipErrorNoBinaryForGpu)",
            f"install a ROCm torch build that lists {dev['arch']} (a newer rocmX.Y index in "
            "kdkit.json); HSA_OVERRIDE_GFX_VERSION only helps for a close, unsupported relative",
        )
    capability = (dev["capability"][0], dev["capability"][1])
    return StepFailed(
        f"{dev['name']} ({dev['arch']}): {how} in this build ({listed}); its first kernel would "
        "fail with \"CUDA error: no kernel image is available for execution on the device\"",
        gpurules.cuda_arch_fix(capability),
    )


# ---------------------------------------------------------------- compute and memory


def compute(ctx: Context) -> Finding:
    torch = ctx.torch
    results: list[ComputeCheck] = []
    notes: list[str] = []
    for device in ctx.devices():
        operands = _operands(torch, 128 if device == "cpu" else 512)
        for dtype in PRECISIONS:
            if dtype == "bfloat16" and not _bf16_native(torch, device):
                notes.append(
                    f"{device}: bf16 not supported without emulation; use fp16 or fp32 on this "
                    "card")
                continue
            error = _checked_matmul(torch, device, dtype, operands)
            results.append({"device": device, "dtype": dtype, "relative_error": error})
    ctx.facts["compute"] = results
    worst = {r["dtype"]: max(x["relative_error"] for x in results if x["dtype"] == r["dtype"])
             for r in results}
    detail = "matmul vs float64 CPU reference, max relative error: " + ", ".join(
        f"{k} {v:.1e}" for k, v in worst.items())
    return warn(detail + "; " + "; ".join(notes)) if notes else ok(detail)


def _bf16_native(torch: Any, device: str) -> bool:
    if device == "cpu":
        return True
    try:
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    except TypeError:  # torch < 2.3 has no including_emulation
        return bool(torch.cuda.is_bf16_supported())


def _operands(torch: Any, n: int) -> tuple[Any, Any, Any]:
    """Seeded float64 matrices and their product on the CPU: the reference every precision is held
    to."""
    gen = torch.Generator().manual_seed(1234)
    a = torch.randn(n, n, generator=gen, dtype=torch.float64)
    b = torch.randn(n, n, generator=gen, dtype=torch.float64)
    return a, b, a @ b


def _checked_matmul(torch: Any, device: str, dtype_name: str,
                    operands: tuple[Any, Any, Any]) -> float:
    """Relative error of one matmul on ``device`` against the float64 CPU reference; fail above
    tolerance."""
    dtype, tolerance = getattr(torch, dtype_name), PRECISIONS[dtype_name]
    a, b, reference = operands
    try:
        with _ExactFp32(torch):
            out = (a.to(device=device, dtype=dtype)
                   @ b.to(device=device, dtype=dtype)).to("cpu", torch.float64)
            synchronize(torch, device)
    except RuntimeError as exc:
        message = str(exc).splitlines()[0]
        fix = ("the build has no code for this card: see the arch step; "
               if "kernel image" in message
               or "invalid device function" in message else "")
        raise StepFailed(f"{dtype_name} matmul on {device} raised: {message}",
                         fix
                         + "read the message; check `dmesg` and nvidia-smi/rocm-smi for Xid or RAS "
                         "errors, and ask the provider for another machine") from None
    error = float("inf") if not bool(torch.isfinite(out).all()) else gpurules.relative_error(
        float((out - reference).abs().max()), float(reference.abs().max()))
    if not error <= tolerance:
        raise StepFailed(
            f"{dtype_name} matmul on {device} differs from the CPU reference: relative error "
            f"{error:.1e} > {tolerance:.0e}",
            "this device computes wrong results: do not use it; report it to the provider (check "
            "ECC errors with nvidia-smi -q / rocm-smi) and ask for another machine",
        )
    return error


class _ExactFp32:
    """Disable TF32 for the fp32 check, so the tolerance measures the card, not a chosen
    shortcut."""

    def __init__(self, torch: Any) -> None:
        self.matmul = torch.backends.cuda.matmul

    def __enter__(self) -> None:
        with captured_warnings():
            self.saved = self.matmul.allow_tf32
            self.matmul.allow_tf32 = False

    def __exit__(self, *exc: object) -> None:
        with captured_warnings():
            self.matmul.allow_tf32 = self.saved


def memory(ctx: Context) -> Finding:
    if (skipped := ctx.need_gpu("the memory check")) is not None:
        return skipped
    torch, share = ctx.torch, ctx.memory_share
    found: list[MemoryCheck] = []
    for index in ctx.device_ids:
        free, total = (int(x) for x in torch.cuda.mem_get_info(index))
        want = int(total * share)
        if want > free:
            raise StepFailed(
                f"cuda:{index}: {share:.0%} of {gpurules.gib(total)} is {gpurules.gib(want)}, but "
                f"only {gpurules.gib(free)} is free: another process holds "
                f"{gpurules.gib(total - free)}",
                "stop the other process (nvidia-smi / rocm-smi list it) or pass a lower "
                "--memory-share",
            )
        peak = _fill(torch, index, want)
        found.append({"device": f"cuda:{index}", "allocated": want, "peak": peak, "total": total})
    ctx.facts["memory"] = found
    return ok("; ".join(f"{m['device']}: {gpurules.gib(m['allocated'])} allocated and written "
                        f"({share:.0%} of {gpurules.gib(m['total'])}), peak "
                        f"{gpurules.gib(m['peak'])}"
                        for m in found))


def _fill(torch: Any, index: int, n_bytes: int) -> int:
    """Allocate and write ``n_bytes`` on a device, check both ends, free it; return the peak."""
    device = f"cuda:{index}"
    torch.cuda.reset_peak_memory_stats(index)
    try:
        block = torch.empty(n_bytes, dtype=torch.uint8, device=device)
        block.fill_(0xA5)
        ends = (int(block[0]), int(block[-1]))
    except RuntimeError as exc:  # torch.cuda.OutOfMemoryError is a RuntimeError
        raise StepFailed(f"{device}: allocating {gpurules.gib(n_bytes)} failed: "
                         f"{str(exc).splitlines()[0]}",
                         "pass a lower --memory-share, or check nvidia-smi / rocm-smi for other "
                         "users") from None
    peak = int(torch.cuda.max_memory_allocated(index))
    del block
    torch.cuda.empty_cache()
    if ends != (0xA5, 0xA5):
        raise StepFailed(f"{device}: memory written as 0xA5 read back as {ends}",
                         "this card's memory is faulty: report it to the provider")
    return peak


# ---------------------------------------------------------------- libraries and extensions


def libraries(ctx: Context) -> Finding:
    if (skipped := ctx.need_gpu("the library check")) is not None:
        return skipped
    torch, notes = ctx.torch, []
    dnn_name, comm_name = ("MIOpen", "RCCL") if ctx.expected == "rocm" else ("cuDNN", "NCCL")
    with captured_warnings():
        dnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    dnn_text = (gpurules.cudnn_version_text(dnn) if ctx.expected == "cuda"
                else str(dnn)) if dnn else None
    comm = _nccl_version(torch)
    ctx.facts["libraries"] = {dnn_name: dnn_text, comm_name: comm}
    if dnn_text is None:
        notes.append(f"{dnn_name} unavailable: convolutions fall back to slow kernels")
    if comm is None:
        notes.append(f"{comm_name} unavailable: multi-GPU training (DDP) will not work")
    detail = f"{dnn_name} {dnn_text or 'missing'}, {comm_name} {comm or 'missing'}"
    return warn(detail + "; " + "; ".join(notes)) if notes else ok(detail)


def _nccl_version(torch: Any) -> str | None:
    try:
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_nccl_available()):
            return None
        raw = torch.cuda.nccl.version()
    except Exception:  # a missing or broken NCCL raises a variety of errors; all mean "not usable"
        return None
    return ".".join(str(x) for x in raw) if isinstance(raw, tuple) else str(raw)


def extensions_step(ctx: Context) -> Finding:
    if ctx.project is None:
        return skip("no kdkit.json here or above (pass --project DIR to check its extensions)")
    try:
        listed = extensions(ctx.project)
    except KdkitError as exc:
        raise StepFailed(str(exc), "fix kdkit.json (`kdkit validate`)") from None
    if not listed:
        return skip(f"{ctx.project / 'kdkit.json'} lists no extensions")
    done = []
    with project_on_path(ctx.project):
        for item in listed:
            done.append(_check_extension(ctx, item))
    ctx.facts["extensions"] = done
    return ok(
        "; ".join(f"{d['module']} imported" + (", smoke passed" if d.get("smoke") else "")
                  for d in done))


def _check_extension(ctx: Context, item: dict[str, str]) -> dict[str, str]:
    import importlib

    module, smoke = item["module"], item.get("smoke")
    stage = "import"
    try:
        with captured_warnings():
            importlib.import_module(module)
            if smoke:
                stage = f"smoke {smoke}"
                smoke_module, func = smoke.split(":", 1)
                getattr(importlib.import_module(smoke_module), func)()
    except Exception as exc:
        said = str(exc).splitlines()[0] if str(exc) else ""
        rocm = " (it needs a ROCm build of its own)" if ctx.expected == "rocm" else ""
        raise StepFailed(
            f"extension {module}: {stage} failed: {type(exc).__name__}: {said}",
            f"rebuild or reinstall {module} against this torch ({ctx.torch.__version__}, "
            f"{ctx.facts['build']['backend']} build){rocm}; 'undefined symbol' means it was "
            "compiled for another torch version",
        ) from None
    return {"module": module, **({"smoke": smoke} if smoke else {})}
