"""`kdkit validate`'s shortcuts for a long manifest (issue 31 §8) find what the entry-by-entry checks find: the
plain-entry check of the manifest (kdkit.project.pilotchecks.plain_documents), the listing of the manifest's folder
instead of a look at each file, the secret-name screen, the per-folder name checks and the walk without an lstat."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kdkit.config.files import project_names, walk_project
from kdkit.core.credentials import find
from kdkit.core.errors import BadInput
from kdkit.core.secretnames import secret_file
from kdkit.project import manifestchecks, pilotchecks, validate
from kdkit.project.names import name_warnings, secret_file_warnings, windows_problem

Docs = list[dict[str, Any]]
ODD_ENTRIES: list[Callable[[Docs], None]] = [
    lambda d: d[0].update(id="ghp_" + "a1B2" * 9),
    lambda d: d[1].update(id="x" * 129),
    lambda d: d[1].update(id=""),
    lambda d: d[2].update(label=""),
    lambda d: d[2].update(label=3),
    lambda d: d[3].update(file="/tmp/doc-04.txt"),
    lambda d: d[3].update(file="~/doc-04.txt"),
    lambda d: d[3].update(file="C:\\doc.txt"),
    lambda d: d[4].update(file="doc-05.txt\n--index-url x"),
    lambda d: d[4].update(note="password=hunter2hunter2"),
    lambda d: d[4].update(note="see https://user:pw12345@host/x"),
    lambda d: d[4].update(note="line\tbreak"),
    lambda d: d[4].update(note=""),
    lambda d: d[5].update(size=3),
    lambda d: d[5].update(extra=1),
    lambda d: d[6].pop("id"),
    lambda d: d[6].update(expect="maybe"),
    lambda d: d[6].update(expect={"a": 1}),  # not hashable: the shortcut crashed on it once
    lambda d: d[6].update(expect=["accept"]),
    lambda d: d[7].update(id="AKIA" + "A" * 16),
    lambda d: d[7].update(id="sk-ant-" + "a" * 25),
    lambda d: d[7].update(file="Ab1" * 14),
    lambda d: d[8].update(id="a b"),
    lambda d: d.append("not an entry"),
    lambda d: d.append({"id": "doc-01", "file": "doc-01.txt", "label": None, "expect": "accept"}),
    lambda d: d[8].update(label="other"),
    lambda d: d[8].update(expected="text"),
    lambda d: d[9].update(file="nope.txt"),
    lambda d: d[9].update(file="../doc-10.txt"),
    lambda d: d[9].update(file="sub/doc-10.txt"),
    lambda d: d[10].update(id="doc-01"),
    lambda d: [doc.update(expect="accept") for doc in d],
    lambda d: None,
]


def _edit_manifest(root: Path, change: Callable[[Docs], None]) -> None:
    path = root / "data" / "pilot" / "manifest.json"
    data = json.loads(path.read_text())
    change(data["documents"])
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("change", ODD_ENTRIES)
def test_plain_manifest_shortcut_finds_what_the_full_check_finds(project: Path,
                                                                 change: Callable[[Docs], None],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _edit_manifest(project, change)
    fast = validate.validate_project(project)
    monkeypatch.setattr(validate, "plain_documents", lambda data: False)
    monkeypatch.setattr(manifestchecks, "plain_files", lambda *args: frozenset())
    monkeypatch.setattr(manifestchecks, "clean_entries", lambda *args, **kwargs: False)
    assert fast == validate.validate_project(project)


def test_the_template_manifest_is_plain(project: Path) -> None:
    data = json.loads((project / "data" / "pilot" / "manifest.json").read_text())
    assert pilotchecks.plain_documents(data)
    data["documents"][0]["id"] = "hf_" + "a" * 34
    assert not pilotchecks.plain_documents(data)


def test_linked_or_missing_inputs_take_the_full_check(project: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    folder = project / "data" / "pilot"
    (folder / "doc-02.txt").unlink()
    os.symlink("doc-01.txt", folder / "doc-02.txt")
    (folder / "doc-03.txt").unlink()
    (folder / "doc-04.txt").unlink()
    (folder / "doc-04.txt").mkdir()
    fast = validate.validate_project(project)
    monkeypatch.setattr(manifestchecks, "plain_files", lambda *args: frozenset())
    assert fast == validate.validate_project(project)
    assert any("doc-03.txt" in p.why for p in fast)


def test_secret_name_screen_matches_secret_file() -> None:
    names = ["a/.env", "a/.env.example", "b/key.pem", "b/key.pub", ".ssh/config", "x/.ssh/known",
             "deep/id_rsa",
             "data/doc.txt", "secrets/x.txt", "c/api_token", "c/tok.token",
             "d/service-account-1.json",
             "e/creds-credentials.json", "f/x.key.bak",
             "g/Readme.md", "h/CREDENTIALS.txt", ".aws/config"]
    expected = [rel for rel in names if secret_file(rel) is not None]
    assert [p.where for p in secret_file_warnings(names)] == expected
    assert expected  # the screen is tried on names it must let through


def test_name_warnings_judge_folders_as_every_part() -> None:
    names = ["ok/a.txt", "CON/a.txt", "ok/nul.txt", "bad./x", "x/y?/z", "Ok/A.txt", "fine"]
    warnings = name_warnings(names)
    assert [(w.where, w.why) for w in warnings if "macOS" not in w.why] == [
        (rel, next(p for p in map(windows_problem, rel.split("/")) if p is not None))
        for rel in names if any(map(windows_problem, rel.split("/")))]


def test_project_names_are_the_walks(project: Path) -> None:
    os.symlink("data", project / "linked")
    assert list(project_names(project)) == [rel for rel, _info in walk_project(project)]


SHAPES = ["sk-proj-" + "a1" * 12, "gho_" + "Ab1" * 12, "glpat-" + "x" * 20, "xoxb-12345678901",
          "AIza" + "a" * 35,
          "npm_" + "a" * 36, "pypi-AgE" + "a" * 50, "eyJabcdefghijk.eyJabcdefghijk.x",
          "-----BEGIN RSA PRIVATE KEY-----", "Ab1/" * 10, "aB3dE5gH7jK9" * 4]


@pytest.mark.parametrize("text", SHAPES)
def test_a_credential_shape_is_never_plain(text: str) -> None:
    if not find(text):  # what the screen lets through must be what find() names nothing in
        pytest.skip("not a credential shape")
    data = {"documents": [{"id": "a", "file": text, "expect": "accept"}]}
    assert not pilotchecks.plain_documents(data)


@pytest.mark.parametrize("names",
                         [["a/b.txt", "a/c.txt", "d"], ["a/B.txt", "a/b.txt"], ["con"],
                          ["x/aux.tar.gz/y"],
                          ["com1x/a"], ["a./b"], ["a /b"], ["a/b."], ["a?b"],
                          ["caf\u00e9", "cafe\u0301"],
                          ["a\nb"], ["", "a"], ["a", "a"], ["LPT1.txt"], ["prn.", "ok"]])
def test_name_warnings_at_once_find_what_the_loop_finds(names: list[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from kdkit.project import names as module

    fast = name_warnings(names)
    monkeypatch.setattr(module, "_all_fine", lambda names: False)
    assert fast == name_warnings(names)


def test_clean_names_are_judged_at_once() -> None:
    from kdkit.project.names import _all_fine

    assert _all_fine(["a/b.txt", "a/c.txt", "d/con1", "e/x.y"])
    assert not _all_fine(["a/b.txt", "A/b.txt"])
    assert not _all_fine(["a/nul.txt"])


def test_secret_names_are_judged_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from kdkit.project import names as module

    clean = ["data/doc.txt", "src/app.py", "a/key.pub", "tokens.md"]
    assert module._no_secret_names(clean) and secret_file_warnings(clean) == []
    assert module._no_secret_names([".env.example", "a/id_rsa.pub"])
    for odd in (["a/.ENV"], ["x/.ssh/config"], ["deep/id_rsa"], ["a/b.key.bak"],
                ["caf\u00e9/.env"], ["a\n.env"]):
        fast = secret_file_warnings(odd)
        monkeypatch.setattr(module, "_no_secret_names", lambda names: False)
        assert fast == secret_file_warnings(odd) and fast
        monkeypatch.undo()


def test_the_sample_validate_reads_is_the_pilots_own(project: Path) -> None:
    """`kdkit validate` judges the pilot sample from the manifest its checks parsed (pilotchecks.FolderDocuments),
    not from a second read: those documents are the ones the pilot's reader makes, a sub-folder's file too."""
    from kdkit.core.pilotconfig import load_pilot

    folder = project / "data" / "pilot"
    (folder / "sub").mkdir()
    # near the limit: the sample then lacks nothing
    (folder / "sub" / "doc-10.txt").write_text("x" * 20000)

    def in_sub(docs: Docs) -> None:
        docs[9]["file"] = "sub/doc-10.txt"
    _edit_manifest(project, in_sub)
    problems, sample = validate.validated(project)
    assert problems == [] and sample is not None
    assert list(sample.documents) == list(load_pilot(project.resolve()).documents)
    _problems, warnings = validate.check_project(project)
    assert not [w for w in warnings if w.name == "$.documents"], warnings
    for name in ("sub/doc-10.txt", "doc-09.txt"):  # the template's own near-limit input too
        (folder / name).write_text("short")
    _problems, warnings = validate.check_project(project)
    assert [w.where for w in warnings
            if "a near-limit input" in w.why] == ["data/pilot/manifest.json"]


def test_a_pilot_with_a_problem_has_no_sample_to_judge(project: Path) -> None:
    _edit_manifest(project, lambda docs: docs[0].update(label="other"))
    problems, sample = validate.validated(project)
    assert [p.name for p in problems] == ["$.documents[0].label"] and sample is None
    assert not [w for w in validate.check_project(project)[1] if w.name == "$.documents"]


@pytest.mark.parametrize("names",
                         [["a/x.env"], ["d/service-account-prod.json"], ["a/my_token"],
                          ["tok.token"],
                          ["a/credentialsfile"], [".env"], ["a/.env.local"], ["k/id_ed25519_sk"],
                          ["x.p8"],
                          ["secretsx/y"], [".envrc"], ["a/.env.sample"],
                          ["ok/id_rsa.pub", "b/.netrc"],
                          ["a/x.envy"], ["tokens/a"], ["a/token"], ["x.key.y/z"], ["a/b.txt"]])
def test_the_secret_name_probes_find_what_the_patterns_find(
    names: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The screen's literal probes (names._probes) miss no name a pattern of SECRET_FILES matches."""
    from kdkit.project import names as module

    fast = secret_file_warnings(names)
    monkeypatch.setattr(module, "_no_secret_names", lambda names: False)
    assert fast == secret_file_warnings(names)


