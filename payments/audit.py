"""The payment audit trail: a database row, an NDJSON event and a log line.

Every challenge, verification, settlement request (the intent, written
before the facilitator is asked), settlement and failure goes through
:func:`record`, so the three views never disagree. Nothing here sees the
tool's arguments: only a hash of the request, and public payment fields
(payer address, transaction hash), never a signature.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kernel import observe
from kernel.jsontypes import JsonObject
from kernel.output import utc_stamp
from payments.models import SettlementLog
from payments.policy import Price

logger = logging.getLogger(__name__)

EVENT_FOR_STATUS: dict[str, str] = {
    SettlementLog.Status.REQUIRED: "payment_required",
    SettlementLog.Status.VERIFIED: "payment_verified",
    SettlementLog.Status.SETTLING: "payment_settling",
    SettlementLog.Status.SETTLED: "payment_settled",
    SettlementLog.Status.FAILED: "payment_failed",
}
_LOG_LOCK = threading.Lock()


@dataclass(frozen=True)
class Entry:
    """What one audit record says."""

    status: str
    tool: str
    price: Price
    request_hash: str
    payer: str = ""
    payer_verified: bool = False  # the facilitator accepted the payment; else a claim
    transaction: str = ""
    error_reason: str = ""
    payment_key: str = ""


class AuditTrail:
    """Writes audit records for one gate."""

    def __init__(self, state_dir: Path, emit: Callable[[JsonObject], None] | None = None) -> None:
        self.log_path = Path(state_dir) / "payments" / "settlement.log"
        self.emit = emit

    def record(self, entry: Entry) -> SettlementLog:
        row = SettlementLog.objects.create(
            tool=entry.tool[:128],
            status=entry.status,
            price=entry.price.display[:40],
            amount=entry.price.amount,
            asset=entry.price.asset,
            network=entry.price.network,
            pay_to=entry.price.pay_to,
            payer=entry.payer[:66],
            payer_verified=bool(entry.payer) and entry.payer_verified,
            transaction=entry.transaction[:132],
            error_reason=entry.error_reason[:128],
            request_hash=entry.request_hash,
            payment_key=entry.payment_key,
        )
        observe.observe_payment(entry.status)
        event = {
            "ts": utc_stamp(),
            "level": "warn" if entry.status == SettlementLog.Status.FAILED else "info",
            "event": EVENT_FOR_STATUS[entry.status],
            "data": self._data(row),
        }
        self._append(event)
        if self.emit is not None:
            self.emit(event)
        return row

    @staticmethod
    def _data(row: SettlementLog) -> JsonObject:
        data = {
            "id": row.pk,
            "tool": row.tool,
            "status": row.status,
            "price": row.price,
            "amount": row.amount,
            "asset": row.asset,
            "network": row.network,
            "pay_to": row.pay_to,
            "request_hash": row.request_hash,
        }
        for key in ("payer", "transaction", "error_reason"):
            if getattr(row, key):
                data[key] = getattr(row, key)
        if row.payer:
            data["payer_verified"] = row.payer_verified
        return data

    def _append(self, event: JsonObject) -> None:
        line = json.dumps(event, sort_keys=True) + "\n"
        try:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            with _LOG_LOCK, self.log_path.open("a", encoding="utf-8") as handle:
                handle.write(line)
        except OSError as exc:  # the database row is the record; the file is a convenience
            logger.warning("cannot append to %s: %s", self.log_path.name, exc.strerror or exc)
