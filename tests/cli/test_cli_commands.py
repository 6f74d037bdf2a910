"""The one command table (kdkit.core.commands.COMMANDS) drives the click group, its help sections, the
in-container entry point and the zipapp: each command is reachable wherever the table says it runs,
and nowhere else."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

from kdkit.cli import cli
from kdkit.core.commands import COMMANDS, CONTAINER, HOST, SECTIONS, ZIPAPP, runs_in
from kdkit.probe.entry import main
from tests.conftest import REPO, invoke, tree_snapshot


@pytest.mark.parametrize("name", runs_in(HOST))
def test_every_host_command_answers_help(name: str) -> None:
    result = invoke(name, "--help")
    assert result.exit_code == 0, result.output
    assert result.output.startswith(
        ("Usage: ", "usage: ")) and f" {name} " in result.output.splitlines()[0]


@pytest.mark.parametrize("name", runs_in(CONTAINER))
def test_every_container_command_answers_help_without_click(name: str) -> None:
    done = subprocess.run([sys.executable, "-m", "kdkit.probe", name, "--help"],
                          capture_output=True, text=True,
                          cwd=REPO, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: kdkit {name} ")


def _listed(out: str) -> list[str]:
    return [line.split()[0] for line in out.splitlines()[3:]]


@pytest.mark.parametrize("where", [CONTAINER, ZIPAPP])
def test_the_entry_points_without_click_list_only_their_commands(where: str,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"], where=where) == 0
    assert _listed(capsys.readouterr().out) == runs_in(where)
    host_only = next(name for name in COMMANDS if name not in runs_in(where))
    assert main([host_only], where=where) == 2  # not run there: usage, exit 2
    assert capsys.readouterr().err.startswith("usage: ")


def test_python_m_kdkit_probe_lists_the_container_commands() -> None:
    done = subprocess.run([sys.executable, "-m", "kdkit.probe", "--help"], capture_output=True,
                          text=True, cwd=REPO,
                          check=False, timeout=120)
    assert done.returncode == 0 and _listed(done.stdout) == runs_in(CONTAINER)


def test_the_help_sections_show_every_host_command_exactly_once() -> None:
    out = invoke("--help").output
    headings = [line[:-1] for line in out.splitlines() if line.endswith(":")
                and not line.startswith(" ")]
    assert headings[headings.index("Options") + 1:] == [s for s in SECTIONS if any(
        COMMANDS[n][1] == s for n in runs_in(HOST))]
    rows = re.findall(r"^  ([a-z][a-z-]*)  ", out, flags=re.MULTILINE)
    assert sorted(rows) == sorted(runs_in(HOST))  # each once, nothing else
    for name in runs_in(HOST):
        section = COMMANDS[name][1]
        assert out.index(f"\n{section}:\n") < out.index(f"\n  {name}  ")


def test_the_group_lists_and_loads_what_the_table_says() -> None:
    with click.Context(cli) as ctx:
        assert cli.list_commands(ctx) == sorted(runs_in(HOST))
        for name, (module, _section, summary, where) in COMMANDS.items():
            command = cli.get_command(ctx, name)
            assert (command is not None) == (HOST in where), name
            if CONTAINER in where:
                assert module.startswith(
                    "kdkit.probe.") and command is not None and command.short_help == summary
            else:
                assert module.startswith("kdkit.cli.") and command is not None
                assert command.callback is not None and command.callback.__module__ == module


def test_kdkit_help_imports_no_command_module() -> None:
    code = ("import sys\nfrom kdkit.cli import cli\ntry:\n    cli.main(['--help'], "
            "standalone_mode=False)\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith(('kdkit.cli.', "
            "'kdkit.probe'))))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, check=False)
    loaded = done.stdout.strip().splitlines()[-1]
    # machine holds the forwarder
    modules = {entry[0] for entry in COMMANDS.values()} - {"kdkit.cli.machine"}
    assert not [m for m in modules if repr(m) in loaded], loaded


@pytest.mark.parametrize("option", ["--ca-bundle", "--force"])
def test_a_shared_option_is_one_definition(option: str) -> None:
    with click.Context(cli) as ctx:
        found = [(name, param) for name in cli.list_commands(ctx)
                 if (command := cli.get_command(ctx, name))
                 for param in command.params if option in param.opts]
    assert len(found) >= 2
    shapes = {repr((p.type.to_info_dict(), p.metavar, getattr(p, "is_flag", None)))
              for _n, p in found}
    assert len(shapes) == 1, shapes


@pytest.mark.parametrize(("typed", "meant"),
                         [("sweeep", "sweep"), ("valdate", "validate"), ("bundel", "bundle")])
def test_a_mistyped_command_is_answered_with_the_one_meant(typed: str, meant: str) -> None:
    """In a fresh process, where the lazy group has loaded no command yet."""
    done = subprocess.run([sys.executable, "-m", "kdkit", typed], capture_output=True, text=True,
                          cwd=REPO,
                          check=False, timeout=120)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == f"Error: No such command {typed!r}. Did you mean {meant!r}?"


@pytest.mark.parametrize("name", runs_in(CONTAINER))
def test_no_in_container_option_may_be_abbreviated(name: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """click refuses `--batch` for `--batch-sizes` on the host; the argparse commands refuse it as well."""
    from kdkit.core.commands import COMMANDS

    module = __import__(COMMANDS[name][0], fromlist=["build_parser"])
    parser = module.build_parser()
    long = next(flag for action in parser._actions for flag in action.option_strings
                if flag.startswith("--") and len(flag) > 5 and flag != "--help"
                and not action.required)
    needed = [word for action in parser._actions if action.required
              for word in ([action.option_strings[0], "x"] if action.option_strings else ["x"])]
    with pytest.raises(SystemExit) as stopped:
        parser.parse_args([*needed, long[:4]])
    assert stopped.value.code == 2
    assert f"unrecognized arguments: {long[:4]}" in capsys.readouterr().err


def test_a_file_given_as_project_dir_is_named_as_a_file(tmp_path: Path) -> None:
    given = tmp_path / "notes.txt"
    given.write_text("not a project\n", encoding="utf-8")
    before = tree_snapshot(tmp_path)
    for command in ("sweep", "resume-test", "pilot"):
        result = invoke(command, given)
        assert result.exit_code == 2
        assert result.stderr == f"Error: PROJECT_DIR {given}: is a file; give the project's folder\n"
    assert tree_snapshot(tmp_path) == before
