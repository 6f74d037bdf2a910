"""The file output kind in the pilot: each call of the app gets fresh out_dirs, each accepted
answer's files are judged (kdkit.core.outputfiles.inspect) before the batch's records go to the run
folder's writer, which keeps them (RunFolder.append: renamed into outputs/ before the lines that
name them)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kdkit.core import outputfiles
from kdkit.probe.pilot.harness import Call
from kdkit.probe.pilot.inputs import Item


def staged_call(app: Call, run: Path, staged: set[str] | None = None) -> Call:
    """``app`` with each item's out_dir made fresh and empty before every call (a batch retried item
    by item starts each retry from an empty folder); each folder's name is added to ``staged`` (the
    items in flight, until the caller has judged the batch:
    kdkit.core.outputfiles.staging_strays)."""

    def call(items: Sequence[Item]) -> Any:
        if staged is not None:
            staged.update(outputfiles.folder_name(item.doc.id) for item in items)
        made = outputfiles.stage(run, [item.doc.id for item in items])
        for item in items:
            item.out_dir = made[item.doc.id]
        return app(items)

    return call


def judged(run: Path, records: list[dict[str, Any]], max_bytes: int | None) -> list[dict[str, Any]]:
    """The batch's records with each accepted one's ``folder`` and ``files``, or the harness's
    rejection naming why its out_dir cannot be kept; the staging folders of items not accepted are
    removed."""
    kept = []
    for record in records:
        ident = record.get("id")
        if record.get("outcome") != "accepted" or not isinstance(ident, str):
            if isinstance(ident, str) and record.get("outcome") != "unrequested":
                outputfiles.discard(run, ident)
            kept.append(record)
            continue
        got = outputfiles.inspect(run, ident, max_bytes)
        if isinstance(got, str):
            outputfiles.discard(run, ident)
            kept.append({"id": ident, "outcome": "rejected", "by": "harness", "reason": got,
                         "batch": record.get("batch"), "sha256": record.get("sha256")})
        else:
            kept.append({**record, **got})
    return kept
