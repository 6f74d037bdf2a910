"""The one place kdkit starts subprocesses.

Standard library only. Errors become kdkit errors: a missing program is
``Unavailable``; a non-zero exit is returned to the caller, who decides.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kdkit.errors import Unavailable


@dataclass(frozen=True)
class Completed:
    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def first_error_line(self) -> str:
        """The most telling line of the output, for one-line messages."""
        lines = [ln.strip() for ln in (self.stderr + "\n" + self.stdout).splitlines() if ln.strip()]
        for line in lines:
            if "error" in line.lower():
                return line
        return lines[-1] if lines else f"exit status {self.returncode}"


def run(
    args: Sequence[str | os.PathLike[str]],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    extra_env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    input_text: str | None = None,
) -> Completed:
    """Run a program to completion, capturing its output as text."""
    argv = tuple(os.fspath(a) for a in args)
    full_env = dict(os.environ if env is None else env)
    if extra_env:
        full_env.update(extra_env)
    try:
        done = subprocess.run(
            argv,
            cwd=cwd,
            env=full_env,
            input=input_text,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError:
        raise Unavailable(f"{argv[0]}: program not found; install it or put it on PATH") from None
    except subprocess.TimeoutExpired:
        raise Unavailable(f"{shlex.join(argv)}: no answer after {timeout:.0f} s") from None
    return Completed(argv, done.returncode, done.stdout or "", done.stderr or "")
