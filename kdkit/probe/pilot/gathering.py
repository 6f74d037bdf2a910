"""The gathering's folder: its summary (summary.json, summary.md) of the whole run, where it goes,
what ``--force`` may replace there (only an earlier gathering as kdkit wrote it, checked against its
own SHA256SUMS), and its writing, staged then published whole (kdkit.core.staging.staged_folder)
with the workers' vectors and outputs joined. kdkit.probe.pilot.gather decides what it says.
Standard library only, as the gathering.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.core import runfolder as rf
from kdkit.core.checksums import SUMS, write_sums
from kdkit.core.errors import BadInput, CheckFailed
from kdkit.core.jsonio import atomic_write_json, atomic_write_text, load_json
from kdkit.core.outputfiles import OUTPUTS, gather_outputs
from kdkit.core.pilotconfig import PilotConfig
from kdkit.core.staging import refuse_link, staged_folder
from kdkit.core.stalestaging import describe_removed
from kdkit.core.vectorfile import gather_vectors
from kdkit.probe.pilot.accounting import NOT_ANSWERED, Accounting
from kdkit.probe.pilot.collect import Worker
from kdkit.probe.results.copyout import read_sums, verify_folder

TABLE_ROWS = 500

if TYPE_CHECKING:
    from typing import TypedDict

    class WorkerRow(TypedDict):
        """One worker's row of the gathered summary's ``per_worker``."""

        worker: int
        folder: str
        path: str
        answered: int
        verdict: Any
        seconds: float | None
        stopped: Any


# ---------------------------------------------------------------- the summary


def summary_data(run_id: str, cfg: PilotConfig, workers: Sequence[Worker], acc: Accounting | None,
                 problems: list[str]) -> dict[str, Any]:
    first = workers[0].params
    return {
        rf.RUN_ID: run_id,
        rf.KIND: rf.GATHERED,
        rf.VERDICT: "fail" if problems else "pass",
        rf.WORKERS: workers[0].share.workers,
        rf.PARAMS_HASH: first.get(rf.PARAMS_HASH),
        "manifest_sha256": first.get("params", {}).get("manifest_sha256"),
        rf.TOTAL: len(cfg.documents),
        rf.ACCEPTED: acc.accepted if acc else None,
        rf.REJECTED: acc.rejected if acc else None,
        "quality": acc.quality if acc else None,
        "min_quality": cfg.min_quality,
        "problems": problems,
        **({NOT_ANSWERED: acc.not_answered} if acc and acc.not_answered else {}),
        "per_worker": [_worker_row(w) for w in workers],
        "gathered": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def _worker_row(worker: Worker) -> WorkerRow:
    summary = worker.summary or {}
    return {"worker": worker.share.worker, "folder": worker.name, "path": str(worker.path),
            "answered": worker.answered, "verdict": summary.get(rf.VERDICT),
            "seconds": rf.session_seconds(summary), "stopped": summary.get(rf.STOPPED)}


def summary_markdown(summary: dict[str, Any]) -> str:
    quality = "undefined" if summary["quality"] is None else f"{summary['quality']:.3f}"
    lines = [f"# Gathered run {summary['run_id']}: {summary['verdict'].upper()}", "",
             f"- Workers: {summary['workers']}; params hash {str(summary['params_hash'])[:12]}, "
             f"manifest sha256 {str(summary['manifest_sha256'])[:12]}",
             f"- IDs in the manifest: {summary['total']}; accepted {summary['accepted']}, rejected "
             f"{summary['rejected']}",
             f"- Quality against the manifest's labels: {quality} (minimum "
             f"{summary['min_quality']:g})",
             "", "## Problems", ""]
    lines += [f"- {rf.md_cell(p)}" for p in summary["problems"][:TABLE_ROWS]] or [
        "None: every ID answered exactly once, by the worker whose share holds it."]
    lines += ["", "## Workers", "",
              "| worker | folder | IDs answered | its own verdict | seconds |",
              "|---|---|---|---|---|"]
    lines += [f"| {w['worker']} | {rf.md_cell(w['folder'])} | {w['answered']} | {w['verdict']} | "
              f"{w['seconds']} |"
              for w in summary["per_worker"]]
    lines += ["",
              "Each worker's own verdict is over its share only; the verdict above is over the "
              "whole manifest.",
              "Files: summary.json, summary.md, SHA256SUMS; the results stay in the workers' "
              "folders."]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- writing, atomically


def default_out(workers: Sequence[Worker], roots: Sequence[Path] = ()) -> Path:
    """<run-id>-gathered in the first --from DIR, else next to the first worker's folder."""
    return (roots[0] if roots else workers[0].path.parent) / rf.gathered_folder(workers[0].run)


