"""`kdkit manifest PATH`: the manifest of a folder of inputs or a JSONL corpus, through the real entry point
(`python -m kdkit manifest`, as a user types it); every bad input is one line, exit 2, nothing written."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from kdkit.core.pilotconfig import load_manifest
from tests.conftest import REPO, tree_snapshot


def kdkit(*args: str | os.PathLike[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "kdkit", "manifest", *map(os.fspath, args)],
                          cwd=cwd, env=env,
                          capture_output=True, text=True, check=False, timeout=300)


def documents(path: Path) -> list[dict[str, Any]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    assert list(data) == ["documents"]
    return list(data["documents"])


def canonical_sha(record: dict[str, Any]) -> str:
    text = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@pytest.fixture
def proj(tmp_path: Path) -> Path:
    """A folder holding kdkit.json (what the default --out must lie in), with a folder of inputs."""
    root = tmp_path / "proj"
    (root / "data" / "pilot" / "nested" / ".cache").mkdir(parents=True)
    (root / "kdkit.json").write_text("{}\n", encoding="utf-8")
    pilot = root / "data" / "pilot"
    (pilot / "doc-01.txt").write_bytes(b"first\n")
    (pilot / "doc-02.bin").write_bytes(bytes(range(256)))
    (pilot / "nested" / "doc-03.txt").write_bytes(b"")
    (pilot / ".hidden.txt").write_bytes(b"skipped")
    (pilot / "nested" / ".cache" / "x.txt").write_bytes(b"skipped too")
    return root


def test_a_folder_gives_one_entry_per_file_relative_to_the_manifest(proj: Path) -> None:
    done = kdkit("data/pilot", "--json", cwd=proj)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # a short corpus prints no progress line
    out = proj / "data" / "pilot.manifest.json"
    result = json.loads(done.stdout)
    assert result == {"out": str(out), "kind": "folder", "source": str(proj / "data" / "pilot"),
                      "count": 3,
                      "bytes": 6 + 256, "skipped": []}
    pilot = proj / "data" / "pilot"
    assert documents(out) == [
        {"id": name.split("/")[-1].split(".")[0], "file": f"pilot/{name}", "label": None,
         "expect": "accept",
         "sha256": hashlib.sha256((pilot / name).read_bytes()).hexdigest(),
         "size": (pilot / name).stat().st_size}
        for name in ("doc-01.txt", "doc-02.bin", "nested/doc-03.txt")]


def test_the_folder_manifest_loads_in_the_pilot_once_labelled(proj: Path) -> None:
    """load_manifest refuses "label": null for an expected acceptance until the pilot accepts unlabelled
    entries; with each entry given a category (what a user does for a pilot sample) it loads, each entry's
    file resolving to the input it hashed."""
    assert kdkit("data/pilot", cwd=proj).returncode == 0
    out = proj / "data" / "pilot.manifest.json"
    data = json.loads(out.read_text(encoding="utf-8"))
    for doc in data["documents"]:
        doc["label"] = "invoice"
    out.write_text(json.dumps(data), encoding="utf-8")
    loaded = load_manifest(out.resolve(), (proj / "data" / "pilot").resolve(), ("invoice",))
    assert [(d.id, Path(d.path).read_bytes()[:5]) for d in loaded] == [
        ("doc-01", b"first"), ("doc-02", bytes(range(5))), ("doc-03", b"")]


def test_a_manifest_inside_the_folder_replaces_the_projects_own(project: Path) -> None:
    """A project from `kdkit init`: its data/pilot/manifest.json is skipped and named, and replaced with --force;
    with the old labels put back, the pilot reads the same documents as before."""
    old = project / "data" / "pilot" / "manifest.json"
    before = documents(old)
    done = kdkit("data/pilot", "--out", "data/pilot/manifest.json", "--force", cwd=project)
    assert done.returncode == 0, done.stderr
    assert f"Wrote {old}: 12 entries" in done.stdout
    new = documents(old)
    assert [(d["id"], d["file"]) for d in new] == [(d["id"], d["file"]) for d in before]
    labels = {d["id"]: (d["label"], d["expect"]) for d in before}
    for doc in new:
        doc["label"], doc["expect"] = labels[doc["id"]]
    old.write_text(json.dumps({"documents": new}), encoding="utf-8")
    categories = tuple(
        json.loads((project / "config" / "pilot.json").read_text(encoding="utf-8"))["categories"])
    loaded = load_manifest(old.resolve(), old.parent.resolve(), categories)
    assert [(d.id, d.file, d.label, d.expect) for d in loaded] == [
        (d["id"], d["file"], d["label"], d["expect"]) for d in before]


def test_a_jsonl_corpus_is_hashed_over_canonical_records(proj: Path) -> None:
    records = [{"doc_id": "a", "text": "héllo", "n": 1},
               {"doc_id": "b", "text": "x", "tags": [1, 2]}]
    corpus = proj / "data" / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in records)
                      + "\n", encoding="utf-8")
    assert kdkit(corpus, "--id", "doc_id", cwd=proj).returncode == 0
    first = documents(proj / "data" / "corpus.manifest.json")
    assert first == [{"id": r["doc_id"], "line": n, "label": None, "expect": "accept",
                      "sha256": canonical_sha(r),
                      "size": len(json.dumps(r, sort_keys=True,
                                             separators=(",", ":"), ensure_ascii=False)
                                  .encode("utf-8"))} for n, r in enumerate(records, 1)]
    # other key order, spaces, escapes, a blank line
    reformatted = proj / "data" / "reformatted.jsonl"
    reformatted.write_text('\n{ "text" : "h\\u00e9llo",  "n": 1, "doc_id": "a" }\n'
                           '{"tags": [1,  2], "doc_id": "b", "text": "y"}\n', encoding="utf-8")
    assert kdkit(reformatted, "--id", "doc_id", "--out", "again.json", cwd=proj).returncode == 0
    second = documents(proj / "again.json")
    assert [d["line"] for d in second] == [2, 3]
    assert second[0]["sha256"] == first[0]["sha256"]  # reformatted: the same input
    assert second[1]["sha256"] != first[1]["sha256"]  # one value changed: another input


def test_a_large_corpus_streams(proj: Path) -> None:
    corpus = proj / "data" / "big.jsonl"
    with corpus.open("w", encoding="utf-8") as handle:
        for n in range(50_000):
            handle.write(json.dumps({"id": f"r{n:06d}", "text": f"record {n} " * 8}) + "\n")
    done = kdkit(corpus, "--json", cwd=proj)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["count"] == 50_000
    docs = documents(proj / "data" / "big.manifest.json")
    assert len(docs) == 50_000 and docs[-1]["id"] == "r049999" and docs[-1]["line"] == 50_000


def test_memory_holds_the_ids_not_the_corpus(proj: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """20,000 records of 2 kB each (40 MB): the traced peak stays far below the corpus."""
    from kdkit.probe.pilot.manifest import main

    corpus = proj / "data" / "wide.jsonl"
    with corpus.open("w", encoding="utf-8") as handle:
        for n in range(20_000):
            handle.write(json.dumps({"id": f"w{n}", "text": "z" * 2000}) + "\n")
    monkeypatch.chdir(proj)
    tracemalloc.start()
    try:
        assert main([str(corpus), "--json"]) == 0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert corpus.stat().st_size > 40_000_000
    assert peak < 10_000_000, peak


def test_force_replaces_and_an_explicit_out_may_leave_the_project(
    proj: Path, tmp_path: Path) -> None:
    out = proj / "data" / "pilot.manifest.json"
    out.write_text("old\n", encoding="utf-8")
    assert kdkit("data/pilot", "--force", cwd=proj).returncode == 0
    assert len(documents(out)) == 3
    elsewhere = tmp_path / "elsewhere"  # outside the project, named by the user: theirs to choose
    elsewhere.mkdir()
    corpus = elsewhere / "c.jsonl"
    corpus.write_text('{"id": "one"}\n', encoding="utf-8")
    assert kdkit(corpus, "--out", elsewhere / "m.json", cwd=elsewhere).returncode == 0
    assert documents(elsewhere / "m.json")[0]["id"] == "one"


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


BAD = [
    ("missing", [],
     ["data/nope"], "data/nope: does not exist; give a folder of inputs or a .jsonl corpus"),
    ("not-jsonl", [("data/notes.txt", b"x")],
     ["data/notes.txt"], "data/notes.txt: not a folder or a regular "
     ".jsonl file"),
    ("broken-line", [("data/c.jsonl", b'{"id": "a"}\n{"id": "b",\n')], ["data/c.jsonl"],
     "c.jsonl: line 2: not valid JSON"),
    ("duplicate-id", [("data/c.jsonl", b'{"id": "a"}\n{"id": "a"}\n')], ["data/c.jsonl"],
     "c.jsonl: line 2: duplicate ID 'a'; every ID must be unique"),
    ("no-id-field", [("data/c.jsonl", b'{"id": "a"}\n{"key": "b"}\n')], ["data/c.jsonl"],
     "c.jsonl: line 2: no ID field 'id'; every record needs one"),
    ("id-not-string", [("data/c.jsonl", b'{"id": 7}\n')], ["data/c.jsonl"],
     "c.jsonl: line 1: the ID field 'id' holds int 7, not a string"),
    ("nan", [("data/c.jsonl", b'{"id": "a", "v": NaN}\n')],
     ["data/c.jsonl"], "c.jsonl: line 1: NaN is not a "
     "JSON number"),
    ("empty-jsonl", [("data/c.jsonl", b"\n\n")], ["data/c.jsonl"], "c.jsonl: holds no input"),
    ("unsafe-name", [("data/pilot/ok.txt", b"x"), ("data/pilot/-bad.txt", b"y")], ["data/pilot"],
     "-bad.txt: its name without the extension, \"-bad\", is not a safe ID"),
    ("spaced-name", [("data/pilot/my doc.txt", b"y")], ["data/pilot"], "is not a safe ID"),
    ("same-stem", [("data/pilot/a.txt", b"x"), ("data/pilot/sub/a.md", b"y")], ["data/pilot"],
     "data/pilot/sub/a.md: its ID 'a' is also the ID of "),
    ("empty-folder", [("data/pilot/.only-hidden", b"x")],
     ["data/pilot"], "data/pilot: holds no input"),
    ("id-for-folder", [("data/pilot/a.txt", b"x")],
     ["data/pilot", "--id", "k"], "--id k: applies to a JSONL "
     "corpus only"),
    ("out-exists", [("data/pilot/a.txt", b"x"), ("data/pilot.manifest.json", b"mine")],
     ["data/pilot"],
     "data/pilot.manifest.json: exists; give --force to replace it"),
    ("out-is-corpus", [("data/c.jsonl", b'{"id": "a"}\n')],
     ["data/c.jsonl", "--out", "data/c.jsonl", "--force"],
     "data/c.jsonl: is the corpus"),
    ("out-no-folder", [("data/c.jsonl", b'{"id": "a"}\n')], ["data/c.jsonl", "--out", "new/m.json"],
     "new/m.json: its folder /"),
    ("out-below", [("data/pilot/a.txt", b"x")], ["data/pilot", "--out", "src/m.json"],
     "src/m.json: a folder's manifest names its files relative to itself"),
    ("default-outside", [("data/x", b"")],
     ["."], "proj.manifest.json: the default manifest path lies outside the "
     "project"),
]


@pytest.mark.parametrize(("files", "args", "message"), [case[1:] for case in BAD],
                         ids=[case[0] for case in BAD])
def test_bad_input_is_one_line_exit_2_nothing_written(tmp_path: Path,
                                                      files: list[tuple[str, bytes]],
                                                      args: list[str], message: str) -> None:
    root = tmp_path / "proj"
    _write(root / "kdkit.json", b"{}\n")
    (root / "src").mkdir()
    for name, data in files:
        _write(root / name, data)
    before = tree_snapshot(tmp_path)
    done = kdkit(*args, cwd=root)
    assert done.returncode == 2, done.stdout
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("Error: "), done.stderr
    assert message in done.stderr
    assert done.stdout == ""
    assert tree_snapshot(tmp_path) == before
    assert [p.name for p in tmp_path.rglob(".*.tmp")] == []


def test_links_and_fifos_in_a_folder_are_refused(proj: Path, tmp_path: Path) -> None:
    pilot = proj / "data" / "pilot"
    outside = tmp_path / "secret.txt"
    outside.write_text("not an input\n", encoding="utf-8")
    (pilot / "link.txt").symlink_to(outside)
    before = tree_snapshot(tmp_path)
    done = kdkit("data/pilot", cwd=proj)
    assert done.returncode == 2
    assert done.stderr == (f"Error: {pilot / 'link.txt'}: is a symbolic link, not a regular file; "
                           "replace it with the file itself or move it out of the folder\n")
    assert tree_snapshot(tmp_path) == before
    (pilot / "link.txt").unlink()
    os.mkfifo(pilot / "pipe")
    listed = sorted(p.name for p in proj.rglob("*"))
    done = kdkit("data/pilot", cwd=proj)
    assert done.returncode == 2 and "pipe: is a FIFO, socket or device, not a regular file" in done.stderr
    assert sorted(p.name for p in proj.rglob("*")) == listed


def test_without_a_project_the_default_out_is_refused(tmp_path: Path) -> None:
    _write(tmp_path / "loose" / "c.jsonl", b'{"id": "a"}\n')
    done = kdkit("c.jsonl", cwd=tmp_path / "loose")
    assert done.returncode == 2
    assert "no kdkit.json here or in any parent folder" in done.stderr and "--out" in done.stderr
    assert sorted(p.name for p in (tmp_path / "loose").iterdir()) == ["c.jsonl"]
