"""Issue 25 §2-3, the run's side: what the app is handed. A file per item as text or as raw bytes, a
JSONL corpus's records as dicts with the sha256 of their canonical bytes, and the config's params for
a predict that takes them; what cannot be read as declared is the harness's rejection, never the app's.

Every pilot here is real (the app in its own process, on CPU); the app writes what it was handed to a
file outside runs/ (tmp_path/observed.jsonl), which the tests read back.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from kdkit.core.pilotconfig import load_pilot
from kdkit.probe.pilot import harness
from kdkit.probe.pilot.inputs import Reading
from tests.conftest import REPO, wait_for_lines
from tests.probe.pilot.test_pilot import pilot

OBSERVE = '''
import json

OBSERVED = {observed!r}


def observe(items, params):
    with open(OBSERVED, "a", encoding="utf-8") as sink:
        for item in items:
            kind = next(k for k in ("text", "bytes", "record") if k in item)
            value = item[kind]
            sink.write(json.dumps({{"id": item["id"], "keys": sorted(item), "kind": kind, "type": type(value).__name__,
                                    "value": value.hex() if isinstance(value, bytes) else value,
                                    "sha256": item.get("sha256"), "params": params}}) + "\\n")
    return [{{"id": item["id"], "category": "a"}} for item in items]
'''
APPS = {
    "with_params": "def predict(items, params):\n    return observe(items, params)\n",
    "items_only": "def predict(items):\n    return observe(items, 'none')\n",
    "star_args": "def predict(*args):\n    return observe(args[0], args[1] if len(args) > 1 else "
                 "'none')\n",
    "option": "def predict(items, batch_size=8):\n    return observe(items, batch_size)\n",
}


def write_app(project: Path, observed: Path, body: str, name: str = "echo") -> str:
    (project / "src" / f"{name}.py").write_text(OBSERVE.format(observed=str(observed)) + "\n"
                                                + body)
    return f"src.{name}:predict"


def write_config(project: Path, **config: Any) -> None:
    base = {"categories": ["a", "b"], "batch_size": 2, "device": "cpu", "max_input_bytes": 4096,
            "min_quality": 0.5, "runs": "runs"}
    (project / "config" / "pilot.json").write_text(json.dumps({**base, **config}, indent=2))


def files_project(project: Path, files: dict[str, bytes]) -> None:
    """data/bin/: one file per item, every one labelled "a"."""
    folder = project / "data" / "bin"
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    documents = [{"id": name.split(".")[0], "file": name, "label": "a", "expect": "accept"}
                 for name in files]
    (folder / "manifest.json").write_text(json.dumps({"documents": documents}))


def corpus_lines(count: int) -> list[bytes]:
    """Records written as people write them: spaces, keys out of order, non-ASCII text."""
    return [json.dumps({"text": f"caf\u00e9 n\u00b0{n}", "id": f"r-{n:03d}", "n": n,
                        "nested": {"b": [1, 2.5], "a": None}}, ensure_ascii=False).encode() + b"\n"
            for n in range(count)]


def corpus_project(project: Path, lines: list[bytes], **config: Any) -> Path:
    """data/corpus.jsonl, and a manifest labelling every record "a" (the category the test apps answer)."""
    corpus = project / "data" / "corpus.jsonl"
    corpus.write_bytes(b"".join(lines))
    documents = [{"id": json.loads(line)["id"], "label": "a", "expect": "accept"} for line in lines]
    (project / "data" / "corpus-manifest.json").write_text(json.dumps({"documents": documents}))
    write_config(project, inputs={"jsonl": "data/corpus.jsonl", "id": "id"},
                 manifest="data/corpus-manifest.json",
                 **config)
    return corpus


def canonical_sha(record: dict[str, Any]) -> str:
    data = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    return hashlib.sha256(data).hexdigest()


def observed(path: Path) -> dict[str, dict[str, Any]]:
    seen: dict[str, dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        seen[entry["id"]] = entry
    return seen


def results(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]


# ---------------------------------------------------------------- real pilots

BINARY = {"png.bin": b"\x89PNG\r\n\x1a\n\x00\xff\xfe\x80", "bom.txt": b"\xef\xbb\xbfhello",
          "utf8.txt": "\u00e9t\u00e9".encode(), "empty.bin": b""}


def test_bytes_inputs_reach_the_app_unchanged(project: Path, tmp_path: Path) -> None:
    files_project(project, BINARY)
    seen_path = tmp_path / "observed.jsonl"
    entry = write_app(project, seen_path, APPS["items_only"])
    write_config(project, inputs="data/bin", manifest="data/bin/manifest.json",
                 entry=entry, decode="bytes")
    code, summary, _ = pilot(project)
    assert code == 0, summary["problems"]
    seen = observed(seen_path)
    for name, data in BINARY.items():
        got = seen[name.split(".")[0]]
        assert (got["kind"], got["type"],
                got["keys"]) == ("bytes", "bytes", ["bytes", "id", "sha256"])
        assert bytes.fromhex(got["value"]) == data  # no UTF-8 check, no BOM stripped
        assert got["sha256"] == hashlib.sha256(data).hexdigest()
    kept = {r["id"]: r["sha256"] for r in results(Path(summary["run_dir"]))}
    assert kept == {name.split(".")[0]: hashlib.sha256(data).hexdigest() for name,
                    data in BINARY.items()}


def test_a_stopped_run_of_bytes_inputs_resumes(project: Path, tmp_path: Path) -> None:
    """--resume reads the inputs already answered as the run did (bytes, never checked to be UTF-8)."""
    files_project(project, BINARY)
    marker = tmp_path / "crash-once"
    marker.touch()
    body = f'''
import os


def predict(items):
    if os.path.exists({str(marker)!r}) and any(item["id"] == "utf8" for item in items):
        os._exit(3)
    return observe(items, None)
'''
    write_config(project, inputs="data/bin", manifest="data/bin/manifest.json", decode="bytes",
                 entry=write_app(project, tmp_path / "observed.jsonl", body))
    code, summary, _ = pilot(project, "--run-id", "stopped")
    assert code != 0 and summary["stopped"]["rule"] == "app-exit"
    marker.unlink()
    code, summary, _ = pilot(project, "--resume", "stopped")
    assert code == 0, summary["problems"]
    assert Counter(r["id"]
                   for r in results(Path(summary["run_dir"]))) == Counter(
                       n.split(".")[0] for n in BINARY)


def test_utf8_inputs_stay_text_and_a_binary_one_is_still_refused(
    project: Path, tmp_path: Path) -> None:
    files_project(project, BINARY)
    seen_path = tmp_path / "observed.jsonl"
    write_config(project, inputs="data/bin", manifest="data/bin/manifest.json",
                 entry=write_app(project, seen_path, APPS["items_only"]))
    code, summary, _ = pilot(project)
    assert code == 1
    assert any(p.startswith(
        "png: expected acceptance, but rejected: input file png.bin is not valid UTF-8")
               for p in summary["problems"]), summary["problems"]
    seen = observed(seen_path)
    assert "png" not in seen
    assert seen["bom"]["value"] == "hello" and seen["bom"]["sha256"] == hashlib.sha256(
        BINARY["bom.txt"]).hexdigest()
    assert (seen["utf8"]["kind"], seen["utf8"]["value"],
            seen["utf8"]["params"]) == ("text", "\u00e9t\u00e9", "none")


def test_jsonl_records_reach_the_app_as_dicts_with_their_canonical_sha256(
    project: Path, tmp_path: Path) -> None:
    lines = corpus_lines(7)
    seen_path = tmp_path / "observed.jsonl"
    corpus_project(project, lines, entry=write_app(project, seen_path, APPS["with_params"]))
    code, summary, _ = pilot(project)
    assert code == 0, summary["problems"]
    seen = observed(seen_path)
    assert len(seen) == 7
    kept = {r["id"]: r["sha256"] for r in results(Path(summary["run_dir"]))}
    for line in lines:
        record = json.loads(line)
        got = seen[record["id"]]
        assert (got["kind"], got["type"], got["value"]) == ("record", "dict", record)
        assert got["sha256"] == canonical_sha(record) == kept[record["id"]]
        # predict(items, params) with no params declared: an empty object
        assert got["params"] == {}


def test_a_record_changed_after_the_run_started_is_that_items_rejection(
    project: Path, tmp_path: Path) -> None:
    """The app rewrites two later records in place while it runs its first batch: one no longer parses, one
    holds another ID. Both are the harness's rejections with the reason; the others go on."""
    lines = corpus_lines(12)
    corpus = corpus_project(project, lines, batch_size=2)
    broken, renamed = lines[9], lines[10]
    offsets = {n: sum(map(len, lines[:n])) for n in (9, 10)}
    body = f'''
import os
EDITED = []


def predict(items):
    if not EDITED:
        EDITED.append(1)
        fd = os.open({str(corpus)!r}, os.O_WRONLY)
        os.pwrite(fd, b"{{" + b"x" * {len(broken) - 2} + b"\\n", {offsets[9]})
        os.pwrite(fd, {renamed.replace(b'"r-010"', b'"q-010"')!r}, {offsets[10]})
        os.close(fd)
    return observe(items, None)
'''
    seen_path = tmp_path / "observed.jsonl"
    write_config(project, inputs={"jsonl": "data/corpus.jsonl", "id": "id"},
                 manifest="data/corpus-manifest.json",
                 batch_size=2, entry=write_app(project, seen_path, body))
    code, summary, _ = pilot(project)
    assert code == 1
    by_id = {r["id"]: r for r in results(Path(summary["run_dir"]))}
    assert set(by_id) == {f"r-{n:03d}" for n in range(12)}
    for ident, what in (("r-009", "its line no longer parses: not valid JSON"),
                        ("r-010", 'its line now holds the ID "q-010"')):
        record = by_id[ident]
        assert (record["outcome"], record["by"]) == ("rejected", "harness")
        assert record["reason"].startswith(
            f"input record {ident} (corpus.jsonl line {int(ident[2:]) + 1}): {what}")
        assert record["reason"].endswith("the corpus changed since the run started; restore it, or "
                                         "start a new run on it")
    assert set(observed(seen_path)) == set(by_id) - {"r-009", "r-010"}
    assert all(by_id[i]["outcome"] == "accepted" for i in set(by_id) - {"r-009", "r-010"})


