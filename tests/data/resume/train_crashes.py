"""A broken loop for tests: it fails as soon as it is asked to resume."""

import sys

if "--resume" in sys.argv:
    raise RuntimeError("cannot resume: checkpoint format unknown")

import src.train as loop

if __name__ == "__main__":
    sys.exit(loop.main())
