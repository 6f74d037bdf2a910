"""Claims on --out (issue 24 §4 and the bundle half of §9): nothing at --out that kdkit did not write is
ever deleted, and of two writers to one --out exactly one succeeds.

`kdkit bundle` and `kdkit gather` stage their folder beside --out and publish it with a no-replace rename
(kdkit.core.staging.staged_folder). Every race here is made deterministic, never left to timing: the
writer is a real process, stopped (SIGSTOP) while its staging folder exists, i.e. after every check it
makes and before it publishes; the test then does what another writer or a person would do, and lets it
go on (SIGCONT). A stop that lands after the publish is tried again, a bounded number of times.

A full disk is a real one: a tmpfs of a few KiB or MiB mounted for the test (root only).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import invoke
from tests.transfer.test_bundle import write_fresh_lock

# the installed console script, a real process of its own
KDKIT = Path(sys.executable).parent / "kdkit"
FAST = ("--no-image", "--no-kdkit-wheels")
TRIES = 40  # stops that land after the publish are tried again, this many times at most

pytestmark = pytest.mark.skipif(
    not KDKIT.is_file(), reason=f"{KDKIT}: the installed kdkit console script is needed")


def listing(root: Path) -> dict[str, object]:
    """Everything at or below ``root`` without following links: folders, files with their bytes, links with
    their targets; {} when nothing is there. Compare before/after: nothing written, deleted or moved. Staging
    directly in ``root`` (hidden: a stopped writer's own) is left out; ``staged`` looks at it."""
    found: dict[str, object] = {}
    if not os.path.lexists(root):
        return found
    paths = [root] if root.is_symlink() or not root.is_dir() else [root, *sorted(root.rglob("*"))]
    for path in paths:
        rel = path.relative_to(root).as_posix()
        if rel != "." and rel.startswith("."):
            continue
        if path.is_symlink():
            found[rel] = ("link", os.readlink(path))
        elif path.is_dir():
            found[rel] = ("folder",)
        else:
            found[rel] = ("file", path.read_bytes())
    return found


def staged(folder: Path) -> list[str]:
    """Staging entries (``.NAME.partial-PID``, ``.NAME.old-PID``, ...) left in ``folder``."""
    return sorted(p.name for p in folder.iterdir()
                  if p.name.startswith(".")) if folder.is_dir() else []


def start(*args: str | Path) -> subprocess.Popen[str]:
    return subprocess.Popen([str(KDKIT), *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen[str]) -> tuple[int, str]:
    """Let a stopped process go on and end: its exit code and stderr."""
    os.kill(process.pid, signal.SIGCONT)
    _out, err = process.communicate(timeout=300)
    return process.returncode, err


def error_line(code: int, err: str) -> str:
    """A refusal: exit 2, no traceback, exactly one error line and it is the last (progress lines go before it)."""
    assert code == 2, err
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert [ln for ln in lines if ln.startswith("Error: ")] == lines[-1:], err
    return lines[-1].removeprefix("Error: ")


def stop_while_staging(process: subprocess.Popen[str], final: Path, present: bool = False) -> bool:
    """SIGSTOP ``process`` once its staging folder of ``final`` exists. True when it is stopped with that folder
    still there: it has made every check and not yet published. False when it ended or had published first."""
    staging = final.parent / f".{final.name}.partial-{process.pid}"
    while not staging.exists():
        if process.poll() is not None:
            return False
    os.kill(process.pid, signal.SIGSTOP)
    _pid, status = os.waitpid(process.pid, os.WUNTRACED)
    if not os.WIFSTOPPED(status):
        process.returncode = os.waitstatus_to_exitcode(status)
        process.communicate()
        return False
    if staging.exists() and (final.exists() or not present):
        return True
    finish(process)
    return False


def stopped(argv: list[str | Path], final: Path, reset: object = None,
            present: bool = False) -> subprocess.Popen[str]:
    """A real kdkit process stopped while it stages ``final`` (tried again, at most TRIES times, when a stop
    came too late; ``reset`` undoes what such a run published). With ``present``, a stop is too late once
    the publication has begun: ``final`` moved aside for its replacement, not yet put back."""
    for _ in range(TRIES):
        process = start(*argv)
        if stop_while_staging(process, final, present):
            return process
        if callable(reset):
            reset()
    pytest.fail(f"{final}: no stop landed while it was staged in {TRIES} tries")


# ---------------------------------------------------------------- bundles


@pytest.fixture
def ready(project: Path) -> Path:
    write_fresh_lock(project)
    return project


def appeared(out: Path) -> str:
    return (f"{out}: appeared while kdkit was writing it (another kdkit or another program made "
            "it); it was left as it is and nothing was published: choose another --out, or move it "
            "away and retry")


def test_two_bundles_into_one_out_one_is_refused_and_the_other_verifies(
    ready: Path, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    first = stopped(["bundle", ready, "--out", out, *FAST], out)  # checked --out: free; staging
    second = start("bundle", ready, "--out", out, *FAST)  # checks --out: still free
    _o, err = second.communicate(timeout=300)
    assert second.returncode == 0, err
    published = listing(out)
    code, err = finish(first)
    assert error_line(code, err) == appeared(out)
    assert listing(out) == published and staged(tmp_path) == []
    assert invoke("verify-bundle", out).exit_code == 0


def test_two_bundles_started_together_one_wins_whatever_the_order(
    ready: Path, tmp_path: Path) -> None:
    """No stop: whichever order the two take, one publishes and the other is refused in one line."""
    out = tmp_path / "bundle"
    processes = [start("bundle", ready, "--out", out, *FAST) for _ in range(2)]
    results = [(p.wait(timeout=300), p.communicate()[1]) for p in processes]
    assert sorted(code for code, _err in results) == [0, 2], results
    line = error_line(*next(r for r in results if r[0] == 2))
    assert line in (appeared(out),  # checked before the other published, refused at its own publish
                    f"{out}: already exists; choose a new --out folder or pass --force to replace "
                    "it",  # after
                    # between the two checks
                    f"{out}: already exists; choose another --out or move it away first")
    assert staged(tmp_path) == [] and invoke("verify-bundle", out).exit_code == 0


def _user_folder(out: Path) -> None:
    out.mkdir()
    (out / "mine.txt").write_text("a person's work\n", encoding="utf-8")


def _empty_folder(out: Path) -> None:
    out.mkdir()  # a plain rename(2) would replace an empty folder without a word


def _file(out: Path) -> None:
    out.write_text("a person's file\n", encoding="utf-8")


def _link_to_folder(out: Path) -> None:
    elsewhere = out.parent / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "kept.txt").write_text("kept\n", encoding="utf-8")
    out.symlink_to(elsewhere)


def _dangling_link(out: Path) -> None:
    out.symlink_to(out.parent / "nowhere")


@pytest.mark.parametrize("make",
                         [_user_folder, _empty_folder, _file, _link_to_folder, _dangling_link])
def test_what_a_person_puts_at_out_mid_bundle_is_left_untouched(
    ready: Path, tmp_path: Path, make: object) -> None:
    out = tmp_path / "bundle"
    refused_untouched(stopped(["bundle", ready, "--out", out, *FAST], out), out, make)


def refused_untouched(process: subprocess.Popen[str], out: Path, make: object) -> None:
    """``make`` something at ``out`` while ``process`` is stopped in its staging; let it go on: it is refused in one
    line, and nothing around ``out`` changed (its staging gone too)."""
    assert callable(make)
    make(out)
    before = listing(out.parent)
    code, err = finish(process)
    assert error_line(code, err) == appeared(out)
    assert listing(out.parent) == before and staged(out.parent) == []


@pytest.mark.parametrize("gone", ["removed", "a file now"])
def test_outs_parent_gone_mid_bundle_is_one_line_and_nothing_made_again(ready: Path, tmp_path: Path,
                                                                       gone: str) -> None:
    parent = tmp_path / "parent"
    parent.mkdir()
    out = parent / "bundle"
    process = stopped(["bundle", ready, "--out", out, *FAST], out)
    shutil.rmtree(parent)
    if gone == "a file now":
        parent.write_text("not a folder\n", encoding="utf-8")
    before = listing(tmp_path)
    code, err = finish(process)
    assert error_line(code,
                      err) == (f"{out}: {parent} was removed or replaced while kdkit was writing "
                                     "there; nothing was published or left behind: make the folder "
                                     "again (or choose another --out) and retry")
    # the folder is not made again by a writer inside the staging
    assert listing(tmp_path) == before


def test_two_bundles_filling_a_cold_wheel_cache_both_succeed_and_share_it(ready: Path,
                                                                          tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """kdkit-wheels/ comes from kdkit's cache: the second fetch to finish keeps the first one's cache and uses it
    (it was replaced, or refused as unusable and fetched again, before)."""
    from kdkit.config.shipped import runtime_lock
    from kdkit.core.jsonio import sha256_file
    from kdkit.transfer.kdkitwheels import WHEELS

    cache = tmp_path / "cache"
    monkeypatch.setenv("KDKIT_CACHE_DIR", str(cache))
    # kdkit's own lock, for the project's CPU
    cached = cache / WHEELS / f"{sha256_file(runtime_lock())[:16]}-x86_64"

    def reset() -> None:
        for path in (cache, tmp_path / "one"):
            shutil.rmtree(path, ignore_errors=True)

    # fetching, not kept
    first = stopped(["bundle", ready, "--out", tmp_path / "one", "--no-image"], cached, reset)
    second = start("bundle", ready, "--out", tmp_path / "two", "--no-image")
    _o, err = second.communicate(timeout=600)
    assert second.returncode == 0, err
    kept = listing(cached)
    code, err = finish(first)
    assert code == 0 and "not usable" not in err, err
    assert listing(cached) == kept and staged(cached.parent) == []
    assert all(invoke("verify-bundle", tmp_path / out).exit_code == 0 for out in ("one", "two"))


# ---------------------------------------------------------------- --force


def _bundle(project: Path, out: Path) -> None:
    result = invoke("bundle", project, "--out", out, *FAST)
    assert result.exit_code == 0, result.output


def _add_notes(out: Path) -> None:
    (out / "notes.txt").write_text("results of a run\n", encoding="utf-8")


def _swap_for_a_folder(out: Path) -> None:
    out.rename(out.with_name("moved-by-a-person"))
    _user_folder(out)


def _swap_for_a_link(out: Path) -> None:
    moved = out.with_name("moved-by-a-person")
    out.rename(moved)
    out.symlink_to(moved)


def _swap_for_another_bundle(out: Path) -> None:
    other = out.with_name("other-bundle")
    shutil.copytree(out, other, symlinks=True)  # a bundle kdkit wrote, but not the one checked
    shutil.rmtree(out)
    other.rename(out)


@pytest.mark.parametrize(("change", "why"), [
    (_add_notes,
     "holds 1 file(s) that `kdkit bundle` did not write (e.g. notes.txt: results of a run, or an "
     "edit), which --force would delete"),
    (_swap_for_a_folder, "another folder is there now"),
    (_swap_for_a_link, "another folder is there now"),
    (_swap_for_another_bundle, "another folder is there now"),
])
def test_force_never_replaces_what_stopped_being_the_bundle_it_checked(ready: Path, tmp_path: Path,
                                                                       change: object,
                                                                       why: str) -> None:
    out = tmp_path / "bundle"
    _bundle(ready, out)
    process = stopped(["bundle", ready, "--out", out, *FAST, "--force"], out)
    assert callable(change)
    change(out)
    before = listing(tmp_path)
    code, err = finish(process)
    assert error_line(code,
                      err) == (f"{out}: changed while kdkit was writing it ({why}); it was left as "
                                     "it is and nothing was published: move it away and retry")
    assert listing(tmp_path) == before and staged(tmp_path) == []


@pytest.mark.parametrize("change", ["none", "removed"])
def test_force_replaces_the_bundle_it_checked_or_publishes_when_it_went(ready: Path, tmp_path: Path,
                                                                       change: str) -> None:
    out = tmp_path / "bundle"
    _bundle(ready, out)
    # a mark of the old copy (its mtime); the new one is written afresh
    (out / "bundle.json").touch()
    old_inode = out.stat().st_ino
    process = stopped(["bundle", ready, "--out", out, *FAST, "--force"], out)
    if change == "removed":
        shutil.rmtree(out)
    code, err = finish(process)
    assert code == 0, err
    assert out.stat().st_ino != old_inode and staged(tmp_path) == []
    assert invoke("verify-bundle", out).exit_code == 0


def test_two_forced_bundles_over_one_bundle_one_replaces_it_the_other_is_refused(
    ready: Path, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    _bundle(ready, out)
    # checked the first bundle
    first = stopped(["bundle", ready, "--out", out, *FAST, "--force"], out)
    # checks it too, and replaces it
    second = start("bundle", ready, "--out", out, *FAST, "--force")
    _o, err = second.communicate(timeout=300)
    assert second.returncode == 0, err
    published = listing(tmp_path)
    code, err = finish(first)
    assert error_line(code,
                      err) == (f"{out}: changed while kdkit was writing it (another folder is "
                                     "there now); it was left as it is and nothing was published: "
                                     "move it away and retry")
    assert listing(tmp_path) == published and staged(tmp_path) == []
    assert invoke("verify-bundle", out).exit_code == 0


# ---------------------------------------------------------------- a full disk (§9)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[object]:
    """Mount a real tmpfs of the size asked for at tmp_path/disk; unmounted in teardown."""
    where = tmp_path / "disk"
    where.mkdir()
    mounted: list[Path] = []

    def mount(size: str) -> Path:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip() or done.returncode}): a "
                        "full disk needs root and CAP_SYS_ADMIN")
        mounted.append(where)
        return where

    yield mount
    for path in mounted:
        subprocess.run(["umount", str(path)], check=True)


@pytest.mark.parametrize(("size", "options"), [
    ("64k", FAST),  # the project's files
    ("2m", FAST),  # kdkit.pyz
    ("5m", ("--no-image",)),  # kdkit-wheels/
])
def test_bundle_on_a_full_disk_is_bad_input_and_leaves_nothing(ready: Path, small_disk: object,
                                                               size: str,
                                                               options: tuple[str, ...]) -> None:
    assert callable(small_disk)
    disk: Path = small_disk(size)
    out = disk / "bundle"
    before = listing(ready)
    result = invoke("bundle", ready, "--out", out, *options)
    line = error_line(result.exit_code, result.stderr)
    assert line == (f"{out}: could not write it (No space left on device); nothing was left "
                    "behind: free space or fix permissions (or choose another --out) and retry")
    assert list(disk.iterdir()) == [] and listing(ready) == before


def test_gathering_on_a_full_disk_is_bad_input_and_leaves_nothing(
    workers: list[Path], small_disk: object) -> None:
    assert callable(small_disk)
    disk: Path = small_disk("64k")
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:  # the disk made full for real: written until the kernel says ENOSPC
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)
    before = listing(disk)
    done = subprocess.run([str(KDKIT), "gather", *map(str, workers), "--out",
                           str(disk / "gathered")],
                          capture_output=True, text=True, timeout=300, check=False)
    assert error_line(done.returncode, done.stderr) == (
        f"{disk / 'gathered'}: could not write it (No space left on device); nothing was left "
        "behind: free space or fix permissions (or choose another --out) and retry")
    assert listing(disk) == before and staged(disk) == []


