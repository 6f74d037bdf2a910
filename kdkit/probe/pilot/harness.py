"""The pilot harness between the inputs and the application's ``predict(items) -> results``.

The harness reads every input itself (kdkit/probe/pilot/inputs.py: missing, unreadable,
oversized, non-UTF-8 or changed inputs are rejected there and never reach the app), calls
the app one batch at a time (with the run's params when it takes them), retries a batch
that raised item by item to isolate the culprit, and turns each answer into one record
for results.jsonl. It records what the app said; accounting.py judges it.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import inspect
import math
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from kdkit.core import outputkinds
from kdkit.core.credentials import REDACT_MARGIN, redact_head
from kdkit.core.errors import BadInput, KdkitError
from kdkit.core.pilotconfig import Output, PilotConfig
from kdkit.core.pilotmanifest import Document
from kdkit.core.projectfiles import real_inside

# the inputs' names, as the harness always offered them
from kdkit.probe.pilot.inputs import Item as Item
from kdkit.probe.pilot.inputs import Reader, Reading
from kdkit.probe.pilot.inputs import prefetching as prefetching
from kdkit.probe.pilot.inputs import read_input as read_input

Predict = Callable[[list[dict[str, Any]]], Any]
ANSWER_SHOWN = 120  # characters of an odd answer kept in the record
REASON_KEPT = 500  # characters of a rejection reason kept (a traceback-sized message is cut)
ANSWERED = frozenset({"accepted", "rejected", "invalid"})  # outcomes that answer an asked ID
_LEADING_SPACE = re.compile(r"\s*")


Call = Callable[[Sequence[Item]], Any]


class EntryError(KdkitError):
    """The application's entry point cannot be imported or is not callable."""


class NotAList(TypeError):
    """predict returned something other than a list: the batch is retried item by item, like a
    raise."""


class AppRaised(Exception):
    """The app raised an exception in its own process (kdkit/probe/pilot/supervisor.py); its type is
    the app's."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(message)
        self.type_name = type_name


# ---------------------------------------------------------------- records


def harness_rejection(doc: Document, reason: str, batch: int) -> dict[str, str | int]:
    return {"id": doc.id, "outcome": "rejected", "by": "harness", "reason": reason, "batch": batch}


def short_text(value: Any, limit: int | None = ANSWER_SHOWN) -> str:
    """A string as it is, anything else as its repr (one that raises is named), cut to ``limit``:
    how an odd answer is kept, here and in the app's process (appchild)."""
    try:
        text = value if isinstance(value, str) else repr(value)
    except Exception as exc:
        text = f"<{type(value).__name__}: repr raised {type(exc).__name__}>"
    return text if limit is None or len(text) <= limit else text[:limit] + "..."


def _shown(value: Any) -> Any:
    """An answer's value kept as data: JSON scalars as they are, anything else as short text; a
    credential shape in it is redacted (kdkit.core.credentials): what the app said may travel and be
    shown. Only what is kept is redacted (redact_head), so a huge value costs no more than a short
    one."""
    if value is None or isinstance(value, (bool, int)) \
            or (isinstance(value, float) and math.isfinite(value)):
        return value
    # NaN and infinities too: strict JSON kept
    return redact_head(short_text(value, limit=None), ANSWER_SHOWN)


def classify_answers(items: Sequence[Item], answers: Any,
                     output: Output, batch: int) -> list[dict[str, Any]]:
    """One record per answer, plus one per item the app left unanswered.

    Raises NotAList when ``answers`` is not a list: the caller treats that as the
    app failing on the batch.
    """
    if not isinstance(answers, list):
        raise NotAList(f"predict returned {type(answers).__name__}, expected a list of results")
    asked = {item.doc.id: item for item in items}
    records, answered = [], set()
    categories = output.categories if output.kind == "category" else None
    for answer in answers:
        record = _accepted(answer,
                           asked, categories, batch) or _record(answer, asked, output, batch)
        records.append(record)
        if record["outcome"] in ANSWERED:
            answered.add(record["id"])
    for ident, item in asked.items():
        if ident not in answered:
            records.append(
                {"id": ident, "outcome": "unanswered", "batch": batch, "sha256": item.sha256})
    return records


