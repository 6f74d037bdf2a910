"""Example document classifier: the app the pilot runs (entry ``src.classify:predict``).

A small but real PyTorch model: hashed word and word-pair counts feed one
linear layer, trained at first use on the shipped examples (src/examples.jsonl,
sentences written apart from the pilot documents). Training is seeded and runs
on the CPU, so the weights are the same on every machine; inference then runs on
the device chosen by the pilot config (KDKIT_DEVICE: auto, cpu, cuda, cuda:N;
ROCm GPUs also appear as cuda).

Replace this module with your application; keep the interface:
``predict(items: list[dict]) -> list[dict]``, each item ``{"id", "text"}``, each
result ``{"id", "category"}`` or ``{"id", "error": "reason"}``.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import zlib
from pathlib import Path
from typing import Any

import torch

CATEGORIES = ("invoice", "contract", "research", "support")
EXAMPLES = Path(__file__).with_name("examples.jsonl")
BUCKETS = 1 << 12
SEED = 20240601
STEPS = 200
LEARNING_RATE = 0.05
BETAS = (0.9, 0.999)
WEIGHT_DECAY = 1e-4
WORD = re.compile(r"[a-z]+")

_model: tuple[torch.nn.Linear, torch.device] | None = None


def features(text: str) -> dict[int, float]:
    """Hashed counts of words and adjacent word pairs, log-scaled and L2-normalized (sparse).

    crc32 (not Python's salted hash) keeps the buckets identical in every process.
    """
    words = WORD.findall(text.lower())
    counts: dict[int, float] = {}
    for token in words + [f"{a} {b}" for a, b in itertools.pairwise(words)]:
        bucket = zlib.crc32(token.encode("utf-8")) % BUCKETS
        counts[bucket] = counts.get(bucket, 0.0) + 1.0
    scaled = {bucket: math.log1p(count) for bucket, count in counts.items()}
    norm = math.sqrt(sum(v * v for v in scaled.values())) or 1.0
    return {bucket: v / norm for bucket, v in scaled.items()}


def matrix(texts: list[str], target: torch.device | str = "cpu") -> torch.Tensor:
    """The feature rows of ``texts`` as one dense float32 tensor on ``target``."""
    x = torch.zeros(len(texts), BUCKETS, dtype=torch.float32)
    for row, text in enumerate(texts):
        for bucket, value in features(text).items():
            x[row, bucket] = value
    return x.to(target)


def _examples() -> tuple[torch.Tensor, torch.Tensor]:
    rows = [json.loads(line) for line in EXAMPLES.read_text(encoding="utf-8").splitlines() if line.strip()]
    y = torch.tensor([CATEGORIES.index(r["label"]) for r in rows], dtype=torch.long)
    return matrix([r["text"] for r in rows]), y


def train() -> torch.nn.Linear:
    """Fit the linear layer on the examples: seeded, full-batch, on one CPU thread.

    One thread makes the float sums' order, hence the weights, identical everywhere, and
    is faster for a layer this small than waking a thread pool 300 times.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _fit()
    finally:
        torch.set_num_threads(threads)


def _fit() -> torch.nn.Linear:
    """Full-batch Adam, written out: torch.optim would import torch._dynamo, a second of start-up."""
    x, y = _examples()
    generator = torch.Generator().manual_seed(SEED)
    weight = (torch.randn(len(CATEGORIES), BUCKETS, generator=generator) * 0.01).requires_grad_()
    bias = torch.zeros(len(CATEGORIES), requires_grad=True)
    params = (weight, bias)
    moments = [(torch.zeros_like(p), torch.zeros_like(p)) for p in params]
    for step in range(1, STEPS + 1):
        loss = torch.nn.functional.cross_entropy(x @ weight.T + bias, y) + WEIGHT_DECAY * weight.square().sum()
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for param, grad, (mean, square) in zip(params, grads, moments, strict=True):
                mean.mul_(BETAS[0]).add_(grad, alpha=1 - BETAS[0])
                square.mul_(BETAS[1]).addcmul_(grad, grad, value=1 - BETAS[1])
                corrected = square.div(1 - BETAS[1] ** step).sqrt_().add_(1e-8)
                param.sub_(LEARNING_RATE * mean.div(1 - BETAS[0] ** step) / corrected)
    layer = torch.nn.Linear(BUCKETS, len(CATEGORIES))
    with torch.no_grad():
        layer.weight.copy_(weight)
        layer.bias.copy_(bias)
    return layer.eval()


def device() -> torch.device:
    """The device from the pilot config (KDKIT_DEVICE), auto meaning the GPU when torch sees one."""
    wanted = os.environ.get("KDKIT_DEVICE", "auto")
    if wanted == "auto":
        wanted = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(wanted)


def model() -> tuple[torch.nn.Linear, torch.device]:
    global _model
    if _model is None:
        target = device()
        _model = (train().to(target), target)
    return _model


def predict(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One result per item, in order: a category, or an error for a document with no words."""
    layer, target = model()
    results: list[dict[str, Any]] = []
    usable = [item for item in items if WORD.search(item["text"].lower())]
    if usable:
        x = matrix([item["text"] for item in usable], target)
        with torch.no_grad():
            chosen = layer(x).argmax(dim=1).tolist()
        answers = {item["id"]: CATEGORIES[index] for item, index in zip(usable, chosen, strict=True)}
    else:
        answers = {}
    for item in items:
        if item["id"] in answers:
            results.append({"id": item["id"], "category": answers[item["id"]]})
        else:
            results.append({"id": item["id"], "error": "no words to classify (empty or symbols only)"})
    return results
