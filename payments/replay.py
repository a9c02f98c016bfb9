"""The replay store: one row per payment, claimed before anything runs.

A payment is identified by its signature and its authorization nonce. The
first request inserts the row (the database's unique constraint decides
races between processes too); any later request with the same payment
finds it and gets the stored outcome, or "in progress" while the first is
still running.

A row moves through these states:

* ``pending``: claimed; verifying, then running the tool;
* ``settling``: the tool ran and succeeded, its result is stored, one request
  is asking the facilitator to settle (if that request dies, a retry takes the
  settlement over once the row is older than a settle call can last);
* ``ran``: settlement could not be reached (facilitator outage); the result
  stays stored, and a retry with the same payment only retries settlement;
* ``done``: the final outcome is stored and is what every replay gets.

A row that never ran the tool (a verification outage) is deleted, so the
same payment can be retried from the start.

The stored outcome may hold the tool's result, hence request content (a
search result quotes its query). It is kept for :data:`RETENTION` after the
row last changed, then :func:`purge_expired` empties it (``outcome = None``,
state ``done``). The row, which holds only hashes, stays: a payment can never
run a tool or be settled twice, however late it comes back.

:func:`claim` runs that purge at most once per :data:`PURGE_INTERVAL` seconds
per process (a write on every paid request would be wasted: rows expire an
hour after they were written), and always expires the claimed payment's own
row if its retention is over, so a late replay never gets a purged answer.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from payments.models import PaymentAttempt

#: how long a stored outcome (and with it the tool's result) is kept
RETENTION = timedelta(hours=1)
#: at most one purge of every expired outcome per this many seconds per process
PURGE_INTERVAL = 60.0
State = PaymentAttempt.State

_purge_lock = threading.Lock()
_last_purge: float | None = None  # time.monotonic() of this process's last purge


def reset_purge_throttle() -> None:
    """Let the next :func:`claim` purge again, as in a fresh process (for tests)."""
    global _last_purge
    with _purge_lock:
        _last_purge = None


def _purge_due() -> bool:
    global _last_purge
    now = time.monotonic()
    with _purge_lock:
        if _last_purge is not None and now - _last_purge < PURGE_INTERVAL:
            return False
        _last_purge = now
        return True


def payment_key(payload: dict[str, Any]) -> str:
    """sha256 of (signature, nonce); falls back to the whole canonical payload."""
    inner = payload.get("payload") if isinstance(payload.get("payload"), dict) else {}
    auth = inner.get("authorization") if isinstance(inner.get("authorization"), dict) else {}
    signature, nonce = str(inner.get("signature", "")), str(auth.get("nonce", ""))
    material = f"{signature.lower()}|{nonce.lower()}" if signature else json.dumps(payload, sort_keys=True)
    return hashlib.sha256(material.encode("utf-8")).hexdigest()


def _until() -> datetime:
    return timezone.now() + RETENTION


def claim(key: str, *, tool: str, request_hash: str) -> tuple[PaymentAttempt, bool]:
    """(attempt, True) for a new payment; (existing attempt, False) for a replay.

    Expired outcomes are purged first (at most once per :data:`PURGE_INTERVAL`),
    so the table never keeps a result much longer than :data:`RETENTION`; a
    replayed payment's own expired outcome is purged before it is looked at.
    """
    if _purge_due():
        purge_expired()
    try:
        with transaction.atomic():
            attempt = PaymentAttempt.objects.create(
                key=key, tool=tool, request_hash=request_hash, kept_until=_until()
            )
            return attempt, True
    except IntegrityError:
        attempt = PaymentAttempt.objects.get(key=key)
    if attempt.kept_until is not None and attempt.kept_until < timezone.now():
        purge_expired(key=key)
        attempt.refresh_from_db()
    return attempt, False


def hold(attempt: PaymentAttempt, outcome: dict[str, Any]) -> None:
    """The tool ran and succeeded: store its outcome before asking to settle."""
    _save(attempt, State.SETTLING, outcome)


def await_settlement(attempt: PaymentAttempt) -> None:
    """Settlement could not be reached: keep the result, let a retry settle."""
    PaymentAttempt.objects.filter(pk=attempt.pk, state=State.SETTLING).update(
        state=State.RAN, kept_until=_until(), updated_at=timezone.now()
    )
    attempt.state = State.RAN


def take_settlement(attempt: PaymentAttempt, *, stale_after: timedelta) -> bool:
    """Move a payment to ``settling`` for this request; False if another has it.

    A ``ran`` payment is taken at once. A ``settling`` one is taken only once it
    has not changed for ``stale_after`` (longer than a settle call can last): the
    request that was settling it died, or could not store its answer, and the
    held result would otherwise be out of reach until it is purged.
    """
    now = timezone.now()
    waiting = Q(state=State.RAN) | Q(state=State.SETTLING, updated_at__lt=now - stale_after)
    taken = PaymentAttempt.objects.filter(waiting, pk=attempt.pk).update(state=State.SETTLING, updated_at=now)
    if taken:
        attempt.state = State.SETTLING
    return bool(taken)


def complete(attempt: PaymentAttempt, outcome: dict[str, Any]) -> None:
    _save(attempt, State.DONE, outcome)


def release(attempt: PaymentAttempt) -> None:
    """Forget a payment that was neither verified nor settled, so the client may retry it."""
    PaymentAttempt.objects.filter(pk=attempt.pk, state=State.PENDING).delete()


def purge_expired(now: datetime | None = None, *, key: str | None = None) -> int:
    """Empty every stored outcome past its retention (only ``key``'s, if given);
    the number of rows purged."""
    now = now or timezone.now()
    rows = PaymentAttempt.objects.filter(kept_until__lt=now)
    if key is not None:
        rows = rows.filter(key=key)
    return rows.update(state=State.DONE, outcome=None, kept_until=None, updated_at=now)


def _save(attempt: PaymentAttempt, state: str, outcome: dict[str, Any]) -> None:
    attempt.state = state
    attempt.outcome = outcome
    attempt.kept_until = _until()
    attempt.save(update_fields=["state", "outcome", "kept_until", "updated_at"])
