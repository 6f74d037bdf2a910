"""A run ID given on a command line is checked by the option's parser (kdkit.core.runid.run_id_type)
and travels inward as a RunId: every in-container option that names a run, its one rule, its one
line and exit 2 for a bad ID, before any file is read."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import pytest

from kdkit.core.errors import BadInput
from kdkit.core.runid import RunId, run_id_type
from kdkit.probe.entry import main as probe_main
from kdkit.probe.pilot import gather
from kdkit.probe.pilot.options import build_parser as pilot_parser
from kdkit.probe.train.command import build_parser as train_parser

# (the command, its parser, the option, whether it names a new run)
OPTIONS: list[tuple[str, Callable[[], argparse.ArgumentParser], str, bool]] = [
    ("pilot", pilot_parser, "--run-id", True),
    ("pilot", pilot_parser, "--resume", False),
    ("train", train_parser, "--run-id", True),
    ("train", train_parser, "--resume", False),
    ("train", train_parser, "--verify-reload", False),
    ("gather", gather.build_parser, "--run-id", False),
]
IDS = [f"{command} {option}" for command, _, option, _ in OPTIONS]
BAD = ["../elsewhere", "", "-starts-with-a-dash", "a/b", "x" * 129, "tab\there"]


@pytest.mark.parametrize(("command", "parser", "option", "new"), OPTIONS, ids=IDS)
def test_the_parser_hands_on_a_run_id(command: str, parser: Callable[[], argparse.ArgumentParser],
                                      option: str,
                                      new: bool) -> None:
    value = vars(
        parser().parse_args([f"{option}=20260101T120000Z-1a2b3c4d"]))[option[2:].replace("-", "_")]
    assert type(value) is RunId and value == "20260101T120000Z-1a2b3c4d"


@pytest.mark.parametrize(("command", "parser", "option", "new"), OPTIONS, ids=IDS)
@pytest.mark.parametrize("bad", BAD, ids=range(len(BAD)))
def test_the_parser_refuses_a_bad_run_id_naming_its_option(command: str,
                                                           parser: Callable[[],
                                                                            argparse.ArgumentParser],
                                                           option: str,
                                                           new: bool, bad: str) -> None:
    with pytest.raises(BadInput, match=f"^{option} .*: not a valid run ID; use letters"):
        parser().parse_args([f"{option}={bad}"])


@pytest.mark.parametrize(("command", "parser", "option", "new"), OPTIONS, ids=IDS)
def test_only_a_new_run_refuses_a_worker_folder_s_name(command: str,
                                                       parser: Callable[[],
                                                                        argparse.ArgumentParser],
                                                       option: str, new: bool) -> None:
    argv = [f"{option}=r1-w0of2"]
    if new:
        with pytest.raises(BadInput, match="ends like a worker's folder"):
            parser().parse_args(argv)
    else:
        assert vars(parser().parse_args(argv))[option[2:].replace("-", "_")] == "r1-w0of2"


@pytest.mark.parametrize(("command", "parser", "option", "new"), OPTIONS, ids=IDS)
def test_a_bad_run_id_is_one_line_and_exit_2_before_any_file_is_read(
        command: str, parser: Callable[[], argparse.ArgumentParser], option: str, new: bool,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # no project here: a file read first would fail with another message
    monkeypatch.chdir(tmp_path)
    assert probe_main([command, option, "../x\x1b[31m"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"Error: {option} '../x\\x1b[31m': not a valid run ID; use letters, digits, '.', '_' and '-' " \
                  "(first a letter or digit), at most 128\n"
    assert list(tmp_path.iterdir()) == []


def test_the_type_names_itself_in_argparse_s_words() -> None:
    assert run_id_type("--run-id").__name__ == "run ID"


@pytest.mark.parametrize("argv",
                         [["status", "../x"], ["wait", "../x"], ["logs", "../x"],
                          ["run", "--resume", "../x"]],
                         ids=["status", "wait", "logs", "run --resume"])
def test_the_host_s_commands_type_their_run_id_too(argv: list[str], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Before the project is looked for or the engine asked: the same rule and line as in the container."""
    from tests.conftest import invoke

    monkeypatch.chdir(tmp_path)
    result = invoke(*argv)
    label = "--resume" if "--resume" in argv else "RUN_ID"
    assert result.exit_code == 2
    assert result.output.splitlines()[-1] == f"Error: {label} '../x': not a valid run ID; use letters, digits, '.', " \
                                             "'_' and '-' (first a letter or digit), at most 128"
