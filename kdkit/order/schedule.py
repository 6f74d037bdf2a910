"""A schedule of stages (``kdkit plan --schedule FILE``): when does the last stage end, against the
window?

Guide 001 (../shared/domain.md, "Schedule"; seed 001): "distinguish machine-busy periods from human
preparation; independent periods may overlap; two stages on the same GPU are not parallel because
they have two rows in a table"; the illustrative schedule books 48 consecutive hours "from the start
of preparations to the receipt of results". The rules kdkit applies, all in hours from the start of
preparations (hour 0):

- A stage starts when every stage it waits for (``after``) has ended.
- Its human preparation (``human_hours``) comes first. It holds no GPU, so it overlaps the machine
  work of other stages; one person prepares one stage at a time, so two preparations never overlap
  each other.
- Its machine work (``machine_hours``) follows, on its GPU (``gpu``, default 0) once that GPU is
  free: stages on one GPU run one after another, stages on different GPUs (or on none, ``gpu:
  null``) side by side.
- Stages are placed one at a time, for good: next is the ready stage (its waits placed) whose
  machine work can start first, so a GPU never idles while a prepared stage could use it; ties go
  essential before useful before exploratory (guide 001's triage: what would be cut comes last, so
  the essential work is done if time runs out), then the longest remaining path (the stage's own
  hours plus the longest chain waiting on it), then the file's order. No stage is later moved into
  an earlier gap, so the result is the same on every run.

Hours are ``Decimal`` end to end, as in kdkit.order.plan: 48 h in a 72 h window leaves exactly 24 h.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.config.schemas import load_valid
from kdkit.core.errors import BadInput
from kdkit.core.safetext import printable

if TYPE_CHECKING:
    from typing import TypedDict

    class CutStage(TypedDict):
        """One stage of a cut: its name, category and machine hours."""

        name: str
        category: str
        machine_hours: float

    class CutPlan(TypedDict):
        """The stages to cut first and where the last stage then ends (cut_plan)."""

        stages: list[CutStage]
        last_end_hours: float
        fits: bool

    class SpreadPlan(TypedDict):
        """The fewest lots over whose GPUs the stages end within the window (spread_plan)."""

        lots: int | None
        gpus: int | None
        last_end_hours: float

    class PlacedStage(TypedDict):
        """One stage of the timeline as a JSON row (stage_rows)."""

        name: str
        category: str
        gpu: int | None
        after: list[str]
        human_hours: float
        machine_hours: float
        start: float
        machine_start: float
        end: float
        waited_for: str | None

    class GpuBusy(TypedDict):
        """One GPU's machine-busy hours (gpu_busy)."""

        gpu: int
        busy_hours: float

CATEGORIES = ("essential", "useful", "exploratory")
ZERO = Decimal(0)
RULE = ("stages start when the stages they wait for end; human preparation comes first, holds no "
        "GPU and overlaps other stages' machine work, one preparation at a time; stages on one GPU "
        "run one after another, on different GPUs side by side; next comes the ready stage whose "
        "machine work can start first, ties going essential, useful, exploratory, then longest "
        "remaining path, then file order")


@dataclass(frozen=True)
class Stage:
    name: str
    machine_hours: Decimal
    human_hours: Decimal
    gpu: int | None
    after: tuple[str, ...]
    category: str
    index: int


@dataclass(frozen=True)
class Slot:
    """One stage placed: when its preparation and its machine work start, when it ends, on which
    GPU, and the stage whose end held it back (a stage it waits for, or the previous user of its GPU
    or of the person)."""

    stage: Stage
    human_start: Decimal
    machine_start: Decimal
    end: Decimal
    gpu: int | None
    waited_for: str | None


def hours(value: object) -> Decimal:
    """A JSON number as the exact decimal it was written as (30 stays 30, 1.5 stays 1.5)."""
    return Decimal(str(value))


def as_number(value: Decimal) -> int | float:
    """Hours for JSON: 78 stays 78, 1.5 stays 1.5."""
    return int(value) if value == value.to_integral_value() else float(value)