@pytest.mark.parametrize("names",
                         [["a/con.x/b"], ["xcon/a"], ["a/nulx"], ["x/com3.tar"], ["a/b\"c"],
                          ["aux"],
                          ["a/lpt9.x.y"], ["con"], ["a/coN"], ["dir /x"], ["a/prn/b"]])
def test_the_windows_screen_finds_what_windows_problem_finds(names: list[str]) -> None:
    from kdkit.project.names import _all_fine

    assert _all_fine(names) == (
        not any(windows_problem(part) for rel in names for part in rel.split("/")))


def test_a_probe_is_placed_by_where_its_run_stands(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pattern whose longest literal both starts and ends it (``a*a``) is probed where that run stands: a line
    break before it, none after (a line ``abca`` holds ``\\na``, not ``\\na\\n``)."""
    from kdkit.project import names as module

    monkeypatch.setattr(module, "SECRET_FILES", (("ab*ab", "a test pattern"), ("x?yy", "another")))
    module._probes.cache_clear()
    try:
        assert not module._no_secret_names(["d/abcab"]) and not module._no_secret_names(["x1yy"])
        assert module._no_secret_names(["d/abc", "ab", "xyy"])
    finally:
        monkeypatch.undo()
        module._probes.cache_clear()


def _config(project: Path, **changes: object) -> None:
    path = project / "config" / "pilot.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def test_inputs_named_through_a_link_are_refused_as_the_pilot_refuses_them(project: Path) -> None:
    """The pilot compares the manifest's folder with the inputs folder as written; validate's checks resolve links.
    Named through a link to the manifest's own folder, the inputs folder holds no entry for the pilot: validate
    must say so (it called the project valid, and warned about a sample the pilot would not load)."""
    from kdkit.core.pilotconfig import load_pilot

    os.symlink("pilot", project / "data" / "link")
    _config(project, inputs="data/link", max_input_bytes=1 << 30)
    with pytest.raises(BadInput, match="not inside the inputs folder") as refused:
        load_pilot(project)
    problems, sample = validate.validated(project)
    assert [(p.where, p.name)
            for p in problems] == [("data/pilot/manifest.json", "$.documents[0].file")]
    assert problems[0].why in str(refused.value) and sample is None


def test_a_manifest_above_its_inputs_folder_is_read_by_the_pilots_reader(project: Path) -> None:
    """A manifest in the folder above the inputs (entries "pilot/doc-01.txt") is a layout the pilot reads: validate
    judges its sample from the documents the pilot's own reader makes."""
    from kdkit.core.pilotconfig import load_pilot

    pilot = project / "data" / "pilot"
    data = json.loads((pilot / "manifest.json").read_text())
    for doc in data["documents"]:
        doc["file"] = f"pilot/{doc['file']}"
    (project / "data" / "manifest.json").write_text(json.dumps(data))
    _config(project, manifest="data/manifest.json")
    problems, sample = validate.validated(project)
    assert problems == [] and sample is not None
    assert list(sample.documents) == list(load_pilot(project.resolve()).documents)
