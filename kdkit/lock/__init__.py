"""`kdkit lock` and `kdkit wheelhouse`: the torch index asked before the resolver (fetch, pages,
preflight), the resolver (pip-compile or uv: resolvers, resolution, pipcompile, uvcompile) run on
the host or in a container, the lock's provenance header and inputs, stale-lock detection, and the
locked files downloaded and hash-checked."""