# what a gathering holds
GATHERING = frozenset({rf.SUMMARY, rf.SUMMARY_MD, SUMS, rf.VECTORS, rf.VECTOR_IDS, OUTPUTS})


def replaceable_gathering(folder: Path) -> str | None:
    """Why ``--force`` must not replace what is at ``folder`` (it is not exactly a gathering kdkit
    wrote), or None."""
    if folder.is_symlink() or not folder.is_dir():
        return "is not a folder"
    try:
        names = set(os.listdir(folder))
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if not (folder / rf.SUMMARY).is_file():
        return f"holds no {rf.SUMMARY}, so it is not an earlier gathering"
    if names - GATHERING:
        return (f"holds {len(names - GATHERING)} file(s) a gathering does not write (e.g. "
                f"{sorted(names - GATHERING)[0]!r}), which --force would delete")
    return _not_gathered(folder)


def _not_gathered(folder: Path) -> str | None:
    """Why the content of ``folder`` is not a gathering as kdkit wrote it (its summary.json's kind,
    then the folder against its own SHA256SUMS: kdkit.core.runverify.verify_folder, the one
    verification), or None."""
    try:
        kind = load_json(folder / rf.SUMMARY).get(rf.KIND)
    except (BadInput, AttributeError):
        kind = None
    if kind != rf.GATHERED:
        return (
            f"its {rf.SUMMARY} is not a gathering's (kind {rf.GATHERED!r}), so it is not an "
            "earlier gathering")
    try:
        problems = verify_folder(folder, read_sums(folder))
    except (BadInput, CheckFailed):  # none, or malformed
        return f"holds no readable {SUMS}, so it is not an earlier gathering"
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if problems:
        return (
            f"does not match its own {SUMS} ({problems[0]}), so it is not a gathering as kdkit "
            "wrote it")
    return None


def check_out(out: Path, workers: Sequence[Worker], force: bool) -> Path:
    refuse_link(out, "--out")
    out = out.resolve()
    for worker in workers:
        if out == worker.path or worker.path in out.parents:
            raise BadInput(
                f"--out {out}: inside the run folder {worker.path}; it would break its {SUMS}")
    why = replaceable_gathering(out) if os.path.lexists(out) else None
    if why is not None:
        raise BadInput(f"{out}: exists and {why}; choose another --out or move it away first")
    if os.path.lexists(out) and not force:
        raise BadInput(f"{out}: exists; add --force to replace an earlier gathering")
    if not out.parent.is_dir():
        raise BadInput(f"--out {out}: the folder {out.parent} does not exist; create it first")
    return out


def write_summary(out: Path, summary: dict[str, Any], force: bool = False,
                  vectors: list[tuple[int, Path, Path]] | None = None,
                  outputs: list[tuple[str, Path, dict[str, str]]] | None = None) -> None:
    """summary.json, summary.md, the workers' ``vectors`` as one array (vectors.npy,
    vectors.ids.jsonl), their ``outputs`` (the file kind) joined into one outputs/
    (kdkit.core.outputfiles.gather_outputs) and SHA256SUMS in a staging folder published as ``out``
    (never over anything but the earlier gathering checked, with ``force``:
    kdkit.core.staging.staged_folder)."""
    with staged_folder(out, "--out", replaceable_gathering if force else None) as staged:
        for line in describe_removed(staged.removed):
            print(f"gather: {line}", file=sys.stderr)
        names = [rf.SUMMARY, rf.SUMMARY_MD]
        if vectors:
            summary["vectors"] = gather_vectors(vectors, staged.path / rf.VECTORS,
                                                staged.path / rf.VECTOR_IDS)
            names += [rf.VECTORS, rf.VECTOR_IDS]
        if outputs:  # the file kind: every worker's outputs/<name>/ joined, each item's once
            files, joined = gather_outputs(outputs, staged.path)
            summary["outputs"] = len({name.split("/")[1] for name in files})
            if joined:
                summary["problems"] = [*summary["problems"], *joined]
                summary[rf.VERDICT] = "fail"
            names += sorted(files)
        # as a pilot's: a file removed with its line is still missing
        summary[rf.FILES] = sorted({*names, SUMS})
        atomic_write_json(staged.path / rf.SUMMARY, summary)
        atomic_write_text(staged.path / rf.SUMMARY_MD, summary_markdown(summary))
        write_sums(staged.path, [(name, staged.path / name) for name in names])
