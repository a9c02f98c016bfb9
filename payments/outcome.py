"""What the gate tells the transport: everything needed to answer one tools/call."""

from __future__ import annotations

import hashlib
import json
import unicodedata
from dataclasses import asdict, dataclass, field, replace

from kernel import errors
from kernel.jsontypes import JsonObject

#: JSON-RPC code for "the payment could not be processed now, retry" (facilitator outage).


@dataclass(frozen=True)
class Outcome:
    """The answer to one gated ``tools/call``.

    ``kind`` is one of:

    * ``free``: the tool is not priced; ``result`` is its answer.
    * ``challenge``: no payment was sent; answer 402 with ``headers`` and ``error``.
    * ``paid``: verified, ran, settled; ``result`` (+ ``PAYMENT-RESPONSE``). Also when
      the facilitator says the nonce is used because an earlier, unanswered settle
      request for the same payment settled it: then the receipt has no transaction.
    * ``tool_error``: verified, the tool failed, nothing was settled; ``result``.
    * ``failed``: the payment was rejected (``reason``, ``invalid_payload`` when it
      cannot be decoded); 402 again, with a fresh challenge.
    * ``unavailable``: the facilitator is down; retryable ``error``. Either the tool did
      not run (a verify outage), or it ran and its result is held until a retry with
      the same payment settles it (a settle outage: ``data.tool_ran``).
    * ``ran``: stored only, never answered: the tool succeeded, settlement is pending.
    * ``in_progress``: the same payment is being processed by another request; retry.
    * ``replayed``: the stored outcome of an earlier request with the same payment and
      the same request hash (a payment sent for another request is ``failed``,
      ``payment_already_used``).

    Exactly one of ``result`` / ``error`` is set. ``variant`` is ``http`` (headers)
    or ``inband`` (``_meta``); in-band payment failures are tool results with
    ``isError`` (x402 MCP transport), so their ``http_status`` is 200.
    """

    kind: str
    http_status: int
    variant: str = "http"
    headers: dict[str, str] = field(default_factory=dict)
    result: JsonObject | None = None
    error: JsonObject | None = None
    reason: str = ""
    replay_of: str = ""

    @property
    def retryable(self) -> bool:
        return bool(self.error and (self.error.get("data") or {}).get("retryable"))

    def to_dict(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: JsonObject) -> Outcome:
        return cls(**data)

    def as_replay(self) -> Outcome:
        return replace(self, kind="replayed", replay_of=self.kind)


def unavailable(variant: str, status: int, detail: str, *, tool_ran: bool = False) -> Outcome:
    if tool_ran:
        message = (
            "The payment facilitator is unavailable; nothing was charged yet. The tool ran and its "
            "result is held: retry with the same payment to settle it and get the result."
        )
    else:
        message = "The payment facilitator is unavailable; nothing was charged. Retry later."
    data = {"code": errors.PROVIDER_FAILED, "retryable": True, "reason": "facilitator_unavailable"}
    error = {
        "code": errors.RPC_PAYMENT_UNAVAILABLE,
        "message": message,
        "data": {**data, "tool_ran": tool_ran},
    }
    headers = {"Retry-After": "5"} if variant == "http" else {}
    http_status = status if variant == "http" else 200
    return Outcome("unavailable", http_status, variant, headers, error=error, reason=detail)


def in_progress(variant: str) -> Outcome:
    error = {
        "code": errors.RPC_PAYMENT_UNAVAILABLE,
        "message": "This payment is already being processed; retry to get its result.",
        "data": {"code": errors.SERVER_BUSY, "retryable": True, "reason": "payment_in_progress"},
    }
    return Outcome("in_progress", 409 if variant == "http" else 200, variant, {}, error=error)


def request_hash(tool_name: str, arguments: JsonObject | None) -> str:
    """sha256 of the tool name and its canonical arguments; the text itself is never kept.

    The replay store serves a payment's stored answer only to a request with
    this hash (payments/gate.py), so it names the question the tool is asked,
    not how it was spelled: keys in any order (at every depth), a number in
    any spelling (``3``, ``3.0``, ``3e0`` are one; ``true`` stays a boolean),
    a key in any Unicode normal form (NFC; two keys of one form in one
    object stay two keys). A value is kept as sent: ``café`` in NFC and NFD
    may name two files. Arguments of integers, NFC keys and any strings hash
    as they did before session 26, so a stored row still answers its retry.
    """
    canonical = json.dumps(
        {"tool": tool_name, "arguments": _canonical(arguments or {})},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        default=str,
    )
    # a lone surrogate is no UTF-8; hashed as its code point rather than raised
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


def _canonical(value: object) -> object:
    """``value`` with integral floats as integers and object keys in NFC."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list | tuple):
        return [_canonical(item) for item in value]
    if isinstance(value, dict):
        items = {str(key): _canonical(item) for key, item in value.items()}
        normal = {unicodedata.normalize("NFC", key): item for key, item in items.items()}
        # two keys that normalize alike stay apart, spelled as sent (a key not
        # in NFC never appears in a normalized object, so no other request matches)
        return normal if len(normal) == len(items) else items
    return value
