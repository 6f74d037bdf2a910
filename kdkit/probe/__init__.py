"""The in-container side of kdkit: diagnose, verify-env, torch-arch, the pilot harness, gather,
copy-out, sweep and resume-test (kdkit.core.commands.COMMANDS lists them).

Everything under this package imports only the standard library (and torch
where present, lazily): it must run in a broken or bare environment, inside
the image, on a host without Docker, or as a zipapp. ``python -m kdkit.probe
COMMAND ...`` runs a command without click; ``kdkit COMMAND`` forwards to it.
"""
