"""Wrong app: answers twice for one ID."""

from src.oracle import predict as correct


def predict(items):
    results = correct(items)
    return results + [r for r in results if r["id"] == "doc-02"]