# ---------------------------------------------------------------- reading the file


def load_schedule(path: Path) -> tuple[Stage, ...]:
    """The stages of ``path`` (schemas/schedule.schema.json), every name unique, every wait known,
    no cycle; BadInput naming the file and the JSON path otherwise."""
    data = load_valid(path, "schedule",
                      what="schedule file", hint="; see schemas/schedule.schema.json")
    stages = tuple(_stage(index, raw) for index, raw in enumerate(data["stages"]))
    _check_names(path, stages)
    _check_waits(path, stages)
    _check_cycles(path, stages)
    return stages


def _stage(index: int, raw: dict[str, Any]) -> Stage:
    return Stage(name=raw["name"], machine_hours=hours(raw["machine_hours"]),
                 human_hours=hours(raw.get("human_hours", 0)), gpu=raw.get("gpu", 0),
                 after=tuple(raw.get("after", ())),
                 category=raw.get("category", "essential"), index=index)


def _check_names(path: Path, stages: Sequence[Stage]) -> None:
    first: dict[str, int] = {}
    for stage in stages:
        if stage.name in first:
            raise BadInput(f"{path}: $.stages[{stage.index}].name: {printable(stage.name)!r} is "
                           f"also the name of $.stages[{first[stage.name]}]; give each stage its "
                           "own name")
        first[stage.name] = stage.index


def _check_waits(path: Path, stages: Sequence[Stage]) -> None:
    names = {stage.name for stage in stages}
    for stage in stages:
        for place, wanted in enumerate(stage.after):
            if wanted not in names:
                known = ", ".join(sorted(names)[:10])
                raise BadInput(f"{path}: $.stages[{stage.index}].after[{place}]: "
                               f"{printable(wanted)!r} is no stage of this schedule (stages: "
                               f"{printable(known)}); fix the name or add the stage")


def _check_cycles(path: Path, stages: Sequence[Stage]) -> None:
    """A stage that waits, through any chain, for itself: BadInput naming the stages of the cycle in
    order."""
    by_name = {stage.name: stage for stage in stages}
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    for root in stages:
        if not state.get(root.name) and (cycle := _cycle_from(root, by_name, state)):
            where = f"$.stages[{by_name[cycle[-2]].index}].after"
            raise BadInput(f"{path}: {where}: the stages wait for each other in a cycle "
                           f"({printable(' waits for '.join(cycle))}); remove one of these waits")


def _cycle_from(root: Stage, by_name: dict[str, Stage], state: dict[str, int]) -> list[str]:
    """Depth first from ``root`` without recursion: the first cycle met (its names, the first
    repeated last), else [] with every stage reached marked done."""
    path_names: list[str] = [root.name]
    iters = [iter(root.after)]
    state[root.name] = 1
    while iters:
        nxt = next(iters[-1], None)
        if nxt is None:
            state[path_names.pop()] = 2
            iters.pop()
        elif state.get(nxt) == 1:
            return [*path_names[path_names.index(nxt):], nxt]
        elif not state.get(nxt):
            state[nxt] = 1
            path_names.append(nxt)
            iters.append(iter(by_name[nxt].after))
    return []


def check_gpus(path: Path, stages: Sequence[Stage], cards: int) -> None:
    """Every stage's GPU exists in the order: GPU 1 of a one-card order is bad input naming the
    stage."""
    for stage in stages:
        if stage.gpu is not None and stage.gpu >= cards:
            raise BadInput(f"{path}: $.stages[{stage.index}].gpu: GPU {stage.gpu}, but the order "
                           f"holds {cards} card(s) (GPU 0 to {cards - 1}); order more lots "
                           "(--lots) or put the stage on a GPU it holds")


# ---------------------------------------------------------------- placing the stages


