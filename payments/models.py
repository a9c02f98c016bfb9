"""Payment audit rows and the replay store."""

from __future__ import annotations

from django.db import models


class SettlementLog(models.Model):
    """One payment event: a challenge, a verification, a settlement or a failure.

    Rows hold a hash of the request, never its arguments (the query text).
    """

    class Status(models.TextChoices):
        REQUIRED = "required", "payment required"
        VERIFIED = "verified", "verified"
        SETTLING = "settling", "settlement requested"
        SETTLED = "settled", "settled"
        FAILED = "failed", "failed"

    tool = models.CharField(max_length=128, db_index=True)
    status = models.CharField(max_length=16, choices=Status.choices, db_index=True)
    price = models.CharField(max_length=40, blank=True, help_text="configured price text, e.g. 0.001")
    amount = models.CharField(max_length=78, blank=True, help_text="atomic units of the asset")
    asset = models.CharField(max_length=66, blank=True)
    network = models.CharField(max_length=64, db_index=True)
    pay_to = models.CharField(max_length=66, blank=True)
    payer = models.CharField(max_length=66, blank=True, db_index=True)
    payer_verified = models.BooleanField(
        default=False,
        help_text="the facilitator accepted the payment signed by this payer; "
        "otherwise the payer is only what the payment claimed",
    )
    transaction = models.CharField(max_length=132, blank=True, db_index=True)
    error_reason = models.CharField(max_length=128, blank=True)
    request_hash = models.CharField(max_length=64, db_index=True)
    payment_key = models.CharField(max_length=64, blank=True, db_index=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.tool} {self.status} {self.amount or '-'} {self.network}"


class PaymentAttempt(models.Model):
    """One payment (signature + nonce) seen by the gate.

    The unique ``key`` is what stops a replayed or concurrent duplicate
    payment from running the tool or settling twice: the second request
    cannot insert its row, and gets the stored ``outcome`` instead.

    ``outcome`` holds the answer of the first request (for a paid call, the
    tool's result, which may quote the query) so that a replay, or a retry
    after a settlement outage, gets it without running the tool again. It is
    purged ``kept_until`` (payments/replay.py); the row itself, which holds
    no request content, stays so the payment can never be used twice.

    Before the facilitator is asked to settle, the row records the intent:
    the authorization's ``nonce``, ``payer`` and ``amount`` (with the
    ``request_hash``), and counts the settle request in ``settle_attempts``
    (the settle requests that may have reached the facilitator with no answer
    stored). ``owner`` names the process handling the payment while it is
    ``pending`` or ``settling`` (payments/owners.py).
    """

    class State(models.TextChoices):
        PENDING = "pending", "in progress"
        RAN = "ran", "ran, awaiting settlement"
        SETTLING = "settling", "settling"
        DONE = "done", "done"

    key = models.CharField(max_length=64, unique=True)
    tool = models.CharField(max_length=128)
    request_hash = models.CharField(max_length=64)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    outcome = models.JSONField(null=True, blank=True)
    kept_until = models.DateTimeField(
        null=True, blank=True, db_index=True, help_text="when the stored outcome is purged"
    )
    owner = models.CharField(max_length=64, blank=True, default="", help_text="the process handling it")
    nonce = models.CharField(max_length=66, blank=True, default="", help_text="the authorization's nonce")
    payer = models.CharField(max_length=66, blank=True, default="")
    amount = models.CharField(max_length=78, blank=True, default="", help_text="atomic units of the asset")
    settle_attempts = models.PositiveIntegerField(
        default=0, help_text="settle requests that may have reached the facilitator, unanswered"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.key[:12]}… {self.tool} {self.state}"
