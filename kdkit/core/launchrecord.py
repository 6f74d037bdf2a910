"""What really ran, as `kdkit run` tells the container: the KDKIT_LAUNCH variable.

`kdkit run` (kdkit.machine.mounts) writes one compact JSON object into the container's environment:
the image's ID and ref, the lock's sha256 (the image's label), the host's code revision, the network
and each mount (name, target, writable, host source). The pilot reads it strictly when it is set and
records it in params.json under ``launch``, beside and outside the parameters its run ID hashes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kdkit.core.errors import BadInput
from kdkit.core.jsonio import parse_json

if TYPE_CHECKING:
    from collections.abc import Mapping

    from kdkit.core.git import CodeState

VARIABLE = "KDKIT_LAUNCH"
KEY = "launch"  # params.json's key
_FIELDS: dict[str, type] = {"image_id": str, "image": str, "lock_sha256": str, "revision": str,
                            "network": str,
                            "mounts": list}
_MOUNT_FIELDS: dict[str, type] = {"name": str, "target": str, "writable": bool, "source": str}


def parse_launch(text: str) -> dict[str, Any]:
    """KDKIT_LAUNCH's object, each field of its type (``revision`` may be null); BadInput naming the
    variable."""
    data = parse_json(text, VARIABLE)
    if not isinstance(data, dict):
        raise BadInput(f"{VARIABLE}: $: expected a JSON object; unset it or let `kdkit run` set it")
    for key, kind in _FIELDS.items():
        value = data.get(key)
        if not (isinstance(value, kind) or (key == "revision" and value is None)):
            raise BadInput(
                f"{VARIABLE}: $.{key}: expected a {kind.__name__}; unset it or let `kdkit run` set "
                "it")
    for i, mount in enumerate(data["mounts"]):
        for key, kind in _MOUNT_FIELDS.items():
            if not isinstance(mount, dict) or not isinstance(mount.get(key), kind):
                raise BadInput(f"{VARIABLE}: $.mounts[{i}].{key}: expected a {kind.__name__}; "
                               "unset it or let `kdkit run` set it")
    return data


def launch_field(environ: Any) -> dict[str, Any]:
    """``{"launch": ...}`` for params.json when KDKIT_LAUNCH is set, else nothing."""
    text = environ.get(VARIABLE)
    return {} if text is None else {KEY: parse_launch(text)}


def with_launch_revision(state: CodeState, launch: Mapping[str, Any] | None) -> CodeState:
    """The code state a run records: git's where the project is a checkout (``state``, from
    kdkit.core.git.code_state), else the revision `kdkit run` passed in KDKIT_LAUNCH (the host's
    checkout, else the image's revision label), so a run in a container never records null where its
    image knows."""
    given = (launch or {}).get("revision")
    if state.get("revision") or not isinstance(given, str) or given in ("", "unknown"):
        return state
    dirty = given.endswith(("+dirty", "-dirty"))
    return {"revision": given.removesuffix("+dirty").removesuffix("-dirty"), "dirty": dirty,
            "note": f"from {VARIABLE} (kdkit run: the host's git checkout, else the image's "
                    "revision label)"}