def _remaining_paths(stages: Sequence[Stage]) -> dict[str, Decimal]:
    """Each stage's own hours plus the longest chain of stages waiting on it (its priority)."""
    waiting: dict[str, list[str]] = {stage.name: [] for stage in stages}
    for stage in stages:
        for wanted in stage.after:
            waiting[wanted].append(stage.name)
    own = {stage.name: stage.human_hours + stage.machine_hours for stage in stages}
    left = {name: len(names) for name, names in waiting.items()}  # waiters not yet valued
    ready = [stage.name for stage in stages if not waiting[stage.name]]
    by_name = {stage.name: stage for stage in stages}
    value: dict[str, Decimal] = {}
    while ready:  # from the last stages back to the first: no recursion, however long a chain
        name = ready.pop()
        value[name] = own[name] + max((value[w] for w in waiting[name]), default=ZERO)
        for wanted in by_name[name].after:
            left[wanted] -= 1
            if left[wanted] == 0:
                ready.append(wanted)
    return value


def timeline(stages: Sequence[Stage], spread: int | None = None) -> list[Slot]:
    """Every stage placed by the module's rules. With ``spread``, a stage that holds a GPU takes
    whichever of ``spread`` GPUs frees first (what more lots would allow), not the GPU it names."""
    known = {stage.name for stage in stages}
    priority = _remaining_paths(stages)
    rank = {category: place for place, category in enumerate(CATEGORIES)}
    done: dict[str, Slot] = {}
    free: dict[object, tuple[Decimal, str]] = {}  # "person" or a GPU number -> (free at, freed by)
    remaining = list(stages)
    while remaining:
        ready = [s for s in remaining if all(a in done or a not in known for a in s.after)]
        spare = None if spread is None else min(range(spread),
                                                key=lambda g: (free.get(g, (ZERO, ""))[0], g))
        tried = [_place(s, done, free, spare) for s in ready]
        slot = min(tried,
                   key=lambda t: (t.machine_start, rank[t.stage.category], -priority[t.stage.name],
                                  t.stage.index))
        remaining.remove(slot.stage)
        done[slot.stage.name] = slot
        if slot.stage.human_hours > 0:
            free["person"] = (slot.human_start + slot.stage.human_hours, slot.stage.name)
        if slot.gpu is not None and slot.stage.machine_hours > 0:
            free[slot.gpu] = (slot.end, slot.stage.name)
    return [done[stage.name] for stage in stages]


def _place(stage: Stage, done: dict[str, Slot], free: dict[object, tuple[Decimal, str]],
           spare: int | None) -> Slot:
    """Where ``stage`` would go now: after its waits, its preparation when the person is free, its
    machine work when its GPU (or, spreading, the GPU ``spare`` that frees first) is free."""
    start, why = max(((done[a].end, a) for a in stage.after if a in done), default=(ZERO, None))
    if stage.human_hours > 0 and "person" in free and free["person"][0] > start:
        start, why = free["person"]
    prepared = start + stage.human_hours
    gpu = stage.gpu if stage.gpu is None or spare is None else spare
    machine = prepared
    if gpu is not None and stage.machine_hours > 0 and gpu in free and free[gpu][0] > machine:
        machine, why = free[gpu]
    return Slot(stage, start, machine, machine + stage.machine_hours, gpu, why)


def last_end(slots: Sequence[Slot]) -> Decimal:
    return max((slot.end for slot in slots), default=ZERO)


def critical_chain(slots: Sequence[Slot]) -> list[str]:
    """The stages the last end waits on, first to last (each one held back the next)."""
    if not slots:
        return []
    by_name = {slot.stage.name: slot for slot in slots}
    slot: Slot | None = max(slots, key=lambda s: (s.end, -s.stage.index))
    chain: list[str] = []
    while slot is not None and slot.stage.name not in chain:
        chain.append(slot.stage.name)
        slot = by_name.get(slot.waited_for) if slot.waited_for else None
    return list(reversed(chain))


# ---------------------------------------------------------------- what to do when it does not fit


