"""``kdkit.pyz``: kdkit's in-container part as one runnable file, for hosts without Docker."""

from __future__ import annotations

import shutil
import zipapp
from pathlib import Path

from kdkit import __version__
from kdkit.core import layout
from kdkit.core.staging import staging_for

# Probe commands the zipapp offers besides kdkit.core.commands.COMMANDS (the host CLI has its own).
ZIPAPP_EXTRA_COMMANDS = {
    "resume-test": ("kdkit.probe.measure.resume", "Prove a training loop resumes exactly in a new process."),
    "sweep": ("kdkit.probe.measure.sweep", "Batch-size sweep of the pilot inputs by length group."),
}


def build_zipapp(target: Path) -> int:
    """``kdkit.pyz``: kdkit's in-container part, runnable as ``python3 kdkit.pyz COMMAND``; returns its size.

    Its sources are staged beside ``target`` (inside the bundle's own staging folder), so a kill
    leaves nothing outside it.
    """
    root = staging_for(target)
    try:
        layout.copy_to(root)
        (root / "__main__.py").write_text(_zipapp_main(), encoding="utf-8")
        zipapp.create_archive(root, target, interpreter="/usr/bin/env python3")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return target.stat().st_size


def _zipapp_main() -> str:
    extra = "".join(f"COMMANDS.setdefault({name!r}, {entry!r})\n" for name, entry in ZIPAPP_EXTRA_COMMANDS.items())
    return (f'"""kdkit {__version__}, in-container part: python3 kdkit.pyz COMMAND [ARGS] (--help lists them)."""\n'
            "import sys\n\nfrom kdkit.core.commands import COMMANDS, main\n\n"
            f"{extra}\nsys.exit(main())\n")
