"""Example text embedder: the app the pilot runs (entry ``src.embed:predict``).

A small but real PyTorch model: hashed words and character trigrams feed one
linear projection to DIM numbers, trained at first use on the shipped sentence
pairs (src/pairs.jsonl, paraphrases written apart from the pilot texts) with a
contrastive loss: each sentence's vector is pulled towards its paraphrase's and
away from the others'. Training is seeded and runs on one CPU thread, so the
weights are the same on every machine, and nothing is written to disk (the
model is rebuilt in a second by each process); inference then runs on the device
chosen by the pilot config (KDKIT_DEVICE: auto, cpu, cuda, cuda:N; ROCm GPUs
also appear as cuda).

Each vector is L2-normalised: the cosine of two texts is the dot product of
their vectors. The manifest's "expected" vectors were made by this same build
(python -m src.embed TEXT prints one); the pilot scores each answer by its
cosine against them ("min_quality" in config/pilot.json).

Replace this module with your application; keep the interface:
``predict(items: list[dict]) -> list[dict]``, each item ``{"id", "text", ...}``,
each result ``{"id", "output": [DIM floats]}`` or ``{"id", "error": "reason"}``.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import zlib
from pathlib import Path
from typing import Any

import torch

DIM = 32  # config/pilot.json: "output": {"kind": "vector", "dim": 32}
PAIRS = Path(__file__).with_name("pairs.jsonl")
BUCKETS = 1 << 11
SEED = 20240602
STEPS = 150
LEARNING_RATE = 0.03
BETAS = (0.9, 0.999)
TEMPERATURE = 0.1  # of the contrastive loss: lower pulls paraphrases closer
WORD = re.compile(r"[a-z0-9]+")

_model: tuple[torch.Tensor, torch.device] | None = None


def features(text: str) -> dict[int, float]:
    """Hashed counts of words and of each word's character trigrams, log-scaled and L2-normalized (sparse).

    crc32 (not Python's salted hash) keeps the buckets identical in every process; trigrams make
    "rain" and "raining" close before any training.
    """
    counts: dict[int, float] = {}
    for word in WORD.findall(text.lower()):
        padded = f"<{word}>"
        for token in [word] + [padded[i:i + 3] for i in range(len(padded) - 2)]:
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


def _pairs() -> tuple[torch.Tensor, torch.Tensor]:
    rows = [json.loads(line) for line in PAIRS.read_text(encoding="utf-8").splitlines() if line.strip()]
    return matrix([r["a"] for r in rows]), matrix([r["b"] for r in rows])


def train() -> torch.Tensor:
    """The projection (DIM x BUCKETS), fitted on the pairs: seeded, full-batch, on one CPU thread.

    One thread makes the float sums' order, hence the weights, identical everywhere.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _fit()
    finally:
        torch.set_num_threads(threads)


def _fit() -> torch.Tensor:
    """Full-batch Adam on a symmetric InfoNCE loss, written out (torch.optim would import torch._dynamo,
    a second of start-up)."""
    a, b = _pairs()
    target = torch.arange(a.shape[0])
    generator = torch.Generator().manual_seed(SEED)
    weight = (torch.randn(DIM, BUCKETS, generator=generator) / math.sqrt(DIM)).requires_grad_()
    mean, square = torch.zeros_like(weight), torch.zeros_like(weight)
    for step in range(1, STEPS + 1):
        za = torch.nn.functional.normalize(a @ weight.T, dim=1)
        zb = torch.nn.functional.normalize(b @ weight.T, dim=1)
        logits = za @ zb.T / TEMPERATURE
        loss = torch.nn.functional.cross_entropy(logits, target) + torch.nn.functional.cross_entropy(logits.T, target)
        (grad,) = torch.autograd.grad(loss, (weight,))
        with torch.no_grad():
            mean.mul_(BETAS[0]).add_(grad, alpha=1 - BETAS[0])
            square.mul_(BETAS[1]).addcmul_(grad, grad, value=1 - BETAS[1])
            corrected = square.div(1 - BETAS[1] ** step).sqrt_().add_(1e-8)
            weight.sub_(LEARNING_RATE * mean.div(1 - BETAS[0] ** step) / corrected)
    return weight.detach()


def device() -> torch.device:
    """The device from the pilot config (KDKIT_DEVICE), auto meaning the GPU when torch sees one."""
    wanted = os.environ.get("KDKIT_DEVICE", "auto")
    if wanted == "auto":
        wanted = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(wanted)


def model() -> tuple[torch.Tensor, torch.device]:
    global _model
    if _model is None:
        target = device()
        _model = (train().to(target), target)
    return _model


def embed(texts: list[str]) -> list[list[float]]:
    """One L2-normalised vector of DIM floats per text."""
    weight, target = model()
    with torch.no_grad():
        vectors = torch.nn.functional.normalize(matrix(texts, target) @ weight.T, dim=1)
    return [[float(v) for v in row] for row in vectors.cpu().tolist()]


def predict(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One result per item, in order: a vector, or an error for a text with no words."""
    usable = [item for item in items if WORD.search(item["text"].lower())]
    vectors = dict(zip((item["id"] for item in usable), embed([item["text"] for item in usable]), strict=True)) \
        if usable else {}
    results: list[dict[str, Any]] = []
    for item in items:
        if item["id"] in vectors:
            results.append({"id": item["id"], "output": vectors[item["id"]]})
        else:
            results.append({"id": item["id"], "error": "no words to embed (empty or symbols only)"})
    return results


if __name__ == "__main__":  # python -m src.embed TEXT...: each text's vector, one JSON line each
    for vector in embed(sys.argv[1:]):
        print(json.dumps(vector))
