"""Example text generator: the app the pilot runs (entry ``src.generate:predict``).

A small but real PyTorch language model: a character-level network (each of the
last CONTEXT characters embedded, one hidden layer, the next character's
logits), trained at first use on the shipped text (src/corpus.txt) for a few
hundred steps. Training is seeded, in float64, on one CPU thread, so the weights
are the same on every machine, and nothing is written to disk (the model is
rebuilt in a second or two by each process); generation then runs on the device
chosen by the pilot config (KDKIT_DEVICE: auto, cpu, cuda, cuda:N; ROCm GPUs
also appear as cuda).

The pilot hands the generation parameters of config/pilot.json's "params" to
``predict(items, params)``: max_new_tokens (characters to add), temperature (0:
greedy, the most likely character each time, deterministic; above 0: sampled)
and seed (each item draws from its own generator, seeded by seed and the item's
ID, so an answer does not depend on the batch it came in). The manifest's
"expected" outputs are greedy continuations made by this same build
(``python -m src.generate PROMPT`` prints one).

Replace this module with your application; keep the interface:
``predict(items: list[dict], params: dict) -> list[dict]``, each item
``{"id", "text", ...}``, each result ``{"id", "output": "text"}`` or
``{"id", "error": "reason"}``.
"""

from __future__ import annotations

import math
import os
import sys
import zlib
from pathlib import Path
from typing import Any

import torch

CORPUS = Path(__file__).with_name("corpus.txt")
CONTEXT = 8  # characters the model sees
EMBED = 16
HIDDEN = 64
SEED = 6  # of the ones tried, the seed whose greedy choices on the pilot prompts lead by the most
STEPS = 200
LEARNING_RATE = 0.01
BETAS = (0.9, 0.999)
DTYPE = torch.float64  # float64 training: the greedy outputs are the same on every machine
DEFAULTS = {"max_new_tokens": 60, "temperature": 0.0, "seed": 0}

_model: tuple[dict[str, torch.Tensor], str, torch.device] | None = None


def corpus() -> str:
    """The training text, on one line: the model never writes a line break (a prompt's becomes a space)."""
    return " ".join(CORPUS.read_text(encoding="utf-8").split("\n")).strip()


def alphabet() -> str:
    """The characters the model knows: those of the corpus (lowercase). Any other becomes a space."""
    return "".join(sorted(set(corpus().lower())))


def encode(text: str, chars: str) -> list[int]:
    space = chars.index(" ")
    index = {c: i for i, c in enumerate(chars)}
    return [index.get(c, space) for c in text.lower()]


def forward(weights: dict[str, torch.Tensor], contexts: torch.Tensor) -> torch.Tensor:
    """The next character's logits for each row of ``contexts`` (N x CONTEXT character indexes)."""
    embedded = weights["embed"][contexts].flatten(1)
    return torch.tanh(embedded @ weights["w1"] + weights["b1"]) @ weights["w2"] + weights["b2"]


