"""Options and arguments shared by several commands, defined once."""

from __future__ import annotations

from pathlib import Path

import click

json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON document on stdout instead of text."
)

project_argument = click.argument(
    "project_dir",
    required=False,
    type=click.Path(file_okay=False, path_type=Path),
)
"""PROJECT_DIR: defaults to the project root found upward from the current folder."""

backend_option = click.option(
    "--backend",
    type=click.Choice(["cuda", "rocm", "cpu"]),
    default=None,
    help="Backend to act on (default: default_backend in kdkit.json).",
)
