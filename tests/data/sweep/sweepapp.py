"""Test apps for `kdkit sweep`: fast, deterministic, each failing in one planned way.

``predict_oom`` stands in for a GPU running out of memory (the one thing a CPU machine cannot
produce safely): it raises torch's own OutOfMemoryError from batch size 4 up.
"""

import torch

CATEGORIES = ("invoice", "contract", "research", "support")


def _answer(item):
    words = item["text"].split()
    return {"id": item["id"], "category": CATEGORIES[len(words) % len(CATEGORIES)]}


def _hold(items):
    # Memory that grows with the batch, so the peak differs between batch sizes.
    return torch.ones(len(items), 1 << 20)  # 4 MiB per item


def predict_ok(items):
    held = _hold(items)
    del held
    return [_answer(item) for item in items]


def predict_oom(items):
    if len(items) >= 4:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
    return predict_ok(items)


def predict_scrambled(items):
    return list(reversed(predict_ok(items)))


def predict_fails_batched(items):
    if len(items) > 1:
        raise ValueError("padding mismatch in batch")
    return predict_ok(items)
