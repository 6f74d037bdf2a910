"""The order file that ``kdkit plan --save`` writes: saved as a record, read back against
schemas/order.schema.json, and updated with the provider's order number and the order's status
(``kdkit plan --order FILE``), each change kept with its time; the plan's figures are never
rewritten."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.config.schemas import load_valid
from kdkit.core.errors import BadInput
from kdkit.core.jsonio import atomic_write_json, require_replaceable
from kdkit.core.projectfiles import CONTROL_CHARACTER, shown

if TYPE_CHECKING:
    from collections.abc import Mapping

# declared by the user, in this order: paid, the provider
ORDER_STATUSES = ("paid", "confirmed", "received")
# confirmed, the machine was received
MAX_ORDER_NUMBER = 100


def utc_now() -> str:
    """Now in UTC to the second, as an order stores it (``created``, an update's ``at``)."""
    import datetime as dt

    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def save_order(order: Mapping[str, Any], path: Path, *, force: bool = False) -> None:
    """Write the order atomically; an existing order is a record and is kept unless ``force``."""
    if path.exists() and not force:
        raise BadInput(
            f"{path}: already exists; an order is a record — choose another name or pass --force")
    if not path.parent.is_dir():
        raise BadInput(f"{path.parent}: folder does not exist; create it first")
    atomic_write_json(path, order)


def load_order(path: Path) -> dict[str, Any]:
    """An order file written by ``kdkit plan --save``, checked against schemas/order.schema.json."""
    return load_valid(path, "order", what="order file", hint="; write it with `kdkit plan --save`")


# ---------------------------------------------------------------- the provider's order number and
# status


def parse_orderas_number(text: str | None) -> str | None:
    """``--order-number``: the provider's order number as one line of printable text, 1 to 100
    characters."""
    if text is None:
        return None
    value = text.strip()
    if not value or len(value) > MAX_ORDER_NUMBER or CONTROL_CHARACTER.search(value):
        raise BadInput(f"--order-number {shown(text)}: expected the provider's order number, 1 to "
                       f"{MAX_ORDER_NUMBER} characters on one line without control characters")
    return value


def check_status(status: str | None) -> None:
    """``--order-status``: one of ORDER_STATUSES, or none given."""
    if status is not None and status not in ORDER_STATUSES:
        raise BadInput(f"--order-status {shown(status)}: choose one of {', '.join(ORDER_STATUSES)}")


def update_order(path: Path, number: str | None, status: str | None) -> dict[str, Any]:
    """``kdkit plan --order FILE``: record the provider's order number and the order's status in a
    saved order, each change appended to ``order_updates`` with its time; the plan's figures are
    never rewritten."""
    number = parse_orderas_number(number)
    check_status(status)
    if number is None and status is None:
        raise BadInput(f"--order {path}: nothing to record; pass --order-number TEXT and/or "
                       f"--order-status {'|'.join(ORDER_STATUSES)}")
    order = load_order(path)
    require_replaceable(path)
    changed = {k: v for k, v in (("order_number", number), ("order_status", status))
               if v is not None and order.get(k) != v}
    if changed:
        order.update(changed)
        order.setdefault("order_updates", []).append({"at": utc_now(), **changed})
        atomic_write_json(path, order)
    return order
