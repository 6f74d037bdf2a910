"""What a build's pip will need, checked before the first layer: the certificate it trusts, and a
source for each locked file.

A lock whose pins came from a folder of the locking machine only (``kdkit lock --torch-find-links``;
its header's ``machine-local``) cannot be installed from any index: the build's pip would fail at
its install layer with ``No matching distribution`` after minutes of work. Without ``--wheelhouse``
it is refused once the engine answers, before the base image is pulled or a layer runs, with the
commands that make a wheelhouse. Each other locked file is looked for on the indexes the build's pip
reads by kdkit.image.fetchable.
"""

from __future__ import annotations

import re
import shlex
import ssl
from pathlib import Path

from kdkit.core.errors import BadInput
from kdkit.core.lockfile import machine_local
from kdkit.lock.locked import LockInput

PEM_BLOCK = re.compile(rb"-----BEGIN CERTIFICATE-----\s+[A-Za-z0-9+/=\s]+-----END CERTIFICATE-----")


def check_ca_bundle(path: Path) -> tuple[Path, bytes]:
    """A readable PEM file that Python's TLS stack accepts as CA certificates, and its bytes (read
    once)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BadInput(
            f"--ca-bundle {path}: cannot read it ({exc.strerror or exc}); give a PEM "
            "file") from None
    if not PEM_BLOCK.search(data):
        raise BadInput(f"--ca-bundle {path}: not a PEM bundle (no -----BEGIN CERTIFICATE----- "
                       "block); give the CA file your proxy's certificate chains to, e.g. "
                       "/etc/ssl/certs/ca-certificates.crt")
    try:
        ssl.create_default_context(cadata=data.decode("ascii", "replace"))
    except (ssl.SSLError, ValueError) as exc:
        raise BadInput(f"--ca-bundle {path}: a certificate in it does not load ({exc}); "
                       "re-export the bundle in PEM format") from None
    return path.resolve(), data


def refuse_machine_local(lock: LockInput, root: Path, backend: str, wheelhouse: bool) -> None:
    """BadInput, before any layer, when the lock has machine-local pins and no wheelhouse
    (--wheelhouse, its every locked file checked by kdkit.lock.wheelhouse.wheelhouse_files) carries
    them."""
    local = machine_local(lock.lock)
    if not local or wheelhouse:
        return
    project, folder = shlex.quote(str(root)), shlex.quote(str(root / "wheelhouse" / backend))
    raise BadInput(f"{lock.path}: {', '.join(local)} came only from a folder of the machine that "
                   "locked it (the lock's machine-local), so the build's pip cannot fetch it from "
                   "any index; copy its files from the folder you locked with "
                   f"(--torch-find-links) into {folder}, then `kdkit wheelhouse {project} "
                   f"--backend {backend}` and `kdkit build {project} --backend {backend} "
                   f"--wheelhouse {folder}`")
