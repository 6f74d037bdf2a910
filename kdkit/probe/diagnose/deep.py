"""The steps `kdkit diagnose --deep` adds: torch.compile, pinned copies, measured throughput.

Throughput is compared with the nominal figures of nominal.py, so a throttled,
shared or mislabelled card is flagged rather than trusted by its name.
"""

from __future__ import annotations

import math
import time
from typing import Any

from kdkit.core.finding import Finding
from kdkit.probe.diagnose import nominal
from kdkit.probe.diagnose.core import (
    Context,
    StepFailed,
    captured_warnings,
    ok,
    skip,
    synchronize,
    warn,
)

MATMUL_N = 8192
COPY_BYTES = 1 << 30
PINNED_BYTES = 256 << 20


def compile_step(ctx: Context) -> Finding:
    """torch.compile of a tiny function: proves Triton (GPU) or the C++ toolchain (CPU) works."""
    torch = ctx.torch
    device = ctx.devices()[0]

    def tiny(x: Any) -> Any:
        return torch.sin(x) * 2 + x

    x = torch.linspace(-3, 3, 4096, device=device)
    started = time.perf_counter()
    try:
        with captured_warnings():
            compiled = torch.compile(tiny)
            out = compiled(x)
            synchronize(torch, device)
    except Exception as exc:
        backend = ("Triton (it ships with the CUDA/ROCm torch wheels)" if device != "cpu"
                   else "a C++ compiler")
        raise StepFailed(
            f"torch.compile on {device} failed: {type(exc).__name__}: "
            f"{str(exc).strip().splitlines()[0]}",
            f"install {backend} matching this torch, or run the application without torch.compile",
        ) from None
    seconds = time.perf_counter() - started
    _compare_with_eager(torch, device, out, tiny(x), [math.sin(v) * 2 + v for v in x.tolist()])
    ctx.facts["compile_seconds"] = seconds
    return (
        ok(f"compiled and ran a tiny function on {device} in {seconds:.1f} s; matches eager mode"))


def _compare_with_eager(torch: Any, device: str, out: Any, eager: Any, exact: list[float]) -> None:
    """Compiled and eager agree within 1e-5, or the step fails naming which of the two is off from
    the exact values: eager math can be the wrong one (a loaded 2-core VM's MKL once returned half
    of a threaded torch.sin off by 3e-4 in one process out of ~100)."""
    if bool(torch.allclose(out, eager, atol=1e-5)):
        return
    reference = torch.tensor(exact, dtype=out.dtype, device=device)
    off_compiled = float((out - reference).abs().max())
    off_eager = float((eager - reference).abs().max())
    if off_eager > off_compiled:
        raise StepFailed(f"eager torch.sin on {device} is off from the exact values by up to "
                         f"{off_eager:.3g} (torch.compile's by {off_compiled:.3g}): this machine's "
                         "math library computed wrongly",
                         "run diagnose again; if it repeats, report it to the provider with the "
                         "torch version")
    raise StepFailed(f"torch.compile on {device} returned values that differ from eager mode "
                     f"(by up to {float((out - eager).abs().max()):.3g})",
                     "report it with the torch version; run without torch.compile meanwhile")


def pinned_step(ctx: Context) -> Finding:
    """A pinned host buffer copied with non_blocking=True arrives intact."""
    if (skipped := ctx.need_gpu("the pinned copy")) is not None:
        return skipped
    torch, found = ctx.torch, []
    host = torch.arange(PINNED_BYTES // 4, dtype=torch.int32).pin_memory()
    for device in ctx.devices():
        started = time.perf_counter()
        on_device = host.to(device, non_blocking=True)
        synchronize(torch, device)
        seconds = time.perf_counter() - started
        if not bool(torch.equal(on_device.cpu(), host)):
            raise StepFailed(f"pinned non-blocking copy to {device} arrived altered",
                             "the host-device link corrupts data: report it to the provider")
        found.append(f"{device} {PINNED_BYTES / seconds / 1e9:.1f} GB/s")
    ctx.facts["pinned_copy"] = found
    return ok(f"pinned {PINNED_BYTES >> 20} MiB host-to-device, non-blocking, intact: "
              + ", ".join(found))


def throughput_step(ctx: Context) -> Finding:
    """bf16 matmul TFLOP/s and device-to-device GB/s against the card's nominal figures."""
    if (skipped := ctx.need_gpu("the throughput measurement")) is not None:
        return skipped
    if not ctx.device_ids:
        return skip("no device")
    measured, flagged, texts = [], [], []
    for dev in ctx.facts["devices"]:
        device = f"cuda:{dev['index']}"
        tflops = _matmul_tflops(ctx.torch, device)
        gbps = _copy_gbps(ctx.torch, device)
        figures = nominal.lookup(dev["name"])
        good_mm, text_mm = nominal.judge(tflops, figures.bf16_tflops if figures else None,
                                         "TFLOP/s",
                                          "bf16 matmul")
        good_cp, text_cp = nominal.judge(gbps,
                                         figures.memory_gbps if figures else None, "GB/s", "copy")
        measured.append({"device": device, "bf16_tflops": tflops, "copy_gbps": gbps,
                         "nominal": figures.name if figures else None})
        texts.append(f"{device} {dev['name']}: {text_mm}, {text_cp}")
        if not (good_mm and good_cp):
            flagged.append(device)
    ctx.facts["throughput"] = measured
    detail = "; ".join(texts)
    if flagged:
        return warn(f"{detail}; below {nominal.FLAG_BELOW:.0%} of nominal on {', '.join(flagged)}: "
                    "throttled (power cap, heat), shared, or not the card its name says")
    return ok(detail)


def _timed(torch: Any, device: str, work: Any, repeats: int) -> float:
    """Seconds per call of ``work`` after warming up, synchronized around the loop."""
    for _ in range(2):
        work()
    synchronize(torch, device)
    started = time.perf_counter()
    for _ in range(repeats):
        work()
    synchronize(torch, device)
    return (time.perf_counter() - started) / repeats


def _matmul_tflops(torch: Any, device: str) -> float:
    a = torch.randn(MATMUL_N, MATMUL_N, device=device, dtype=torch.bfloat16)
    b = torch.randn(MATMUL_N, MATMUL_N, device=device, dtype=torch.bfloat16)
    seconds = _timed(torch, device, lambda: a @ b, repeats=20)
    return float(2 * MATMUL_N**3 / seconds / 1e12)


def _copy_gbps(torch: Any, device: str) -> float:
    """Device-to-device copy, counting bytes read plus bytes written (as vendors' bandwidth
    does)."""
    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    seconds = _timed(torch, device, lambda: dst.copy_(src), repeats=20)
    return float(2 * COPY_BYTES / seconds / 1e9)
