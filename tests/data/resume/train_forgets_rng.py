"""A broken loop for tests: it saves the RNG states but never puts them back."""

import sys

import src.train as loop

loop.restore_rng = lambda saved: None

if __name__ == "__main__":
    sys.exit(loop.main())
