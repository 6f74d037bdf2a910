"""A real CUDA image: PyPI's torch (a CUDA build with its nvidia-* and cuda-toolkit wheels), locked and built
by kdkit on a machine without a GPU, measured.

Given a project whose cuda backend takes torch from PyPI (``backends.cuda.torch_index`` =
``https://pypi.org/simple``) and is locked (``kdkit lock --backend cuda``), this script runs, as a user would:

1. ``kdkit build --backend cuda --json --no-cache`` (the wheels come from the network in the builder stage, or from
   ``--wheelhouse``): the build's seconds, the image's size, each layer's size and what made it;
2. every CUDA library file in the image counted by name: each must be there once (no base image copy);
3. one more small package (``--extra``, default ``six``) added to requirements/base.in, re-locked, rebuilt:
   the seconds, the steps that ran, and whether the layers holding torch are the same layers;
4. ``kdkit torch-arch --json`` in the image against the image's ``torch.arch_list`` label;
5. ``kdkit verify-env`` in the image (``--network none``);
6. ``NVIDIA_REQUIRE_CUDA`` read from the image's environment, split the way the NVIDIA container runtime
   reads it (space-separated constraints, all of which must hold);
7. the floor: the bytes the locked wheels unpack to (their zip members), read from the wheel folder
   ``--wheels`` when given.

Too big for every CI run (2.7 GB of wheels, about 6 GB of image); run it by hand:

    .venv/bin/python bench/bench_cuda_image.py --project /tmp/pypi-proof \
        [--wheelhouse DIR] [--wheels DIR] [--ca-bundle FILE]

Needs an engine and the base image (`make engine`). Writes bench/results/cuda_image.json.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

from _common import BIN, REPO, machine, write_result

from kdkit.core import proc

KDKIT = str(BIN / "kdkit")
BASE = os.environ.get("KDKIT_TEST_BASE", "kdkit-test/debian-python:3.11")
CUDA_LIB = re.compile(r"^lib(cublas|cublasLt|cudnn\w*|nccl|cusparse|cusparseLt|cufft|cufftw|curand|cusolver|"
                      r"cusolverMg|nvrtc|nvrtc-builtins|cudart|nvJitLink|cupti|nvToolsExt|cufile|nvshmem\w*)"
                      r"\.so(\.[0-9.]+)?$")


def kdkit(*args: str | Path, expect: int = 0, timeout: float = 3600) -> proc.Completed:
    done = proc.run([KDKIT, *map(str, args)], timeout=timeout)
    if done.returncode != expect:
        raise SystemExit(f"kdkit {' '.join(map(str, args))} exited {done.returncode}:\n"
                         f"{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return done


def docker(*args: str, timeout: float = 600) -> str:
    done = proc.run(["docker", *args], timeout=timeout)
    if done.returncode != 0:
        raise SystemExit(f"docker {' '.join(args)} exited {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout


def build(project: Path, options: list[str], *extra: str) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    done = kdkit("build", project, "--backend", "cuda", "--base-image", BASE, "--json",
                 *options, *extra)
    return time.perf_counter() - started, json.loads(done.stdout)


def ran(result: dict[str, Any]) -> list[str]:
    steps = [" ".join(s["instruction"].split()) for s in result["steps"]
             if s["number"] in result["ran"]]
    return [s[:60] for s in steps if s.startswith(("RUN", "COPY"))]


def layers(tag: str) -> list[dict[str, Any]]:
    """The image's layers (newest first, as `docker history` lists them), with their sizes."""
    out = docker("history", "--no-trunc", "--format", "{{json .}}", tag)
    rows = [json.loads(line) for line in out.splitlines() if line.strip()]
    layer_ids = json.loads(docker("image", "inspect", tag, "--format", "{{json .RootFS.Layers}}"))
    sized = [{"size": _bytes(r["Size"]), "created_by": " ".join(r["CreatedBy"].split())[:120]}
             for r in rows]
    return [{**row, "bytes": row["size"]} for row in sized
            if row["size"]] + [{"layer_ids": layer_ids}]


def _bytes(text: str) -> int:
    number, unit = re.match(r"([0-9.]+)\s*([kMGT]?B)", text).groups()  # type: ignore[union-attr]
    return int(float(number) * {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}[unit])


def cuda_libraries(tag: str) -> dict[str, Any]:
    """Every file of a CUDA library in the image by name, and the names found more than once."""
    out = docker("run", "--rm", "--pull", "never", "--network", "none", "--entrypoint", "sh", tag,
                 "-c",
                 "find / -xdev -type f -name 'lib*.so*' 2>/dev/null; true")
    paths = [p for p in out.splitlines() if CUDA_LIB.match(os.path.basename(p))]
    counts = collections.Counter(os.path.basename(p) for p in paths)
    return {"files": sorted(paths), "count": len(paths),
            "more_than_once": {name: [p for p in paths if p.endswith("/" + name)] for name,
                               n in counts.items()
                               if n > 1}}


