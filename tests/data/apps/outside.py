"""Wrong app: answers a category that is not in the allowed list."""

from src.oracle import predict as correct


def predict(items):
    return [dict(r, category="spam") if r["id"] == "doc-03" else r for r in correct(items)]
