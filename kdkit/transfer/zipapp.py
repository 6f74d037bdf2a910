"""``kdkit.pyz``: kdkit's in-container part as one runnable file, for hosts without Docker."""

from __future__ import annotations

import shutil
import zipapp
from pathlib import Path

from kdkit import __version__
from kdkit.core import layout
from kdkit.core.staging import staging_for


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
    """The zipapp's __main__: the commands kdkit.core.commands.COMMANDS says run in the zipapp."""
    return (f'"""kdkit {__version__}, in-container part: python3 kdkit.pyz COMMAND [ARGS] (--help lists them)."""\n'
            "import sys\n\nfrom kdkit.probe.entry import main\n\nsys.exit(main(where=\"zipapp\"))\n")
