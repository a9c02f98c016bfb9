"""The replay store: one row per payment, claimed before anything runs.

A payment is identified by its signature and its authorization nonce. The
first request inserts the row with its ``request_hash`` (the tool and its
canonical arguments, payments/outcome.py; the database's unique constraint
decides races between processes too). The payment then belongs to that
request: a later request with the same payment and the same request hash
(its client's retry) gets the stored outcome, or "in progress" while the
first is still running; one with another request hash gets
``payment_already_used`` and changes nothing here (payments/gate.py). The
row's ``tool`` and ``request_hash`` are never rewritten: once settled, the
authorization is public on chain, and a stored answer served to any request
carrying it was anyone's to read (until session 26).

A row moves through these states:

* ``pending``: claimed by its ``owner`` (a process, payments/owners.py);
  verifying, then running the tool. Nothing is stored and nothing settled:
  if the owner dies, a retry of the same request takes the row over and
  starts again (verify, run); while it lives, a retry is told "in progress";
* ``settling``: the tool ran and succeeded. Its result is stored together
  with the intent to settle (the authorization's nonce, payer and amount,
  and the request hash), and ``settle_attempts`` counts the settle request,
  all before the facilitator is asked. If the owner dies, a retry (of the
  same request, as for every state below) takes the
  settlement over at once (or, when the owner cannot be probed, once the row
  is older than a settle call can last) and asks again;
* ``ran``: the facilitator could not be reached; the result stays stored,
  and a retry with the same payment only retries settlement;
* ``done``: the final outcome is stored and is what every retry of the
  same request gets.

A row that never ran the tool (a verification outage) is deleted, so the
same payment can be retried from the start.

``settle_attempts`` is what makes a lost answer safe: a settle request that
may have reached the facilitator with no answer stored (a crash, a timeout,
a 5xx) stays counted, so when the next one is refused because the nonce is
already used, the gate knows the earlier request is what used it, and
answers with the stored result instead of refusing a payment that went
through (payments/gate.py). A request that certainly never reached the
facilitator (connection refused) is uncounted again.

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

from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from kernel.jsontypes import JsonObject
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


def payment_key(payload: JsonObject) -> str:
    """sha256 of (signature, nonce); falls back to the whole canonical payload."""
    inner = payload.get("payload")
    inner = inner if isinstance(inner, dict) else {}
    auth = inner.get("authorization")
    auth = auth if isinstance(auth, dict) else {}
    signature, nonce = _hex(inner.get("signature", "")), _hex(auth.get("nonce", ""))
    material = f"{signature}|{nonce}" if signature else json.dumps(payload, sort_keys=True)
    return hashlib.sha256(material.encode("utf-8")).hexdigest()


def _hex(value: object) -> str:
    """One spelling of a hex value: the facilitator reads ``0xAB``, ``AB`` and
    `` ab `` as the same bytes, so a payment respelled so was a new payment
    here and ran its tool a second time (session 25b)."""
    text = str(value).strip().lower()
    return text[2:] if text.startswith("0x") else text


def _until() -> datetime:
    return timezone.now() + RETENTION


def claim(key: str, *, tool: str, request_hash: str, owner: str = "") -> tuple[PaymentAttempt, bool]:
    """(attempt, True) for a new payment, owned by ``owner``; (existing attempt, False) for a
    payment seen before, whichever request it was for (the caller compares ``request_hash``).

    Expired outcomes are purged first (at most once per :data:`PURGE_INTERVAL`),
    so the table never keeps a result much longer than :data:`RETENTION`; a
    replayed payment's own expired outcome is purged before it is looked at.
    """
    if _purge_due():
        purge_expired()
    try:
        with transaction.atomic():
            attempt = PaymentAttempt.objects.create(
                key=key, tool=tool, request_hash=request_hash, kept_until=_until(), owner=owner
            )
            return attempt, True
    except IntegrityError:
        attempt = PaymentAttempt.objects.get(key=key)
    if attempt.kept_until is not None and attempt.kept_until < timezone.now():
        purge_expired(key=key)
        attempt.refresh_from_db()
    return attempt, False


def take_over(attempt: PaymentAttempt, *, owner: str, request_hash: str) -> bool:
    """Claim a ``pending`` payment whose owner died, for a retry of its own
    request (``request_hash``, which the row must hold: it is never
    rewritten); False if another request took it first. Nothing was stored
    or settled for it."""
    taken = PaymentAttempt.objects.filter(
        pk=attempt.pk, state=State.PENDING, owner=attempt.owner, request_hash=request_hash
    ).update(owner=owner, kept_until=_until(), updated_at=timezone.now())
    if taken:
        attempt.owner = owner
    return bool(taken)


def hold(attempt: PaymentAttempt, outcome: JsonObject, *, nonce: str, payer: str, amount: str) -> None:
    """The tool ran and succeeded: store its outcome and the intent to settle
    (nonce, payer, amount; the request hash is already there), counting the
    settle request about to be sent, in one write, before asking to settle."""
    attempt.nonce, attempt.payer, attempt.amount = nonce[:66], payer[:66], amount[:78]
    attempt.settle_attempts = 1
    _save(attempt, State.SETTLING, outcome, "nonce", "payer", "amount", "settle_attempts")


def await_settlement(attempt: PaymentAttempt, *, sent: bool = True) -> None:
    """Settlement could not be reached: keep the result, let a retry settle.

    ``sent=False``: the settle request certainly never reached the facilitator,
    so it is no longer counted in ``settle_attempts``.
    """
    row = PaymentAttempt.objects.filter(pk=attempt.pk)
    with transaction.atomic():
        moved = row.filter(state=State.SETTLING, owner=attempt.owner).update(
            state=State.RAN, kept_until=_until(), updated_at=timezone.now()
        )
        if moved and not sent:
            row.filter(settle_attempts__gt=0).update(settle_attempts=F("settle_attempts") - 1)
    attempt.state = State.RAN


def take_settlement(
    attempt: PaymentAttempt,
    *,
    owner: str,
    request_hash: str,
    stale_after: timedelta,
    owner_dead: bool = False,
) -> bool:
    """Move a payment to ``settling`` for this request and count the settle
    request it is about to send; False if another request has it, or if this
    request is not the one the payment was first sent with (``request_hash``).

    A ``ran`` payment is taken at once, and so is a ``settling`` one whose owner
    died (``owner_dead``: its process is gone, payments/owners.py). Otherwise a
    ``settling`` one is taken only once it has not changed for ``stale_after``
    (longer than a settle call can last): the request that was settling it died,
    or could not store its answer, and the held result would otherwise be out
    of reach until it is purged.
    """
    now = timezone.now()
    waiting = Q(state=State.RAN) | Q(state=State.SETTLING, updated_at__lt=now - stale_after)
    if owner_dead:
        waiting |= Q(state=State.SETTLING, owner=attempt.owner)
    taken = PaymentAttempt.objects.filter(waiting, pk=attempt.pk, request_hash=request_hash).update(
        state=State.SETTLING, owner=owner, settle_attempts=F("settle_attempts") + 1, updated_at=now
    )
    if taken:
        attempt.refresh_from_db(fields=["state", "owner", "settle_attempts", "outcome", "updated_at"])
    return bool(taken)


def unfinished_owners() -> set[str]:
    """The owners of every ``pending`` or ``settling`` payment."""
    rows = PaymentAttempt.objects.filter(state__in=(State.PENDING, State.SETTLING))
    return set(rows.values_list("owner", flat=True).distinct())


def complete(attempt: PaymentAttempt, outcome: JsonObject) -> None:
    _save(attempt, State.DONE, outcome)


def release(attempt: PaymentAttempt) -> None:
    """Forget a payment that was neither verified nor settled, so the client may retry it."""
    PaymentAttempt.objects.filter(pk=attempt.pk, state=State.PENDING, owner=attempt.owner).delete()


def purge_expired(now: datetime | None = None, *, key: str | None = None) -> int:
    """Empty every stored outcome past its retention (only ``key``'s, if given);
    the number of rows purged."""
    now = now or timezone.now()
    rows = PaymentAttempt.objects.filter(kept_until__lt=now)
    if key is not None:
        rows = rows.filter(key=key)
    return rows.update(state=State.DONE, outcome=None, kept_until=None, updated_at=now)


def _save(attempt: PaymentAttempt, state: str, outcome: JsonObject, *fields: str) -> None:
    attempt.state = state
    attempt.outcome = outcome
    attempt.kept_until = _until()
    attempt.save(update_fields=["state", "outcome", "kept_until", "updated_at", *fields])
