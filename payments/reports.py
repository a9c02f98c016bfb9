"""Read-only views over the audit rows: totals per tool and CSV export."""

from __future__ import annotations

import csv
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import IO

from django.db.models import Count, QuerySet

from payments.models import SettlementLog

CSV_FIELDS = (
    "id",
    "created_at",
    "tool",
    "status",
    "price",
    "amount",
    "asset",
    "network",
    "pay_to",
    "payer",
    "payer_verified",
    "transaction",
    "error_reason",
    "request_hash",
)


@dataclass(frozen=True)
class ToolTotal:
    """Audit events of one tool on one asset and network (and, grouped by outcome, one status)."""

    tool: str
    asset: str
    network: str
    settled: int
    failed: int
    challenges: int
    amount: int  # atomic units settled; grouped by outcome, the amount of that outcome's events
    outcome: str = ""  # the status, when grouped by outcome
    count: int = 0  # every event of the group

    @property
    def amount_display(self) -> str:
        return f"{self.amount:,}"


_COUNTED = (SettlementLog.Status.SETTLED, SettlementLog.Status.FAILED, SettlementLog.Status.REQUIRED)


def totals_per_tool(
    rows: QuerySet[SettlementLog], *, since: datetime | None = None, by_outcome: bool = False
) -> list[ToolTotal]:
    """Settled amount and event counts per (tool, asset, network) of ``rows``.

    ``since`` keeps the events created at or after it. ``by_outcome`` makes one
    total per (status, tool, asset, network), whose ``amount`` is what those
    events were for (settled, refused or asked). Sorted by those keys.
    """
    if since is not None:
        rows = rows.filter(created_at__gte=since)
    # Few distinct groups however many rows: SQL counts, Python adds the
    # amounts (stored as text, atomic units of the asset).
    fields = ("status", "tool", "asset", "network", "amount")
    groups = rows.order_by().values_list(*fields).annotate(n=Count("id"))
    acc: dict[tuple[str, str, str, str], dict[str, int]] = {}
    for status, tool, asset, network, amount, n in groups.iterator():
        key = (status if by_outcome else "", tool, asset, network)
        bucket = acc.setdefault(key, {"settled": 0, "failed": 0, "required": 0, "amount": 0, "count": 0})
        bucket["count"] += n
        if status in _COUNTED:
            bucket[status] += n
        if amount.isdigit() and (by_outcome or status == SettlementLog.Status.SETTLED):
            bucket["amount"] += int(amount) * n
    return [
        ToolTotal(
            tool, asset, network, b["settled"], b["failed"], b["required"], b["amount"], outcome, b["count"]
        )
        for (outcome, tool, asset, network), b in sorted(acc.items())
    ]


def write_csv(rows: Iterable[SettlementLog], stream: IO[str]) -> int:
    """Write ``rows`` as CSV (header first); returns the number of data rows."""
    writer = csv.writer(stream)
    writer.writerow(CSV_FIELDS)
    count = 0
    for row in rows:
        values = [getattr(row, name) for name in CSV_FIELDS]
        values[1] = row.created_at.isoformat()
        writer.writerow([spreadsheet_safe(v) for v in values])
        count += 1
    return count


#: What makes a spreadsheet read a cell as a formula (OWASP, "CSV Injection"):
#: = + - @, a leading tab or carriage return, their full-width forms (some
#: spreadsheets fold them to ASCII) and a line feed (trimmed by some importers).
FORMULA_LEADS = frozenset("=+-@\t\r\n\uff1d\uff0b\uff0d\uff20")


def spreadsheet_safe(value: object) -> str:
    """``value`` as text a spreadsheet shows as text: a cell whose first
    character, or first after leading white space, could start a formula gets
    a leading apostrophe."""
    text = "" if value is None else str(value)
    if text[:1] in FORMULA_LEADS or text.lstrip()[:1] in FORMULA_LEADS:
        return "'" + text
    return text
