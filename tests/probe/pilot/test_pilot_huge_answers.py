"""Issue 24 §8: huge answers and huge inputs cost the harness what it keeps, never what the app sends.

A reply of the app's process is refused from its length header, before one byte of its body is read,
when it is over the bound the batch size gives it (1 MiB + 64 KiB per item): the stop rule
`app-protocol`, with the batch named. What is kept of an answer (120 characters of an odd value, 500 of
a reason) is cut first and redacted after, with a margin, so a credential shape across the cut is
still redacted. An input is held once: read, checked, hashed and sent from the same bytes.

Every pilot is real (a scaffolded project, the app in its own process). Memory is judged by the
pilot process's own peak RSS (VmHWM of /proc/self/status, read in that process: the app's process is
not in it; ru_maxrss is not used, since Linux carries it over an exec, and a child that pytest starts
with vfork inherits the test process's own peak), against generous bounds; no test measures time.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kdkit.core.pilotconfig import Document
from kdkit.probe.pilot import harness
from tests.conftest import REPO
from tests.probe.pilot.test_pilot import edit_config
from tests.probe.pilot.test_pilot_supervision import closed_and_failing, make_app

MIB = 1 << 20
MEASURED = ("import sys\nfrom kdkit.probe.entry import main\ncode = main(sys.argv[1:])\n"
            "hwm = next(line for line in open('/proc/self/status') if line.startswith('VmHWM:'))\n"
            "print('peak-rss-kib', hwm.split()[1], file=sys.stderr)\n"
            "sys.exit(code)")
# The pilot's harness holds its modules and a small run in about 25 MB; a harness that read a refused
# 64 MB reply would hold it at least twice (its buffer and its bytes).
NOT_READ_BOUND = 100 * MIB


def measured_pilot(project: Path, *args: str) -> tuple[int, dict[str, Any], str, int]:
    """`kdkit pilot PROJECT --json` in a process of its own: (exit code, summary, stderr, its peak RSS in bytes)."""
    done = subprocess.run([sys.executable, "-c", MEASURED, "pilot", str(project), "--json", *args],
                          capture_output=True, text=True, cwd=REPO, timeout=900, check=False)
    *said, peak = done.stderr.rstrip("\n").split("\n")
    assert peak.startswith("peak-rss-kib "), done.stderr[-2000:]
    summary = json.loads(done.stdout) if done.stdout.strip() else {}
    return done.returncode, summary, "\n".join(said), int(peak.split()[1]) * 1024


def stopped_unread(project: Path, name: str, body: str) -> dict[str, Any]:
    """The app does ``body`` on batch 1; the run must stop with app-protocol, its reply never read."""
    make_app(project, name, body, f"sends a reply it should not: {name}")
    code, summary, _, peak = measured_pilot(project, "--run-id", name)
    stop = closed_and_failing(project, name, code, summary)
    assert stop["rule"] == "app-protocol", stop
    assert peak < NOT_READ_BOUND, f"harness peak RSS {peak / MIB:.0f} MiB: the refused reply was read"
    return stop


RAW = (
    "import gc, struct\nserver = next(o for o in gc.get_objects() if type(o).__name__ == "
    "'Server')\n")
BIG = 64 * MIB


@pytest.mark.parametrize(("name", "body"), [
    ("hugeerror", f"return [{{'id': i['id'], 'error': 'x' * {BIG}}} for i in items]"),
    ("hugecategory",
     f"return [{{'id': i['id'], 'category': 'invoice' * {BIG // 7}}} for i in items]"),
    ("hugeid", f"return [{{'id': 'doc-05' * {BIG // 6}, 'category': 'invoice'}}] + correct(items)"),
    ("manymedium",
     "return correct(items) + [{'id': 'doc-05', 'category': 'invoice', 'note': 'y' * 500}] * "
     "20000"),
    ("bigextra", "return [{**a, 'logits': [0.5] * 400000} for a in correct(items)]"),
], ids=["a 64 MB error", "a 64 MB category",
        "a 64 MB id", "20 000 medium answers", "a 2 MB extra key"])
def test_an_answer_over_the_bound_stops_the_run_unread(project: Path, name: str, body: str) -> None:
    stop = stopped_unread(project, name, body)
    assert "more than the 1310720 a reply may take with batch_size 4; not read" in stop["reason"], stop["reason"]


def test_a_header_claiming_2_gib_and_then_nothing_stops_at_once(project: Path) -> None:
    # The app then sleeps: a harness waiting for the body would wait for max_batch_seconds (300 s), a rule
    # of its own; the stop must be the header's.
    body = RAW + "server.replies.write(struct.pack('>IQ', 1 << 31, 0))\ntime.sleep(3600)"
    stop = stopped_unread(project, "claims2g", body)
    assert "a reply of 2147483648 bytes" in stop["reason"], stop["reason"]


def test_a_header_over_the_bound_with_a_real_body_is_refused_before_the_body(project: Path) -> None:
    size = 1310720 + 1  # one byte over the bound of batch_size 4
    body = RAW + (f"server.replies.write(struct.pack('>IQ', {size}, 0) + "
                  f"b'{{\"op\":\"answers\",\"plain\":[' + b' ' * ({size} - 26) + b']}}')\nreturn "
                  "correct(items)")
    stop = stopped_unread(project, "overby1", body)
    assert f"a reply of {size} bytes" in stop["reason"], stop["reason"]


def test_a_reply_with_a_payload_is_refused(project: Path) -> None:
    body = RAW + "server.replies.write(struct.pack('>IQ', 2, 1 << 40) + b'{}')\ntime.sleep(3600)"
    stop = stopped_unread(project, "payload", body)
    assert "bytes of payload (replies have none)" in stop["reason"], stop["reason"]


def test_deeply_nested_json_written_raw_is_a_protocol_stop(project: Path) -> None:
    nested = "b'{\"op\":\"answers\",\"plain\":' + b'[' * 200000 + b']' * 200000 + b'}'"
    body = (RAW
            + f"data = {nested}\nserver.replies.write(struct.pack('>IQ', len(data), 0) + "
              "data)\ntime.sleep(3600)")
    stop = stopped_unread(project, "nested", body)
    assert "a reply that is not a JSON object" in stop["reason"], stop["reason"]


def test_answers_within_the_bound_pass_and_deep_values_are_kept_short(project: Path) -> None:
    """The bound leaves room: 60 KB of extra keys per answer, or a value nested past JSON's depth (the app's
    process sends it as a short repr), still pass."""
    body = ("deep = []\nfor _ in range(100000):\n    deep = [deep]\n"
            "return [{**a, 'notes': 'n' * 60000, 'deep': deep} for a in correct(items)]")
    make_app(project, "roomy", body, "answers with big but bounded extras")
    code, summary, _, peak = measured_pilot(project, "--run-id", "roomy")
    assert code == 0 and summary["verdict"] == "pass", summary.get("problems")
    assert peak < NOT_READ_BOUND


# ---------------------------------------------------------------- what is kept is redacted, and only that


def _secrets() -> dict[str, tuple[str, str]]:
    """doc-05..08 -> (an error whose credential crosses the 500-character cut, a part of it that must not be kept).
    Built by concatenation: no credential shape is written in this file."""
    github = "gh" + "p_" + "Q7w8E9r0T1y2U3i4O5p6A7s8D9f0G1h2J3k4"
    jwt = "ey" + "J" + "Hd9Kq2" * 4000 + ".ey" + "J" + "pL0aZ7" * 3 + ".c2ln"
    quoted = " pass" + 'word="' + "Zx9 " * 5000 + '"'
    url = " https://alice:Vq8Lp2Xw" + "@example.org/simple"
    return {
        "doc-05": ("x" * 490 + " " + github + " after", "Q7w8E9r0"),
        "doc-06": ("x" * 470 + " " + jwt + " after", "Hd9Kq2"),
        "doc-07": ("x" * 480 + quoted + " after " + "z" * 30000, "Zx9"),
        "doc-08": ("x" * 480 + url + " " + "z" * 40000, "Vq8Lp2Xw"),
    }


SECRETS_APP = '''from src.oracle import predict as correct
ERRORS = {errors!r}

def predict(items):
    return [{{"id": i["id"], "error": ERRORS[i["id"]]}} if i["id"] in ERRORS else a
            for i, a in zip(items, correct(items))]
'''


def test_a_credential_across_the_cut_is_redacted_in_what_is_kept(project: Path) -> None:
    secrets = _secrets()
    import shutil

    from tests.conftest import DATA
    shutil.copy(DATA / "apps" / "oracle.py", project / "src" / "oracle.py")
    (project / "src"
     / "leaky.py").write_text(SECRETS_APP.format(errors={k: v[0] for k, v in secrets.items()}))
    edit_config(project, entry="src.leaky:predict", device="cpu",
                stop={"max_rejected": None, "max_seconds": 600})
    code, summary, _, _ = measured_pilot(project, "--run-id", "leaky")
    assert code == 1 and summary["rejected"] == 5, summary  # the four, and doc-12 (planned)
    run = project / "runs" / "leaky"
    reasons = {r["id"]: r["reason"]
               for r in map(json.loads, (run / "results.jsonl").read_text().splitlines())
               if r["outcome"] == "rejected"}
    written = "".join(p.read_text(errors="replace") for p in run.iterdir())
    for ident, (error, secret) in secrets.items():
        assert secret not in reasons[ident] and secret not in written, (
            ident, reasons[ident][-120:])
        assert reasons[ident].startswith(error[:400]) and reasons[ident].endswith("...")
        assert len(reasons[ident]) == 503 and "<red" in reasons[ident], (
            ident, reasons[ident][-80:])


# ---------------------------------------------------------------- an input is held once


def test_a_big_input_is_held_once(project: Path) -> None:
    size = 100 * MIB
    (project / "data" / "pilot" / "doc-05.txt").write_bytes(b"invoice " * (size // 8))
    # doc-05 is answered with an error: summary.md's excerpts show accepted inputs only
    make_app(project, "bigin",
             "return [{'id': 'doc-05', 'error': 'too long for me'}] + correct(items[1:])",
             "refuses the big input", max_input_bytes=size + 1)
    code, summary, _, peak = measured_pilot(project, "--run-id", "bigin")
    assert summary["accepted"] == 10 and summary["rejected"] == 2, summary
    # held once: the file's bytes (100 MiB) and the harness itself; before, the text was held four times
    assert peak < size * 1.5 + 64 * MIB, f"harness peak RSS {peak / MIB:.0f} MiB for a {size // MIB} MiB input"
    assert code == 1


def _doc(folder: Path, data: bytes) -> Document:
    (folder / "in.txt").write_bytes(data)
    return Document(id="in", file="in.txt", location=str(folder / "in.txt"),
                    label=None, expect="accept")


@pytest.mark.parametrize(("data", "bad"), [
    # a character across the block boundary
    (b"a" * (MIB - 1) + "\u00e9".encode() + b"b" * 10, None),
    (b"a" * (MIB - 1) + "\U0001f600".encode() + b"b" * 10, None),
    (b"a" * (3 * MIB + 5) + b"\xff" + b"c", 3 * MIB + 5),
    ("\u00e9".encode() * MIB + b"\xc3", 2 * MIB),  # cut inside a character at the very end
    (b"\xef\xbb\xbf" + "\u00e9".encode() * 10 + b"\x80", 23),
], ids=["2 bytes across", "4 bytes across",
        "bad byte after 3 MiB", "truncated at the end", "BOM then bad"])
def test_utf8_is_checked_by_blocks_with_the_offset_of_the_file(
    tmp_path: Path, data: bytes, bad: int | None) -> None:
    got = harness.read_input(_doc(tmp_path, data), len(data))
    if bad is None:
        assert isinstance(got, harness.Item) and got.text == data.decode("utf-8")
        assert bytes(got.payload) == data
    else:
        assert got == (f"input file in.txt is not valid UTF-8 (byte 0x{data[bad]:02x} at offset "
                       f"{bad}); convert it to UTF-8 or keep it as a planned rejection")


def test_a_bom_is_hashed_but_not_sent(tmp_path: Path) -> None:
    import hashlib

    data = b"\xef\xbb\xbfhello \xc3\xa9"
    got = harness.read_input(_doc(tmp_path, data), 100)
    assert isinstance(got, harness.Item)
    assert got.sha256 == hashlib.sha256(data).hexdigest() and bytes(
        got.payload) == "hello \u00e9".encode()
    assert got.text == "hello \u00e9" and got.excerpt(3) == ("hel",
                                                             True) and got.excerpt(7) == (
                                                                 "hello \u00e9", False)
