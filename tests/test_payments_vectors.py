"""The x402 spec's header vectors, the fake facilitator's signature check, and concurrent replays."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from django.db import connection
from x402 import PaymentPayload, PaymentRequirements
from x402.http import (
    decode_payment_required_header,
    decode_payment_response_header,
    decode_payment_signature_header,
    encode_payment_signature_header,
    safe_base64_decode,
)

from kernel.config import build_config
from payments import gate as gate_mod
from payments import replay
from payments.facilitator import Facilitator
from payments.models import PaymentAttempt
from tests.fakes.facilitator import FakeFacilitator, running_facilitator
from tests.x402_client import BASE_SEPOLIA, PAY_TO, payment_header, sign_payment

#: the x402 HTTP transport spec's header vectors (source: tests/data/x402/README.md)
VECTORS = Path(__file__).resolve().parent / "data" / "x402" / "x402_vectors.json"
VECTOR_PAYER = "0x857b06519E91e3A54538791bDbb0E22373e36b66"


@pytest.fixture
def vectors() -> dict[str, list]:
    out: dict[str, list] = {}
    for item in json.loads(VECTORS.read_text())["vectors"]:
        out.setdefault(item["header"], []).append(item)
    return out


@pytest.fixture
def fake_facilitator():
    with running_facilitator() as fake:
        yield fake


def _dump(model) -> dict:
    return model.model_dump(by_alias=True, exclude_none=True, mode="json")


def test_the_vectors_are_in_the_repository(vectors):
    counts = {header: len(items) for header, items in vectors.items()}
    assert counts == {
        "PAYMENT-REQUIRED": 1,
        "PAYMENT-SIGNATURE": 1,
        "PAYMENT-RESPONSE": 2,
        "EXTENSION-RESPONSES": 2,
    }


def test_spec_vectors_decode_with_the_x402_codecs(vectors):
    (required,) = vectors["PAYMENT-REQUIRED"]
    assert _dump(decode_payment_required_header(required["value"])) == required["decoded"]
    (signature,) = vectors["PAYMENT-SIGNATURE"]
    assert _dump(decode_payment_signature_header(signature["value"])) == signature["decoded"]
    for response in vectors["PAYMENT-RESPONSE"]:
        assert _dump(decode_payment_response_header(response["value"])) == response["decoded"]
    for ext in vectors["EXTENSION-RESPONSES"]:
        assert json.loads(safe_base64_decode(ext["value"])) == ext["decoded"]


def test_vector_signature_is_genuine_but_expired(vectors, fake_facilitator: FakeFacilitator):
    payload = decode_payment_signature_header(vectors["PAYMENT-SIGNATURE"][0]["value"])
    decoded = vectors["PAYMENT-SIGNATURE"][0]["decoded"]
    requirements = PaymentRequirements.model_validate(decoded["accepted"])
    auth = decoded["payload"]["authorization"]
    assert FakeFacilitator.signature_ok(auth, decoded["payload"]["signature"], decoded["accepted"])
    forged = {**auth, "value": "20000"}
    assert not FakeFacilitator.signature_ok(forged, decoded["payload"]["signature"], decoded["accepted"])
    client = Facilitator(fake_facilitator.url)
    try:
        verdict = client.verify(payload, requirements)
    finally:
        client.close()
    assert verdict.is_valid is False and verdict.payer == VECTOR_PAYER
    assert verdict.invalid_reason == "invalid_exact_evm_payload_authorization_valid_before"
    assert fake_facilitator.calls[-1].body["paymentPayload"] == decoded


@pytest.mark.django_db
def test_replay_store_claims_a_payment_once():
    first, fresh = replay.claim("k" * 64, tool="t", request_hash="h")
    second, again = replay.claim("k" * 64, tool="t", request_hash="h")
    assert fresh and not again and first.pk == second.pk


def test_payment_key_is_signature_and_nonce():
    base = {"payload": {"signature": "0xAB", "authorization": {"nonce": "0x01"}}}
    same = {"payload": {"signature": "0xab", "authorization": {"nonce": "0x01"}}, "resource": {"url": "x"}}
    other = {"payload": {"signature": "0xab", "authorization": {"nonce": "0x02"}}}
    assert replay.payment_key(base) == replay.payment_key(same) != replay.payment_key(other)


def required_gate(facilitator_url: str, tmp_path, *, request_hash: str) -> tuple[gate_mod.Gate, str]:
    """A gate requiring payment for every call, and a payment for its challenge to ``request_hash``."""
    cfg = build_config(
        {
            "x402": {
                "mode": "required",
                "facilitator_url": facilitator_url,
                "resource_base_url": "https://files.example",
                "route_policy": {"tools_call": {"price": "0.01", "network": BASE_SEPOLIA, "pay_to": PAY_TO}},
            }
        },
        {},
        {},
    )
    gate = gate_mod.from_config(cfg, tmp_path)
    unpaid = gate.handle(
        tool_name="t", arguments={}, header=None, meta_payment=None, request_hash=request_hash, run=dict
    )
    return gate, payment_header(unpaid.headers["PAYMENT-REQUIRED"])


@pytest.mark.django_db(transaction=True)
def test_concurrent_duplicate_payment_runs_the_tool_once(fake_facilitator, tmp_path):
    gate, header = required_gate(fake_facilitator.url, tmp_path, request_hash="h")
    started, release = threading.Event(), threading.Event()
    runs: list[int] = []
    outcomes: dict[str, object] = {}

    def slow_tool() -> dict:
        runs.append(1)
        started.set()
        release.wait()
        return {"content": [{"type": "text", "text": "ok"}], "isError": False}

    def request(name: str) -> None:
        try:
            outcomes[name] = gate.handle(
                tool_name="t", arguments={}, header=header, meta_payment=None, request_hash="h", run=slow_tool
            )
        finally:
            connection.close()

    first = threading.Thread(target=request, args=("first",))
    first.start()
    assert started.wait(30)
    second = threading.Thread(target=request, args=("second",))
    second.start()
    second.join(30)
    release.set()
    first.join(30)
    gate.close()
    assert outcomes["first"].kind == "paid" and outcomes["second"].kind == "in_progress"
    assert len(runs) == 1 and fake_facilitator.count("/settle") == 1
    assert PaymentAttempt.objects.get().state == "done"
    later = gate.handle(
        tool_name="t", arguments={}, header=header, meta_payment=None, request_hash="h", run=slow_tool
    )
    assert later.kind == "replayed" and len(runs) == 1


def test_signed_header_round_trips_through_the_codecs():
    pr = {
        "x402Version": 2,
        "resource": {"url": "https://files.example/mcp"},
        "accepts": [
            {
                "scheme": "exact",
                "network": BASE_SEPOLIA,
                "amount": "10000",
                "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
                "payTo": PAY_TO,
                "maxTimeoutSeconds": 60,
                "extra": {"name": "USDC", "version": "2"},
            }
        ],
    }
    payload = sign_payment(pr)
    assert isinstance(payload, PaymentPayload)
    decoded = decode_payment_signature_header(encode_payment_signature_header(payload))
    assert _dump(decoded) == _dump(payload) and decoded.accepted.pay_to == PAY_TO
    auth = _dump(decoded)["payload"]["authorization"]
    assert FakeFacilitator.signature_ok(auth, _dump(decoded)["payload"]["signature"], pr["accepts"][0])


@pytest.mark.django_db(transaction=True)
def test_concurrent_requests_with_one_payment_run_only_the_first_request(fake_facilitator, tmp_path):
    """Two requests with the same payment and different arguments, on two
    threads (two database connections): the first claims the payment and its
    request runs; the other is ``payment_already_used`` while it runs and
    after, never "in progress" (it would be served the first's answer)."""
    gate, header = required_gate(fake_facilitator.url, tmp_path, request_hash="a")
    started, release = threading.Event(), threading.Event()
    runs: list[str] = []
    outcomes: dict[str, gate_mod.Outcome] = {}

    def request(name: str, asked: str) -> None:
        def tool() -> dict:
            runs.append(asked)
            started.set()
            release.wait(30)
            return {"content": [{"type": "text", "text": f"answer to {asked}"}], "isError": False}

        try:
            outcomes[name] = gate.handle(
                tool_name="t", arguments={}, header=header, meta_payment=None, request_hash=asked, run=tool
            )
        finally:
            connection.close()

    first = threading.Thread(target=request, args=("first", "a"))
    first.start()
    assert started.wait(30)
    second = threading.Thread(target=request, args=("second", "b"))
    second.start()
    second.join(30)
    release.set()
    first.join(30)
    late = threading.Thread(target=request, args=("late", "b"))
    late.start()
    late.join(30)
    gate.close()
    assert outcomes["first"].kind == "paid" and runs == ["a"]
    for name in ("second", "late"):
        assert outcomes[name].kind == "failed" and outcomes[name].reason == "payment_already_used", name
        assert "answer to" not in json.dumps(outcomes[name].to_dict())
    assert fake_facilitator.count("/verify") == 1 and fake_facilitator.count("/settle") == 1
    attempt = PaymentAttempt.objects.get()
    assert (attempt.state, attempt.request_hash) == ("done", "a")
