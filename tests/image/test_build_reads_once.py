"""`kdkit build` reads each input of its context once: the lock whose sha256 the image's label names is the
lock the image holds, whatever happens to the file while the build runs.

The file is replaced at exact moments, never by a clock: an audit hook (``sys.addaudithook``, the ``open``
event) sees kdkit open the lock, and replaces the file at the k-th file kdkit opens after that (before that
open proceeds), for several k. Before, the lock was opened six times (freshness, parse, hash, torch's labels,
credentials, the context) and a replacement between the hash and the context gave an image labelled with
another lock than the one inside it.
"""

from __future__ import annotations

import hashlib
import io
import os
import sys
import tarfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from kdkit.image.build import context_entries, plan_build
from kdkit.image.buildrun import build_image
from kdkit.image.context import write_context
from kdkit.image.labels import LABEL
from tests.conftest import BASE

LOCK = Path("requirements") / "cpu.txt"


class Watch:
    """What the hook does while a test watches a path: count its opens, and replace it at one moment."""

    def __init__(self) -> None:
        self.path: str | None = None
        self.opens: list[str] = []
        self.replacement: Path | None = None
        # replace at the after-th open of any file once the watched path was first opened
        self.after = 0
        self.seen = -1  # opens since the watched path's first open (-1: not opened yet)
        self.replaced_at: str | None = None
        self.busy = False


WATCH = Watch()


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event != "open" or WATCH.path is None or WATCH.busy \
            or not isinstance(args[0], (str, bytes, os.PathLike)):
        return
    opened = os.fsdecode(args[0])
    if opened == WATCH.path:
        WATCH.opens.append(opened)
    if WATCH.seen >= 0:
        WATCH.seen += 1
        if WATCH.replacement is not None and WATCH.replaced_at is None \
                and WATCH.seen >= WATCH.after:
            WATCH.busy = True
            try:
                # the whole file at once, as an editor or a git checkout
                os.replace(WATCH.replacement, WATCH.path)
            finally:
                WATCH.busy = False
            WATCH.replaced_at = opened
    elif opened == WATCH.path:
        WATCH.seen = 0


sys.addaudithook(_hook)


@contextmanager
def watching(lock: Path, replace_after: int | None = None) -> Iterator[Watch]:
    """Count the opens of ``lock``; with ``replace_after``, replace it by another valid lock at that moment."""
    replacement = None
    if replace_after is not None:
        replacement = lock.with_name(".replacement.txt")
        replacement.write_bytes(lock.read_bytes() + b"# replaced while kdkit build ran\n")
    WATCH.__init__()  # type: ignore[misc]
    WATCH.replacement, WATCH.after = replacement, replace_after or 0
    WATCH.path = str(lock)
    try:
        yield WATCH
    finally:
        WATCH.path = None


def carried_lock(context: bytes, rel: str) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(context)) as tar:
        handle = tar.extractfile(f"lock/{rel}")
        assert handle is not None
        return handle.read()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------- the context, without an engine


def test_a_build_opens_its_lock_once(locked_copy: Path, wheelhouse: Path,
                                     ca_bundle: tuple[Path, bytes]) -> None:
    lock = locked_copy / LOCK
    for options in ({}, {"wheelhouse": wheelhouse},
                    {"wheelhouse": wheelhouse, "ca_bundle": ca_bundle[0]}):
        with watching(lock) as watch:
            plan = plan_build(locked_copy, "cpu", **options)
            context = io.BytesIO()
            write_context(context_entries(plan), context)
        # read once: checked, parsed, hashed and sent from those bytes
        assert watch.opens == [str(lock)], options
        assert sha256(
            carried_lock(context.getvalue(), LOCK.as_posix())) == plan.labels[f"{LABEL}lock.sha256"]


def test_a_build_parses_its_lock_once(locked_copy: Path, wheelhouse: Path,
                                      lock_parses: list[str]) -> None:
    """Issue 30: the lock is parsed once per build (plan, context, labels, preflight): each Lock made from the
    lock's path is counted, whatever module made it (the split parts' own check names another path)."""
    for options in ({}, {"wheelhouse": wheelhouse}):
        lock_parses.clear()
        plan = plan_build(locked_copy, "cpu", **options)
        write_context(context_entries(plan), io.BytesIO())
        assert lock_parses.count(os.path.realpath(locked_copy / LOCK)) == 1, (options, lock_parses)


@pytest.mark.parametrize("after", [1, 2, 3, 5, 8, 13, 21, 34])
def test_a_lock_replaced_during_the_build_is_not_what_the_label_names(
    locked_copy: Path, after: int) -> None:
    lock = locked_copy / LOCK
    original = lock.read_bytes()
    with watching(lock, replace_after=after) as watch:
        plan = plan_build(locked_copy, "cpu")
        context = io.BytesIO()
        write_context(context_entries(plan), context)
    assert watch.replaced_at is not None, "the build opened fewer files than the moment chosen"
    assert lock.read_bytes() != original  # the file did change under the build
    carried = carried_lock(context.getvalue(), LOCK.as_posix())
    assert carried == original  # what kdkit read first, checked fresh, is what the image gets
    assert plan.labels[f"{LABEL}lock.sha256"] == plan.lock_sha256 == sha256(carried)
    assert plan.tag.endswith(sha256(carried)[:12])


def test_a_project_file_replaced_after_its_check_is_not_sent(locked_copy: Path) -> None:
    """The project's files travel as the bytes whose credentials were checked: a key written into a source file
    after that check does not reach the image."""
    source = locked_copy / "src" / "classify.py"
    checked = source.read_bytes()
    plan = plan_build(locked_copy, "cpu")
    source.write_bytes(checked + b'TOKEN = "ghp_' + b"A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
                       + b'"\n')
    context = io.BytesIO()
    write_context(context_entries(plan), context)
    with tarfile.open(fileobj=io.BytesIO(context.getvalue())) as tar:
        handle = tar.extractfile("project/src/classify.py")
        assert handle is not None and handle.read() == checked


# ---------------------------------------------------------------- the image, through the engine


def test_the_image_holds_the_lock_its_label_names(built: dict[str, Any], locked_copy: Path,
                                                  wheelhouse: Path,
                                                  ca_bundle: tuple[Path, bytes]) -> None:
    from kdkit.docker_adapter import connect

    lock = locked_copy / LOCK
    original = lock.read_bytes()
    tag = f"kdkit-test/reads-once-{uuid.uuid4().hex[:12]}:cpu"
    engine = connect()
    try:
        with watching(lock, replace_after=1) as watch:
            plan = plan_build(locked_copy, "cpu", base_image=BASE, tag=tag, wheelhouse=wheelhouse,
                              ca_bundle=ca_bundle[0])
            result = build_image(plan)
        assert watch.replaced_at is not None and watch.opens == [str(lock)]
        inside = engine.read_file(tag, f"/app/{LOCK.as_posix()}")
        assert inside == original != lock.read_bytes()
        assert result.labels[f"{LABEL}lock.sha256"] == sha256(inside)
    finally:
        engine.remove_image(tag)