def _accepted(answer: Any, asked: dict[str, Item], categories: Sequence[str] | None,
              batch: int) -> dict[str, Any] | None:
    """The record of the usual category answer, exactly {"id": <asked ID>, "category": <allowed>},
    checked in one expression; None for anything else (and for every answer of another kind), which
    _record then judges rule by rule (and names)."""
    if categories is not None and type(answer) is dict and len(answer) == 2:
        ident, category = answer.get("id"), answer.get("category")
        if type(ident) is str and type(category) is str and ident in asked \
                and category in categories:
            return {"id": ident, "outcome": "accepted", "category": category, "batch": batch,
                    "sha256": asked[ident].sha256}
    return None


def _record(answer: Any, asked: dict[str, Item], output: Output, batch: int) -> dict[str, Any]:
    if not isinstance(answer, dict) or not isinstance(answer.get("id"), str):
        return {"id": None, "outcome": "malformed", "answer": _shown(answer), "batch": batch}
    ident: str = answer["id"]
    keys = [key for key in outputkinds.value_keys(output) if key in answer]
    if output.kind == "file" and not keys and "error" not in answer and "category" not in answer:
        # {"id"} alone: the files in out_dir are the answer
        answer, keys = {**answer, "output": None}, ["output"]

    # what an answer that is not accepted keeps of what it said (never built else)
    def shown() -> dict[str, Any]:
        return {k: _shown(answer[k]) for k in ("category", "output", "error") if k in answer}

    if ident not in asked:
        return {"id": _shown(ident), "outcome": "unrequested", **shown(), "batch": batch}
    where = {"batch": batch, "sha256": asked[ident].sha256}
    problem = _shape_problem(answer, keys, output)
    if problem is not None:
        return {"id": ident, "outcome": "invalid", **shown(), "problem": problem, **where}
    if not keys:
        error = answer.get("error")
        if not (isinstance(error, str) and error.strip()):
            return {"id": ident, "outcome": "invalid", **shown(),
                    "problem": "rejected without a reason (empty error)",
                    **where}
        return {"id": ident, "outcome": "rejected", "by": "app", "reason": _reason(error), **where}
    value = answer[keys[0]]
    kept = outputkinds.check(output, value, _shown)
    if isinstance(kept, str):
        return {"id": ident, "outcome": "invalid", **shown(), **where, "problem": kept}
    return _scored({"id": ident, "outcome": "accepted", **kept, **where}, output, value,
                   asked[ident])


def _shape_problem(answer: dict[str, Any], keys: list[str], output: Output) -> str | None:
    """Why the answer is neither exactly one value nor exactly one error, or None."""
    has_err = "error" in answer
    if output.kind != "category" and "category" in answer and not keys:
        return ("the result has a category, but this run's output is "
                f'{outputkinds.describe(output)}: answer {{"id": ..., "output": ...}}')
    if len(keys) > 1:
        return "the result has both a category and an output"
    if bool(keys) == has_err:
        what = "a category" if output.kind == "category" and (
            not keys or keys[0] == "category") else "an output"
        return (f"the result has both {what} and an error" if has_err
                else f"the result has neither {what} nor an error")
    return None


def _scored(record: dict[str, Any], output: Output, value: Any, item: Item) -> dict[str, Any]:
    """An accepted answer of a kind other than category with its score against the manifest's
    expected value (where there is one): the project's scorer's (quality.scorer,
    :func:`project_score`), else the kind's built-in one. A score that is NaN, not a number or
    outside [0, 1], or a scorer that raised, makes it the harness's rejection with the reason, never
    a pass."""
    expected = item.doc.expected
    if output.kind == "category" or expected is None:
        return record
    if output.scorer is not None:
        score: float | str = project_score(output.scorer, item, value, expected)
    else:
        score = outputkinds.score(output, value, expected)
        if math.isnan(score):
            score = ("the quality score against the manifest's expected output is undefined (NaN: "
                     "a zero vector, or an expected value of another shape)")
    if isinstance(score, str):
        return {"id": record["id"], "outcome": "rejected", "by": "harness",
                "reason": _reason(score),
                "batch": record["batch"], "sha256": record["sha256"]}
    record[outputkinds.SCORE] = score
    return record


