"""Whether a project's code revision can be recorded: a run's params.json names the git revision of
the code it ran (kdkit.core.git.code_state; in a container, the one `kdkit run` passes), so a
project outside git, or with uncommitted changes, runs code no revision names. `init` says how to
start a repository, `validate` warns."""

from __future__ import annotations

from pathlib import Path

from kdkit.config.schemas import config_warning
from kdkit.core.finding import Finding
from kdkit.core.git import checkout_state

SHOWN = 3  # uncommitted paths named before "+N more"
NOT_GIT = "not a git checkout (or no git here), so a run records no code revision"
START = "git init -q && git add -A && git commit -qm 'kdkit init'"  # run in the project


def git_commands(shown: str) -> str:
    """The commands that put the project at ``shown`` (already quoted for a shell) under git, from
    here."""
    return f"cd {shown} && {START}"


def git_warnings(root: Path) -> list[Finding]:
    """A warning when ``root`` is not in a git checkout, or has uncommitted changes; none
    otherwise."""
    state = checkout_state(root)
    if state is None:
        return [config_warning(Path("."), "git", f"{NOT_GIT}; start one there: `{START}`")]
    changed = state["uncommitted"]
    if not changed:
        return []
    more = f" (+{len(changed) - SHOWN} more)" if len(changed) > SHOWN else ""
    return [config_warning(Path("."),
                           "git",
                           f"{len(changed)} uncommitted change(s) ({', '.join(changed[:SHOWN])}"
                           f"{more}): a run records its revision as dirty; commit them first")]


def init_line(root: Path, shown: str) -> str | None:
    """What `init` says when the new project is not in a git checkout: how to start one."""
    if checkout_state(root) is not None:
        return None
    return (
        "Not under git: a run records no code revision until it is; start it with: "
        f"{git_commands(shown)}")
