"""What `kdkit close` counts from a project's runs folder: each folder read and verified, workers'
shares proven together, and the runs of another configuration told apart.

A folder counts by what it holds and proves, never by what it says of itself
(kdkit.core.runfolder.folder_kind):

- a whole-manifest pilot run is an accepted output when it verifies (read_run), passes, ran the
  project's current pilot parameters (the params_hash that names the config and the manifest's
  SHA-256) and answered as many IDs as the manifest holds;
- a worker's folder (``<run>-wIofN``) is never an output by itself: the N folders of one run are
  one, when every share is there and they pass the proof of `kdkit gather`
  (kdkit.probe.pilot.gather.judge: each folder verified, every share present, the project's
  parameters, every manifest ID answered exactly once by the worker whose share holds it, the
  pilot's accounting over the whole manifest). A gathering's own folder is never read: it holds no
  results, only what its workers' folders prove.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.core.errors import BadInput
from kdkit.core.pilotconfig import PilotConfig, params_hash
from kdkit.core.runfolder import PARAMS, WORKER_FOLDER, base_id, run_folders
from kdkit.core.runverify import Run, read_run
from kdkit.probe.pilot.collect import collect
from kdkit.probe.pilot.gather import judge

if TYPE_CHECKING:
    from typing import TypedDict

    class RunRow(TypedDict):
        """One run folder as the report lists it (run_row)."""

        run_id: str
        config_hash: str | None
        manifest_sha256: str | None
        verdict: str
        stop_reason: str | None
        total: int | None
        accepted: int | None
        rejected: int | None
        seconds: float | None
        has_summary: bool
        problems: list[str]
        # "I/N" for a worker's folder, else None; Any: gathered_row splits it on the rows that
        # share_groups kept (never None there), which the type checker cannot see
        share: Any


def run_row(run: Run) -> RunRow:
    """One run as the report lists it (its keys are the report's, read from kdkit.core.runverify's
    model)."""
    share = WORKER_FOLDER.match(run.run_id) if run.share is None else None
    return {"run_id": run.run_id, "config_hash": run.params_hash,
            "manifest_sha256": run.manifest_sha256,
            "verdict": run.verdict,
            "stop_reason": run.stop_reason, "total": run.total, "accepted": run.accepted,
            "rejected": run.rejected,
            "seconds": run.seconds, "has_summary": run.has_summary, "problems": list(run.problems),
            "share": (f"{run.share[0]}/{run.share[1]}" if run.share else
                      f"{share['worker']}/{share['workers']}" if share else None)}


def read_runs(runs: Path) -> list[Run]:
    """Every pilot run under ``runs``, in id order (ids start with the UTC time, so this is time
    order).

    A pilot run writes params.json before its first item; folders without one (a sweep's or a resume
    test's measurements, a gathering) are not runs of the campaign's protocol, nor is a training
    (params.json's ``"kind": "train"``: kdkit.order.closework lists those, and counts their hours).
    """
    return [run for run in map(read_run, (f for f in run_folders(runs) if not is_training(f)))
            if run.has_params]


def is_training(folder: Path) -> bool:
    """A `kdkit train` run folder (its params.json says so; a pilot's params.json holds no
    ``kind``)."""
    try:
        params = json.loads((folder / PARAMS).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(params, dict) and params.get("kind") == "train"


def against_project(row: RunRow, cfg: PilotConfig,
                    current: dict[str, Any]) -> tuple[bool, str | None]:
    """A verified passing whole run against the project as it is now: (counted, what the deviations
    say).

    A run of the project's manifest (its params' manifest_sha256) must have answered every ID of it;
    a run of another configuration or manifest counts as its own output, named as such (its manifest
    is not here to check its total against)."""
    run, total, size, digest = row["run_id"], row["total"], len(cfg.documents), params_hash(current)
    if row["manifest_sha256"] == current["manifest_sha256"] and total != size:
        return False, (f"run {run} answered {total} ID(s) of the project's manifest, which holds "
                       f"{size}: not counted as an accepted output")
    if row["config_hash"] != digest:
        return True, (f"run {run} ran another pilot configuration or manifest than the project's "
                      f"now (params hash {str(row['config_hash'])[:8]}, now {digest[:8]}): its "
                      f"{total} ID(s) are not checked against a manifest")
    return True, None


def share_groups(rows: list[RunRow]) -> dict[str, list[RunRow]]:
    """The workers' folders by run (``<run>-wIofN`` -> ``<run>``), in id order."""
    groups: dict[str, list[RunRow]] = {}
    for row in rows:
        if row["share"] is not None:
            groups.setdefault(base_id(row["run_id"]), []).append(row)
    return groups


def gathered_row(run: str, members: list[RunRow],
                 runs: Path, cfg: PilotConfig) -> dict[str, Any]:
    """The N shares of one run as one output, proven as `kdkit gather` proves them; else why not."""
    counts = {int(row["share"].split("/")[1]) for row in members}
    workers = max(counts)
    have = {int(row["share"].split("/")[0]) for row in members if row["verdict"] in ("pass", "fail")
            and not row["problems"]}
    row: dict[str, Any] = {"run_id": run, "config_hash": members[0]["config_hash"],
                           "workers": workers, "folders": [m["run_id"] for m in members],
                           "verdict": "incomplete", "total": None, "accepted": None,
                           "rejected": None, "problems": []}
    if len(counts) > 1 or len(have) < workers:
        row["problems"] = [f"run {run}: {len(have)} of {workers} shares closed and verified, not "
                           "gathered"
                           + ("" if len(counts) == 1
                              else f" (folders of {len(counts)} different worker counts)")]
        return row
    try:
        acc, problems = judge(cfg, collect([runs / name for name in row["folders"]]))
    except BadInput as exc:
        acc, problems = None, [str(exc)]
    row.update(verdict="fail" if problems else "pass",
               problems=[f"run {run}: {p}" for p in problems],
               total=len(cfg.documents), accepted=acc.accepted if acc else None,
               rejected=acc.rejected if acc else None)
    return row


Rows = list[dict[str, Any]]


def outputs(rows: list[RunRow], runs: Path,
            cfg: PilotConfig) -> tuple[list[RunRow | dict[str, Any]], Rows, list[str]]:
    """(candidate outputs: verified passing whole runs of the current config; the gathered runs;
    deviations)."""
    current = cfg.resolved()
    candidates, deviations, said = [], [], set()
    row: RunRow | dict[str, Any]  # a run's row, then a gathered run's
    for row in rows:
        if row["share"] is None and row["verdict"] == "pass":
            counted, why = against_project(row, cfg, current)
            # a configuration named once
            if why and (not counted or row["config_hash"] not in said):
                deviations.append(why)
                said.add(row["config_hash"])
            candidates += [row] if counted else []
    gathered = [gathered_row(run, members, runs, cfg) for run,
                members in share_groups(rows).items()]
    for row in gathered:
        more = f" (+{len(row['problems']) - 1} more)" if len(row["problems"]) > 1 else ""
        deviations += [row["problems"][0] + more] if row["problems"] else []
    return candidates + [row for row in gathered if row["verdict"] == "pass"], gathered, deviations
