"""`kdkit lock` and `kdkit wheelhouse`: the torch index asked before pip-compile (fetch, pages,
preflight), pip-compile run on the host or in a container, the lock's provenance header and inputs,
stale-lock detection, and the locked files downloaded and hash-checked."""
