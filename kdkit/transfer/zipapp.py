"""``kdkit.pyz``: kdkit's in-container part as one runnable file, for hosts without Docker."""

from __future__ import annotations

import compileall
import py_compile
import shutil
import zipapp
from pathlib import Path

from kdkit import __version__
from kdkit.core import layout
from kdkit.core.staging import staging_for


def build_zipapp(target: Path) -> int:
    """``kdkit.pyz``: kdkit's in-container part, runnable as ``python3 kdkit.pyz COMMAND``; returns
    its size.

    Its sources are staged beside ``target`` (inside the bundle's own staging folder), so a kill
    leaves nothing outside it.
    """
    root = staging_for(target)
    try:
        layout.copy_to(root)
        # Byte code beside each module (``module.pyc``, the layout zipimport reads), for this
        # Python: a zipapp cannot cache what it compiles, so without it every command compiles kdkit
        # anew (a verify-env 7x slower). Another Python finds a magic number it does not know and
        # reads the sources. quiet=2: a module it cannot compile (a full disk) is not printed;
        # writing the archive then says why.
        compileall.compile_dir(root, quiet=2, legacy=True,
                               invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
        (root / "__main__.py").write_text(_zipapp_main(), encoding="utf-8")
        zipapp.create_archive(root, target, interpreter="/usr/bin/env python3")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return target.stat().st_size


def _zipapp_main() -> str:
    """The zipapp's __main__: the commands kdkit.core.commands.COMMANDS says run in the zipapp."""
    return (f'"""kdkit {__version__}, in-container part: python3 kdkit.pyz COMMAND [ARGS] (--help '
            "lists them).\"\"\"\nimport sys\n\nfrom kdkit.probe.entry import "
            "main\n\nsys.exit(main(where=\"zipapp\"))\n")
