"""`kdkit bundle` and `verify-bundle` against a hostile hour (issue 10): an --out that would swallow
the project, links that lead out, secrets among the files, a bundle trimmed to pass.

Every refusal is one line, exit 2 (bad input) or 1 (a failed check), and leaves every file as it was.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import invoke, tree_snapshot
from tests.probe.pilot.test_pilot import edit_config
from tests.transfer.test_bundle import ready_to_bundle, write_fresh_lock

MARKER = b"OUTSIDE-SECRET-MARKER-5d1c"


@pytest.fixture
def ready(project: Path) -> Path:
    """A scaffolded project with a fresh lock, a .env and an old run: ready to bundle."""
    return ready_to_bundle(project)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder beside the project holding a file the bundle must never read."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "shadow").write_bytes(MARKER + b"\n")
    return folder


def _refused(args: list[str | os.PathLike[str]], watched: Path, code: int = 2) -> str:
    """Run the CLI, expect one error line (the last) and exit ``code``, and prove nothing under ``watched``
    changed."""
    before = tree_snapshot(watched)
    result = invoke(*args)
    assert result.exit_code == code, result.output
    lines = result.stderr.splitlines()
    errors = [line for line in lines if line.startswith("Error: ")]
    # progress lines may come first (load)
    assert len(errors) == 1 and lines[-1] == errors[0], result.stderr
    assert tree_snapshot(watched) == before
    assert MARKER.decode() not in result.output
    return errors[0].removeprefix("Error: ")


def _git(root: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"}
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, env=env,
                          check=True).stdout.strip()


def _commit_all(root: Path) -> str:
    _git(root, "init", "-q")
    _git(root, "add", "-A", "-f")
    _git(root, "commit", "-q", "-m", "all")
    return _git(root, "rev-parse", "HEAD")[:12]


def _bundle(project: Path, out: Path, *args: str) -> dict[str, object]:
    result = invoke("bundle", project, "--out", out, "--no-image", "--json", *args)
    assert result.exit_code == 0, result.stderr
    data: dict[str, object] = json.loads(result.stdout)
    return data


# ---------------------------------------------------------------- class 1: --out never swallows the project

INSIDE = "the project {root} or a folder inside it; write the bundle outside the project"
HOLDS = "which holds the project {root}; write the bundle to a new folder outside the project"
OUTS: list[tuple[str, Callable[[Path, Path], Path], str]] = [
    ("the project itself (.)", lambda root, _t: Path("."), INSIDE),
    ("runs (relative)", lambda root, _t: Path("runs"), INSIDE),
    ("data", lambda root, _t: root / "data", INSIDE),
    ("src", lambda root, _t: root / "src", INSIDE),
    ("data/pilot", lambda root, _t: root / "data" / "pilot", INSIDE),
    ("a new folder in config", lambda root, _t: root / "config" / "bundle", INSIDE),
    ("a dotted detour back in", lambda root, _t: root / ".." / root.name / "src", INSIDE),
    ("a link outside pointing at runs", lambda root,
     t: _link(t / "to-runs", root / "runs"), INSIDE),
    ("a link outside pointing at the project", lambda root, t: _link(t / "to-proj", root), INSIDE),
    ("the parent", lambda root, _t: root.parent, HOLDS),
    ("the filesystem root", lambda root, _t: Path("/"), HOLDS),
    ("a link to the parent", lambda root, t: _link(t / "to-parent", t), HOLDS),
]


def _link(path: Path, target: Path) -> Path:
    path.symlink_to(target, target_is_directory=True)
    return path


@pytest.mark.parametrize("force", [False, True], ids=["plain", "force"])
@pytest.mark.parametrize(("make_out", "expected"), [o[1:] for o in OUTS], ids=[o[0] for o in OUTS])
def test_out_inside_or_around_the_project_is_refused(ready: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     make_out: Callable[[Path, Path], Path],
                                                     expected: str,
                                                     force: bool) -> None:
    monkeypatch.chdir(ready)
    out = make_out(ready, tmp_path)
    message = _refused(
        ["bundle", ready, "--out", out, "--no-image", *(["--force"] if force else [])], tmp_path)
    assert message.startswith(f"--out {out}: resolves to {out.resolve()}, ")
    assert message.endswith(expected.format(root=ready)) or expected.format(root=ready) in message


def _fake_folder(out: Path) -> None:
    out.mkdir()
    (out / "thesis.tex").write_text("two years of work\n", encoding="utf-8")


def _foreign_bundle_json(out: Path) -> None:
    _fake_folder(out)
    (out
     / "bundle.json").write_text(
         json.dumps({"format": 1, "note": "not from kdkit"}), encoding="utf-8")


def _results_in_bundle(out: Path) -> None:
    (out / "runs" / "pilot-1").mkdir(parents=True)
    (out / "runs" / "pilot-1" / "summary.json").write_text("{}\n", encoding="utf-8")


def _results_in_project_copy(out: Path) -> None:
    (out / "project" / "runs" / "pilot-2").mkdir(parents=True)
    (out / "project" / "runs" / "pilot-2" / "results.jsonl").write_text("{}\n", encoding="utf-8")


def _extra_file(out: Path) -> None:
    (out / "project" / "notes.md").write_text("my notes\n", encoding="utf-8")


def _link_inside(out: Path) -> None:
    (out / "project" / "home").symlink_to(Path.home())


def _no_sums(out: Path) -> None:
    (out / "SHA256SUMS").unlink()


FORCED: list[tuple[str, Callable[[Path], None], bool, str]] = [
    ("an ordinary folder",
     _fake_folder, False, "holds no readable bundle.json, so kdkit did not write it"),
    ("a bundle.json not from kdkit",
     _foreign_bundle_json, False, "its bundle.json has no 'kdkit_bundle' key"),
    ("results of a run (Docker path)", _results_in_bundle, True,
     "holds 1 file(s) that `kdkit bundle` did not write (e.g. runs/pilot-1/summary.json: results "
     "of a run"),
    ("results of a run (kdkit.pyz path)", _results_in_project_copy, True,
     "holds 1 file(s) that `kdkit bundle` did not write (e.g. project/runs/pilot-2/results.jsonl"),
    ("a file added by hand",
     _extra_file, True, "(e.g. project/notes.md: results of a run, or an edit)"),
    ("a link added by hand",
     _link_inside, True, "(e.g. project/home: results of a run, or an edit)"),
    ("a bundle without SHA256SUMS", _no_sums, True, "its SHA256SUMS is missing or unreadable"),
]


@pytest.mark.parametrize(("damage", "from_bundle", "why"), [f[1:] for f in FORCED],
                         ids=[f[0] for f in FORCED])
def test_force_replaces_only_a_bundle_kdkit_wrote(ready: Path, tmp_path: Path,
                                                  damage: Callable[[Path], None],
                                                  from_bundle: bool, why: str) -> None:
    out = tmp_path / "bundle"
    if from_bundle:
        _bundle(ready, out)
    damage(out)
    message = _refused(["bundle", ready, "--out", out, "--no-image", "--force"], tmp_path)
    assert message.startswith(f"{out}: ") and why in message
    assert message.endswith("--force replaces only a bundle that kdkit wrote: choose a new --out "
                            "or move the folder away first")


def test_force_over_a_file_is_refused(ready: Path, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    out.write_text("not a folder\n", encoding="utf-8")
    assert _refused(["bundle", ready, "--out", out, "--no-image", "--force"], tmp_path) == (
        f"{out}: exists and is not a folder; choose another --out")


def test_force_over_an_untouched_bundle_replaces_it(ready: Path, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    _bundle(ready, out)
    (ready / "src" / "extra.py").write_text("X = 1\n", encoding="utf-8")
    info = _bundle(ready, out, "--force")
    assert "src/extra.py" in info["files"]  # type: ignore[operator]
    assert invoke("verify-bundle", out).exit_code == 0
    # no staging, no old copy left
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


# ---------------------------------------------------------------- class 2: links


def _move_pilot_out(root: Path, outside: Path) -> Path:
    shutil.move(str(root / "data" / "pilot"), str(outside / "pilot"))
    (root / "data" / "pilot").symlink_to(outside / "pilot", target_is_directory=True)
    return root / "data" / "pilot"


def _kdkit_json_elsewhere(root: Path, outside: Path) -> Path:
    shutil.move(str(root / "kdkit.json"), str(outside / "kdkit.json"))
    (root / "kdkit.json").symlink_to(outside / "kdkit.json")
    return root / "kdkit.json"


def _chain(root: Path, outside: Path) -> Path:
    (root / "src" / "b.py").symlink_to(outside / "shadow")
    (root / "src" / "a.py").symlink_to("b.py")
    return root / "src" / "a.py"


def _plain(rel: str, target: Callable[[Path, Path], str | Path]) -> Callable[[Path, Path], Path]:
    def make(root: Path, outside: Path) -> Path:
        link = root / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(target(root, outside))
        return link
    return make


def _fifo(root: Path, _outside: Path) -> Path:
    os.mkfifo(root / "src" / "pipe")
    return root / "src" / "pipe"


OUTSIDE_LINK = (
    "a symbolic link to {target}, outside the project {root}; a bundle carries the project's own "
    "files only")
LINKS: list[tuple[str, Callable[[Path, Path], Path], str]] = [
    ("/etc/shadow in src", _plain("src/shadow", lambda _r, _o: "/etc/shadow"), OUTSIDE_LINK),
    ("absolute, in config", _plain("config/leak.json", lambda _r, o: o / "shadow"), OUTSIDE_LINK),
    ("relative escape among the inputs",
     _plain("data/pilot/doc-99.txt", lambda _r, _o: "../../../outside/shadow"),
     OUTSIDE_LINK),
    ("a folder outside", _plain("src/lib", lambda _r, o: o), OUTSIDE_LINK),
    ("the inputs folder is a link out", _move_pilot_out, OUTSIDE_LINK),
    ("kdkit.json is a link out", _kdkit_json_elsewhere, OUTSIDE_LINK),
    ("a chain of links that ends outside", _chain, OUTSIDE_LINK),
    ("in a README", _plain("README.txt", lambda _r, o: o / "shadow"), OUTSIDE_LINK),
    ("a broken link",
     _plain("src/gone.py", lambda _r, _o: "nowhere.py"), "which is nothing (a broken link)"),
    ("a folder inside", _plain("src/data", lambda _r, _o: "../data"), "which is a folder"),
    ("into the runs", _plain("src/res.jsonl", lambda _r, _o: "../runs/old-run/results.jsonl"),
     "which a bundle never carries (results (runs/) are copied out"),
    ("into .venv",
     _plain("src/cfg", lambda r, _o: _venv_file(r)),
     "which a bundle never carries (.venv/ is never"),
    ("a FIFO", _fifo, "not a regular file (a FIFO, socket or device); remove it from the project"),
]


def _venv_file(root: Path) -> str:
    (root / ".venv").mkdir()
    (root / ".venv" / "pyvenv.cfg").write_text("home = /usr\n", encoding="utf-8")
    return "../.venv/pyvenv.cfg"


@pytest.mark.parametrize(("make", "expected"), [c[1:] for c in LINKS], ids=[c[0] for c in LINKS])
def test_a_link_that_leads_out_is_refused_before_anything_is_written(ready: Path, tmp_path: Path,
                                                                     outside: Path,
                                                                     make: Callable[[Path,
                                                                                     Path], Path],
                                                                     expected: str) -> None:
    link = make(ready, outside)
    message = _refused(["bundle", ready, "--out", tmp_path / "bundle", "--no-image"], tmp_path)
    target = os.path.realpath(link)
    assert message.startswith(f"{link}: ")
    assert expected.format(target=target, root=ready) in message
    assert not (tmp_path / "bundle").exists()


def test_a_link_inside_to_a_file_inside_travels_as_that_file(ready: Path, tmp_path: Path) -> None:
    (ready / "src" / "alias.py").symlink_to("classify.py")
    (ready / "src" / "env.txt").symlink_to("../.env")
    info = _bundle(ready, tmp_path / "bundle")
    copy = tmp_path / "bundle" / "project" / "src" / "alias.py"
    assert not copy.is_symlink() and copy.read_bytes() == (
        ready / "src" / "classify.py").read_bytes()
    assert {
        "file": "src/env.txt",
        "why": "a link to .env, named like an environment "
               "file"} in info["left_out"]  # type: ignore[operator]
    assert not (tmp_path / "bundle" / "project" / "src" / "env.txt").exists()


GIT_LINKS: list[tuple[str, str, str, str]] = [
    ("absolute /etc/shadow",
     "src/shadow", "/etc/shadow", "a symbolic link to /etc/shadow, outside the project"),
    ("relative escape",
     "data/pilot/x.txt", "../../../../etc/passwd", "a symbolic link to ../../../../etc/passwd"),
    ("a loop", "src/loop.py", "loop.py", "a symbolic link to loop.py, outside the project"),
    ("a broken link", "src/gone.py", "nowhere.py", "which is nothing (a broken link)"),
    ("into .git", "config/gitconfig", "../.git/config", "which is nothing (a broken link)"),
]


@pytest.mark.parametrize(("rel", "target", "expected"), [c[1:] for c in GIT_LINKS],
                         ids=[c[0] for c in GIT_LINKS])
def test_git_mode_carries_no_link_that_leads_out(ready: Path, tmp_path: Path, rel: str, target: str,
                                                 expected: str) -> None:
    (ready / rel).symlink_to(target)
    revision = _commit_all(ready)
    message = _refused(["bundle", ready, "--out", tmp_path / "bundle", "--no-image"], tmp_path)
    assert message.startswith(f"{rel} (committed at {revision}): ") and expected in message


def test_git_mode_refuses_a_link_out_of_a_project_nested_in_a_repository(tmp_path: Path) -> None:
    from kdkit.project.init import init_project

    repo = tmp_path / "repo"
    root = init_project(repo / "apps" / "proj", name="proj", backend="cpu")
    write_fresh_lock(root)
    (repo / "apps" / "shared.py").write_text("SECRET = 1\n", encoding="utf-8")
    # inside the repository, outside the project
    (root / "src" / "shared.py").symlink_to("../../shared.py")
    revision = _commit_all(repo)
    message = _refused(["bundle", root, "--out", tmp_path / "bundle", "--no-image"], tmp_path)
    assert message.startswith(f"src/shared.py (committed at {revision}): a symbolic link to "
                              f"../../shared.py, outside the project {root}")


def test_git_mode_carries_a_link_inside_as_its_file(ready: Path, tmp_path: Path) -> None:
    (ready / "src" / "alias.py").symlink_to("classify.py")
    _commit_all(ready)
    info = _bundle(ready, tmp_path / "bundle")
    copy = tmp_path / "bundle" / "project" / "src" / "alias.py"
    assert "src/alias.py" in info["files"]  # type: ignore[operator]
    assert not copy.is_symlink() and copy.read_bytes() == (
        ready / "src" / "classify.py").read_bytes()


# ---------------------------------------------------------------- class 3: an allow-list, secrets named

SECRETS = [".env.production", "secrets.env", ".ssh/id_ed25519", ".netrc", ".pypirc", ".npmrc",
           "credentials.json",
           "server.pem", ".aws/credentials", "config/api.key", "config/.env", "src/.env.local",
           "src/id_rsa",
           "data/pilot/.netrc", "requirements/.pypirc", ".git-credentials"]
NOT_PROJECT = ["notes/todo.txt", "scratch.py", "Makefile", "wheelhouse/cpu/x.whl"]
EXTRA = ["config/extra.json", "src/extra.py", "README.md"]


@pytest.mark.parametrize("mode", ["files", "git"])
def test_bundle_carries_the_project_and_names_every_secret_it_leaves_out(ready: Path,
                                                                         tmp_path: Path,
                                                                         mode: str) -> None:
    for index, rel in enumerate(SECRETS + NOT_PROJECT + EXTRA[:2]):
        (ready / rel).parent.mkdir(parents=True, exist_ok=True)
        (ready / rel).write_bytes(MARKER + f"-{index}\n".encode() if rel in SECRETS
                                  else b"ordinary\n")
    if mode == "git":
        _commit_all(ready)
        (ready / "src" / ".env.local").write_text("changed, uncommitted\n", encoding="utf-8")
    out = tmp_path / "bundle"
    result = invoke("bundle", ready, "--out", out, "--no-image", "--json")
    assert result.exit_code == 0, result.stderr
    info = json.loads(result.stdout)
    left = {item["file"] for item in info["left_out"]}
    assert left == {*SECRETS, ".env"}
    assert set(info["files"]) >= {"kdkit.json", "config/pilot.json", "requirements/cpu.txt",
                                  "src/train.py",
                                  "data/pilot/manifest.json", *EXTRA}
    assert not set(info["files"]) & {*SECRETS, *NOT_PROJECT}
    assert {"notes", "scratch.py", "Makefile", "wheelhouse"} <= set(info["outside_allow_list"])
    assert info["uncommitted"] == []  # the edited .env.local is no change the bundle would carry
    carried = [p for p in out.rglob("*") if p.is_file()]
    assert not [p for p in carried if MARKER in p.read_bytes()]
    assert sorted(p.relative_to(out / "project").as_posix() for p in carried
                  if p.is_relative_to(out / "project")) == info["files"]
    assert invoke("verify-bundle", out).exit_code == 0
    text = invoke("bundle", ready, "--out", tmp_path / "second", "--no-image")
    assert f"Warning: left out {len(left)} file(s): .aws/credentials (named like a credentials file)" in (
        text.stderr)


def test_a_required_file_named_like_a_secret_is_refused(ready: Path, tmp_path: Path) -> None:
    (ready / "config" / "pilot.json").rename(ready / "config" / "secrets.json")
    data = json.loads((ready / "kdkit.json").read_text(encoding="utf-8"))
    data["pilot_config"] = "config/secrets.json"
    (ready / "kdkit.json").write_text(json.dumps(data), encoding="utf-8")
    assert _refused(["bundle", ready, "--out", tmp_path / "bundle", "--no-image"], tmp_path) == (
        "config/secrets.json: named like a secrets file, so no bundle carries it, yet the rented "
        "machine needs it; rename it and update the config that names it")


def test_a_carried_name_with_a_newline_is_refused(ready: Path, tmp_path: Path) -> None:
    (ready / "src" / "bad\nname.py").write_text("x = 1\n", encoding="utf-8")
    message = _refused(["bundle", ready, "--out", tmp_path / "bundle", "--no-image"], tmp_path)
    assert message.endswith("the file name holds a control character or a backslash; rename it "
                            "(SHA256SUMS lists one name a line)")


# ---------------------------------------------------------------- class 5: a bundle trimmed to pass


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _drop(name: str) -> Callable[[Path], None]:
    def damage(out: Path) -> None:
        (out / name).unlink()
        sums = out / "SHA256SUMS"
        sums.write_text("".join(line
                                for line in sums.read_text(encoding="utf-8").splitlines(
                                    keepends=True)
                                if not line.endswith(f"  {name}\n")), encoding="utf-8")
    return damage


def _add_listed(out: Path) -> None:
    extra = out / "project" / "src" / "evil.py"
    extra.write_text("import os\n", encoding="utf-8")
    with (out / "SHA256SUMS").open("a", encoding="utf-8") as sums:
        sums.write(f"{_sha(extra)}  project/src/evil.py\n")


def _swap_for_link(out: Path) -> None:
    target = out / "project" / "src" / "train.py"
    target.unlink()
    target.symlink_to("/etc/hostname")


def _rewrite_bundle_json(change: Callable[[dict[str, object]], object]) -> Callable[[Path], None]:
    def damage(out: Path) -> None:
        path = out / "bundle.json"
        data = json.loads(path.read_text(encoding="utf-8"))
        change(data)
        path.write_text(json.dumps(data), encoding="utf-8")
        sums = out / "SHA256SUMS"
        lines = [f"{_sha(path)}  bundle.json" if line.endswith("  bundle.json") else line
                 for line in sums.read_text(encoding="utf-8").splitlines()]
        sums.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return damage


def _sums_text(change: Callable[[str], str | bytes]) -> Callable[[Path], None]:
    def damage(out: Path) -> None:
        sums = out / "SHA256SUMS"
        new = change(sums.read_text(encoding="utf-8"))
        sums.write_bytes(new if isinstance(new, bytes) else new.encode("utf-8"))
    return damage


def _first(text: str) -> str:
    return text.splitlines()[0]


MISSING_TOO = "missing, and its SHA256SUMS line too (bundle.json lists it)"
DAMAGES: list[tuple[str, Callable[[Path], None], str, str]] = [
    ("a project file and its line",
     _drop("project/src/train.py"), "project/src/train.py", MISSING_TOO),
    ("kdkit.json and its line", _drop("project/kdkit.json"), "project/kdkit.json", MISSING_TOO),
    ("the lock and its line",
     _drop("project/requirements/cpu.txt"), "project/requirements/cpu.txt", MISSING_TOO),
    ("the manifest and its line", _drop("project/data/pilot/manifest.json"),
     "project/data/pilot/manifest.json",
     MISSING_TOO),
    ("a pilot input and its line", _drop("project/data/pilot/doc-12.txt"),
     "project/data/pilot/doc-12.txt",
     MISSING_TOO),
    ("RUN.md and its line", _drop("RUN.md"), "RUN.md", MISSING_TOO),
    ("kdkit.pyz and its line", _drop("kdkit.pyz"), "kdkit.pyz", MISSING_TOO),
    ("bundle.json and its line",
     _drop("bundle.json"), "bundle.json", "missing, and its SHA256SUMS line too"),
    ("a file added with its line", _add_listed, "project/src/evil.py",
     "listed in SHA256SUMS but not part of the bundle (bundle.json does not list it)"),
    ("a file swapped for a link", _swap_for_link, "project/src/train.py",
     "a link or special file where a bundle holds a plain file"),
    ("bundle.json of another format", _rewrite_bundle_json(lambda d: d.pop("kdkit_bundle")),
     "bundle.json",
     "has no 'kdkit_bundle': 2 or 3 (made by an older or newer kdkit, or not by kdkit); make the "
     "bundle again with `kdkit bundle` of this kdkit"),
    ("bundle.json naming a path out",
     _rewrite_bundle_json(lambda d: d.update(files=["../../etc/passwd"])),
     "bundle.json", "its file list ($.files, $.lock, $.pilot_config, $.manifest) is malformed"),
    ("kdkit-wheels naming a path out",
     _rewrite_bundle_json(lambda d: d.update(kdkit_wheels={"files": ["../x"]})),
     "bundle.json", "its $.kdkit_wheels.files is malformed"),
    ("a kdkit wheel and its line", _drop("kdkit-wheels/requirements.txt"),
     "kdkit-wheels/requirements.txt",
     MISSING_TOO),
]


@pytest.mark.parametrize(("damage", "name", "problem"), [d[1:] for d in DAMAGES],
                         ids=[d[0] for d in DAMAGES])
def test_verify_bundle_knows_what_a_bundle_must_hold(ready: Path, tmp_path: Path,
                                                     damage: Callable[[Path], None],
                                                     name: str, problem: str) -> None:
    out = tmp_path / "bundle"
    _bundle(ready, out)
    damage(out)
    for command in ("verify-bundle", "load"):
        message = _refused([command, out], out, code=1)
        assert message.startswith(f"{out / name}: {problem}"), message
        assert message.endswith("the bundle was changed or damaged in transfer: copy it again")
    report = json.loads(invoke("verify-bundle", out, "--json").stdout)
    assert {"file": name, "problem": problem} in report["problems"] and report["ok"] is False


MALFORMED: list[tuple[str, Callable[[Path], None], str]] = [
    ("not UTF-8",
     _sums_text(lambda t: t.encode("utf-8") + b"\xff\xfe  project/x\n"),
     "not UTF-8 (byte at offset"),
    ("no two-space separator", _sums_text(lambda t: t.replace("  RUN.md", " RUN.md")), ":"),
    ("a digest in capitals",
     _sums_text(lambda t: t.replace(_first(t)[:64], _first(t)[:64].upper())), ":1: "),
    ("a short digest", _sums_text(lambda t: t[1:]), ":1: "),
    ("an absolute name",
     _sums_text(lambda t: t + f"{'0' * 64}  /etc/passwd\n"), ": malformed line"),
    ("a name with ..",
     _sums_text(lambda t: t + f"{'0' * 64}  project/../../x\n"), ": malformed line"),
    ("a line listed twice", _sums_text(lambda t: t + _first(t) + "\n"), ": malformed line"),
    ("CRLF line ends", _sums_text(lambda t: t.replace("\n", "\r\n")), ":1: malformed line"),
]


@pytest.mark.parametrize(("damage", "expected"), [m[1:] for m in MALFORMED],
                         ids=[m[0] for m in MALFORMED])
def test_a_malformed_sha256sums_is_one_clean_line(ready: Path, tmp_path: Path,
                                                  damage: Callable[[Path], None],
                                                  expected: str) -> None:
    out = tmp_path / "bundle"
    _bundle(ready, out)
    damage(out)
    for command in ("verify-bundle", "load"):
        message = _refused([command, out], out, code=1)
        assert message.startswith(f"{out / 'SHA256SUMS'}") and expected in message
        assert message.endswith("the bundle is damaged, copy it again")


def test_an_empty_sha256sums_fails_on_every_required_file(ready: Path, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    _bundle(ready, out)
    (out / "SHA256SUMS").write_text("", encoding="utf-8")
    message = _refused(["verify-bundle", out], out, code=1)
    assert message.startswith(f"{out / 'bundle.json'}: not listed in SHA256SUMS (+")


# ---------------------------------------------------------------- configs that would steer the bundle


def _pilot(root: Path, **changes: object) -> None:
    path = root / "config" / "pilot.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data.update(changes)
    path.write_text(json.dumps(data), encoding="utf-8")


STEERING: list[tuple[str, Callable[[Path, Path], None], str]] = [
    ("runs is the project", lambda r,
     _o: _pilot(r, runs="."), "$.runs: '.' is the project folder itself"),
    ("runs is src", lambda r,
     _o: _pilot(r, runs="src"), "config/pilot.json: $.runs: 'src' is 'src', a part of"),
    ("runs holds the inputs", lambda r,
     _o: _pilot(r, runs="data"), "$.runs: 'data' holds 'data/pilot', a part of"),
    ("inputs outside", lambda r,
     _o: _pilot(r, inputs="../outside"), "$.inputs: '../outside' points outside"),
    ("manifest absolute", lambda r, _o: _pilot(r, manifest="/etc/passwd"),
     "$.manifest: '/etc/passwd' is absolute; give a path relative to the project root"),
    ("no manifest key", lambda r,
     _o: _pilot(r, manifest=None), "$.manifest: expected string, got NoneType null"),
    ("pilot config linked out", lambda r, o: _link_pilot_config(r, o), "$.pilot_config: "),
]


def _link_pilot_config(root: Path, outside: Path) -> None:
    shutil.move(str(root / "config" / "pilot.json"), str(outside / "pilot.json"))
    (root / "config" / "pilot.json").symlink_to(outside / "pilot.json")


@pytest.mark.parametrize(("edit", "expected"), [c[1:] for c in STEERING],
                         ids=[c[0] for c in STEERING])
def test_a_config_cannot_steer_the_bundle_out_of_the_project(ready: Path, tmp_path: Path,
                                                             outside: Path,
                                                             edit: Callable[[Path, Path], None],
                                                             expected: str) -> None:
    edit(ready, outside)
    message = _refused(["bundle", ready, "--out", tmp_path / "bundle", "--no-image"], tmp_path)
    assert expected in message


# ---------------------------------------------------------------- git mode: a project nested in a repository


@pytest.fixture
def nested(tmp_path: Path) -> Path:
    from kdkit.project.init import init_project

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "top.txt").write_text("the repository's own file\n", encoding="utf-8")
    root = init_project(repo / "apps" / "proj", name="proj", backend="cpu")
    write_fresh_lock(root)
    return root


def test_a_project_nested_in_a_repository_is_bundled_at_its_revision(
    nested: Path, tmp_path: Path) -> None:
    (nested / "src" / "données.py").write_text("X = 'é'\n", encoding="utf-8")
    revision = _commit_all(nested.parent.parent)
    (nested / "src" / "train.py").write_text("# an uncommitted edit\n", encoding="utf-8")
    (nested / "src" / ".env.local").write_text("TOKEN=uncommitted\n", encoding="utf-8")
    out = tmp_path / "bundle"
    info = _bundle(nested, out)
    assert str(info["revision"]).startswith(revision) and info["uncommitted"] == ["src/train.py"]
    assert (out / "project" / "src" / "données.py").read_text(encoding="utf-8") == "X = 'é'\n"
    assert (out / "project" / "src"
            / "train.py").read_text(encoding="utf-8") != "# an uncommitted edit\n"
    assert not (out / "project"
                / "top.txt").exists() and "top.txt" not in info["files"]  # type: ignore[operator]
    assert invoke("verify-bundle", out).exit_code == 0


def test_a_nested_project_never_committed_is_refused(nested: Path, tmp_path: Path) -> None:
    repo = nested.parent.parent
    _git(repo, "init", "-q")
    _git(repo, "add", "top.txt")
    _git(repo, "commit", "-q", "-m", "top only")
    revision = _git(repo, "rev-parse", "HEAD")[:12]
    assert _refused(["bundle", nested, "--out", tmp_path / "bundle", "--no-image"], tmp_path) == (
        f"kdkit.json: not committed at revision {revision}; the bundle must carry it (git add "
        "kdkit.json && git commit)")


@pytest.mark.parametrize(("name", "expected"), [
    (b"src/bad\xff.py", "the file name is not UTF-8; rename it"),
    (b"src/new\nline.py", "the file name holds a control character or a backslash; rename it"),
    (b"src/back\\slash.py", "the file name holds a control character or a backslash; rename it"),
], ids=["not UTF-8", "a newline", "a backslash"])
def test_git_mode_refuses_names_sha256sums_cannot_hold(nested: Path, tmp_path: Path, name: bytes,
                                                       expected: str) -> None:
    with open(os.fsencode(nested) + b"/" + name, "w", encoding="utf-8") as handle:
        handle.write("x = 1\n")
    revision = _commit_all(nested.parent.parent)
    message = _refused(["bundle", nested, "--out", tmp_path / "bundle", "--no-image"], tmp_path)
    assert f"(committed at {revision}): {expected}" in message


def test_git_archive_export_ignore_is_named_or_refused(ready: Path, tmp_path: Path) -> None:
    (ready / "src" / "local_only.py").write_text("X = 1\n", encoding="utf-8")
    (ready / ".gitattributes").write_text("src/local_only.py export-ignore\n", encoding="utf-8")
    _commit_all(ready)
    info = _bundle(ready, tmp_path / "bundle")
    assert {
        "file": "src/local_only.py",
        "why": "export-ignore: git archive leaves it "
               "out"} in info["left_out"]  # type: ignore[operator]
    assert "src/local_only.py" not in info["files"]  # type: ignore[operator]
    assert invoke("verify-bundle", tmp_path / "bundle").exit_code == 0
    (ready / ".gitattributes").write_text("config/pilot.json export-ignore\n", encoding="utf-8")
    _git(ready, "commit", "-q", "-a", "-m", "ignore the pilot config")
    message = _refused(["bundle", ready, "--out", tmp_path / "second", "--no-image"], tmp_path)
    assert message == ("config/pilot.json: left out by `git archive` (export-ignore in "
                       ".gitattributes?); the bundle must carry it")


# ---------------------------------------------------------------- folders this user may not read


def _as_nobody(*args: object) -> subprocess.CompletedProcess[str]:
    import sys

    kdkit = Path(sys.executable).parent / "kdkit"
    argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", str(kdkit),
            *map(str, args)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


@pytest.fixture
def shared() -> object:
    import tempfile

    if shutil.which("setpriv") is None or subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "true"], check=False).returncode:
        pytest.skip("setpriv (util-linux) cannot switch user here")
    base = Path(tempfile.mkdtemp(prefix="kdkit-bundle-places-"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base)


def test_results_this_user_cannot_read_do_not_stop_validate_or_bundle(shared: Path) -> None:
    from kdkit.project.init import init_project

    root = init_project(shared / "proj", name="proj", backend="cpu")
    write_fresh_lock(root)
    private = root / "runs" / "pilot-1"  # as the container's user writes it
    private.mkdir(parents=True)
    (private / "results.jsonl").write_text("{}\n", encoding="utf-8")
    private.chmod(0o700)
    outs = shared / "outs"
    outs.mkdir()
    outs.chmod(0o777)
    done = _as_nobody("validate", root)
    assert done.returncode == 0, done.stderr
    done = _as_nobody("bundle", root, "--out", outs / "bundle", "--no-image", "--no-kdkit-wheels")
    assert done.returncode == 0, done.stderr
    (root / "src" / "private").mkdir()
    (root / "src" / "private").chmod(0o700)
    before = tree_snapshot(outs)
    done = _as_nobody("bundle", root, "--out", outs / "second", "--no-image", "--no-kdkit-wheels")
    assert done.returncode == 2 and done.stderr == (f"Error: {root / 'src' / 'private'}: cannot "
                                                    "read this folder of the project; fix its "
                                                    "permissions\n")
    assert tree_snapshot(outs) == before


# ---------------------------------------------------------------- nothing secret travels


CREDENTIALS = {
    "requirements/base.in": "--extra-index-url https://bob:Sup3rS3cretPw@pypi.example.com/simple\n",
    "src/settings.py": 'AWS_SECRET_ACCESS_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"\n',
    "src/notes.md": "token: ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8\n",
    "src/deploy.txt": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaA==\n-----END OPENSSH PRIVATE "
                      "KEY-----\n",
    "config/extra.json": '{"password": "hunter2hunter2"}\n',
}


@pytest.mark.parametrize("rel", list(CREDENTIALS))
def test_a_bundle_refuses_to_carry_a_credential_and_names_it_redacted(project: Path, tmp_path: Path,
                                                                     rel: str) -> None:
    (project / rel).parent.mkdir(parents=True, exist_ok=True)
    with (project / rel).open("a") as handle:
        handle.write(CREDENTIALS[rel])
    write_fresh_lock(project)  # a lock matching the inputs as they now are
    out = tmp_path / "bundle"
    result = invoke("bundle", project, "--no-image", "--out", out)
    assert result.exit_code == 2, result.output
    assert f"{rel}:" in result.stderr and "a credential would travel" in result.stderr
    for secret in ("Sup3rS3cretPw", "wJalrXUtnFEMI", "ghp_a1B2", "hunter2hunter2", "b3BlbnNzaA"):
        assert secret not in result.output
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".bundle.")]


@pytest.mark.parametrize("name",
                         ["id_rsa.bak", "id_ed25519.old", "server.key.txt", "hf_token", "token",
                          "backup.gpg", "sa.p8", ".env~", ".envrc.local"])
def test_secret_shaped_names_the_first_list_missed_are_left_out(
    project: Path, tmp_path: Path, name: str) -> None:
    (project / "src" / name).write_text("nothing shaped like a key here\n")
    write_fresh_lock(project)
    out = tmp_path / "bundle"
    assert invoke("bundle", project, "--no-image", "--out", out).exit_code == 0
    assert not (out / "project" / "src" / name).exists()
    assert name in json.dumps(json.loads((out / "bundle.json").read_text())["left_out"])


def test_a_public_key_is_not_a_secret(project: Path, tmp_path: Path) -> None:
    (project / "src"
     / "id_ed25519.pub").write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMq ci@example\n")
    write_fresh_lock(project)
    out = tmp_path / "bundle"
    assert invoke("bundle", project, "--no-image", "--out", out).exit_code == 0
    assert (out / "project" / "src" / "id_ed25519.pub").exists()


# ---------------------------------------------------------------- verify-bundle: results folders hide nothing


@pytest.mark.parametrize("runs", ["project", "src", "runs"])
def test_a_file_added_to_the_packed_project_is_named_whatever_runs_says(project: Path,
                                                                        tmp_path: Path,
                                                                        runs: str) -> None:
    edit_config(project, runs=runs)
    write_fresh_lock(project)
    out = tmp_path / "bundle"
    made = invoke("bundle", project, "--no-image", "--out", out)
    if made.exit_code != 0:
        assert made.exit_code == 2  # refused as a place for results: nothing to verify
        return
    (out / "project" / "src" / "extra.py").write_text("x = 1\n")
    (out / "project" / "torch.py").write_text("raise SystemExit\n")
    result = invoke("verify-bundle", out)
    assert result.exit_code == 1 and "not listed" in result.output + result.stderr, result.output
