"""Wrong app: answers with a bare string, a result with both keys, and an empty reason."""

from src.oracle import predict as correct


def predict(items):
    results = []
    for r in correct(items):
        if r["id"] == "doc-04":
            results.append("doc-04 is support")
        elif r["id"] == "doc-08":
            results.append({"id": "doc-08", "category": "support", "error": "unsure"})
        elif r["id"] == "doc-10":
            results.append({"id": "doc-10", "error": ""})
        else:
            results.append(r)
    return results
