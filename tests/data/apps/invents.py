"""Wrong app: adds a result for an ID it was never given."""

from src.oracle import predict as correct


def predict(items):
    results = correct(items)
    if any(item["id"] == "doc-01" for item in items):
        results.append({"id": "doc-99", "category": "invoice"})
    return results
