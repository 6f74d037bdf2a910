"""Order and campaign commands: check, plan, estimate-memory, close; what they print is rendered by
kdkit/cli/orderview.py."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from kdkit.cli._options import FiniteNumber, force_option, json_option, project_argument, whole
from kdkit.cli._output import emit_json, say
from kdkit.cli.orderview import print_check, print_close, print_memory, show_plan
from kdkit.core.builds import BACKENDS
from kdkit.core.errors import CheckFailed

if TYPE_CHECKING:
    from collections.abc import Mapping

    from kdkit.order.checkrecords import CheckReport

catalog_option = click.option(
    "--catalog", "catalog_file", type=click.Path(dir_okay=False, path_type=Path),
    help="Your own catalog (schemas/catalog.schema.json): its offers add to, or replace by name, "
         "the shipped ones and a project catalog.json.",
)
gpu_option = click.option("--gpu",
                          metavar="NAME",
                          help=("Catalog offer, e.g. \"RTX 4090\", \"B200\", \"MI300X\"."))

# ---------------------------------------------------------------- check


@click.command("check")
@project_argument
@gpu_option
@click.option("--backend", type=click.Choice(BACKENDS), default=None,
              help=(
                  "Backend whose lock is checked (default: the image's with --image, else the "
                  "offer's own)."))
@click.option("--image", metavar="IMG", default=None,
              help=(
                  "Judge this image built by `kdkit build` (its torch's own arch list) instead of "
                  "the lock."))
@catalog_option
@click.option("--pairings", "pairings_file", type=click.Path(dir_okay=False, path_type=Path),
              help=(
                  "Extra torch build pairings (schemas/pairings.schema.json), merged over the "
                  "shipped ones."))
@click.option("--offline", is_flag=True,
              help=(
                  "Do not read the locked torch wheel on its index (also KDKIT_OFFLINE=1); the "
                  "pairings answer."))
@json_option
def check(project_dir: Path | None, gpu: str | None, backend: str | None, image: str | None,
          catalog_file: Path | None, pairings_file: Path | None,
          offline: bool, as_json: bool) -> None:
    """Before ordering: will the locked build run on this GPU offer?

    \b
    Points checked, each with its reason and its fix when it fails:
      backend  the offer's vendor matches the backend (NVIDIA: cuda, AMD: rocm)
      cpu      the lock (or image) is for the CPU of the offer's hosts
               (GH200 hosts are aarch64: an x86_64 lock does not install there)
      build    the lock pins a torch build of that backend, with its local label
      kernels  the build carries code for the card: read in the locked wheel on its
               index (range requests, never all of it), else kdkit's pairings of
               published builds, or with --image from the torch inside the image
      driver   the minimum host driver the build's CUDA and the card need
      memory   kdkit.json's memory estimate, and the pilot's measured peak, per card
      extension <name>  each extension kdkit.json lists and each one the lock
               pins (flash-attn, vllm, bitsandbytes, torchvision, ...) against the
               card, from kdkit/data/extensions.json: ok, fail, or unknown (no
               facts: your diagnose will import it on the machine)
    Pairings are data (kdkit/data/pairings.json, each fact with its source; a
    project pairings.json extends it). Exit 0 when every point is ok or a note
    (notes are yours to confirm) or an unknown extension (the summary names it),
    1 when one fails or another point is unknown, 2 for bad input,
    3 when --image needs a Docker engine that is not there.

    \b
    Examples:
      kdkit check --gpu "RTX 5090"
      kdkit check --gpu H200 --image myproj:cuda-0123456789ab
    """
    from kdkit.order.check import check_order

    report = check_order(project_dir, gpu, backend=backend, catalog_file=catalog_file,
                         pairings_file=pairings_file, image=image, offline=offline)
    if as_json:
        emit_json(report)
    else:
        print_check(report)
    _conclude(report, as_json)


def _names(names: list[str], shown: int = 5) -> str:
    """The first ``shown`` names, then ``+N more``: one summary line, however many points."""
    from kdkit.core.safetext import printable

    more = f", +{len(names) - shown} more" if len(names) > shown else ""
    return printable(", ".join(names[:shown])) + more


def _conclude(report: CheckReport, as_json: bool) -> None:
    """Exit 1 when a point blocks the order; else the summary, naming the extensions still
    unknown."""
    from kdkit.order.extensions import blocks

    failing = [p["name"] for p in report["points"] if blocks(p["name"], p["verdict"])]
    if failing:
        where = "in the report's fix fields" if as_json else "above"
        raise CheckFailed(f"{report['gpu']['name']}: not ready ({_names(failing)}); apply the "
                          f"fixes {where}, then run `kdkit check` again")
    if not as_json:
        unknown = [p["name"] for p in report["points"] if p["verdict"] == "unknown"]
        say(f"{report['gpu']['name']}: every point holds (notes are yours to confirm)"
            if not unknown else
            f"{report['gpu']['name']}: no point fails, but {len(unknown)} unknown "
            f"({_names(unknown)}): your diagnose will import them on the machine (notes are yours "
            "to confirm)")


# ---------------------------------------------------------------- plan


@click.command("plan")
@project_argument
@click.option("--gpu",
              metavar="NAME", help="Catalog offer, e.g. \"RTX 4090\" (required to make a plan).")
@click.option("--days",
              type=whole("3"), help="Duration of the plan: 3, 7 or 30 (required to make a plan).")
@click.option("--lots",
              type=whole("1"),
              help=("Lots to order, 1 to 10 (a B200 lot is 2 cards; required for a plan)."))
@click.option("--price",
              metavar="USD",
              help=("Price of ONE lot for the duration; required when the catalog's is null."))
@click.option("--hours", type=FiniteNumber("48"),
              help="Machine-busy hours planned end to end: install, checks, compute, export.")
@click.option("--schedule", "schedule_file", type=click.Path(dir_okay=False, path_type=Path),
              help=(
                  "Stages (schemas/schedule.schema.json) instead of --hours: kdkit computes when "
                  "the last ends."))
@click.option("--from-report", "report_file", type=click.Path(dir_okay=False, path_type=Path),
              help=(
                  "A closed campaign's campaign-report.json: its measured hours (per stage with "
                  "--schedule)."))
@click.option("--accepted",
              type=whole("2"),
              help=("Accepted outputs expected (or obtained): gives the cost per output."))
@click.option("--preparation", type=click.Choice(["ubuntu", "pytorch", "blender", "custom"]),
              default="ubuntu",
              show_default=True, help="Machine preparation to ask the provider for.")
@catalog_option
@click.option("--save", type=click.Path(dir_okay=False, path_type=Path),
              help=(
                  "Write the order (schemas/order.schema.json) to FILE, for `kdkit close --order "
                  "FILE`."))
@force_option("With --save: replace an existing order file.")
@click.option("--order", "order_file", type=click.Path(dir_okay=False, path_type=Path),
              help=(
                  "A saved order to update with --order-number / --order-status only (its plan is "
                  "never rewritten)."))
@click.option("--order-number",
              metavar="TEXT", help="The provider's order number (with --save or --order).")
@click.option("--order-status", type=click.Choice(["paid", "confirmed", "received"]),
              help="The order's status as you declare it (with --save or --order).")
@json_option
def plan(project_dir: Path | None, gpu: str | None, days: int | None, lots: int | None,
         price: str | None,
         hours: float | None, schedule_file: Path | None, report_file: Path | None,
         accepted: int | None,
         preparation: str, catalog_file: Path | None, save: Path | None, force: bool,
         order_file: Path | None,
         order_number: str | None, order_status: str | None, as_json: bool) -> None:
    """The order summary, its schedule and the cost per accepted output.

    \b
    Total = price of one lot for the duration × lots; a lot's price already
    covers its cards (a B200 lot is 2 cards: never multiplied again).
    Schedule: --hours against the window (3 days = 72 h); when it does not
    fit, the longer plan with its price difference, or a reduced protocol.
    --schedule FILE: stages with machine and human hours, a GPU, and what
    each waits for; stages on one GPU run one after another, on different
    GPUs side by side, human preparation overlaps other stages' machine
    work; over the window, the stages to cut (exploratory, then useful) and
    the lots that would let them spread. --from-report: the measured hours
    of a closed campaign (per stage of --schedule when the names match).
    Cost per accepted output: total / --accepted; with 0 it is undefined
    (the cost incurred is shown, never a zero cost).
    kdkit never invents a price: a null catalog price needs --price.
    --order FILE --order-status received: records the provider's order
    number or status in a saved order (each change kept with its time).

    \b
    Examples:
      kdkit plan --gpu "RTX 4090" --days 3 --lots 2 --hours 48 --save order.json
      kdkit plan --gpu "RTX 4090" --days 3 --lots 1 --schedule schedule.json
      kdkit plan --order order.json --order-number IG-2026-1234 --order-status paid
    """
    from kdkit.order.orderfile import update_order
    from kdkit.order.plan import plan_order

    if order_file is not None:
        _refuse_with_order(order_file, gpu=gpu, days=days, lots=lots, price=price, hours=hours,
                           schedule=schedule_file, report=report_file, accepted=accepted, save=save)
        # a saved order (its schema's shape), or the plan made below (OrderPlan)
        order: Mapping[str, Any] = update_order(order_file, order_number, order_status)
    else:
        order = plan_order(project_dir, gpu, days, lots, price=price, hours=hours,
                           accepted=accepted, preparation=preparation, catalog_file=catalog_file,
                           save=save, force=force, schedule_file=schedule_file,
                           report_file=report_file, order_number=order_number,
                           order_status=order_status)
    if as_json:
        emit_json(order)
    else:
        show_plan(order, order_file, save)


def _refuse_with_order(order_file: Path, **given: object) -> None:
    """--order FILE updates a saved order's number and status only: a plan option beside it is bad
    input."""
    from kdkit.core.errors import BadInput

    named = [f"--{name}" for name, value in given.items() if value is not None]
    if named:
        raise BadInput(f"--order {order_file} records the order number and status only; the plan "
                       f"is never rewritten: leave out {', '.join(named)} (or make a new plan with "
                       "--save)")


# ---------------------------------------------------------------- estimate-memory


@click.command("estimate-memory")
@project_argument
@click.option("--params", metavar="N", help="Parameter count: 7B, 350M, 1.5e9 or a plain integer.")
@click.option("--from-config", is_flag=True, help="Read the job from kdkit.json's memory section.")
@click.option("--dtype", type=click.Choice(["fp32", "fp16", "bf16", "fp8", "int8", "int4"]),
              default=None,
              help="Weight dtype (default bf16, or the config's).")
@click.option("--train", type=click.Choice(["none", "sgd", "adam"]), default=None,
              help="Training adds gradients, fp32 master weights under mixed precision and, for "
                   "Adam, two fp32 moments (default none).")
@click.option("--kv",
              metavar="L,H,D,S,B",
              help=("KV cache of generation: layers,kv_heads,head_dim,seq,batch."))
@gpu_option
@catalog_option
@json_option
def estimate_memory(project_dir: Path | None, params: str | None, from_config: bool,
                    dtype: str | None,
                    train: str | None, kv: str | None, gpu: str | None, catalog_file: Path | None,
                    as_json: bool) -> None:
    """A lower bound on GPU memory, with what it cannot know listed.

    \b
    Counts weights, gradients and optimizer states when training, and the KV
    cache; lists activations, workspaces and fragmentation as unmeasured.
    Against a card (--gpu) the verdict is "does not fit" or "may fit — to be
    measured by the pilot": never "fits" from a parameter count. Inside a
    project, the last pilot's measured peak is shown beside the estimate.

    \b
    Example:  kdkit estimate-memory --params 7B --dtype bf16 --train adam --gpu "H100 80GB"
    """
    from kdkit.facts.catalog import load_catalog
    from kdkit.order.memory import memory_report
    from kdkit.order.plan import optional_project

    project = optional_project(project_dir)
    offer = None if gpu is None else load_catalog(None if project is None
                                                  else project.root, catalog_file).find(gpu)
    report = memory_report(project, params=params, from_config=from_config, dtype=dtype,
                           train=train, kv=kv,
                           offer=offer)
    if as_json:
        emit_json(report)
    else:
        print_memory(report)


# ---------------------------------------------------------------- close


@click.command("close")
@project_argument
@click.option("--order", "order_file", type=click.Path(dir_okay=False, path_type=Path),
              required=True,
              help="The order written by `kdkit plan --save` (read, never rewritten).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help=(
                  "Folder for campaign-report.md and campaign-report.json (default: "
                  "<project>/reports)."))
@click.option("--accepted", type=whole("2"),
              help="Accepted outputs, when they are not the pilot's passing runs (default: one per "
                   "passing configuration under runs/).")
@click.option("--expense", "expenses", multiple=True, metavar='"WHAT AMOUNT CUR"',
              help=(
                  'Another expense, kept apart from the rental, e.g. --expense "storage 12.50 USD" '
                  '(repeatable).'))
@json_option
def close(project_dir: Path | None, order_file: Path, out: Path | None, accepted: int | None,
          expenses: tuple[str, ...], as_json: bool) -> None:
    """The campaign report: what the order bought, against the plan.

    \b
    Observed machine time is the union of the intervals recorded work ran
    in (builds, verified pilot runs and workers, trainings, sweeps, resume
    tests): parallel work counts once, idle gaps are listed. Booked against
    observed in total and per stage, each run with its id, config hash,
    verdict and stop reason, accepted outputs (one per configuration:
    repeating a corpus is not another corpus), cost per accepted output,
    the campaign's variants against its threshold with the conclusion, the
    decisions, other expenses, the provider's order number and status, and
    every deviation. Writes Markdown for a person and JSON that reloads
    (its measured_durations feed the next plan); the order is never rewritten.
    """
    from kdkit.order.close import close_campaign

    report, md, js = close_campaign(project_dir, order_file, out=out,
                                    accepted=accepted, expenses=expenses)
    if as_json:
        emit_json(report)
        return
    print_close(report, md, js)
