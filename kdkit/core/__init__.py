"""kdkit's core: what both sides stand on, in the standard library alone.

Errors and their exit codes, JSON I/O, the subprocess helper, staging beside a final path,
checksums, secrets and redaction, the project's files and path containment, the lock model with
its markers and versions, the pilot config model, the run-folder model, torch build labels, GPU
rules and the command table. The host CLI imports it; so does everything under kdkit.probe, and
it is copied with the probe into every image and into kdkit.pyz. Nothing here imports a module
above it (kdkit.probe, the host modules, kdkit.cli) or a third-party package.
"""