# ---------------------------------------------------------------- the rename itself, and where the C library has none


@pytest.fixture(params=["renameat2", "claim first"])
def rename(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> object:
    """kdkit.core.noreplace.rename_no_replace through the C library's call, and through the fallback that claims
    the name first (for systems without one: the same cases must hold)."""
    from kdkit.core import noreplace

    if request.param == "claim first":
        monkeypatch.setattr(noreplace, "_c_call", lambda: None)
    elif noreplace._c_call() is None:
        pytest.skip("this C library has no renameat2 or renamex_np")
    return noreplace.rename_no_replace


@pytest.mark.parametrize("make",
                         [_user_folder, _empty_folder, _file, _link_to_folder, _dangling_link])
@pytest.mark.parametrize("kind", ["folder", "file"])
def test_the_rename_never_replaces_anything(rename: object, tmp_path: Path,
                                            make: object, kind: str) -> None:
    source = tmp_path / "staged"
    if kind == "folder":
        source.mkdir()
        (source / "new.txt").write_text("new\n", encoding="utf-8")
    else:
        source.write_text("new\n", encoding="utf-8")
    assert callable(make) and callable(rename)
    make(tmp_path / "final")
    before = listing(tmp_path)
    with pytest.raises(FileExistsError):
        rename(source, tmp_path / "final")
    assert listing(tmp_path) == before
    (tmp_path / "free").mkdir()
    rename(source, tmp_path / "free" / "final")
    moved = {".": ("file", b"new\n")} if kind == "file" else {
        ".": ("folder",), "new.txt": ("file", b"new\n")}
    assert listing(tmp_path / "free" / "final") == moved
    assert not os.path.lexists(source)


@pytest.mark.docker
def test_bundle_whose_image_fills_the_disk_is_bad_input(ready: Path,
                                                        small_disk: object,
                                                        docker_engine: None) -> None:
    """`docker save | zstd` fails on the full disk: zstd's failure is put down to it (the disk is full when it
    fails), one line, exit 2, nothing left."""
    from tests.transfer.test_bundle import _labelled_image

    assert callable(small_disk)
    # this test's own image, removed at the end
    tag = f"kdkit-test/out-claims:{uuid.uuid4().hex[:12]}"
    _labelled_image(ready, tag)
    try:
        disk: Path = small_disk("8m")  # the project and kdkit.pyz fit, the image does not
        out = disk / "bundle"
        result = invoke("bundle", ready, "--out", out, "--image", tag, "--no-kdkit-wheels")
        line = error_line(result.exit_code, result.stderr)
        assert line.startswith(
            f"{out}: could not write it (No space left on device: zstd") and line.endswith(
            "; nothing was left behind: free space or fix permissions (or choose another --out) "
            "and retry"), line
        assert list(disk.iterdir()) == []
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, check=False)


