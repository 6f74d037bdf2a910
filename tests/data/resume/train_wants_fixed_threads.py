"""A loop for tests: it refuses to run unless MKL and OpenMP keep the number of threads they are
given, which resume-test asks of every phase (a CPU GEMM split otherwise rounds differently)."""

import os
import sys

import src.train as loop

for name in ("MKL_DYNAMIC", "OMP_DYNAMIC"):
    if os.environ.get(name) != "FALSE":
        raise RuntimeError(f"{name} is {os.environ.get(name)!r}, not 'FALSE'")

if __name__ == "__main__":
    sys.exit(loop.main())
