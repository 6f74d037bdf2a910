"""Wrong app: answers correctly, but on its second batch copies a finished line of results.jsonl
(something else writing into the run folder while it runs)."""

from pathlib import Path

from src.oracle import predict as correct

calls = 0


def predict(items):
    global calls
    calls += 1
    if calls == 2:
        runs = Path(__file__).resolve().parent.parent / "runs"
        results = max(runs.glob("*/results.jsonl"), key=lambda p: p.stat().st_mtime)
        first = results.read_bytes().splitlines(keepends=True)[0]
        with results.open("ab") as handle:
            handle.write(first)
    return correct(items)
