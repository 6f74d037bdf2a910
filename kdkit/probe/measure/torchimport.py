"""Importing torch where numpy is absent, without torch's warning on every command.

torch does not require numpy, and a lock without it is common (the template's is one). Each process
that imports such a torch prints ``UserWarning: Failed to initialize NumPy: No module named
'numpy'`` (torch's ``torch/csrc/utils/tensor_numpy.cpp``, raised at import), which reads like a
failure. kdkit's own imports of torch hide that one warning, its children get it hidden through
PYTHONWARNINGS, and the command says once, in its own words, what it means (:data:`NOTE`). Standard
library only.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

NUMPY_WARNING = "Failed to initialize NumPy"  # the start of torch's message
QUIET = f"ignore:{NUMPY_WARNING}"  # a -W / PYTHONWARNINGS entry: message matched from its start
NOTE = ("{command}: note: numpy is not importable for {python}; torch runs without it (its '"
        + NUMPY_WARNING
        + "' warning is not shown); add numpy to requirements/*.in if the app needs it")


def import_torch(command: str) -> Any:
    """``import torch`` with its numpy warning said once as ``command``'s own note (:data:`NOTE`) on
    stderr; every other warning of the import goes on as it came. ImportError as the import raises
    it."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        import torch
    for seen in caught:
        if str(seen.message).startswith(NUMPY_WARNING):
            print(NOTE.format(command=command, python=sys.executable), file=sys.stderr)
        else:
            warnings.warn_explicit(seen.message, seen.category, seen.filename, seen.lineno)
    return torch


def quiet_env() -> dict[str, str]:
    """PYTHONWARNINGS for a child that imports torch: the user's own entries kept, torch's numpy one
    added."""
    given = os.environ.get("PYTHONWARNINGS", "")
    return {"PYTHONWARNINGS": f"{given},{QUIET}" if given else QUIET}
