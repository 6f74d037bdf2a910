"""Wrong app: raises on one item; the harness must isolate it and keep the others."""

from src.oracle import predict as correct


def predict(items):
    if any(item["id"] == "doc-06" for item in items):
        raise ValueError("cannot parse doc-06")
    return correct(items)