def _cut_group(stage: Stage, kept: Sequence[Stage]) -> list[Stage]:
    """The stage and every kept stage waiting on it, through any chain (cutting one cuts what needs
    it)."""
    group = [stage]
    names = {stage.name}
    grew = True
    while grew:
        grew = False
        for other in kept:
            if other.name not in names and any(a in names for a in other.after):
                group.append(other)
                names.add(other.name)
                grew = True
    return group


def _cut_groups(stages: Sequence[Stage]) -> list[list[Stage]]:
    """What may be cut, in the order it is cut: exploratory stages, then useful ones (longest first,
    then file order), each with what waits on it; never a group a more important stage is in."""
    rank = {category: place for place, category in enumerate(CATEGORIES)}
    optional = sorted((s for s in stages if s.category != "essential"),
                      key=lambda s: (-rank[s.category],
                                     -(s.machine_hours + s.human_hours), s.index))
    kept, groups = list(stages), []
    for stage in optional:
        if stage not in kept:
            continue
        group = _cut_group(stage, kept)
        if all(rank[g.category] >= rank[stage.category] for g in group):
            kept = [s for s in kept if s not in group]
            groups.append(group)
    return groups


def cut_plan(stages: Sequence[Stage], window: Decimal) -> CutPlan | None:
    """The fewest groups of :func:`_cut_groups`, taken in order, after which the last stage ends
    within ``window`` (found by bisection: cutting more never lengthens the schedule), or all of
    them when even that does not fit. None: nothing may be cut."""
    groups = _cut_groups(stages)
    if not groups:
        return None

    def end_after(count: int) -> Decimal:
        gone = {s.name for group in groups[:count] for s in group}
        return last_end(timeline([s for s in stages if s.name not in gone]))

    low, high = 1, len(groups)
    while low < high:
        middle = (low + high) // 2
        if end_after(middle) <= window:
            high = middle
        else:
            low = middle + 1
    end = end_after(low)
    cut: list[CutStage] = [{"name": s.name, "category": s.category,
                            "machine_hours": as_number(s.machine_hours)}
                           for group in groups[:low] for s in group]
    return {"stages": cut, "last_end_hours": as_number(end), "fits": end <= window}


def spread_plan(stages: Sequence[Stage], window: Decimal, lots: int, cards_per_lot: int,
                max_lots: int) -> SpreadPlan | None:
    """The fewest lots (from today's) over whose GPUs the stages, spread, end within ``window``;
    with ``lots: None`` when even one GPU per stage cannot (the chain of waits alone is too long).
    None when no stage holds a GPU."""
    users = sum(1 for s in stages if s.gpu is not None and s.machine_hours > 0)
    if users == 0:
        return None
    floor = last_end(timeline(stages, spread=users))
    if floor > window:
        return {"lots": None, "gpus": None, "last_end_hours": as_number(floor)}
    for count in range(lots, max_lots + 1):
        end = last_end(timeline(stages, spread=count * cards_per_lot))
        if end <= window:
            return {"lots": count, "gpus": count * cards_per_lot, "last_end_hours": as_number(end)}
    return None


def stage_rows(slots: Sequence[Slot]) -> list[PlacedStage]:
    """The timeline as JSON rows, in the file's order."""
    return [{"name": s.stage.name, "category": s.stage.category, "gpu": s.gpu,
             "after": list(s.stage.after),
             "human_hours": as_number(s.stage.human_hours),
             "machine_hours": as_number(s.stage.machine_hours),
             "start": as_number(s.human_start), "machine_start": as_number(s.machine_start),
             "end": as_number(s.end),
             "waited_for": s.waited_for} for s in slots]


def gpu_busy(slots: Sequence[Slot]) -> list[GpuBusy]:
    """Machine-busy hours per GPU: the sum of its stages (never parallel on one GPU)."""
    busy: dict[int, Decimal] = {}
    for slot in slots:
        if slot.gpu is not None:
            busy[slot.gpu] = busy.get(slot.gpu, ZERO) + slot.stage.machine_hours
    return [{"gpu": gpu, "busy_hours": as_number(busy[gpu])} for gpu in sorted(busy)]
