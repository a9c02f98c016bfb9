"""Read-only views over the audit rows: totals per tool and CSV export."""

from __future__ import annotations

import csv
from collections.abc import Iterable
from dataclasses import dataclass
from typing import IO

from django.db.models import QuerySet

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
    "transaction",
    "error_reason",
    "request_hash",
)


@dataclass(frozen=True)
class ToolTotal:
    tool: str
    asset: str
    network: str
    settled: int
    failed: int
    challenges: int
    amount: int  # atomic units settled

    @property
    def amount_display(self) -> str:
        return f"{self.amount:,}"


def totals_per_tool(rows: QuerySet[SettlementLog]) -> list[ToolTotal]:
    """Settled amount and event counts per (tool, asset, network) of ``rows``."""
    acc: dict[tuple[str, str, str], dict[str, int]] = {}
    fields = ("tool", "asset", "network", "status", "amount")
    for tool, asset, network, status, amount in rows.order_by().values_list(*fields).iterator():
        bucket = acc.setdefault(
            (tool, asset, network), {"settled": 0, "failed": 0, "required": 0, "amount": 0}
        )
        if status in bucket:
            bucket[status] += 1
        if status == SettlementLog.Status.SETTLED and amount.isdigit():
            bucket["amount"] += int(amount)
    return [
        ToolTotal(tool, asset, network, b["settled"], b["failed"], b["required"], b["amount"])
        for (tool, asset, network), b in sorted(acc.items())
    ]


def write_csv(rows: Iterable[SettlementLog], stream: IO[str]) -> int:
    """Write ``rows`` as CSV (header first); returns the number of data rows."""
    writer = csv.writer(stream)
    writer.writerow(CSV_FIELDS)
    count = 0
    for row in rows:
        values = [getattr(row, name) for name in CSV_FIELDS]
        values[1] = row.created_at.isoformat()
        writer.writerow([_safe_cell(v) for v in values])
        count += 1
    return count


def _safe_cell(value) -> str:
    # Spreadsheet formula injection: a cell must not start with = + - @.
    text = "" if value is None else str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@") else text
