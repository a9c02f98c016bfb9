"""The replay store: one row per payment, claimed before anything runs.

A payment is identified by its signature and its authorization nonce. The
first request inserts the row (the database's unique constraint decides
races between processes too); any later request with the same payment
finds it and gets the stored outcome, or "in progress" while the first is
still running.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from django.db import IntegrityError, transaction

from payments.models import PaymentAttempt


def payment_key(payload: dict[str, Any]) -> str:
    """sha256 of (signature, nonce); falls back to the whole canonical payload."""
    inner = payload.get("payload") if isinstance(payload.get("payload"), dict) else {}
    auth = inner.get("authorization") if isinstance(inner.get("authorization"), dict) else {}
    signature, nonce = str(inner.get("signature", "")), str(auth.get("nonce", ""))
    material = f"{signature.lower()}|{nonce.lower()}" if signature else json.dumps(payload, sort_keys=True)
    return hashlib.sha256(material.encode("utf-8")).hexdigest()


def claim(key: str, *, tool: str, request_hash: str) -> tuple[PaymentAttempt, bool]:
    """(attempt, True) for a new payment; (existing attempt, False) for a replay."""
    try:
        with transaction.atomic():
            return PaymentAttempt.objects.create(key=key, tool=tool, request_hash=request_hash), True
    except IntegrityError:
        return PaymentAttempt.objects.get(key=key), False


def complete(attempt: PaymentAttempt, outcome: dict[str, Any]) -> None:
    attempt.state = PaymentAttempt.State.DONE
    attempt.outcome = outcome
    attempt.save(update_fields=["state", "outcome", "updated_at"])


def release(attempt: PaymentAttempt) -> None:
    """Forget a payment that was neither verified nor settled, so the client may retry it."""
    PaymentAttempt.objects.filter(pk=attempt.pk, state=PaymentAttempt.State.PENDING).delete()
