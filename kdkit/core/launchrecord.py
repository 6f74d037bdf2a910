"""What really ran, as `kdkit run` tells the container: the KDKIT_LAUNCH variable.

`kdkit run` (kdkit.machine.mounts) writes one compact JSON object into the container's environment: the
image's ID and ref, the lock's sha256 (the image's label), the host's code revision, the network and
each mount (name, target, writable, host source). The pilot reads it strictly when it is set and
records it in params.json under ``launch``, beside and outside the parameters its run ID hashes.
"""

from __future__ import annotations

from typing import Any

from kdkit.core.errors import BadInput
from kdkit.core.jsonio import parse_json

VARIABLE = "KDKIT_LAUNCH"
KEY = "launch"  # params.json's key
_FIELDS: dict[str, type] = {"image_id": str, "image": str, "lock_sha256": str, "revision": str, "network": str,
                            "mounts": list}
_MOUNT_FIELDS: dict[str, type] = {"name": str, "target": str, "writable": bool, "source": str}


def parse_launch(text: str) -> dict[str, Any]:
    """KDKIT_LAUNCH's object, each field of its type (``revision`` may be null); BadInput naming the variable."""
    data = parse_json(text, VARIABLE)
    if not isinstance(data, dict):
        raise BadInput(f"{VARIABLE}: $: expected a JSON object; unset it or let `kdkit run` set it")
    for key, kind in _FIELDS.items():
        value = data.get(key)
        if not (isinstance(value, kind) or (key == "revision" and value is None)):
            raise BadInput(f"{VARIABLE}: $.{key}: expected a {kind.__name__}; unset it or let `kdkit run` set it")
    for i, mount in enumerate(data["mounts"]):
        for key, kind in _MOUNT_FIELDS.items():
            if not isinstance(mount, dict) or not isinstance(mount.get(key), kind):
                raise BadInput(f"{VARIABLE}: $.mounts[{i}].{key}: expected a {kind.__name__}; unset it or let "
                               "`kdkit run` set it")
    return data


def launch_field(environ: Any) -> dict[str, Any]:
    """``{"launch": ...}`` for params.json when KDKIT_LAUNCH is set, else nothing."""
    text = environ.get(VARIABLE)
    return {} if text is None else {KEY: parse_launch(text)}
