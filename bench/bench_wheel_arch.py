"""The compiled architectures of a torch wheel on its index, before ordering: kdkit's range read
(kdkit.lock.wheelarch: the zip's end record, its central directory, one header) against the peer's way, the
whole wheel downloaded (``pip download --no-deps``, what a user or uv does to look inside a wheel) and the
same header read from it.

Real network: PyPI's torch wheel (default: torch 2.13.0, CPython 3.11, manylinux_2_28 x86_64, a CUDA 13.0
build of about 530 MB). Runs take turns; medians; bytes fetched by each.

    .venv/bin/python bench/bench_wheel_arch.py [--runs 3] [--index https://pypi.org/simple]

pip runs with ``PIP_CONFIG_FILE=/dev/null`` and without ``PIP_FIND_LINKS`` (a user's view, no local wheel
folder); PIP_CERT is kept (a TLS-intercepting proxy). Writes bench/results/wheel_arch.json.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

from _common import REPO, machine, write_result

from kdkit.lock.fetch import Network
from kdkit.lock.wheelarch import CUDA_MEMBER, read_wheel_arch
from kdkit.probe.env.torcharch import parse_config_header

WHEEL = "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl"


def wheel_url(index: str, name: str) -> str:
    with urllib.request.urlopen(f"{index.rstrip('/')}/torch/", timeout=60) as page:
        text = page.read().decode()
    found = re.search(r'href="([^"#]*/' + re.escape(name) + r')[#"]', text)
    if found is None:
        raise SystemExit(f"{index}/torch/ lists no {name}")
    return found.group(1)


def by_range(url: str) -> tuple[float, tuple[str, ...], int]:
    started = time.perf_counter()
    reading = read_wheel_arch(url, Network(), WHEEL)
    seconds = time.perf_counter() - started
    if reading.arch_list is None:
        raise SystemExit(f"range read failed: {reading.reason}")
    return seconds, reading.arch_list, reading.received


def by_download(index: str, version: str) -> tuple[float, tuple[str, ...], int]:
    env = {k: v for k,
           v in os.environ.items() if k != "PIP_FIND_LINKS"} | {"PIP_CONFIG_FILE": os.devnull}
    import subprocess

    with tempfile.TemporaryDirectory(prefix="kdkit-bench-wheel-") as tmp:
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                        "--only-binary=:all:",
                        "--platform", "manylinux_2_28_x86_64", "--python-version", "3.11",
                        "--index-url", index,
                        "-d", tmp, f"torch=={version}"], check=True, env=env)
        wheel = Path(tmp) / WHEEL
        with zipfile.ZipFile(wheel) as archive:
            arches = parse_config_header(archive.read(CUDA_MEMBER).decode())
        seconds = time.perf_counter() - started
        return seconds, tuple(arches or ()), wheel.stat().st_size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--index", default="https://pypi.org/simple")
    args = parser.parse_args()
    url = wheel_url(args.index, WHEEL)
    cases: dict[str, dict[str, Any]] = {"range read (kdkit)": {"times": []},
                                        "pip download + read": {"times": []}}
    for _ in range(args.runs):
        for name, run in (("range read (kdkit)", lambda: by_range(url)),
                          ("pip download + read", lambda: by_download(args.index, "2.13.0"))):
            seconds, arches, fetched = run()
            cases[name]["times"].append(round(seconds, 3))
            cases[name].update(arch_list=list(arches), bytes_fetched=fetched)
    for case in cases.values():
        case["median_s"] = round(statistics.median(case["times"]), 3)
    fastest_peer = cases["pip download + read"]["median_s"]
    cases["range read (kdkit)"]["peer_over_kdkit"] = round(
        fastest_peer / cases["range read (kdkit)"]["median_s"], 1)
    same = cases["range read (kdkit)"]["arch_list"] == cases["pip download + read"]["arch_list"]
    result = {"wheel": WHEEL, "url": url, "same_arch_list": same, "cases": cases,
              "machine": machine()}
    out = write_result("wheel_arch", result)
    for name, case in cases.items():
        print(f"{name:<22} median {case['median_s']:8.3f} s  {case['bytes_fetched'] / 1e6:9.1f} MB "
              f" {' '.join(case['arch_list'])}")
    print(f"same list: {same}; written to {out.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
