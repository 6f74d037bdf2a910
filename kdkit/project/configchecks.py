"""`kdkit validate`'s rules for the project's configs beyond the pilot's: machine-bound paths in any
JSON config, kdkit.json's "acceptance" (as `kdkit diagnose --accept` judges it), and campaign.json,
config/train.json and config/service.json, each checked by its own model (kdkit.config.campaign,
kdkit.core.trainconfig, kdkit.core.serviceconfig): the ones `kdkit campaign`, `kdkit train` and
`kdkit serve-test` refuse to start on."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.config.schemas import config_problem, json_path, secret_problems, walk_document
from kdkit.core.errors import BadInput
from kdkit.core.finding import Finding
from kdkit.project.pilotchecks import MACHINE_PATHS

if TYPE_CHECKING:
    from collections.abc import Mapping


def machine_path_problems(data: Any, file: Path) -> list[Finding]:
    problems = []
    for parts, _key, value in walk_document(data):
        if not isinstance(value, str) or "://" in value:
            continue
        for pattern, what in MACHINE_PATHS:
            if pattern.search(value):
                problems.append(config_problem(file,
                                               json_path(parts),
                                               f"{value!r} is {what}, which exists on one "
                                               "machine only; use a path relative to the project "
                                               "root"))
                break
    return problems


def acceptance_problems(project: Mapping[str, Any]) -> list[Finding]:
    """kdkit.json's "acceptance" judged as `kdkit diagnose --accept` judges it before its load:
    rules kdkit ships, values of their kind, a source without a credential
    (kdkit.probe.diagnose.points)."""
    if "acceptance" not in project:
        return []
    from kdkit.probe.diagnose.points import check_overrides

    try:
        check_overrides(project["acceptance"], "$.acceptance")
    except BadInput as exc:
        where, _sep, message = str(exc).partition(": ")
        return [config_problem(Path("kdkit.json"), where, message)]
    return []


def _loader_problems(root: Path, rel: Path, load: Callable[[Path], object]) -> list[Finding]:
    """``load`` (the config's own model) on ``rel``: its message, one problem at the JSON path or
    line it names."""
    try:
        load(root / rel)
    except BadInput as exc:
        said = str(exc).removeprefix(f"{root / rel}").removeprefix(f"{rel}")
        placed = re.match(r":(\d+):(\d+): (.*)", said)  # the strict reader's line and column
        where, _sep, message = said.removeprefix(": ").partition(": ")
        return [config_problem(rel, f"line {placed[1]} column {placed[2]}", placed[3]) if placed
                else
                config_problem(rel, where, message) if where.startswith("$")
                else config_problem(rel, "$", str(exc))]
    return []


def campaign_train_problems(root: Path) -> list[Finding]:
    """campaign.json (kdkit.config.campaign: its schema, then its rules), config/train.json (the
    train model, kdkit.core.trainconfig) and config/service.json (kdkit.core.serviceconfig), each
    when the project has one."""
    from kdkit.config.campaign import CAMPAIGN, read_problems
    from kdkit.core.serviceconfig import SERVICE_CONFIG, load_service
    from kdkit.core.trainconfig import load_train_config

    problems: list[Finding] = []
    rel = Path(CAMPAIGN)
    if (root / rel).exists() or (root / rel).is_symlink():
        data, problems = read_problems(root, rel)
        if data is not None:
            problems += machine_path_problems(data, rel) + secret_problems(data, rel)
    for config, load in ((Path("config/train.json"), load_train_config),
                         (Path(SERVICE_CONFIG), load_service)):
        if (root / config).exists():
            problems += _loader_problems(root, config, load)
    return problems