def in_image(tag: str, *argv: str) -> proc.Completed:
    return proc.run(
        ["docker", "run", "--rm", "--pull", "never", "--network", "none", tag, *argv], timeout=600)


def arch_and_labels(tag: str) -> dict[str, Any]:
    labels = json.loads(
        docker("image", "inspect", tag, "--format", "{{json .Config.Labels}}")) or {}
    env = json.loads(docker("image", "inspect", tag, "--format", "{{json .Config.Env}}")) or []
    arch = in_image(tag, "kdkit", "torch-arch", "--json")
    verify = in_image(tag, "sh", "-c", 'exec kdkit verify-env --lock "$KDKIT_LOCK_FILE"')
    require = next((e.split("=", 1)[1] for e in env if e.startswith("NVIDIA_REQUIRE_CUDA=")), None)
    return {"labels": {k: v for k,
                       v in labels.items() if "torch" in k or "cuda" in k or "kdkit" in k},
            "torch_arch": {"exit": arch.returncode, "stdout": arch.stdout.strip()[-4000:],
                           "stderr": arch.stderr.strip()[-1000:]},
            "verify_env": {"exit": verify.returncode,
                           "output": (verify.stdout + verify.stderr).strip()[-3000:]},
            "NVIDIA_REQUIRE_CUDA": require,
            "NVIDIA_REQUIRE_CUDA_constraints": require.split() if require else []}


def floor(wheels: Path | None) -> dict[str, Any] | None:
    """The bytes the wheels unpack to (the sum of their members' sizes) and their own bytes."""
    if wheels is None:
        return None
    files = sorted(wheels.glob("*.whl"))
    unpacked = sum(sum(i.file_size for i in zipfile.ZipFile(f).infolist()) for f in files)
    return {"wheels": len(files),
            "wheel_bytes": sum(f.stat().st_size for f in files), "unpacked_bytes": unpacked}


def add_package(project: Path, extra: str, lock_options: list[str]) -> float:
    base_in = project / "requirements" / "base.in"
    base_in.write_text(base_in.read_text(encoding="utf-8").rstrip("\n")
                       + f"\n{extra}\n", encoding="utf-8")
    started = time.perf_counter()
    kdkit("lock", project, "--backend", "cuda", *lock_options)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--project", type=Path,
                        required=True, help="a project locked for cuda from PyPI")
    parser.add_argument("--wheelhouse",
                        type=Path, help="build from this folder (kdkit wheelhouse) instead")
    parser.add_argument("--wheels",
                        type=Path, help="the locked wheels, for the unpacked-size floor")
    parser.add_argument("--ca-bundle", help="passed to kdkit build (a TLS-intercepting proxy)")
    parser.add_argument("--extra", default="six", help="the small package added for the reuse case")
    parser.add_argument("--tag", default="kdkit-bench/cuda-pypi:real")
    args = parser.parse_args()
    options = ["--tag", args.tag] + (["--wheelhouse", str(args.wheelhouse)] if args.wheelhouse
                                     else []) \
        + (["--ca-bundle", args.ca_bundle] if args.ca_bundle else [])
    seconds, first = build(args.project, options, "--no-cache")
    result: dict[str, Any] = {"build_s": round(seconds, 1), "ran": ran(first),
                              "image_bytes": first["size"],
                              "layers": layers(args.tag),
                              "cuda_libraries": cuda_libraries(args.tag),
                              "image": arch_and_labels(args.tag), "floor": floor(args.wheels)}
    before = result["layers"][-1]["layer_ids"]
    relock = add_package(args.project, args.extra, [])
    seconds, second = build(args.project, options)
    after = layers(args.tag)[-1]["layer_ids"]
    shared = sum(1 for a, b in zip(before, after, strict=False) if a == b)
    result["one_more_package"] = {"package": args.extra, "relock_s": round(relock, 1),
                                  "rebuild_s": round(seconds, 1), "ran": ran(second),
                                  "layers_before": len(before), "layers_after": len(after),
                                  "leading_layers_shared": shared, "image_bytes": second["size"]}
    result["machine"] = machine(base_image=BASE)
    out = write_result("cuda_image", result)
    print(
        json.dumps(
            {k: result[k] for k in ("build_s", "image_bytes", "one_more_package")}, indent=2))
    print(f"written to {out.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