def project_score(scorer: Callable[[dict[str, Any], Any, Any], Any], item: Item, value: Any,
                  expected: Any) -> float | str:
    """``scorer(item, answer, expected)``: the item as predict got it ({"id", "text" | "bytes" |
    "record", "sha256"}), the answer's output value and the manifest's expected value (copies: the
    scorer cannot change what is kept). The score as a float in [0, 1], or the reason it is none
    (the scorer raised, SystemExit included; NaN, not a number, or out of range). Ctrl-C still stops
    the run. The scorer runs in this, the harness's, process: one that hangs or calls os._exit is
    beyond what the harness can turn into a reason."""
    try:
        got = scorer(item.app_item(), copy.deepcopy(value), copy.deepcopy(expected))
    except KeyboardInterrupt:
        raise
    # sys.exit() in a scorer is its failure on this item, never the run's end
    except BaseException as exc:
        said = first_line(str(exc), REASON_KEPT)
        return f"the quality scorer raised {type(exc).__name__}" + (f": {said}" if said else "")
    if isinstance(got, bool) or not isinstance(got, (int, float)):
        return (
            f"the quality scorer returned {short_text(got)} ({type(got).__name__}), not a number "
            "in [0, 1]")
    if not 0 <= got <= 1:  # NaN fails both comparisons
        return (
            f"the quality scorer returned {got!r}, {'NaN' if got != got else 'outside [0, 1]'}: "
            "not a score")
    return float(got)


def _reason(text: str) -> str:
    return redact_head(text, REASON_KEPT)


def first_line(text: str, limit: int) -> str:
    """The first line of ``text`` (leading space left out) for a reason kept to ``limit``
    characters: looked for only in twice the redaction margin past the limit, so a huge message is
    never split or copied whole (and a line cut there is still longer than redact_head's window: it
    knows the line was cut)."""
    space = _LEADING_SPACE.match(text)
    start = space.end() if space else 0
    window = text[start:start + limit + 2 * REDACT_MARGIN]
    line = window.splitlines()[0] if window else ""
    return line.rstrip() if len(line) <= limit else line


def exception_rejection(item: Item, exc: BaseException, batch: int) -> dict[str, str | int]:
    """The record of an item whose single-item call still failed: the exception is its reason."""
    said = first_line(str(exc), REASON_KEPT)
    if isinstance(exc, NotAList):
        by, reason = "harness", said
    else:
        name = exc.type_name if isinstance(exc, AppRaised) else type(exc).__name__
        by, reason = "app-exception", f"the app raised {name}" + (f": {said}" if said else "")
    return {"id": item.doc.id, "outcome": "rejected", "by": by, "reason": _reason(reason),
            "batch": batch,
            "sha256": item.sha256}


# ---------------------------------------------------------------- calling the app


def run_batch(call: Call, items: Sequence[Item],
              output: Output, batch: int) -> list[dict[str, Any]]:
    """Records for one batch; a batch that raises is retried one item at a time.

    ``call`` hands the items to the app and returns its answers: the app's own process
    (supervisor.AppProcess) in the pilot, or :func:`in_process` around a predict function.
    """
    try:
        answers = call(items)
        return classify_answers(items, answers, output, batch)
    except Exception as exc:
        if len(items) == 1:
            return [exception_rejection(items[0], exc, batch)]
    return [record for item in items for record in run_batch(call, [item], output, batch)]


def takes_params(predict: Callable[..., Any]) -> bool:
    """Whether ``predict`` is handed the run's params, decided once from its signature: a second
    positional parameter without a default (``predict(items, params)``) or named ``params``, or
    ``*args``, takes them; ``predict(items)`` and ``predict(items, option=default)`` (apps written
    before params) never do."""
    try:
        parameters = list(inspect.signature(predict).parameters.values())
    # a builtin or an extension without a signature (or one that raises): called as before
    except Exception:
        return False
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) >= 2:
        return positional[1].default is inspect.Parameter.empty or positional[1].name == "params"
    return any(p.kind == p.VAR_POSITIONAL for p in parameters)


