"""Issue 10: the cases a hostile tester found against the first version of the fixes, one class each,
each with variants of its own. (The app forging its run folder and the daemon it leaves behind are
in tests/probe/pilot/test_pilot_supervision.py; a resume of a folder holding foreign entries in
tests/core/test_resume_integrity.py.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kdkit.core.errors import BadInput
from kdkit.core.jsonio import atomic_write_text, parse_json
from tests.conftest import REPO, invoke, tree_snapshot
from tests.probe.pilot.test_pilot import edit_config, pilot
from tests.probe.pilot.test_pilot_supervision import make_app
from tests.transfer.test_bundle import write_fresh_lock

# ---------------------------------------------------------------- a lone surrogate is data, never a crash


@pytest.mark.parametrize("body", [
    "out = correct(items)\nout[0] = {'id': out[0]['id'], 'error': 'bad byte \\udc80 here'}\nreturn out",
    "out = correct(items)\nout[0]['category'] = 'inv\\ud800oice'\nreturn out",
    "out = correct(items)\nout.append({'id': 'doc-\\udfff', 'category': 'invoice'})\nreturn out",
    "raise ValueError('cannot read \\udc80')",
], ids=["reason", "category", "invented id", "exception"])
def test_an_app_string_with_a_lone_surrogate_is_recorded_and_the_run_closed(project: Path, body: str) -> None:
    make_app(project, "surrogate", body, "answers with a lone surrogate")
    code, _summary, stderr = pilot(project, "--run-id", "s")
    assert "Traceback" not in stderr and code == 1
    run = project / "runs" / "s"
    assert (run / "SHA256SUMS").is_file() and invoke("copy-out", run, "--verify").exit_code == 0
    for name in ("summary.json", "summary.md", "results.jsonl"):
        (run / name).read_bytes().decode("utf-8")  # valid UTF-8 throughout


@pytest.mark.parametrize("text", ['{"a": "\\udc80"}', '{"\\ud800": 1}', '["ok", {"x": ["\\udfff"]}]'])
def test_a_file_holding_a_lone_surrogate_is_refused_where_it_is_read(text: str) -> None:
    with pytest.raises(BadInput, match="a string holds a lone surrogate"):
        parse_json(text, "f.json")


def test_a_pair_of_surrogates_is_one_character_and_reads() -> None:
    assert parse_json('{"a": "\\ud83d\\ude00"}', "f.json") == {"a": "\U0001f600"}


def test_a_writer_never_fails_on_a_lone_surrogate(tmp_path: Path) -> None:
    atomic_write_text(tmp_path / "x.txt", "a\udc80b")
    assert (tmp_path / "x.txt").read_bytes() == b"a\\udc80b"


# ---------------------------------------------------------------- one thing per key


@pytest.mark.parametrize(("text", "key"), [
    ('{"min_quality": 0.9, "min_quality": 0.0}', "min_quality"),
    ('{"documents": [], "documents": [{"id": "x"}]}', "documents"),
    ('{"stop": {"max_seconds": 1, "max_seconds": 2}}', "max_seconds"),
])
def test_a_key_given_twice_is_refused_with_its_place(text: str, key: str) -> None:
    with pytest.raises(BadInput, match=rf'^f.json:1:\d+: key "{key}" appears twice in one object'):
        parse_json(text, "f.json")


def test_validate_and_pilot_refuse_a_config_with_a_key_twice(project: Path) -> None:
    path = project / "config/pilot.json"
    path.write_text(path.read_text().replace('"min_quality": 0.9,', '"min_quality": 0.9, "min_quality": 0.0,'))
    before = tree_snapshot(project)
    for command in ("validate", "pilot"):
        result = invoke(command, project)
        assert result.exit_code == 2 and 'key "min_quality" appears twice' in result.stderr, result.output
    assert tree_snapshot(project) == before


# ---------------------------------------------------------------- writes never replace what is not a file


def _special(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "victim.txt").write_text("keep")
    made = {"fifo": tmp_path / "fifo", "link": tmp_path / "link", "folder": tmp_path / "folder"}
    os.mkfifo(made["fifo"])
    made["link"].symlink_to(tmp_path / "victim.txt")
    made["folder"].mkdir()
    try:
        os.mknod(tmp_path / "null", 0o20666, os.makedev(1, 3))
        made["device"] = tmp_path / "null"
    except PermissionError:
        pass
    return made


def test_an_out_path_that_is_not_a_regular_file_is_never_replaced(tmp_path: Path) -> None:
    for kind, path in _special(tmp_path).items():
        before = os.lstat(path)
        result = invoke("diagnose", "--expect", "cpu", "--out", path)
        assert result.exit_code == 2, (kind, result.output)
        assert "kdkit writes over regular files only" in result.stderr, (kind, result.stderr)
        after = os.lstat(path)
        assert (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino), kind
    assert (tmp_path / "victim.txt").read_text() == "keep"


def test_diagnose_refuses_such_an_out_before_running_its_steps(tmp_path: Path) -> None:
    fifo = _special(tmp_path)["fifo"]
    result = invoke("diagnose", "--expect", "cpu", "--out", fifo)
    assert result.exit_code == 2 and result.stdout == ""  # refused before any step ran (none printed)


# ---------------------------------------------------------------- regular files only: nothing blocks


@pytest.mark.parametrize("which", ["fifo", "/dev/zero", "folder"])
def test_verify_env_refuses_a_lock_that_is_not_a_regular_file(tmp_path: Path, which: str) -> None:
    lock = _special(tmp_path)["fifo"] if which == "fifo" else Path(which) if which.startswith("/") else tmp_path
    done = subprocess.run([sys.executable, "-m", "kdkit.probe", "verify-env", "--lock", str(lock)], cwd=REPO,
                          capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize("which", ["config/pilot.json", "data/pilot/manifest.json"])
def test_validate_refuses_a_config_that_is_a_fifo_without_waiting(project: Path, which: str) -> None:
    path = project / which
    path.unlink()
    os.mkfifo(path)
    done = subprocess.run([sys.executable, "-m", "kdkit", "validate", str(project)], cwd=REPO, capture_output=True,
                          text=True, timeout=30, check=False)
    assert done.returncode == 2 and "not a regular file" in done.stderr, done.stderr


# ---------------------------------------------------------------- the app is the project's own code


@pytest.mark.parametrize("entry", ["os:system", "builtins:print", "collections:OrderedDict", "json:loads"])
def test_an_entry_outside_the_project_is_refused_by_validate_and_pilot(project: Path, entry: str) -> None:
    edit_config(project, entry=entry)
    before = tree_snapshot(project)
    for command in ("validate", "pilot"):
        result = invoke(command, project)
        assert result.exit_code == 2 and "$.entry: module" in result.stderr, (command, result.output)
    assert tree_snapshot(project) == before


@pytest.mark.parametrize(("change", "where"), [
    ({"runs": "kdkit.json"}, "$.runs: 'kdkit.json' is a file"),
    ({"inputs": "data/pilot/manifest.json"}, "$.inputs: 'data/pilot/manifest.json' is a file"),
])
def test_a_folder_key_naming_a_file_is_refused_by_both(project: Path, change: dict[str, str], where: str) -> None:
    edit_config(project, **change)
    assert where in invoke("validate", project).stderr
    assert invoke("pilot", project).exit_code == 2


# ---------------------------------------------------------------- nothing secret travels


CREDENTIALS = {
    "requirements/base.in": "--extra-index-url https://bob:Sup3rS3cretPw@pypi.example.com/simple\n",
    "src/settings.py": 'AWS_SECRET_ACCESS_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"\n',
    "src/notes.md": "token: ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8\n",
    "src/deploy.txt": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaA==\n-----END OPENSSH PRIVATE KEY-----\n",
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


def test_lock_refuses_a_requirements_input_holding_a_password(project: Path) -> None:
    with (project / "requirements/base.in").open("a") as handle:
        handle.write(CREDENTIALS["requirements/base.in"])
    before = tree_snapshot(project)
    result = invoke("lock", project, "--backend", "cpu", "--torch-find-links", project)
    assert result.exit_code == 2 and "requirements/base.in:" in result.stderr
    assert "Sup3rS3cretPw" not in result.output and "https://bob:<redacted>@" in result.stderr
    assert tree_snapshot(project) == before


@pytest.mark.parametrize("name", ["id_rsa.bak", "id_ed25519.old", "server.key.txt", "hf_token", "token",
                                  "backup.gpg", "sa.p8", ".env~", ".envrc.local"])
def test_secret_shaped_names_the_first_list_missed_are_left_out(project: Path, tmp_path: Path, name: str) -> None:
    (project / "src" / name).write_text("nothing shaped like a key here\n")
    write_fresh_lock(project)
    out = tmp_path / "bundle"
    assert invoke("bundle", project, "--no-image", "--out", out).exit_code == 0
    assert not (out / "project" / "src" / name).exists()
    assert name in json.dumps(json.loads((out / "bundle.json").read_text())["left_out"])


def test_a_public_key_is_not_a_secret(project: Path, tmp_path: Path) -> None:
    (project / "src" / "id_ed25519.pub").write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMq ci@example\n")
    write_fresh_lock(project)
    out = tmp_path / "bundle"
    assert invoke("bundle", project, "--no-image", "--out", out).exit_code == 0
    assert (out / "project" / "src" / "id_ed25519.pub").exists()


@pytest.mark.parametrize("body", [
    "return [{'id': i['id'], 'error': 'password=hunter2hunter2 at https://bob:s3cr3tpw@example.com/x'} for i in items]",
    "raise RuntimeError('AKIAIOSFODNN7EXAMPLE was refused')",
    "return [{'id': i['id'], 'category': 'ghp_' + 'a1B2c3D4e5' * 3 + 'F6g7h8'} for i in items]",
])
def test_credentials_the_app_emits_are_redacted_everywhere_the_run_shows_them(project: Path, body: str) -> None:
    make_app(project, "leaky", body, "emits credentials")
    result = invoke("pilot", project, "--run-id", "leak", "--json")
    run = project / "runs" / "leak"
    shown = result.output + "".join((run / n).read_text() for n in ("summary.json", "summary.md", "results.jsonl",
                                                                    *(["stop.json"] if (run / "stop.json").exists()
                                                                      else [])))
    for secret in ("hunter2hunter2", "s3cr3tpw", "AKIAIOSFODNN7EXAMPLE", "a1B2c3D4e5a1B2c3D4e5"):
        assert secret not in shown, secret
    assert "<redacted" in shown


# ---------------------------------------------------------------- verify-bundle: results folders hide nothing


@pytest.mark.parametrize("runs", ["project", "src", "runs"])
def test_a_file_added_to_the_packed_project_is_named_whatever_runs_says(project: Path, tmp_path: Path,
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


def test_copy_out_with_an_empty_destination_is_refused(project: Path) -> None:
    use = invoke("pilot", project, "--run-id", "e")
    assert use.exit_code in (0, 1)
    result = invoke("copy-out", project / "runs" / "e", "")
    assert result.exit_code == 2 and "DEST '': empty" in result.stderr