def test_params_reach_a_predict_that_takes_them(project: Path, tmp_path: Path) -> None:
    params = {"temperature": 0.25, "max_tokens": 64, "stop": ["\n"], "seed": 7}
    seen_path = tmp_path / "observed.jsonl"
    corpus_project(project, corpus_lines(3),
                   entry=write_app(project, seen_path, APPS["with_params"]), params=params)
    code, summary, _ = pilot(project)
    assert code == 0, summary["problems"]
    assert [entry["params"] for entry in observed(seen_path).values()] == [params] * 3


@pytest.mark.parametrize(("app", "expected"), [("items_only", "none"), ("option", 8)])
def test_a_predict_of_the_items_alone_is_called_as_before(project: Path, tmp_path: Path, app: str,
                                                          expected: Any) -> None:
    """predict(items), and predict(items, option=default) written before params existed, get no params."""
    seen_path = tmp_path / "observed.jsonl"
    corpus_project(project, corpus_lines(3), entry=write_app(project, seen_path, APPS[app]),
                   params={"seed": 1})
    code, summary, _ = pilot(project)
    assert code == 0, summary["problems"]
    assert [entry["params"] for entry in observed(seen_path).values()] == [expected] * 3


def test_todays_app_reads_id_and_text_as_before(project: Path) -> None:
    code, summary, _ = pilot(project)  # the template's classifier: item["id"], item["text"]
    assert code == 0, summary["problems"]
    assert (summary["verdict"], summary["total"], summary["accepted"],
            summary["rejected"]) == ("pass", 12, 11, 1)


