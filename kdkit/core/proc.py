"""The one place kdkit starts subprocesses.

Standard library only. Errors become kdkit errors: a missing program is
``Unavailable``; a non-zero exit is returned to the caller, who decides. A program started here dies
with kdkit (:func:`dies_with_kdkit`), never left running as an orphan.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shlex
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kdkit.core.errors import CheckFailed, Unavailable

# The proxy variables a build, a lock or a container inherits from the user's shell (pip, curl and
# apt read both spellings).
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")


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


# linux/prctl.h; prctl(2): "the signal the calling process will get when its parent dies"
PR_SET_PDEATHSIG = 1


@functools.cache
def _prctl() -> Callable[..., int] | None:
    """libc's prctl, looked up once in kdkit's own process (never in a forked child); None off
    Linux."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        function: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return function


def dies_with_kdkit() -> Callable[[], None] | None:
    """A ``preexec_fn`` after which the program gets SIGKILL when kdkit ends, however it ends
    (SIGKILL included): Linux's PR_SET_PDEATHSIG, which fires when the thread that started it ends;
    each helper here waits for its program in that thread, so it fires only when kdkit is gone. A
    resolver (pip-compile, uv), a compressor or a download never outlives the kdkit that started it.
    A parent that died before the request took effect is seen in the child (its parent changed) and
    it ends at once. None where there is no prctl (not Linux)."""
    prctl, parent = _prctl(), os.getpid()
    if prctl is None:
        return None

    def tie() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return tie


@contextlib.contextmanager
def _starting(argv: tuple[str, ...]) -> Iterator[None]:
    """Starting ``argv``: a program that is missing or cannot be run becomes Unavailable, naming
    it."""
    try:
        yield
    except FileNotFoundError:
        raise Unavailable(f"{argv[0]}: program not found; install it or put it on PATH") from None
    except OSError as exc:  # not executable, a wrong binary format, a folder
        raise Unavailable(
            f"{argv[0]}: cannot be run ({exc.strerror or exc}); install a working one") from None


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
        with _starting(argv):
            done = subprocess.run(argv, cwd=cwd, env=full_env, input=input_text,
                                  capture_output=True, text=True,
                                  timeout=timeout, check=False, preexec_fn=dies_with_kdkit())
    except subprocess.TimeoutExpired:
        raise Unavailable(f"{shlex.join(argv)}: no answer after {timeout:.0f} s") from None
    return Completed(argv, done.returncode, done.stdout or "", done.stderr or "")


# ---------------------------------------------------------------- byte streams (kdkit bundle /
# load)


def pipe_to_file(args: Sequence[str | os.PathLike[str]],
                 chunks: Iterable[bytes], out: Path) -> Completed:
    """Feed ``chunks`` to a program's stdin and write its stdout to ``out`` (a compressor).

    Nothing is held in memory: an image archive of many GB streams through. stderr goes to a
    temporary file, never a pipe, so a chatty program cannot block on a full pipe.
    """
    argv = tuple(os.fspath(a) for a in args)
    with out.open("wb") as sink, tempfile.TemporaryFile() as errors:
        with _starting(argv):
            child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=sink, stderr=errors,
                                     preexec_fn=dies_with_kdkit())
        assert child.stdin is not None
        try:
            for chunk in chunks:
                child.stdin.write(chunk)
        except BrokenPipeError:
            pass  # the program stopped reading: its exit status and stderr say why
        finally:
            with contextlib.suppress(BrokenPipeError):
                child.stdin.close()
            returncode = child.wait()
        errors.seek(0)
        return Completed(argv, returncode, "", errors.read().decode("utf-8", errors="replace"))


def stdout_chunks(args: Sequence[str | os.PathLike[str]],
                  chunk_size: int = 1 << 20) -> Iterator[bytes]:
    """A program's stdout as chunks (a decompressor); CheckFailed naming its error if it fails."""
    argv = tuple(os.fspath(a) for a in args)
    with tempfile.TemporaryFile() as errors:
        with _starting(argv):
            child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=errors,
                                     preexec_fn=dies_with_kdkit())
        assert child.stdout is not None
        try:
            while chunk := child.stdout.read(chunk_size):
                yield chunk
        finally:
            child.stdout.close()
            returncode = child.wait()
        if returncode != 0:
            errors.seek(0)
            done = Completed(argv, returncode, "", errors.read().decode("utf-8", errors="replace"))
            raise CheckFailed(f"{shlex.join(argv)}: {done.first_error_line()}")
