"""Reading a text file kdkit was given (a config, a lock), with one clear line for each way it can
fail.

Standard library only, and nothing but ``os`` and ``stat`` (loaded with the interpreter): the lock
reader of every in-container ``verify-env`` starts here (bench/bench_verify_env.py).
"""

from __future__ import annotations

import os
import stat

from kdkit.core.errors import BadInput

TYPE_CHECKING = False  # typing is not imported at start-up (kdkit.core.commands says why)
if TYPE_CHECKING:
    from os import PathLike


def read_text_file(path: str | PathLike[str], what: str, *, limit: int | None = None) -> str:
    """A text file kdkit reads (a config, a lock): BadInput when it is missing, a folder, not a
    regular file (a FIFO would block, /dev/zero never end), larger than ``limit`` bytes or not
    UTF-8."""
    try:
        info = os.stat(path)
        if stat.S_ISDIR(info.st_mode):
            raise BadInput(f"{path}: {what} is a folder, not a file; give the file")
        if not stat.S_ISREG(info.st_mode):
            raise BadInput(
                f"{path}: {what} is not a regular file (a FIFO, socket or device?); give the file")
        if limit is not None and info.st_size > limit:
            raise BadInput(f"{path}: {info.st_size} bytes, too large to be a {what} (at most "
                           f"{limit}); give the {what}")
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        raise BadInput(f"{path}: {what} not found; create it or pass the right path") from None
    except UnicodeDecodeError as exc:
        raise BadInput(
            f"{path}: {what} is not UTF-8 (byte at offset {exc.start}); save it as UTF-8") from None
    except OSError as exc:
        raise BadInput(
            f"{path}: cannot read {what} ({exc.strerror or exc}); check the file") from None
