"""The image part of `kdkit bundle` against `docker save IMAGE | gzip`, and the compressor choice.

Two measurements, in the same run, on one image (default: the largest on the engine):

1. Candidates, to pick the compressor: the image is saved once, uncompressed, and each
   compressor (gzip -1/-6, zstd -1/-3/-6/-9 on all cores, xz -0 on images under 300 MB) reads
   that file once: size and time of the compression alone.
2. Head to head, several runs each, alternating: the peer `docker save IMAGE | gzip` (a shell
   pipeline, gzip's default level 6) against kdkit's streaming `docker save` -> zstd -3 -T0
   (kdkit.transfer.bundle.save_image, what `kdkit bundle` runs). Medians; goal: smaller and >= 3x faster.

    .venv/bin/python bench/bench_bundle.py [--image REF] [--runs 3]

Needs a Docker engine (`bash scripts/engine.sh`). Writes bench/results/bundle.json.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _common import interleaved, machine, medians, rounded, write_result

from kdkit.transfer.bundle import COMPRESSORS, save_image

CANDIDATES = {
    "gzip -1": ["gzip", "-1", "-c"], "gzip -6": ["gzip", "-6", "-c"],
    "zstd -1": ["zstd", "-q", "-T0", "-1", "-c"], "zstd -3": ["zstd", "-q", "-T0", "-3", "-c"],
    "zstd -6": ["zstd", "-q", "-T0", "-6", "-c"], "zstd -9": ["zstd", "-q", "-T0", "-9", "-c"],
    "xz -0": ["xz", "-T0", "-0", "-c"],
}
XZ_LIMIT = 300_000_000  # xz is left out on larger images: it alone would take minutes


def largest_image() -> str:
    rows = subprocess.run(["docker", "images", "--format", "{{.Repository}}:{{.Tag}} {{.ID}}"],
                          capture_output=True, text=True, check=True).stdout.split("\n")
    sizes = []
    for row in filter(None, rows):
        ref, image_id = row.split()
        if "<none>" in ref:
            continue
        size = subprocess.run(["docker", "image", "inspect", "--format", "{{.Size}}", image_id],
                              capture_output=True, text=True, check=True).stdout.strip()
        sizes.append((int(size), ref))
    if not sizes:
        raise SystemExit(
            "no tagged image on the engine; run `bash scripts/engine.sh` or pass --image")
    return max(sizes)[1]


def compress_file(args: list[str], source: Path, out: Path) -> float:
    started = time.perf_counter()
    with source.open("rb") as reader, out.open("wb") as writer:
        subprocess.run(args, stdin=reader, stdout=writer, check=True)
    return time.perf_counter() - started


def candidates(image: str, work: Path) -> tuple[dict[str, dict[str, float]], float, int]:
    tar = work / "image.tar"
    started = time.perf_counter()
    subprocess.run(["docker", "save", "-o", str(tar), image], check=True)
    save_seconds = time.perf_counter() - started
    raw = tar.stat().st_size
    table = {}
    for name, args in CANDIDATES.items():
        if shutil.which(args[0]) is None or (name.startswith("xz") and raw > XZ_LIMIT):
            continue
        out = work / "candidate"
        seconds = compress_file(args, tar, out)
        table[name] = {"seconds": round(seconds, 3), "bytes": out.stat().st_size,
                       "ratio": round(raw / out.stat().st_size, 3)}
        out.unlink()
    tar.unlink()
    return table, save_seconds, raw


def peer(image: str, out: Path) -> tuple[float, int]:
    started = time.perf_counter()
    subprocess.run(f"docker save {image} | gzip > {out}", shell=True, check=True)
    return time.perf_counter() - started, out.stat().st_size


def kdkit(image: str, out: Path) -> tuple[float, int]:
    started = time.perf_counter()
    info = save_image(image, COMPRESSORS["zstd"], out)
    return time.perf_counter() - started, int(info["bytes"])


def _sized(func: Callable[[str, Path], tuple[float, int]], image: str, out: Path,
           sizes: dict[str, int],
           name: str) -> Callable[[], float]:
    """One timed run of ``func`` (peer or kdkit) as a case: its seconds; its output's size into ``sizes``."""
    def once() -> float:
        seconds, sizes[name] = func(image, out)
        out.unlink()
        return seconds
    return once


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--image", help="image to bundle (default: the largest tagged one)")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    image = args.image or largest_image()
    with tempfile.TemporaryDirectory(prefix="bench-bundle.", dir=os.environ.get("TMPDIR")) as tmp:
        work = Path(tmp)
        table, save_seconds, raw = candidates(image, work)
        sizes: dict[str, int] = {}
        times = interleaved({name: _sized(func, image, work / f"{name}.out", sizes, name)
                             for name, func in (("peer", peer), ("kdkit", kdkit))}, args.runs)
    median = medians(times)
    result = {
        "image": image, "uncompressed_bytes": raw, "docker_save_seconds": round(save_seconds, 3),
        "candidates": table, "runs": args.runs,
        "peer": {"command": f"docker save {image} | gzip",
                 "median_seconds": round(median["peer"], 3),
                 "bytes": sizes["peer"], "seconds": rounded(times["peer"], 3)},
        "kdkit": {"command": "kdkit.transfer.bundle.save_image (docker save stream -> zstd -q -T0 "
                             "-3)",
                  "median_seconds": round(median["kdkit"], 3), "bytes": sizes["kdkit"],
                  "seconds": rounded(times["kdkit"], 3)},
        "speedup": round(median["peer"] / median["kdkit"], 2),
        "size_ratio": round(sizes["kdkit"] / sizes["peer"], 3),
        "machine": machine(),
    }
    write_result("bundle", result)
    print(f"image {image}: {raw / 1e6:.0f} MB uncompressed, docker save alone {save_seconds:.2f} s")
    print(f"{'compressor (file -> file)':<26}{'seconds':>9}{'MB':>9}{'ratio':>7}")
    for name, row in table.items():
        print(f"{name:<26}{row['seconds']:>9.2f}{row['bytes'] / 1e6:>9.1f}{row['ratio']:>7.2f}")
    print(f"\n{'save + compress':<26}{'median s':>9}{'MB':>9}")
    for name in ("peer", "kdkit"):
        print(f"{result[name]['command'][:25]:<26}{median[name]:>9.2f}{sizes[name] / 1e6:>9.1f}")
    print(
        f"\nkdkit is {result['speedup']}x faster, {result['size_ratio']:.3f} of the size (goal: >= "
        "3x, < 1)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
