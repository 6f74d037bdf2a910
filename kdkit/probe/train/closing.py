"""A training run closed: stop.json, summary.json, summary.md, reload.json, then SHA256SUMS over
every file.

Checkpoint files are listed by the digests of their own SHA256SUMS when the checkpoint verified as
it was committed (no second hashing of large files); everything else is hashed here. ``.``-named
staging and the heartbeat are never listed.

Standard library only.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.core import checkpoints
from kdkit.core.checksums import SUMS, write_digests
from kdkit.core.heartbeat import HEARTBEAT
from kdkit.core.jsonio import atomic_write_json, atomic_write_text, sha256_file
from kdkit.core.runfolder import SUMMARY, SUMMARY_MD
from kdkit.core.safetext import md_cell
from kdkit.probe.train.runfiles import CHECKPOINTS, RELOAD

if TYPE_CHECKING:
    from typing import NotRequired, TypedDict

    from kdkit.probe.train.saving import SavePolicy

    class ReloadBrief(TypedDict):
        """summary.json's "reload": how `kdkit train --verify-reload` ended (reload.py)."""

        ok: bool
        returncode: int | None
        seconds: float
        at: str

    class TrainSummary(TypedDict):
        """A training run's summary.json, as command.py ``summarize`` builds it."""

        run_id: str
        kind: str
        verdict: str
        started: str | None  # params.json's "created"
        session_started: str
        ended: str
        timings: dict[str, float]
        steps: int
        exit_code: int | None
        stop: dict[str, Any]  # stop.json's "reason", "detail" and "step"
        metrics: dict[str, Any]  # the loop's latest value of each metric it reported
        final_checkpoint: str | None
        save: SavePolicy
        reload: ReloadBrief | None  # None until --verify-reload runs
        variant: str | None
        resumed_from: NotRequired[str | None]  # set by `kdkit train` once summarized

VERDICTS = {"exit": "pass"}
FAILED = frozenset({"killed", "oom", "signal"})


def verdict(reason: str, returncode: int | None) -> str:
    if reason == "exit":
        return "pass" if returncode == 0 else "fail"
    return "fail" if reason in FAILED else "stopped"


def digests(folder: Path) -> dict[str, str]:
    """{relative name: sha256} of every file of the closed run folder (staging and the heartbeat
    left out)."""
    found: dict[str, str] = {}
    ckpts = folder / CHECKPOINTS
    known = {}
    for _step, path in checkpoints.checkpoint_folders(ckpts):
        sums = checkpoints.listed(path)
        if sums is not None and all((path / name).is_file() for name in sums):
            for name, digest in sums.items():
                known[f"{CHECKPOINTS}/{path.name}/{name}"] = digest
    for base, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            path = Path(base) / name
            relative = path.relative_to(folder).as_posix()
            if name.startswith(".") or relative in (SUMS, HEARTBEAT) or path.is_symlink():
                continue
            found[relative] = known.get(relative) or sha256_file(path)
    return found


def seal(folder: Path) -> int:
    return write_digests(folder, digests(folder))


def render(summary: TrainSummary) -> str:
    save = summary.get("save") or {}
    rows = [("run", summary["run_id"]), ("verdict", summary["verdict"]),
            ("stop", summary["stop"]["reason"]),
            ("detail", summary["stop"]["detail"]), ("steps", summary["steps"]),
            ("seconds", summary["timings"]["seconds"]),
            ("final checkpoint", summary["final_checkpoint"]),
            ("save median s", save.get("seconds_median")), ("save share", save.get("share")),
            ("save every (steps)", save.get("recommended_every_steps")),
            ("save warning", save.get("warning"))]
    lines = [f"# Training run {md_cell(str(summary['run_id']))}", "", "| | |", "| --- | --- |"]
    lines += [f"| {name} | {md_cell(str(value))} |" for name, value in rows]
    metrics = summary.get("metrics") or {}
    lines += ["", "| metric | last value |", "| --- | --- |"]
    lines += [f"| {md_cell(str(k))} | {md_cell(str(v))} |" for k, v in sorted(metrics.items())]
    return "\n".join(lines) + "\n"


def close(folder: Path, summary: TrainSummary, reload_argv: list[str] | None) -> None:
    """Write the closing files (stop.json is already written) and SHA256SUMS last; a checkpoint the
    stopped loop was writing (its staging) is removed first."""
    checkpoints.clean_partials(folder / CHECKPOINTS)
    if reload_argv is not None:
        atomic_write_json(folder / RELOAD,
                          {"argv": reload_argv, "cwd": ".",
                           "checkpoint": summary["final_checkpoint"]})
    atomic_write_json(folder / SUMMARY, summary)
    atomic_write_text(folder / SUMMARY_MD, render(summary))
    (folder / HEARTBEAT).unlink(missing_ok=True)
    seal(folder)