def with_params(predict: Callable[..., Any], params: dict[str, Any] | None) -> Predict:
    """``predict`` as a function of the items alone: handed the run's params (the config's
    ``params``, ``{}`` where it declares none) with every batch when it takes them
    (:func:`takes_params`)."""
    if not takes_params(predict):
        return predict
    given = {} if params is None else params
    return lambda items: predict(items, given)


def in_process(predict: Callable[..., Any], params: dict[str, Any] | None = None) -> Call:
    """A predict function called in this interpreter, as run_batch calls the app: each item as the
    app's process gets it (Item.app_item), the params as AppProcess hands them."""
    call = with_params(predict, params)
    return lambda items: call([item.app_item() for item in items])


def load_entry(root: Path, entry: str, signature: str = "(items) -> results") -> Predict:
    """Import ``module:function`` from the project root, fresh (never a same-named module cached
    earlier)."""
    module_name, function = entry.split(":", 1)
    top = module_name.split(".")[0]
    if (root / top).is_dir() or (root / f"{top}.py").is_file():
        for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
            del sys.modules[name]
    if str(root) in sys.path:  # first on the path, ahead of any other project imported earlier
        sys.path.remove(str(root))
    sys.path.insert(0, str(root))
    importlib.invalidate_caches()
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise EntryError(f"cannot import {module_name} (entry {entry}) from {root}: "
                         f"{type(exc).__name__}: {exc}") from exc
    where = getattr(module, "__file__", None)
    if not where or real_inside(os.path.realpath(root), where) is None:
        raise EntryError(f"{module_name} (entry {entry}) was imported from {where or 'no file'}, "
                         f"not from the project {root}; the app must be the project's own code")
    predict = getattr(module, function, None)
    if not callable(predict):
        raise EntryError(f"{module_name} has no function {function!r} (entry {entry}); define "
                         f"{function}{signature}")
    result: Predict = predict
    return result


def with_scorer(cfg: PilotConfig) -> PilotConfig:
    """``cfg`` with its quality scorer (the project's own function, checked by load_pilot) imported
    into this, the harness's, process (fresh, as :func:`load_entry` imports the app; no bytecode
    written into the project), set on its output; BadInput (exit 2) when it does not import or is
    not callable. Without a scorer, ``cfg``."""
    entry = (cfg.quality or {}).get("scorer")
    if entry is None:
        return cfg
    kept, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        scorer: Callable[..., Any] = load_entry(
            cfg.root, entry, "(item, answer, expected) -> a number in [0, 1]")
    except EntryError as exc:
        raise BadInput(f"{cfg.config_path}: $.quality.scorer: {exc}") from exc
    finally:
        sys.dont_write_bytecode = kept
    return dataclasses.replace(cfg, output=dataclasses.replace(cfg.output, scorer=scorer))


def batches(pending: Sequence[Document], size: int, reading: Reading,
            first_batch: int) -> Iterator[tuple[int, list[Item], list[dict[str, Any]]]]:
    """(batch number, items for the app, harness rejections), filling each app batch to ``size``.

    Inputs are read lazily, just before their batch, so a long run holds one batch in memory; a
    JSONL corpus stays open for the run and a batch's consecutive records are read at once
    (inputs.Reader).
    """
    number, items, rejected = first_batch, list[Item](), list[dict[str, Any]]()
    with Reader(reading) as reader:
        for index, doc in enumerate(pending):
            got = reader.read(doc, pending, index, size - len(items))
            if isinstance(got, str):
                rejected.append(harness_rejection(doc, got, number))
            else:
                items.append(got)
            if len(items) == size:
                yield number, items, rejected
                number, items, rejected = number + 1, [], []
        if items or rejected:
            yield number, items, rejected


def set_device(device: str) -> None:
    """Tell the app which device the pilot config chose (KDKIT_DEVICE; the app may read it)."""
    os.environ["KDKIT_DEVICE"] = device
