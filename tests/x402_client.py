"""The buyer's side of x402, offline: real EIP-3009 signatures from a public test key.

:func:`payment_header` is what an x402 client sends after a 402: it decodes
``PAYMENT-REQUIRED`` with the x402 codecs, signs with the ``x402`` client
and ``eth_account``, and encodes ``PAYMENT-SIGNATURE``. :func:`sign_custom`
signs an authorization with chosen fields (another value, recipient or
validity window), still with a genuine signature, to build the rejection
cases a facilitator must catch.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from eth_account import Account
from eth_account.messages import encode_typed_data
from x402 import PaymentPayload, PaymentRequired, x402ClientSync
from x402.http import decode_payment_required_header, encode_payment_signature_header

from payments.evm import get_evm_chain_id, register_exact_evm_client

#: Anvil/Hardhat account #0: public test material, never funded.
TEST_KEY = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80"
TEST_ADDRESS = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
#: Anvil account #1, used to sign payments that claim to come from someone else.
OTHER_KEY = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d"
PAY_TO = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"
BASE_SEPOLIA = "eip155:84532"
BASE_SEPOLIA_USDC = "0x036CbD53842c5426634e7929541eC2318f3dCF7e"


def x402_env(facilitator_url: str, *, resource_base: str = "https://files.example.com") -> dict[str, str]:
    """The environment of a server that sells every tool call at $0.01 on
    Base Sepolia through ``facilitator_url`` (what ``--x402 required`` and
    its flags set)."""
    return {
        "DIR2MCP_X402_MODE": "required",
        "DIR2MCP_X402_FACILITATOR_URL": facilitator_url,
        "DIR2MCP_X402_RESOURCE_BASE_URL": resource_base,
        "DIR2MCP_X402_NETWORK": BASE_SEPOLIA,
        "DIR2MCP_X402_PRICE": "0.01",
        "DIR2MCP_X402_PAY_TO": PAY_TO,
    }


def as_payment_required(value: PaymentRequired | str | dict) -> PaymentRequired:
    """Accept the decoded object, the ``PAYMENT-REQUIRED`` header value or its JSON dict."""
    if isinstance(value, PaymentRequired):
        return value
    if isinstance(value, dict):
        clean = {k: v for k, v in value.items() if k not in ("code", "retryable")}
        return PaymentRequired.model_validate(clean)
    decoded = decode_payment_required_header(value)
    assert isinstance(decoded, PaymentRequired), "expected an x402 v2 PaymentRequired"
    return decoded


def sign_payment(required: PaymentRequired | str | dict, *, key: str = TEST_KEY) -> PaymentPayload:
    """A payment for the first accepted requirement, made by the x402 client itself."""
    client = x402ClientSync()
    register_exact_evm_client(client, Account.from_key(key))
    return client.create_payment_payload(as_payment_required(required))


def payment_header(required: PaymentRequired | str | dict, *, key: str = TEST_KEY) -> str:
    """The ``PAYMENT-SIGNATURE`` header value answering ``required``."""
    return encode_payment_signature_header(sign_payment(required, key=key))


def payment_meta(required: PaymentRequired | str | dict, *, key: str = TEST_KEY) -> dict[str, Any]:
    """The in-band ``_meta["x402/payment"]`` object answering ``required``."""
    return sign_payment(required, key=key).model_dump(by_alias=True, exclude_none=True, mode="json")


def sign_custom(
    required: PaymentRequired | str | dict,
    *,
    key: str = TEST_KEY,
    value: str | None = None,
    to: str | None = None,
    valid_after: int = 0,
    valid_before: int | None = None,
    accepted: dict | None = None,
) -> PaymentPayload:
    """A genuinely signed EIP-3009 payment whose fields may differ from what was asked."""
    pr = as_payment_required(required)
    req = pr.accepts[0]
    account = Account.from_key(key)
    message = {
        "from": account.address,
        "to": to or req.pay_to,
        "value": int(value if value is not None else req.amount),
        "validAfter": valid_after,
        "validBefore": valid_before if valid_before is not None else int(time.time()) + 600,
        "nonce": "0x" + secrets.token_hex(32),
    }
    typed = {
        "types": {
            "EIP712Domain": [
                {"name": "name", "type": "string"},
                {"name": "version", "type": "string"},
                {"name": "chainId", "type": "uint256"},
                {"name": "verifyingContract", "type": "address"},
            ],
            "TransferWithAuthorization": [
                {"name": "from", "type": "address"},
                {"name": "to", "type": "address"},
                {"name": "value", "type": "uint256"},
                {"name": "validAfter", "type": "uint256"},
                {"name": "validBefore", "type": "uint256"},
                {"name": "nonce", "type": "bytes32"},
            ],
        },
        "primaryType": "TransferWithAuthorization",
        "domain": {
            "name": req.extra["name"],
            "version": req.extra["version"],
            "chainId": get_evm_chain_id(req.network),
            "verifyingContract": req.asset,
        },
        "message": message,
    }
    signed = account.sign_message(encode_typed_data(full_message=typed))
    authorization = {k: str(v) for k, v in message.items()}
    return PaymentPayload.model_validate(
        {
            "x402Version": 2,
            "resource": pr.resource.model_dump(by_alias=True, exclude_none=True) if pr.resource else None,
            "accepted": accepted or req.model_dump(by_alias=True, exclude_none=True),
            "payload": {
                "signature": "0x" + signed.signature.hex().removeprefix("0x"),
                "authorization": authorization,
            },
        }
    )


def _hex(data: bytes) -> str:
    return "0x" + data.hex().removeprefix("0x")
