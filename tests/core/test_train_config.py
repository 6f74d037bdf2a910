"""config/train.json (kdkit.core.trainconfig): defaults, every key read, bad input one line naming file and path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kdkit.core.errors import BadInput
from kdkit.core.trainconfig import TrainConfig, base_model_problem, load_train_config


def write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "train.json"
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def test_no_file_is_the_defaults(tmp_path: Path) -> None:
    assert load_train_config(tmp_path / "none.json") == TrainConfig()


def test_every_key_is_read(tmp_path: Path) -> None:
    cfg = load_train_config(write(tmp_path, {
        "module": "src.train", "log_every": 2, "max_lost_minutes": 20, "max_save_share": 0.2,
        "stop": {"nonfinite_loss": False, "loss_above": {"value": 10.0, "after_steps": 50},
                 "eval_below": {"metric": "accuracy", "value": 0.5},
                 "max_checkpoint_gap_minutes": 30,
                 "max_seconds": 86400},
        "base_model": {"name": "org/m", "revision": "a" * 40}}))
    assert cfg.module == "src.train" and cfg.log_every == 2 and cfg.max_lost_minutes == 20
    assert cfg.stop.loss_above == (10.0, 50) and cfg.stop.eval_below == ("accuracy", 0.5)
    assert cfg.stop.nonfinite_loss is False and cfg.stop.max_seconds == 86400
    assert base_model_problem(cfg) is None


def test_a_moving_revision_is_a_warning(tmp_path: Path) -> None:
    cfg = load_train_config(write(tmp_path, {"base_model": {"name": "org/m", "revision": "main"}}))
    problem = base_model_problem(cfg)
    assert problem is not None and "$.base_model.revision" in problem and "exact commit" in problem


@pytest.mark.parametrize(("text", "where"), [
    ('{"stop": {"max_seconds": NaN}}', "not a finite number"),
    ('{"stop": {"loss_above": {"value": 1e999}}}', "not a finite number"),
    ('{"stop": {"max_seconds": "ten"}}', "$.stop.max_seconds"),
    ('{"stop": {"max_seconds": 0}}', "$.stop.max_seconds"),
    ('{"stpo": {}}', "$.stpo"),
    ('{"stop": {"eval_below": {"metric": "acc"}}}', "$.stop.eval_below.value"),
    ('{"max_save_share": 2}', "$.max_save_share"),
    ('{"log_every": 1.5}', "$.log_every"),
    ('{"module": "src/train.py"}', "$.module"),
    ('{"base_model": {"name": "m"}}', "$.base_model.revision"),
    ('[]', "$"),
])
def test_bad_input_names_file_and_path(tmp_path: Path, text: str, where: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(BadInput) as caught:
        load_train_config(path)
    message = str(caught.value)
    assert str(path) in message and where in message and "\n" not in message
