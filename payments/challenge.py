"""The 402 challenge: PaymentRequired, its header, and its two JSON-RPC shapes.

HTTP variant (x402 HTTP transport): HTTP 402, ``PAYMENT-REQUIRED`` =
base64(PaymentRequired), body = a JSON-RPC error with code 402 (the x402
MCP transport's ``MCP_PAYMENT_REQUIRED_CODE``) whose ``data`` is the same
PaymentRequired plus the spec §14 fields ``code`` and ``retryable``.

In-band variant (x402 MCP transport): a tool result with ``isError: true``,
the PaymentRequired as ``structuredContent`` and as JSON text.
"""

from __future__ import annotations

import json

from x402 import PaymentRequired, ResourceInfo
from x402.http import PAYMENT_REQUIRED_HEADER, encode_payment_required_header
from x402.mcp.types import MCP_PAYMENT_REQUIRED_CODE

from kernel import errors
from kernel.jsontypes import JsonObject
from payments.policy import Price

JSONRPC_PAYMENT_REQUIRED = MCP_PAYMENT_REQUIRED_CODE  # 402
NO_PAYMENT = 'PAYMENT-SIGNATURE header or _meta["x402/payment"] is required'


def payment_required(
    tool_name: str,
    price: Price,
    resource_url: str,
    *,
    error: str = NO_PAYMENT,
    extensions: JsonObject | None = None,
    description: str = "",
) -> PaymentRequired:
    return PaymentRequired(
        error=error,
        resource=ResourceInfo(
            url=resource_url,
            description=description or f"MCP tool call: {tool_name}",
            mime_type="application/json",
        ),
        accepts=[price.requirements()],
        extensions=extensions or None,
    )


def as_dict(required: PaymentRequired) -> JsonObject:
    return required.model_dump(by_alias=True, exclude_none=True, mode="json")


def headers(required: PaymentRequired) -> dict[str, str]:
    return {PAYMENT_REQUIRED_HEADER: encode_payment_required_header(required), "Cache-Control": "no-store"}


def jsonrpc_error(required: PaymentRequired, message: str = "Payment required") -> JsonObject:
    data = {**as_dict(required), "code": errors.UNAUTHORIZED, "retryable": False}
    return {"code": JSONRPC_PAYMENT_REQUIRED, "message": message, "data": data}


def inband_result(required: PaymentRequired) -> JsonObject:
    body = as_dict(required)
    return {
        "content": [{"type": "text", "text": json.dumps(body)}],
        "structuredContent": body,
        "isError": True,
    }


def encode_receipt(receipt: JsonObject) -> str:
    """``PAYMENT-RESPONSE`` for a stored or failed SettleResponse dict."""
    from x402 import SettleResponse
    from x402.http import encode_payment_response_header

    return encode_payment_response_header(SettleResponse.model_validate(receipt))
