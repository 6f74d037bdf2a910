"""The in-container side of kdkit: diagnose, verify-env, the pilot harness.

Everything under this package imports only the standard library (and torch
where present, lazily): it must run in a broken or bare environment, inside
the image, on a host without Docker, or as a zipapp. ``python -m kdkit.probe
COMMAND ...`` runs a command without click; ``kdkit COMMAND`` forwards to it.
"""

# The modules of kdkit outside this package that the probe may import (standard library only, like
# the probe): copied beside it into the image and into kdkit.pyz, and checked by the tests.
CORE_MODULES = ("__init__.py", "credentials.py", "errors.py", "jsonio.py", "proc.py", "staging.py", "checksums.py")
# Data files of kdkit the probe reads (kdkit.probe.builds), copied beside it likewise.
CORE_DATA = ("data/pairings.json", "data/catalog.json")
