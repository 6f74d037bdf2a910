"""A new training run's folder and its params.json: the loop, its arguments, the config, the code's
hashes, the data and model references, the adapter's base model and exact revision, the code
revision, the launch.

Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.core.errors import BadInput
from kdkit.core.git import code_state
from kdkit.core.heartbeat import utc_now
from kdkit.core.jsonio import atomic_write_json, load_json, sha256_file
from kdkit.core.launchrecord import KEY as LAUNCH
from kdkit.core.launchrecord import launch_field, with_launch_revision
from kdkit.core.pilotconfig import load_pilot
from kdkit.core.projectfiles import DOTTED, MARKER, path_problem
from kdkit.core.runfolder import PARAMS, new_run_folder
from kdkit.core.runid import RunId
from kdkit.core.trainconfig import DEFAULT_MODULE, TrainConfig
from kdkit.probe.train.runfiles import TRAIN, lock_run

if TYPE_CHECKING:
    from typing import TypedDict

    class References(TypedDict):
        """params.json's "data" and "model", as the pilot records them (None without one)."""

        data: dict[str, Any] | None  # "inputs", "manifest", "manifest_sha256"
        model: Any  # the pilot config's resolved "model", if any

CODE_FOLDERS = ("src", "config")
MAX_CODE_FILES = 2000


def _project(root: Path) -> dict[str, Any]:
    data = load_json(root / MARKER, what="project file") if (root / MARKER).is_file() else {}
    return data if isinstance(data, dict) else {}


def module_of(root: Path, cfg: TrainConfig) -> str:
    """The loop's module: config/train.json "module", else kdkit.json "train", else src.train."""
    if cfg.module:
        return cfg.module
    declared = _project(root).get("train", DEFAULT_MODULE)
    if not isinstance(declared, str) or not DOTTED.fullmatch(declared):
        raise BadInput(
            f"{root / MARKER}: $.train: must be a dotted module name such as {DEFAULT_MODULE}")
    return declared


def runs_dir(root: Path) -> Path:
    """Where run folders go, as `kdkit status` finds them (kdkit.machine.watch.place): the pilot
    config's "runs" (kdkit.json's "pilot_config", else config/pilot.json) when it names a safe path,
    else runs/."""
    try:
        named = json.loads((root / "kdkit.json").read_text(encoding="utf-8")).get("pilot_config")
        pilot = root / (named if isinstance(named, str) and path_problem(named) is None
                        else "config/pilot.json")
        runs = json.loads(
            pilot.read_text(encoding="utf-8")).get("runs") if pilot.is_file() else None
    except (OSError, ValueError, AttributeError):
        runs = None
    return root / runs if isinstance(runs, str) and path_problem(runs) is None else root / "runs"


def code_hashes(root: Path) -> dict[str, str]:
    """sha256 of each file under src/ and config/ (caches and hidden files left out), at most
    MAX_CODE_FILES."""
    found: dict[str, str] = {}
    for top in CODE_FOLDERS:
        for base, dirs, files in os.walk(root / top):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
            for name in sorted(files):
                path = Path(base) / name
                if not name.startswith(".") and path.is_file() and len(found) < MAX_CODE_FILES:
                    found[path.relative_to(root).as_posix()] = sha256_file(path)
    return found


def _references(root: Path) -> References:
    """The data and model references as the pilot records them (kdkit.core.pilotconfig.load_pilot:
    the inputs, the manifest and its SHA-256, the model's files each hashed, its hub revision); None
    for a project without a pilot config. A pilot config that does not load is BadInput, before
    anything is written."""
    if "pilot_config" not in _project(root) and not (root / "config" / "pilot.json").is_file():
        return {"data": None, "model": None}
    resolved = load_pilot(root).resolved()
    return {"data": {key: resolved[key] for key in ("inputs", "manifest", "manifest_sha256")},
            "model": resolved.get("model")}


def open_new(root: Path, runs: Path, cfg: TrainConfig, config_file: str, run_id: RunId | None,
             variant: str | None,
             args: list[str]) -> tuple[Path, dict[str, Any], int]:
    """Make the run folder (its ID from the parameters' hash, or ``run_id``), take its lock (its
    fd, for the session) and write params.json under it: a ``--resume`` of this ID started at the
    same moment never finds params.json without the lock held."""
    module, references = module_of(root, cfg), _references(root)
    launch = launch_field(os.environ)  # KDKIT_LAUNCH, read (and checked) before any folder is made
    config = {"module": module, "args": args, "config": cfg.raw, "variant": variant, **references}
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()
    folder = _new_folder(runs, run_id, digest)
    lock = lock_run(folder)
    try:
        base = {"name": cfg.base_model[0],
                "revision": cfg.base_model[1]} if cfg.base_model else None
        params = {"run_id": folder.name, "kind": TRAIN, "created": utc_now(), "module": module,
                  "args": args,
                  "variant": variant, "config_file": config_file if cfg.source else None,
                  "config": cfg.raw,
                  "params_hash": digest, "code": code_hashes(root), **references,
                  "base_model": base,
                  "revision": with_launch_revision(code_state(root), launch.get(LAUNCH)),
                  **launch}
        atomic_write_json(folder / PARAMS, params)
    except BaseException:
        os.close(lock)
        raise
    return folder, params, lock


def _new_folder(runs: Path, run_id: RunId | None, digest: str) -> Path:
    """The new run's folder, made: ``run_id``'s (refused when it exists), else one named from the
    parameters' hash."""
    if run_id is None:
        return new_run_folder(runs, TRAIN, "runs folder", digest)
    try:
        (runs / run_id).mkdir(parents=True)
    except FileExistsError:
        raise BadInput(
            f"{runs / run_id}: already exists; choose another --run-id, or --resume "
            "it") from None
    return runs / run_id