# ---------------------------------------------------------------- gatherings


@pytest.fixture
def workers(project: Path) -> list[Path]:
    from tests.machine.test_workers import use_oracle, workers_run

    return workers_run(use_oracle(project))


def test_two_gatherings_into_one_out_one_is_refused(workers: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "gathered"
    first = stopped(["gather", *workers, "--out", out], out, reset=lambda: shutil.rmtree(out))
    second = start("gather", *workers, "--out", out, "--json")
    stdout, err = second.communicate(timeout=300)
    assert second.returncode == 0, err
    assert json.loads(stdout)["verdict"] == "pass"
    published = listing(out)
    code, err = finish(first)
    assert error_line(code, err) == appeared(out)
    assert listing(out) == published and staged(tmp_path) == []
    assert sorted(published) == [".", "SHA256SUMS", "summary.json", "summary.md"]


@pytest.mark.parametrize("make",
                         [_user_folder, _empty_folder, _file, _link_to_folder, _dangling_link])
def test_what_a_person_puts_at_out_mid_gathering_is_left_untouched(workers: list[Path],
                                                                   tmp_path: Path,
                                                                   make: object) -> None:
    out = tmp_path / "gathered"
    refused_untouched(
        stopped(["gather", *workers, "--out", out], out, reset=lambda: shutil.rmtree(out)), out,
        make)


def test_gathering_force_never_replaces_what_is_no_longer_the_gathering_it_checked(workers: list[Path],
                                                                                  tmp_path: Path) -> None:
    out = tmp_path / "gathered"
    assert invoke("gather", *workers, "--out", out).exit_code == 0
    process = stopped(["gather", *workers, "--out", out, "--force"], out, present=True)
    # taken while it is stopped: a try whose stop came too late published a newer gathering there
    checked = listing(out)
    (out / "notes.md").write_text("a person's notes\n", encoding="utf-8")
    before = listing(tmp_path)
    code, err = finish(process)
    assert error_line(code, err) == (
        f"{out}: changed while kdkit was writing it (holds 1 file(s) a gathering does not write "
        "(e.g. 'notes.md'), which --force would delete); it was left as it is and nothing was "
        "published: move it away and retry")
    assert listing(tmp_path) == before
    refused = invoke("gather", *workers, "--out", out, "--force")  # now refused before any work
    assert refused.exit_code == 2 and refused.stderr.splitlines() == [
        f"Error: {out}: exists and holds 1 file(s) a gathering does not write (e.g. 'notes.md'), "
        "which --force would delete; choose another --out or move it away first"]
    assert listing(tmp_path) == before
    (out / "notes.md").unlink()
    assert listing(out) == checked
    # the gathering it is replaced
    assert invoke("gather", *workers, "--out", out, "--force").exit_code == 0


# ---------------------------------------------------------------- --force over what is not a gathering, a link at --out


def _notes_by_a_person(out: Path) -> None:  # the names a gathering writes, a person's content
    (out / "summary.json").write_text('{"a": 1}\n', encoding="utf-8")
    (out / "summary.md").write_text("my notes\n", encoding="utf-8")


# a SHA256SUMS that matches, but not a gathering's summary
def _with_sums_of_their_own(out: Path) -> None:
    from kdkit.core.checksums import write_sums

    _notes_by_a_person(out)
    write_sums(out, [(name, out / name) for name in ("summary.json", "summary.md")])


def _kind_gathered_no_sums(out: Path) -> None:
    (out / "summary.json").write_text('{"kind": "gathered", "verdict": "pass"}\n', encoding="utf-8")
    (out / "summary.md").write_text("my notes\n", encoding="utf-8")


def _summary_not_an_object(out: Path) -> None:
    (out / "summary.json").write_text('["kind", "gathered"]\n', encoding="utf-8")


NOT_A_GATHERING = (
    "its summary.json is not a gathering's (kind 'gathered'), so it is not an earlier gathering")


@pytest.mark.parametrize(("make", "why"), [
    (_notes_by_a_person, NOT_A_GATHERING),
    (_with_sums_of_their_own, NOT_A_GATHERING),
    (_summary_not_an_object, NOT_A_GATHERING),
    (_kind_gathered_no_sums, "holds no readable SHA256SUMS, so it is not an earlier gathering"),
])
def test_gathering_force_refuses_a_folder_that_is_not_a_gathering(workers: list[Path],
                                                                  tmp_path: Path, make: object,
                                                                   why: str) -> None:
    out = tmp_path / "victim"
    out.mkdir()
    assert callable(make)
    make(out)
    before = listing(tmp_path)
    refused = invoke("gather", *workers, "--out", out, "--force")
    assert refused.exit_code == 2 and refused.stderr.splitlines() == [
        f"Error: {out}: exists and {why}; choose another --out or move it away first"]
    assert listing(tmp_path) == before


@pytest.mark.parametrize("edit", ["summary.md", "summary.json", "SHA256SUMS"])
def test_gathering_force_refuses_a_gathering_edited_since_it_was_written(workers: list[Path],
                                                                         tmp_path: Path,
                                                                         edit: str) -> None:
    out = tmp_path / "gathered"
    assert invoke("gather", *workers, "--out", out).exit_code == 0
    # a person's line: the file no longer matches its sum
    with (out / edit).open("a", encoding="utf-8") as file:
        file.write("\n" if edit == "summary.json" else "my line\n")
    before = listing(tmp_path)
    refused = invoke("gather", *workers, "--out", out, "--force")
    assert refused.exit_code == 2, refused.output
    line, = refused.stderr.splitlines()
    assert line.startswith(f"Error: {out}: exists and ") and "so it is not" in line, line
    assert listing(tmp_path) == before
    # the workers themselves are fine
    assert invoke("gather", *workers, "--out", tmp_path / "other").exit_code == 0


def _link_nowhere(out: Path) -> Path:
    out.symlink_to(out.parent / "nowhere")
    return out.parent / "nowhere"


def _link_to_empty_folder(out: Path) -> Path:
    (out.parent / "elsewhere").mkdir()
    out.symlink_to(out.parent / "elsewhere", target_is_directory=True)
    return out.parent / "elsewhere"


def _link_into_missing_folder(out: Path) -> Path:
    out.symlink_to("missing/deeper")
    return Path("missing/deeper")


def link_refused(argv: list[str | Path], out: Path, target: Path) -> None:
    """A link at --out: exit 2, one line naming it, nothing written anywhere (not where it leads either)."""
    before = listing(out.parent)
    refused = invoke(*argv)
    assert refused.exit_code == 2, refused.output
    assert refused.stderr.splitlines() == [
        f"Error: {out}: is a symbolic link (to {target}); kdkit never writes through a link at "
        "--out: give the real path, or move the link away"]
    assert listing(out.parent) == before and staged(out.parent) == []


@pytest.mark.parametrize("force", [[], ["--force"]], ids=["plain", "force"])
@pytest.mark.parametrize("make", [_link_nowhere, _link_to_empty_folder, _link_into_missing_folder])
def test_bundle_refuses_a_link_at_out(ready: Path, tmp_path: Path, make: object,
                                      force: list[str]) -> None:
    out = tmp_path / "dang"
    assert callable(make)
    link_refused(["bundle", ready, "--out", out, *FAST, *force], out, make(out))


def test_bundle_refuses_a_link_to_a_kdkit_bundle_even_with_force(
    ready: Path, tmp_path: Path) -> None:
    real = tmp_path / "real"
    assert invoke("bundle", ready, "--out", real, *FAST).exit_code == 0
    out = tmp_path / "alias"
    out.symlink_to(real, target_is_directory=True)
    link_refused(["bundle", ready, "--out", out, *FAST, "--force"], out, real)
    # the real path: replaced
    assert invoke("bundle", ready, "--out", real, *FAST, "--force").exit_code == 0


@pytest.mark.parametrize("force", [[], ["--force"]], ids=["plain", "force"])
@pytest.mark.parametrize("make", [_link_nowhere, _link_to_empty_folder, _link_into_missing_folder])
def test_gather_refuses_a_link_at_out(workers: list[Path], tmp_path: Path, make: object,
                                      force: list[str]) -> None:
    out = tmp_path / "dang"
    assert callable(make)
    link_refused(["gather", *workers, "--out", out, *force], out, make(out))