SLOW = '''
import time


def predict(items, params):
    time.sleep(0.05)
    return observe(items, params)
'''


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sigkill_mid_run_on_a_corpus_then_resume_keeps_each_id_once(project: Path, tmp_path: Path,
                                                                   seed: int) -> None:
    count = 30
    seen_path = tmp_path / "observed.jsonl"
    corpus_project(project, corpus_lines(count), batch_size=3, params={"seed": seed},
                   entry=write_app(project, seen_path, SLOW))
    kill_after = random.Random(seed).randrange(3, count - 3)
    process = subprocess.Popen([sys.executable, "-m", "kdkit.probe", "pilot", str(project),
                                "--run-id", "killed",
                                "--quiet"], env=dict(os.environ), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE,
                               cwd=REPO)
    run_dir = project / "runs" / "killed"
    wait_for_lines(run_dir / "results.jsonl", kill_after, process)
    time.sleep(random.Random(seed).uniform(0, 0.1))
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert not (run_dir / "summary.json").exists()

    code, summary, _ = pilot(project, "--resume", "killed")
    assert code == 0, summary["problems"]
    ids = Counter(r["id"] for r in results(run_dir))
    assert ids == Counter(f"r-{n:03d}" for n in range(count))
    assert all(r["sha256"] == canonical_sha(json.loads(line)) for r, line in
               zip(sorted(results(run_dir), key=lambda r: r["id"]),
                   corpus_lines(count), strict=True))


# ---------------------------------------------------------------- the harness in this process


def _items(project: Path, **reading: Any) -> tuple[list[harness.Item], list[dict[str, Any]]]:
    cfg = load_pilot(project)
    items, rejected = [], []
    for _number, got, refused in harness.batches(cfg.documents, 4, Reading(**{**{
            "max_bytes": cfg.max_input_bytes, "root": os.fspath(cfg.root), "decode": cfg.decode,
            "id_field": cfg.id_field}, **reading}), 0):
        items += got
        rejected += refused
    return items, rejected


