"""config/train.json: what ``kdkit train`` runs, the stop rules declared before the run, the save
policy and the adapter's base model (schemas/train.schema.json describes the same file). Every key
is optional; no file means the defaults. A bad file is BadInput (exit 2), one line naming the file,
the JSON path and what to do.

    {"module": "src.train", "log_every": 1,
     "stop": {"nonfinite_loss": true, "loss_above": {"value": 10.0, "after_steps": 50},
              "eval_below": {"metric": "accuracy", "value": 0.5},
              "max_checkpoint_gap_minutes": 30, "max_seconds": 86400},
     "max_lost_minutes": 20, "max_save_share": 0.1,
     "base_model": {"name": "org/model", "revision": "<40-hex commit>"}}

Standard library only (the in-container side reads it).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kdkit.core.configreader import ConfigReader
from kdkit.core.jsonio import load_json
from kdkit.core.projectfiles import DOTTED

TRAIN_CONFIG = "config/train.json"
DEFAULT_MODULE = "src.train"
COMMIT = re.compile(r"[0-9a-f]{40}")
_TOP = {"module", "log_every", "stop", "max_lost_minutes", "max_save_share",
        "base_model", "$schema", "description"}
_STOP = {"nonfinite_loss", "loss_above", "eval_below", "max_checkpoint_gap_minutes", "max_seconds"}


@dataclass(frozen=True)
class StopRules:
    nonfinite_loss: bool = True
    loss_above: tuple[float, int] | None = None  # (value, after_steps)
    eval_below: tuple[str, float] | None = None  # (metric, value)
    max_checkpoint_gap_minutes: float | None = None
    max_seconds: float | None = None


@dataclass(frozen=True)
class TrainConfig:
    module: str | None = None  # None: kdkit.json's "train", else src.train
    log_every: int = 1
    stop: StopRules = field(default_factory=StopRules)
    max_lost_minutes: float | None = None
    max_save_share: float = 0.1
    base_model: tuple[str, str] | None = None  # (name, revision)
    source: str | None = None  # the file read, as given; None when there was none
    raw: dict[str, Any] = field(default_factory=dict)


def _stop(reader: ConfigReader, data: Any) -> StopRules:
    if data is None:
        return StopRules()
    stop = reader.keys(data, "$.stop", _STOP)
    nonfinite = stop.get("nonfinite_loss", True)
    if not isinstance(nonfinite, bool):
        raise reader.bad("$.stop.nonfinite_loss", "must be true or false")
    loss_above = None
    if stop.get("loss_above") is not None:
        rule = reader.keys(stop["loss_above"], "$.stop.loss_above", {"value", "after_steps"})
        value = reader.number(rule, "value", "$.stop.loss_above", minimum=-math.inf)
        if value is None:
            raise reader.bad("$.stop.loss_above.value", "is required: the loss bound")
        loss_above = (float(value),
                      int(reader.number(rule, "after_steps", "$.stop.loss_above", whole=True) or 0))
    eval_below = None
    if stop.get("eval_below") is not None:
        rule = reader.keys(stop["eval_below"], "$.stop.eval_below", {"metric", "value"})
        threshold = reader.number(rule, "value", "$.stop.eval_below", minimum=-math.inf)
        if threshold is None:
            raise reader.bad("$.stop.eval_below.value", "is required: the threshold")
        eval_below = (reader.text(rule, "metric", "$.stop.eval_below"), float(threshold))
    return StopRules(nonfinite, loss_above, eval_below,
                     reader.number(stop, "max_checkpoint_gap_minutes", "$.stop", above=True),
                     reader.number(stop, "max_seconds", "$.stop", above=True))


def _base_model(reader: ConfigReader, data: Any) -> tuple[str, str] | None:
    if data is None:
        return None
    model = reader.keys(data, "$.base_model", {"name", "revision"})
    return reader.text(model, "name", "$.base_model"), reader.text(
        model, "revision", "$.base_model")


def load_train_config(path: Path) -> TrainConfig:
    """config/train.json read and checked; the defaults when there is no file; BadInput on a bad
    one."""
    if not path.exists():
        return TrainConfig()
    reader = ConfigReader(path)
    data = reader.keys(load_json(path, what="training config"), "$", _TOP)
    module = data.get("module")
    if module is not None \
            and (not isinstance(module, str) or not DOTTED.fullmatch(module) or len(module) > 200):
        raise reader.bad("$.module", "must be a dotted module name such as src.train")
    log_every = reader.number(data, "log_every", "$", minimum=1, whole=True)
    share = reader.number(data, "max_save_share", "$", above=True)
    if share is not None and share > 1:
        raise reader.bad("$.max_save_share",
                         "must be a share between 0 and 1 (0.1 = a tenth of the time)")
    return TrainConfig(module=module, log_every=int(log_every or 1),
                       stop=_stop(reader, data.get("stop")),
                       max_lost_minutes=reader.number(data, "max_lost_minutes", "$", above=True),
                       max_save_share=0.1 if share is None else float(share),
                       base_model=_base_model(reader, data.get("base_model")), source=str(path),
                       raw=dict(data))


def base_model_problem(cfg: TrainConfig) -> str | None:
    """A warning when the declared base model's revision is not an exact commit (40 lowercase hex),
    else None."""
    if cfg.base_model is None:
        return None
    name, revision = cfg.base_model
    if COMMIT.fullmatch(revision):
        return None
    return (f"{cfg.source or TRAIN_CONFIG}: $.base_model.revision: {revision[:60]!r} is not an "
            f"exact commit (40 hex characters); a branch or tag of {name[:80]!r} can move: pin the "
            "commit the adapter was trained on")
