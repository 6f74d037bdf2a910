"""Project commands: init, validate."""

from __future__ import annotations

import shlex
from pathlib import Path

import click

from kdkit.cli._options import force_option, json_option, project_argument
from kdkit.cli._output import emit_json, printable, say
from kdkit.core.builds import BACKENDS
from kdkit.core.errors import BadInput


@click.command("init")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--name", help="Project name (default: the folder's name, lowercased).")
@click.option("--backend", type=click.Choice(BACKENDS), default="cuda", show_default=True,
              help="Default backend written to kdkit.json.")
@click.option("--template", default="classify", show_default=True, metavar="NAME",
              help="The example app: classify, embed or generate (described above).")
@force_option("Write into an existing non-empty folder (template files are replaced).")
def init(path: Path, name: str | None, backend: str, template: str, force: bool) -> None:
    """Create a project folder that survives a change of machine.

    \b
    It holds kdkit.json, config/pilot.json (no secrets), requirements/base.in,
    pilot inputs with their manifest (one must be rejected), an example
    PyTorch app in src/ (seeded, trained on the CPU at first use, no
    download), runs/ and .env.example. It is built as .PATH.partial-PID
    beside PATH and renamed when complete; what a killed init left there is
    removed by the next one.

    \b
    --template chooses the app:
      classify  documents into 4 categories (output kind category; 12
                documents, quality: accuracy against the labels)
      embed     texts into 32 floats each (output kind vector; quality:
                cosine against the manifest's reference vectors)
      generate  a text's continuation, character by character (output
                kind text; params max_new_tokens, temperature, seed;
                quality: greedy outputs match the manifest's exactly)
    """
    from kdkit.core.stalestaging import describe_removed
    from kdkit.project.gitstate import init_line
    from kdkit.project.init import create_project

    created = create_project(path, name=name, backend=backend, force=force, template=template)
    for line in describe_removed(created.removed):
        say(line, err=True)
    root = created.root
    say(f"Created {root}")
    # a line to paste: the path one word, whatever it holds, and never an option ("-P")
    given = str(path)
    shown = shlex.quote(given if not given.startswith("-") else f"./{given}")
    git = init_line(root, shown)
    if git:
        say(git)
    say(f"Next: kdkit validate {shown} && kdkit lock {shown} --backend {backend}")


@click.command("validate")
@project_argument
@json_option
def validate(project_dir: Path | None, as_json: bool) -> None:
    """Check every config against its schema, plus portability rules.

    Validates kdkit.json, the pilot config, the manifest, campaign.json and
    config/train.json when present; then refuses
    machine-bound paths (absolute, home, /tmp), paths outside the project,
    secrets in config, requirements inputs and locks (shown redacted), unsafe or
    duplicate IDs, and stale locks. Every problem is listed. Files named like
    secrets (.env, *.pem, .ssh/ ...) are warnings: bundles leave them out; so are
    names a copy through macOS or Windows loses (case, NFC/NFD, CON, a final dot).
    A valid project outside git, or with uncommitted changes, is warned about
    too (a run records the code revision it ran; --json always lists it).
    Exit 0 when valid (warnings or not), 2 otherwise.
    """
    from kdkit.config.schemas import problem_line
    from kdkit.core.finding import finding_json
    from kdkit.core.projectfiles import project_root
    from kdkit.project.gitstate import git_warnings
    from kdkit.project.validate import check_project

    root = project_root(project_dir)
    problems, warnings = check_project(root)
    warnings += git_warnings(root)
    if as_json:
        emit_json({"project": str(root), "valid": not problems,
                   "problems": [finding_json(p) for p in problems],
                   "warnings": [finding_json(w) for w in warnings]})
    else:
        for problem in problems:  # one line each, whatever a file's name holds
            say(printable(problem_line(problem, root)), err=True)
        # problems first; --json has it
        shown = [w for w in warnings if not problems or w.name != "git"]
        for warning in shown:
            say(printable(f"Warning: {problem_line(warning, root)}"), err=True)
        if not problems:
            say(f"{root}: valid" + (f" ({len(shown)} warning(s))" if shown else ""))
    if problems:
        raise BadInput(
            f"{root}: {len(problems)} problem(s) found; fix them and run `kdkit validate` again")