def test_in_process_hands_records_and_params_as_the_apps_process_does(project: Path) -> None:
    corpus_project(project, corpus_lines(5), entry="src.classify:predict", params={"k": [1]})
    items, rejected = _items(project)
    assert not rejected and [item.kind for item in items] == ["record"] * 5
    got: list[Any] = []
    call = harness.in_process(lambda batch, params: got.append((batch, params)) or [], {"k": [1]})
    call(items[:2])
    assert got == [([{"id": "r-000", "record": json.loads(corpus_lines(1)[0]),
                      "sha256": items[0].sha256},
                     {"id": "r-001", "record": json.loads(corpus_lines(2)[1]),
                      "sha256": items[1].sha256}], {"k": [1]})]
    assert harness.in_process(lambda batch: [len(batch)])(items) == [5]


class _Callable:
    def __call__(self, items: Any, params: Any) -> Any:
        return params


@pytest.mark.parametrize(("function", "takes"), [
    (lambda items: items, False), (lambda items, params: items, True),
    (lambda items, params=None: items, True),
    (lambda items, batch_size=8: items, False), (lambda *args: args, True),
    (lambda items, *rest: items, True),
    (lambda items, *, params=None: items, False), (_Callable(), True), (print, True), (len, False)],
    ids=["items", "items-params", "params-default", "option-default", "star-args", "items-star",
         "keyword-only",
         "callable-object", "builtin-star", "builtin-one"])
def test_takes_params_is_decided_from_the_signature(function: Any, takes: bool) -> None:
    assert harness.takes_params(function) is takes


def test_records_that_cannot_be_sent_are_refused_with_the_reason(project: Path) -> None:
    lines = [*corpus_lines(2), b'{"id": "big", "text": "' + b"x" * 5000 + b'"}\n',
             b'{"id": "inf", "x": 1e999}\n',
             b'{"id": "spaced",    "text":     "' + b"y" * 3000 + b'"}\n']
    corpus_project(project, lines, entry="src.classify:predict")
    items, rejected = _items(project)
    # 3,000 bytes once spaces are gone
    assert [item.doc.id for item in items] == ["r-000", "r-001", "spaced"]
    reasons = {r["id"]: r["reason"] for r in rejected}
    assert reasons["big"] == ("input record big (corpus.jsonl line 3) is 5022 bytes as canonical "
                              "JSON, over max_input_bytes 4096")
    assert reasons["inf"].startswith(
        "input record inf (corpus.jsonl line 4) cannot be sent as JSON: Out of range")


def test_a_truncated_or_missing_corpus_is_each_records_rejection(project: Path) -> None:
    lines = corpus_lines(4)
    corpus = corpus_project(project, lines, entry="src.classify:predict")
    cfg = load_pilot(project)
    corpus.write_bytes(b"".join(lines[:2]) + lines[2][:10])
    reasons = [r["reason"] for _n, _i,
               refused in harness.batches(cfg.documents, 4, Reading.of(cfg), 0)
               for r in refused]
    assert reasons == [f"input record r-00{n} (corpus.jsonl line {n + 1}): its line is no longer "
                       "there; the corpus changed since the run started; restore it, or start a "
                       "new run on it" for n in (2, 3)]
    corpus.unlink()
    reasons = [r["reason"] for _n, _i,
               refused in harness.batches(cfg.documents, 4, Reading.of(cfg), 0)
               for r in refused]
    assert reasons == ["input file corpus.jsonl not found"] * 4


def test_a_fifo_is_refused_whatever_the_decoding(project: Path) -> None:
    files_project(project, {"a.bin": b"\x00\xff", "b.bin": b"x"})
    write_config(project, inputs="data/bin", manifest="data/bin/manifest.json",
                 entry="src.classify:predict",
                 decode="bytes")
    (project / "data/bin/b.bin").unlink()
    os.mkfifo(project / "data/bin/b.bin")
    items, rejected = _items(project)
    assert [(item.doc.id, item.kind, item.data) for item in items] == [("a", "bytes", b"\x00\xff")]
    assert rejected[0]["reason"] == "input file b.bin is a FIFO (named pipe), not a regular file; the harness never " \
                                    "reads it"


def test_a_batch_of_consecutive_records_is_one_read(project: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    corpus_project(project, corpus_lines(10), entry="src.classify:predict")
    reads: list[tuple[int, int]] = []
    real = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, size,
                        offset: reads.append((size, offset)) or real(fd, size, offset))
    items, _ = _items(project)
    assert len(items) == 10 and len(reads) == 3  # batches of 4, 4 and 2
