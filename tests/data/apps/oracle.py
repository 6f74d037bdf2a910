"""A correct app for harness tests: answers each item with its manifest label. Needs no torch.

Copied into a scaffolded project as src/oracle.py; the wrong apps beside it build on it.
"""

import json
import os
from pathlib import Path

MANIFEST = Path(__file__).resolve().parent.parent / "data" / "pilot" / "manifest.json"


def labels():
    return {d["id"]: d["label"]
            for d in json.loads(MANIFEST.read_text(encoding="utf-8"))["documents"]}


def spy(items):
    """Record the IDs the app was handed (SPY_FILE), to prove what the harness kept from it."""
    if os.environ.get("SPY_FILE"):
        with open(os.environ["SPY_FILE"], "a", encoding="utf-8") as handle:
            handle.writelines(item["id"] + "\n" for item in items)


def predict(items):
    spy(items)
    known = labels()
    return [{"id": item["id"], "category": known[item["id"]]} for item in items]
