"""Wrong app: silently leaves out one ID."""

from src.oracle import predict as correct


def predict(items):
    return [result for result in correct(items) if result["id"] != "doc-05"]