def train() -> tuple[dict[str, torch.Tensor], str]:
    """The weights and the alphabet, fitted on the corpus: seeded, full-batch, on one CPU thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _fit()
    finally:
        torch.set_num_threads(threads)


def _fit() -> tuple[dict[str, torch.Tensor], str]:
    """Full-batch Adam, written out (torch.optim would import torch._dynamo, a second of start-up)."""
    chars = alphabet()
    ids = encode(" " * CONTEXT + corpus(), chars)
    contexts = torch.tensor([ids[i:i + CONTEXT] for i in range(len(ids) - CONTEXT)])
    targets = torch.tensor(ids[CONTEXT:])
    generator = torch.Generator().manual_seed(SEED)
    shapes = {"embed": (len(chars), EMBED), "w1": (CONTEXT * EMBED, HIDDEN), "b1": (HIDDEN,),
              "w2": (HIDDEN, len(chars)), "b2": (len(chars),)}
    weights = {name: (torch.randn(shape, generator=generator, dtype=DTYPE) / math.sqrt(shape[0])).requires_grad_()
               for name, shape in shapes.items()}
    moments = {name: (torch.zeros_like(w), torch.zeros_like(w)) for name, w in weights.items()}
    for step in range(1, STEPS + 1):
        loss = torch.nn.functional.cross_entropy(forward(weights, contexts), targets)
        grads = torch.autograd.grad(loss, list(weights.values()))
        with torch.no_grad():
            for (name, param), grad in zip(weights.items(), grads, strict=True):
                mean, square = moments[name]
                mean.mul_(BETAS[0]).add_(grad, alpha=1 - BETAS[0])
                square.mul_(BETAS[1]).addcmul_(grad, grad, value=1 - BETAS[1])
                corrected = square.div(1 - BETAS[1] ** step).sqrt_().add_(1e-8)
                param.sub_(LEARNING_RATE * mean.div(1 - BETAS[0] ** step) / corrected)
    return {name: w.detach() for name, w in weights.items()}, chars


def device() -> torch.device:
    """The device from the pilot config (KDKIT_DEVICE), auto meaning the GPU when torch sees one."""
    wanted = os.environ.get("KDKIT_DEVICE", "auto")
    if wanted == "auto":
        wanted = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(wanted)


def model() -> tuple[dict[str, torch.Tensor], str, torch.device]:
    global _model
    if _model is None:
        target = device()
        weights, chars = train()
        _model = ({name: w.to(target) for name, w in weights.items()}, chars, target)
    return _model


def settings(params: dict[str, Any] | None) -> tuple[int, float, int]:
    """(max_new_tokens, temperature, seed) from ``params``, defaults for the keys it lacks; ValueError names
    a key whose value cannot be used."""
    given = {**DEFAULTS, **(params or {})}
    tokens, temperature, seed = given["max_new_tokens"], given["temperature"], given["seed"]
    if isinstance(tokens, bool) or not isinstance(tokens, int) or not 0 <= tokens <= 100_000:
        raise ValueError(f"params.max_new_tokens must be an integer from 0 to 100000, not {tokens!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 <= temperature <= 100:
        raise ValueError(f"params.temperature must be a number from 0 (greedy) to 100, not {temperature!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"params.seed must be an integer, not {seed!r}")
    return tokens, float(temperature), seed


def continuation(prompt: str, tokens: int, temperature: float, generator: torch.Generator | None) -> str:
    """``tokens`` characters after ``prompt``: the most likely each time (temperature 0), else sampled."""
    weights, chars, target = model()
    context = (encode(" " * CONTEXT + prompt, chars))[-CONTEXT:]
    out = []
    with torch.no_grad():
        for _ in range(tokens):
            logits = forward(weights, torch.tensor([context], device=target))[0].cpu()
            if temperature == 0:
                chosen = int(logits.argmax())
            else:
                chosen = int(torch.multinomial(torch.softmax(logits / temperature, 0), 1, generator=generator))
            out.append(chars[chosen])
            context = [*context[1:], chosen]
    return "".join(out)


def generate(ident: str, prompt: str, params: dict[str, Any] | None) -> str:
    tokens, temperature, seed = settings(params)
    generator = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(ident.encode("utf-8")))
    return continuation(prompt, tokens, temperature, generator)


def predict(items: list[dict[str, Any]], params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One result per item, in order: the prompt's continuation, or an error for an empty prompt."""
    try:
        settings(params)
    except ValueError as exc:
        return [{"id": item["id"], "error": str(exc)} for item in items]
    results: list[dict[str, Any]] = []
    for item in items:
        if not item["text"].strip():
            results.append({"id": item["id"], "error": "empty prompt: nothing to continue"})
        else:
            results.append({"id": item["id"], "output": generate(item["id"], item["text"], params)})
    return results


if __name__ == "__main__":  # python -m src.generate PROMPT...: each prompt's greedy continuation
    for text in sys.argv[1:]:
        print(repr(generate("cli", text, None)))
