"""Gate.handle against the fake facilitator over HTTP, with genuinely signed payments."""

from __future__ import annotations

import base64
import hashlib
import json
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone
from x402 import PaymentPayload, PaymentRequired
from x402.http import (
    decode_payment_required_header,
    decode_payment_response_header,
    decode_payment_signature_header,
    encode_payment_signature_header,
)

from kernel.config import build_config
from payments import gate as gate_mod
from payments import owners, replay
from payments.facilitator import Facilitator
from payments.models import PaymentAttempt, SettlementLog
from tests.fakes.facilitator import FakeFacilitator, running_facilitator
from tests.x402_client import (
    BASE_SEPOLIA,
    BASE_SEPOLIA_USDC,
    OTHER_KEY,
    PAY_TO,
    TEST_ADDRESS,
    payment_header,
    payment_meta,
    sign_custom,
)

pytestmark = pytest.mark.django_db

TOOL = "dir2mcp.search"
ARGS = {"query": "invoices 2024 confidential", "k": 3}


class Tool:
    """A real ``run`` callable that counts its calls."""

    def __init__(self, *, error: bool = False):
        self.calls = 0
        self.error = error

    def __call__(self) -> dict:
        self.calls += 1
        text = "boom" if self.error else "3 hits"
        return {
            "content": [{"type": "text", "text": text}],
            "structuredContent": {"n": 3},
            "isError": self.error,
        }


def x402_config(facilitator_url: str, **tools_call) -> dict:
    return {
        "x402": {
            "mode": "required",
            "facilitator_url": facilitator_url,
            "resource_base_url": "https://files.example",
            "route_policy": {
                "tools_call": {"price": "0.01", "network": BASE_SEPOLIA, "pay_to": PAY_TO, **tools_call}
            },
        }
    }


@pytest.fixture
def fake_facilitator():
    with running_facilitator() as fake:
        yield fake


@pytest.fixture
def gate(fake_facilitator: FakeFacilitator, tmp_path: Path):
    events: list[dict] = []
    cfg = build_config(x402_config(fake_facilitator.url, prices={"dir2mcp.stats": "0"}), {}, {})
    g = gate_mod.from_config(cfg, tmp_path, emit=events.append)
    g.events = events
    g.state = tmp_path
    yield g
    g.close()


def call(gate, tool: Tool, *, header=None, meta=None, name=TOOL, args=ARGS):
    return gate.handle(
        tool_name=name,
        arguments=args,
        header=header,
        meta_payment=meta,
        request_hash=gate_mod.request_hash(name, args),
        run=tool,
    )


def challenge(gate) -> PaymentRequired:
    outcome = call(gate, Tool())
    return decode_payment_required_header(outcome.headers["PAYMENT-REQUIRED"])


def test_unpaid_call_gets_402_with_every_requirement_field(gate):
    tool = Tool()
    outcome = call(gate, tool)
    assert outcome.kind == "challenge" and outcome.http_status == 402 and tool.calls == 0
    raw = json.loads(base64.b64decode(outcome.headers["PAYMENT-REQUIRED"]))
    assert raw["x402Version"] == 2
    assert raw["resource"]["url"] == "https://files.example/mcp"
    assert raw["accepts"] == [
        {
            "scheme": "exact",
            "network": BASE_SEPOLIA,
            "amount": "10000",
            "asset": BASE_SEPOLIA_USDC,
            "payTo": PAY_TO,
            "maxTimeoutSeconds": 300,
            "extra": {"name": "USDC", "version": "2"},
        }
    ]
    decoded = decode_payment_required_header(outcome.headers["PAYMENT-REQUIRED"])
    assert decoded.accepts[0].amount == "10000"
    error = outcome.error
    assert error["code"] == 402 and error["data"]["accepts"] == raw["accepts"]
    assert error["data"]["code"] == "UNAUTHORIZED" and error["data"]["retryable"] is False
    row = SettlementLog.objects.get()
    assert row.status == "required" and row.tool == TOOL and row.amount == "10000"
    assert row.request_hash == gate_mod.request_hash(TOOL, ARGS)
    assert [e["event"] for e in gate.events] == ["payment_required"]


def test_valid_payment_runs_tool_settles_once_and_returns_payment_response(gate, fake_facilitator):
    tool = Tool()
    header = payment_header(challenge(gate))
    outcome = call(gate, tool, header=header)
    assert outcome.kind == "paid" and outcome.http_status == 200 and tool.calls == 1
    assert outcome.result["content"][0]["text"] == "3 hits"
    receipt = decode_payment_response_header(outcome.headers["PAYMENT-RESPONSE"])
    assert receipt.success and receipt.payer == TEST_ADDRESS and receipt.network == BASE_SEPOLIA
    assert receipt.transaction.startswith("0x") and len(receipt.transaction) == 66
    assert fake_facilitator.count("/verify") == 1 and fake_facilitator.count("/settle") == 1
    statuses = list(SettlementLog.objects.order_by("id").values_list("status", flat=True))
    assert statuses == ["required", "verified", "settling", "settled"]
    settled = SettlementLog.objects.get(status="settled")
    assert settled.transaction == receipt.transaction and settled.payer == TEST_ADDRESS
    # the payer is the one the facilitator accepted, from verification on
    verified = SettlementLog.objects.exclude(status="required")
    assert [row.payer_verified for row in verified] == [True, True, True]
    assert all(e["data"]["payer_verified"] is True for e in gate.events[1:])
    events = [e["event"] for e in gate.events]
    assert events == ["payment_required", "payment_verified", "payment_settling", "payment_settled"]
    # the intent to settle, recorded before the facilitator was asked
    intent = SettlementLog.objects.get(status="settling")
    assert (intent.payer, intent.amount, intent.request_hash) == (
        TEST_ADDRESS,
        "10000",
        gate_mod.request_hash(TOOL, ARGS),
    )
    attempt = PaymentAttempt.objects.get()
    nonce = decode_payment_signature_header(header).payload["authorization"]["nonce"]
    assert (attempt.nonce, attempt.payer, attempt.amount, attempt.settle_attempts) == (
        nonce,
        TEST_ADDRESS,
        "10000",
        1,
    )


def _rejection_cases(required: PaymentRequired):
    accepted = required.accepts[0].model_dump(by_alias=True, exclude_none=True)
    tampered = payment_meta(required)
    sig = tampered["payload"]["signature"]
    tampered["payload"]["signature"] = sig[:10] + ("0" if sig[10] != "0" else "1") + sig[11:]
    return {
        "bad-signature": tampered,
        "signed-by-someone-else": _spoofed(required),
        "wrong-amount-declared": sign_custom(required, value="1", accepted={**accepted, "amount": "1"}),
        "wrong-amount-signed": sign_custom(required, value="1"),
        "wrong-recipient-declared": sign_custom(
            required, to=TEST_ADDRESS, accepted={**accepted, "payTo": TEST_ADDRESS}
        ),
        "wrong-recipient-signed": sign_custom(required, to=TEST_ADDRESS),
        "expired": sign_custom(required, valid_before=int(time.time()) - 10),
        "not-yet-valid": sign_custom(required, valid_after=int(time.time()) + 3600),
    }


def _spoofed(required: PaymentRequired) -> dict:
    """Signed by another key, but claiming to come from the test address."""
    payload = sign_custom(required, key=OTHER_KEY).model_dump(by_alias=True, exclude_none=True)
    payload["payload"]["authorization"]["from"] = TEST_ADDRESS
    return payload


REASONS = {
    "bad-signature": "invalid_exact_evm_payload_signature",
    "signed-by-someone-else": "invalid_exact_evm_payload_signature",
    "wrong-amount-declared": "invalid_exact_evm_payload_authorization_value_mismatch",
    "wrong-amount-signed": "invalid_exact_evm_payload_authorization_value_mismatch",
    "wrong-recipient-declared": "invalid_exact_evm_payload_recipient_mismatch",
    "wrong-recipient-signed": "invalid_exact_evm_payload_recipient_mismatch",
    "expired": "invalid_exact_evm_payload_authorization_valid_before",
    "not-yet-valid": "invalid_exact_evm_payload_authorization_valid_after",
}


@pytest.mark.parametrize("case", list(REASONS), ids=list(REASONS))
def test_rejected_payment_gets_402_with_reason_and_tool_does_not_run(gate, fake_facilitator, case):
    payment = _rejection_cases(challenge(gate))[case]
    meta = payment if isinstance(payment, dict) else payment.model_dump(by_alias=True, exclude_none=True)

    header = encode_payment_signature_header(PaymentPayload.model_validate(meta))
    tool = Tool()
    outcome = call(gate, tool, header=header)
    assert outcome.kind == "failed" and outcome.http_status == 402 and tool.calls == 0
    assert outcome.reason == REASONS[case]
    assert decode_payment_required_header(outcome.headers["PAYMENT-REQUIRED"]).error == REASONS[case]
    assert outcome.error["code"] == 402 and outcome.error["data"]["error"] == REASONS[case]
    assert fake_facilitator.count("/settle") == 0
    failed = SettlementLog.objects.get(status="failed")
    assert failed.error_reason == REASONS[case]
    assert failed.payer and failed.payer_verified is False  # only what the payment claimed
    # a mismatch with the requirements is caught before the facilitator is asked
    assert fake_facilitator.count("/verify") == (0 if case.endswith("declared") else 1)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


UNDECODABLE = {
    "not-base64": "not-base64-json!",
    "not-json": _b64("{not json"),
    "not-a-payment": _b64(json.dumps({"x402Version": 2, "hello": "world"})),
    "version-1": _b64(json.dumps({"x402Version": 1, "scheme": "exact", "network": "base", "payload": {}})),
}


@pytest.mark.parametrize("header", list(UNDECODABLE.values()), ids=list(UNDECODABLE))
def test_undecodable_header_gets_402_with_a_fresh_challenge_naming_the_reason(gate, fake_facilitator, header):
    tool = Tool()
    outcome = call(gate, tool, header=header)
    assert outcome.kind == "failed" and outcome.http_status == 402 and outcome.reason == "invalid_payload"
    assert tool.calls == 0 and fake_facilitator.calls == []
    required = decode_payment_required_header(outcome.headers["PAYMENT-REQUIRED"])
    assert required.error == "invalid_payload" and required.accepts == challenge(gate).accepts
    assert outcome.error["code"] == 402 and outcome.error["data"]["error"] == "invalid_payload"
    assert SettlementLog.objects.filter(status="failed", error_reason="invalid_payload").count() == 1
    assert not PaymentAttempt.objects.exists()
    # the fresh challenge is one a client can pay
    paid = call(gate, tool, header=payment_header(required))
    assert paid.kind == "paid" and tool.calls == 1


@pytest.mark.parametrize("meta", ["base64-or-whatever", {"x402Version": 2}], ids=["a-string", "no-payload"])
def test_undecodable_inband_payment_gets_the_challenge_in_band(gate, fake_facilitator, meta):
    tool = Tool()
    outcome = call(gate, tool, meta=meta)
    assert outcome.kind == "failed" and outcome.http_status == 200 and tool.calls == 0
    assert outcome.result["isError"] is True and outcome.reason == "invalid_payload"
    structured = outcome.result["structuredContent"]
    assert structured["error"] == "invalid_payload" and structured["accepts"][0]["amount"] == "10000"
    assert fake_facilitator.calls == []


def test_facilitator_down_is_retryable_and_tool_does_not_run(gate, fake_facilitator):
    header = payment_header(challenge(gate))
    fake_facilitator.stop()
    tool = Tool()
    outcome = call(gate, tool, header=header)
    assert outcome.kind == "unavailable" and outcome.http_status == 503 and tool.calls == 0
    assert outcome.retryable and outcome.error["data"]["code"] == "PROVIDER_FAILED"
    assert SettlementLog.objects.filter(status="failed", error_reason="facilitator_unavailable").count() == 1
    assert not PaymentAttempt.objects.exists()  # released: the same payment can be retried later


def test_facilitator_error_status_is_retryable_502_and_retry_then_succeeds(gate, fake_facilitator):
    header = payment_header(challenge(gate))
    fake_facilitator.fail_next(500)
    tool = Tool()
    first = call(gate, tool, header=header)
    assert first.kind == "unavailable" and first.http_status == 502 and tool.calls == 0
    second = call(gate, tool, header=header)
    assert second.kind == "paid" and tool.calls == 1


def test_tool_error_is_verified_but_never_settled(gate, fake_facilitator):
    tool = Tool(error=True)
    outcome = call(gate, tool, header=payment_header(challenge(gate)))
    assert outcome.kind == "tool_error" and outcome.result["isError"] is True and tool.calls == 1
    assert "PAYMENT-RESPONSE" not in outcome.headers
    assert fake_facilitator.count("/verify") == 1 and fake_facilitator.count("/settle") == 0
    assert not SettlementLog.objects.filter(status="settled").exists()
    assert SettlementLog.objects.filter(status="failed", error_reason="tool_error").exists()


def test_settlement_failure_withholds_output_and_sends_failure_receipt(gate, fake_facilitator):
    fake_facilitator.settle_failure("insufficient_funds")
    tool = Tool()
    outcome = call(gate, tool, header=payment_header(challenge(gate)))
    assert outcome.kind == "failed" and outcome.http_status == 402 and outcome.result is None
    receipt = decode_payment_response_header(outcome.headers["PAYMENT-RESPONSE"])
    assert receipt.success is False and receipt.error_reason == "insufficient_funds"


def test_replayed_payment_returns_stored_outcome_without_running_or_settling_again(gate, fake_facilitator):
    tool = Tool()
    header = payment_header(challenge(gate))
    first = call(gate, tool, header=header)
    again = call(gate, tool, header=header)
    assert first.kind == "paid" and again.kind == "replayed" and again.replay_of == "paid"
    assert again.result == first.result and again.headers == first.headers
    assert tool.calls == 1
    assert fake_facilitator.count("/verify") == 1 and fake_facilitator.count("/settle") == 1
    assert SettlementLog.objects.filter(status="settled").count() == 1


def test_payment_still_in_progress_is_not_run_twice(gate):
    header = payment_header(challenge(gate))
    tool = Tool()
    inner: list = []

    def run_and_replay() -> dict:
        inner.append(call(gate, tool, header=header))  # the duplicate arrives mid-call
        return tool()

    outcome = call(gate, run_and_replay, header=header)  # the duplicate is the same request
    assert outcome.kind == "paid" and tool.calls == 1
    assert inner[0].kind == "in_progress" and inner[0].retryable and inner[0].http_status == 409


def test_inband_meta_payment_gets_receipt_in_result_meta(gate, fake_facilitator):
    tool = Tool()
    outcome = call(gate, tool, meta=payment_meta(challenge(gate)))
    assert outcome.kind == "paid" and outcome.variant == "inband" and tool.calls == 1
    receipt = outcome.result["_meta"]["x402/payment-response"]
    assert receipt["success"] is True and receipt["payer"] == TEST_ADDRESS
    assert fake_facilitator.count("/settle") == 1


def test_inband_rejection_is_an_error_result_with_payment_required(gate):
    required = challenge(gate)
    meta = sign_custom(required, valid_before=int(time.time()) - 10).model_dump(
        by_alias=True, exclude_none=True
    )
    tool = Tool()
    outcome = call(gate, tool, meta=meta)
    assert outcome.http_status == 200 and outcome.result["isError"] is True and tool.calls == 0
    structured = outcome.result["structuredContent"]
    assert structured["x402Version"] == 2 and structured["error"].endswith("valid_before")
    assert json.loads(outcome.result["content"][0]["text"]) == structured


def test_free_tool_runs_without_payment_or_audit(gate):
    tool = Tool()
    outcome = call(gate, tool, name="dir2mcp.stats", args={})
    assert outcome.kind == "free" and tool.calls == 1 and gate.price_for("dir2mcp.stats") is None
    assert not SettlementLog.objects.exists()


def test_audit_never_holds_the_query_text(gate):
    call(gate, Tool(), header=payment_header(challenge(gate)))
    log = (gate.state / "payments" / "settlement.log").read_text()
    events = [json.loads(line)["event"] for line in log.splitlines()]
    assert events == ["payment_required", "payment_verified", "payment_settling", "payment_settled"]
    assert "invoices" not in log and "signature" not in log
    for row in SettlementLog.objects.values():
        assert "invoices" not in json.dumps(row, default=str)


@pytest.mark.parametrize("outages", [1, 2], ids=["one-outage", "two-outages"])
def test_settle_outage_keeps_the_result_and_a_retry_only_settles(gate, fake_facilitator, outages):
    tool = Tool()
    header = payment_header(challenge(gate))
    fake_facilitator.fail_next(503, path="/settle", count=outages)
    for _ in range(outages):
        down = call(gate, tool, header=header)
        assert down.kind == "unavailable" and down.retryable and down.result is None
        assert down.error["data"]["tool_ran"] is True and "PAYMENT-RESPONSE" not in down.headers
        assert PaymentAttempt.objects.get().state == "ran"
    assert tool.calls == 1
    settled = call(gate, tool, header=header)
    assert settled.kind == "paid" and tool.calls == 1  # the tool never ran a second time
    assert settled.result["content"][0]["text"] == "3 hits"
    assert decode_payment_response_header(settled.headers["PAYMENT-RESPONSE"]).success is True
    assert fake_facilitator.count("/verify") == 1 and fake_facilitator.count("/settle") == outages + 1
    replayed = call(gate, tool, header=header)
    assert replayed.kind == "replayed" and replayed.result == settled.result and tool.calls == 1
    assert fake_facilitator.count("/settle") == outages + 1
    statuses = list(SettlementLog.objects.order_by("id").values_list("status", flat=True))
    assert statuses == ["required", "verified", *["settling", "failed"] * outages, "settling", "settled"]


def test_settle_outage_then_inband_retry_gets_the_receipt_in_meta(gate, fake_facilitator):
    tool = Tool()
    meta = payment_meta(challenge(gate))
    fake_facilitator.fail_next(500, path="/settle")
    down = call(gate, tool, meta=meta)
    assert down.kind == "unavailable" and down.http_status == 200 and down.error["data"]["tool_ran"]
    settled = call(gate, tool, meta=meta)
    assert settled.kind == "paid" and tool.calls == 1
    assert settled.result["_meta"]["x402/payment-response"]["success"] is True


def test_a_retry_after_a_refused_settlement_does_not_rerun_or_resettle(gate, fake_facilitator):
    tool = Tool()
    header = payment_header(challenge(gate))
    fake_facilitator.fail_next(503, path="/settle")
    call(gate, tool, header=header)
    fake_facilitator.settle_failure("insufficient_funds")
    refused = call(gate, tool, header=header)
    assert refused.kind == "failed" and refused.result is None and tool.calls == 1
    again = call(gate, tool, header=header)
    assert again.kind == "replayed" and again.replay_of == "failed" and tool.calls == 1
    assert fake_facilitator.count("/settle") == 2


def echo_tool(calls: list):
    def run() -> dict:
        calls.append(1)
        return {
            "content": [{"type": "text", "text": ARGS["query"]}],
            "structuredContent": {"query": ARGS["query"]},
        }

    return run


def test_stored_outcome_is_purged_after_retention_and_the_payment_stays_used(gate, fake_facilitator):
    calls: list = []
    header = payment_header(challenge(gate))
    first = _paid(gate, calls, header)
    assert first.kind == "paid"
    attempt = PaymentAttempt.objects.get()
    assert ARGS["query"] in json.dumps(attempt.outcome)  # kept, to answer a replay
    assert attempt.kept_until > timezone.now() + replay.RETENTION - timedelta(minutes=1)

    assert replay.purge_expired(now=timezone.now()) == 0  # still within retention
    assert replay.purge_expired(now=attempt.kept_until + timedelta(seconds=1)) == 1
    attempt.refresh_from_db()
    assert attempt.outcome is None and attempt.state == "done"
    assert ARGS["query"] not in json.dumps(list(PaymentAttempt.objects.values()), default=str)

    again = _paid(gate, calls, header)
    assert again.kind == "failed" and again.reason == "payment_already_used" and again.http_status == 402
    assert len(calls) == 1 and fake_facilitator.count("/settle") == 1


def test_a_new_paid_request_purges_expired_outcomes(gate, fake_facilitator):
    replay.reset_purge_throttle()
    calls: list = []
    first = payment_header(challenge(gate))
    _paid(gate, calls, first)
    # the first outcome's retention is over (rows are aged, not the clock)
    PaymentAttempt.objects.update(kept_until=timezone.now() - timedelta(seconds=1))
    replay.reset_purge_throttle()  # as if PURGE_INTERVAL had passed since the first request's purge
    second = payment_header(challenge(gate))
    _paid(gate, calls, second)
    outcomes = list(PaymentAttempt.objects.order_by("id").values_list("outcome", flat=True))
    assert outcomes[0] is None and outcomes[1] is not None


def _paid(gate, calls: list, header: str):
    return gate.handle(
        tool_name=TOOL,
        arguments=ARGS,
        header=header,
        meta_payment=None,
        request_hash="h",
        run=echo_tool(calls),
    )


def test_the_purge_runs_at_most_once_per_interval_not_on_every_paid_request(
    gate, fake_facilitator, monkeypatch
):

    monkeypatch.setattr(replay, "PURGE_INTERVAL", 3600.0)  # no stall of the test machine can end it
    replay.reset_purge_throttle()
    calls: list = []
    assert _paid(gate, calls, payment_header(challenge(gate))).kind == "paid"  # purges (nothing to purge)
    PaymentAttempt.objects.update(kept_until=timezone.now() - timedelta(seconds=1))
    assert _paid(gate, calls, payment_header(challenge(gate))).kind == "paid"  # within the interval
    outcomes = list(PaymentAttempt.objects.order_by("id").values_list("outcome", flat=True))
    assert outcomes[0] is not None  # not purged by the second request: no write on its hot path

    replay.reset_purge_throttle()  # the interval is over
    assert _paid(gate, calls, payment_header(challenge(gate))).kind == "paid"
    outcomes = list(PaymentAttempt.objects.order_by("id").values_list("outcome", flat=True))
    assert outcomes[0] is None and outcomes[1] is not None and outcomes[2] is not None


def test_a_replay_of_an_expired_payment_is_used_up_even_between_purges(gate, fake_facilitator, monkeypatch):
    monkeypatch.setattr(replay, "PURGE_INTERVAL", 3600.0)
    replay.reset_purge_throttle()
    calls: list = []
    header = payment_header(challenge(gate))
    assert _paid(gate, calls, header).kind == "paid"  # this request's claim ran the periodic purge
    PaymentAttempt.objects.update(kept_until=timezone.now() - timedelta(seconds=1))
    again = _paid(gate, calls, header)
    assert again.kind == "failed" and again.reason == "payment_already_used" and len(calls) == 1
    attempt = PaymentAttempt.objects.get()
    assert attempt.outcome is None and attempt.state == "done"
    assert fake_facilitator.count("/settle") == 1


@pytest.fixture
def settled_rows_refused():
    """The database refuses the audit's ``settled`` rows, as a locked one would."""
    message = "database is locked"
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(
                "CREATE TRIGGER refuse_settled BEFORE INSERT ON payments_settlementlog "
                f"WHEN NEW.status = 'settled' BEGIN SELECT RAISE(ABORT, '{message}'); END"
            )
        elif connection.vendor == "postgresql":
            cursor.execute(
                "CREATE FUNCTION refuse_settled() RETURNS trigger AS $$ BEGIN "
                f"RAISE EXCEPTION '{message}'; END $$ LANGUAGE plpgsql"
            )
            cursor.execute(
                "CREATE TRIGGER refuse_settled BEFORE INSERT ON payments_settlementlog FOR EACH ROW "
                "WHEN (NEW.status = 'settled') EXECUTE FUNCTION refuse_settled()"
            )
        else:
            pytest.skip(f"no trigger recipe for {connection.vendor}")
    yield
    with connection.cursor() as cursor:
        cursor.execute(
            "DROP TRIGGER refuse_settled"
            + (" ON payments_settlementlog" if connection.vendor == "postgresql" else "")
        )
        if connection.vendor == "postgresql":
            cursor.execute("DROP FUNCTION refuse_settled()")


def test_a_failing_audit_after_settlement_cannot_lose_the_paid_result(
    gate, fake_facilitator, settled_rows_refused, caplog
):
    # neither the audit's database row nor its log file can be written
    (gate.state / "payments" / "settlement.log").mkdir(parents=True)
    tool = Tool()
    header = payment_header(challenge(gate))
    with caplog.at_level("WARNING", logger="payments"):
        paid = call(gate, tool, header=header)
    assert paid.kind == "paid" and paid.result["content"][0]["text"] == "3 hits" and tool.calls == 1
    assert decode_payment_response_header(paid.headers["PAYMENT-RESPONSE"]).success is True
    assert PaymentAttempt.objects.get().state == "done"  # the answer was stored before the audit

    again = call(gate, tool, header=header)
    assert again.kind == "replayed" and again.replay_of == "paid" and again.result == paid.result
    assert tool.calls == 1 and fake_facilitator.count("/settle") == 1

    lost = [r.getMessage() for r in caplog.records if "audit record lost" in r.getMessage()]
    assert len(lost) == 1 and lost[0].startswith("payment audit record lost: settled - for dir2mcp.search")
    logged = "\n".join(r.getMessage() for r in caplog.records)
    signature = json.loads(base64.b64decode(header))["payload"]["signature"]
    assert signature not in logged and ARGS["query"] not in logged
    assert not SettlementLog.objects.filter(status="settled").exists()


def test_a_settlement_left_settling_is_taken_over_once_older_than_a_settle_call(gate, fake_facilitator):
    tool = Tool()
    header = payment_header(challenge(gate))
    fake_facilitator.fail_next(503, path="/settle")
    assert call(gate, tool, header=header).kind == "unavailable"
    # a retry on another machine (its lock file is not here: it cannot be
    # probed) took the settlement, then its process died before any answer
    PaymentAttempt.objects.update(state="settling", owner="77-aaaaaaaaaaaa", updated_at=timezone.now())

    busy = call(gate, tool, header=header)  # it might still be settling: not taken over yet
    assert busy.kind == "in_progress" and busy.http_status == 409
    assert fake_facilitator.count("/settle") == 1

    # half an hour later: far longer than a settle call can last (a minute), within retention (an hour)
    PaymentAttempt.objects.update(updated_at=timezone.now() - timedelta(minutes=30))
    settled = call(gate, tool, header=header)
    assert settled.kind == "paid" and settled.result["content"][0]["text"] == "3 hits"
    assert tool.calls == 1 and fake_facilitator.count("/settle") == 2
    assert PaymentAttempt.objects.get().state == "done"
    assert call(gate, tool, header=header).kind == "replayed"


# -- paid means answered: the intent to settle, lost answers and dead owners ----------


def nonce_of(header: str) -> str:
    return decode_payment_signature_header(header).payload["authorization"]["nonce"].lower()


def statuses() -> list[tuple[str, str]]:
    return list(SettlementLog.objects.order_by("id").values_list("status", "error_reason"))


def test_a_settlement_whose_answer_was_lost_is_answered_once_and_never_charged_twice(gate, fake_facilitator):
    tool = Tool()
    header = payment_header(challenge(gate))
    fake_facilitator.lose_next_answer("/settle")  # it settles, then its answer never arrives
    lost = call(gate, tool, header=header)
    assert lost.kind == "unavailable" and lost.error["data"]["tool_ran"] is True and lost.result is None
    assert fake_facilitator.settlements == [nonce_of(header)]  # the payment went through
    attempt = PaymentAttempt.objects.get()
    assert attempt.state == "ran" and attempt.settle_attempts == 1  # the lost request stays counted

    retried = call(gate, tool, header=header)  # the facilitator now says: nonce already used
    assert retried.kind == "paid" and retried.result["content"][0]["text"] == "3 hits" and tool.calls == 1
    receipt = decode_payment_response_header(retried.headers["PAYMENT-RESPONSE"])
    assert receipt.success is True and receipt.transaction == "" and receipt.payer == TEST_ADDRESS
    assert receipt.extra == {"reconciled": "invalid_exact_evm_nonce_already_used"}
    assert fake_facilitator.count("/settle") == 2 and fake_facilitator.settlements == [nonce_of(header)]
    assert statuses() == [
        ("required", ""),
        ("verified", ""),
        ("settling", ""),
        ("failed", "facilitator_unavailable"),
        ("settling", ""),
        ("settled", "invalid_exact_evm_nonce_already_used"),
    ]
    again = call(gate, tool, header=header)
    assert (
        again.kind == "replayed" and again.result == retried.result and fake_facilitator.count("/settle") == 2
    )


def test_nonce_used_on_the_first_settle_request_is_a_refusal(gate, fake_facilitator):
    """Nothing of ours can have used the nonce (the payer cancelled the
    authorization while the tool ran): the answer stays withheld."""
    tool = Tool()
    header = payment_header(challenge(gate))

    def cancelled_meanwhile() -> dict:
        fake_facilitator.used_nonces.add(nonce_of(header))
        return tool()

    outcome = call(gate, cancelled_meanwhile, header=header)
    assert outcome.kind == "failed" and outcome.http_status == 402 and outcome.result is None
    assert outcome.reason == "invalid_exact_evm_nonce_already_used" and tool.calls == 1
    assert fake_facilitator.settlements == []
    assert statuses()[-1] == ("failed", "invalid_exact_evm_nonce_already_used")


def test_a_refused_connection_at_settle_is_not_counted_so_a_used_nonce_stays_refused(
    fake_facilitator, tmp_path
):
    """A settle request that never reached the facilitator cannot have settled:
    if the nonce is used by the retry, someone else used it."""
    cfg = build_config(x402_config(fake_facilitator.url), {}, {})
    first = gate_mod.from_config(cfg, tmp_path)
    tool = Tool()
    header = payment_header(challenge(first))

    def facilitator_goes_down() -> dict:
        fake_facilitator.stop()  # verified; then the settle request's connection is refused
        return tool()

    down = call(first, facilitator_goes_down, header=header)
    first.close()
    assert down.kind == "unavailable" and down.http_status == 503 and down.error["data"]["tool_ran"]
    attempt = PaymentAttempt.objects.get()
    assert attempt.state == "ran" and attempt.settle_attempts == 0

    with running_facilitator() as other:  # the facilitator is back (at another address)
        other.used_nonces.add(nonce_of(header))  # the payer cancelled the authorization meanwhile
        second = gate_mod.from_config(cfg, tmp_path, facilitator=Facilitator(other.url))
        try:
            refused = call(second, tool, header=header)
        finally:
            second.close()
    assert refused.kind == "failed" and refused.reason == "invalid_exact_evm_nonce_already_used"
    assert refused.result is None and tool.calls == 1 and other.settlements == []


DEAD_OWNER = "4242-0123456789ab"


def leave_behind(gate, header: str, state: str, *, owner: str, outcome=None) -> PaymentAttempt:
    """The replay row a process serving ``call(gate, ..., header=header)`` left
    when it stopped at ``state`` (``owner``'s lock file
    is there, unlocked, when the owner died: what the kernel leaves of a killed process)."""
    if owner == DEAD_OWNER:
        folder = owners.owners_dir(gate.state_dir)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{DEAD_OWNER}.lock").touch()
    payload = decode_payment_signature_header(header).model_dump(by_alias=True, exclude_none=True)
    key, asked = replay.payment_key(payload), gate_mod.request_hash(TOOL, ARGS)
    attempt, _ = replay.claim(key, tool=TOOL, request_hash=asked, owner=owner)
    if state != "pending":
        PaymentAttempt.objects.filter(pk=attempt.pk).update(state=state, outcome=outcome, settle_attempts=1)
    return attempt


def test_a_pending_payment_whose_process_died_is_started_again_at_once(gate, fake_facilitator):
    tool = Tool()
    header = payment_header(challenge(gate))
    leave_behind(gate, header, "pending", owner=DEAD_OWNER)  # it died verifying or running the tool
    outcome = call(gate, tool, header=header)
    assert outcome.kind == "paid" and tool.calls == 1 and fake_facilitator.settlements == [nonce_of(header)]
    attempt = PaymentAttempt.objects.get()
    assert attempt.state == "done" and attempt.owner == gate.owner and attempt.owner != DEAD_OWNER


def test_a_pending_payment_of_a_live_process_is_in_progress(gate, fake_facilitator):
    tool = Tool()
    header = payment_header(challenge(gate))
    live = owners.ProcessLock(gate.state_dir)  # another process of this state directory, alive
    try:
        leave_behind(gate, header, "pending", owner=live.token)
        busy = call(gate, tool, header=header)
    finally:
        live.close()
    assert busy.kind == "in_progress" and busy.http_status == 409 and tool.calls == 0
    assert fake_facilitator.calls == []


def test_a_pending_payment_of_an_unknown_owner_is_in_progress(gate, fake_facilitator):
    """No lock file here (another machine's process): it cannot be probed."""
    tool = Tool()
    header = payment_header(challenge(gate))
    leave_behind(gate, header, "pending", owner="77-aaaaaaaaaaaa")
    assert call(gate, tool, header=header).kind == "in_progress" and tool.calls == 0


def test_a_settling_payment_whose_process_died_is_settled_at_once(gate, fake_facilitator):
    """It died after the intent was stored, before its settle request went out."""
    tool = Tool()
    header = payment_header(challenge(gate))
    held = gate_mod.Outcome("ran", 200, "http", result=Tool()()).to_dict()
    leave_behind(gate, header, "settling", owner=DEAD_OWNER, outcome=held)
    outcome = call(gate, tool, header=header)  # not "in progress" for a minute: settled now
    assert outcome.kind == "paid" and outcome.result["content"][0]["text"] == "3 hits" and tool.calls == 0
    receipt = decode_payment_response_header(outcome.headers["PAYMENT-RESPONSE"])
    assert receipt.success and receipt.transaction.startswith("0x")  # this request's own settlement
    assert fake_facilitator.count("/verify") == 0 and fake_facilitator.settlements == [nonce_of(header)]
    attempt = PaymentAttempt.objects.get()
    assert attempt.state == "done" and attempt.settle_attempts == 2


# -- a payment answers its own request only (docs/security.md, session 26) -------------

OTHER_ARGS = {"query": "payroll 2025", "k": 3}


def the_row() -> dict:
    """Every column of the one replay row, to show a refused replay changed none."""
    return PaymentAttempt.objects.values().get()


def refused_as_used(outcome, *, variant: str = "http", tool: str = TOOL) -> None:
    """A fresh challenge for the request's own tool, naming ``payment_already_used``,
    holding nothing of the stored answer."""
    assert outcome.kind == "failed" and outcome.reason == "payment_already_used", outcome
    assert "3 hits" not in json.dumps(outcome.to_dict())
    if variant == "inband":
        assert outcome.http_status == 200 and outcome.result["isError"] is True
        required = outcome.result["structuredContent"]
        assert required["error"] == "payment_already_used" and required["accepts"][0]["amount"] == "10000"
        assert required["resource"]["description"] == f"MCP tool call: {tool}"
        return
    assert outcome.http_status == 402 and outcome.result is None
    required = decode_payment_required_header(outcome.headers["PAYMENT-REQUIRED"])
    assert required.error == "payment_already_used" and required.accepts[0].amount == "10000"
    assert required.resource.description == f"MCP tool call: {tool}"
    assert outcome.error["code"] == 402 and outcome.error["data"]["error"] == "payment_already_used"


def test_a_settled_payment_sent_for_another_request_is_used_and_gets_nothing_stored(gate, fake_facilitator):
    """Once settled, the authorization is public on chain: rebuilt into a
    header, it got the stored answer of the request it paid for, whatever the
    replay asked. Now only the same request (tool and arguments) gets it."""
    tool = Tool()
    header = payment_header(challenge(gate))
    paid = call(gate, tool, header=header)
    assert paid.kind == "paid"
    row = the_row()

    other_query = call(gate, tool, header=header, args=OTHER_ARGS)
    refused_as_used(other_query)
    other_tool = call(gate, tool, header=header, name="dir2mcp.find", args={"content": "loader"})
    refused_as_used(other_tool, tool="dir2mcp.find")
    assert the_row() == row  # nothing taken over, nothing overwritten
    assert tool.calls == 1
    assert (fake_facilitator.count("/verify"), fake_facilitator.count("/settle")) == (1, 1)
    refusals = SettlementLog.objects.filter(status="failed", error_reason="payment_already_used")
    assert sorted(refusals.values_list("request_hash", flat=True)) == sorted(
        [
            gate_mod.request_hash(TOOL, OTHER_ARGS),
            gate_mod.request_hash("dir2mcp.find", {"content": "loader"}),
        ]
    )

    # the request it paid for still gets its answer (its client's retry of a lost answer)
    same = call(gate, tool, header=header, args={"k": 3, "query": ARGS["query"]})
    assert same.kind == "replayed" and same.result == paid.result and same.headers == paid.headers
    assert tool.calls == 1 and fake_facilitator.count("/settle") == 1


def test_an_inband_payment_sent_for_another_request_is_used_in_band(gate, fake_facilitator):
    tool = Tool()
    meta = payment_meta(challenge(gate))
    paid = call(gate, tool, meta=meta)
    assert paid.kind == "paid"
    row = the_row()
    refused_as_used(call(gate, tool, meta=meta, args=OTHER_ARGS), variant="inband")
    # the same payment as a header, for another request: the same payment, used
    refused_as_used(
        call(
            gate,
            tool,
            header=encode_payment_signature_header(PaymentPayload.model_validate(meta)),
            args=OTHER_ARGS,
        )
    )
    assert the_row() == row and tool.calls == 1
    same = call(gate, tool, meta=meta)
    assert same.kind == "replayed" and same.result == paid.result


def test_a_held_result_is_settled_only_for_its_own_request(gate, fake_facilitator):
    """After a settle outage the result waits (``ran``) for its client's retry:
    another request with the payment neither settles it nor gets it."""
    tool = Tool()
    header = payment_header(challenge(gate))
    fake_facilitator.fail_next(503, path="/settle")
    down = call(gate, tool, header=header)
    assert down.kind == "unavailable" and down.error["data"]["tool_ran"] is True
    row = the_row()
    assert row["state"] == "ran" and row["settle_attempts"] == 1

    refused_as_used(call(gate, tool, header=header, args=OTHER_ARGS))  # a mistaken retry: not a second run
    assert the_row() == row
    assert tool.calls == 1 and fake_facilitator.count("/settle") == 1

    settled = call(gate, tool, header=header)  # the legitimate retry settles and gets the result
    assert settled.kind == "paid" and settled.result["content"][0]["text"] == "3 hits" and tool.calls == 1
    assert fake_facilitator.count("/settle") == 2
    refused_as_used(call(gate, tool, header=header, args=OTHER_ARGS))


def test_a_settlement_whose_process_died_is_not_taken_over_by_another_request(gate, fake_facilitator):
    tool = Tool()
    header = payment_header(challenge(gate))
    held = gate_mod.Outcome("ran", 200, "http", result=Tool()()).to_dict()
    leave_behind(gate, header, "settling", owner=DEAD_OWNER, outcome=held)
    row = the_row()
    refused_as_used(call(gate, tool, header=header, args=OTHER_ARGS))
    assert the_row() == row and fake_facilitator.calls == []
    settled = call(gate, tool, header=header)  # its own request settles it at once
    assert settled.kind == "paid" and settled.result["content"][0]["text"] == "3 hits" and tool.calls == 0


def test_a_pending_payment_whose_process_died_is_started_again_only_for_its_request(gate, fake_facilitator):
    tool = Tool()
    header = payment_header(challenge(gate))
    leave_behind(gate, header, "pending", owner=DEAD_OWNER)
    row = the_row()
    refused_as_used(call(gate, tool, header=header, args=OTHER_ARGS))
    assert the_row() == row and tool.calls == 0 and fake_facilitator.calls == []
    assert call(gate, tool, header=header).kind == "paid" and tool.calls == 1


def test_a_payment_running_for_one_request_is_used_for_another(gate, fake_facilitator):
    """Two requests with one payment: the first's request runs; the other,
    sent while it runs, is refused (not "in progress": it would never get
    its own answer), and refused after it too."""
    header = payment_header(challenge(gate))
    tool = Tool()
    during: list = []

    def run_and_send_another() -> dict:
        during.append(call(gate, tool, header=header, args=OTHER_ARGS))
        during.append(call(gate, tool, header=header))  # its own request, meanwhile: in progress
        return tool()

    first = call(gate, run_and_send_another, header=header)
    assert first.kind == "paid" and tool.calls == 1
    refused_as_used(during[0])
    assert during[1].kind == "in_progress"
    refused_as_used(call(gate, tool, header=header, args=OTHER_ARGS))
    assert tool.calls == 1 and fake_facilitator.count("/settle") == 1


def _old_request_hash(tool_name: str, arguments: dict) -> str:
    """The request hash as sessions before 26 wrote it."""
    text = json.dumps(
        {"tool": tool_name, "arguments": arguments}, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_the_request_hash_is_one_per_question_the_tool_is_asked():
    h = gate_mod.request_hash
    base = h(TOOL, {"query": "café", "k": 3, "filters": {"a": 1, "b": [1, 2]}})
    # key order (at every depth) and the spelling of a number are not the question
    assert h(TOOL, json.loads('{"filters": {"b": [1, 2.0], "a": 1e0}, "k": 3.0, "query": "café"}')) == base
    assert (
        h(TOOL, json.loads('{"k": 30e-1, "filters": {"a": 1, "b": [1, 2]}, "query": "caf\\u00e9"}')) == base
    )
    # a key in another Unicode normal form is the same key
    assert h(TOOL, {"caf\u00e9": 1}) == h(TOOL, {"cafe\u0301": 1})
    # what the tool reads differently is another question
    assert h(TOOL, {"query": "caf\u00e9"}) != h(TOOL, {"query": "cafe\u0301"})  # a value is kept as sent
    assert h(TOOL, {"k": 1}) != h(TOOL, {"k": True}) != h(TOOL, {"k": "1"})
    assert h(TOOL, {"k": [1, 2]}) != h(TOOL, {"k": [2, 1]})
    assert h(TOOL, {"k": 1}) != h("dir2mcp.find", {"k": 1})
    assert h(TOOL, {"k": 0.5}) != h(TOOL, {"k": 0})
    assert h(TOOL, None) == h(TOOL, {})
    # two keys of one normal form in one object stay two keys
    both = h(TOOL, {"caf\u00e9": 1, "cafe\u0301": 2})
    assert both not in (
        h(TOOL, {"caf\u00e9": 1}),
        h(TOOL, {"caf\u00e9": 2}),
        h(TOOL, {"caf\u00e9": 2, "cafe\u0301": 1}),
    )
    # a lone surrogate (REST or a future parser) is hashed, not a traceback
    assert len(h(TOOL, {"query": "\ud800"})) == 64
    # what sessions before 26 stored still matches: a retry across the upgrade gets its answer
    assert h(TOOL, ARGS) == _old_request_hash(TOOL, ARGS)
    assert h(TOOL, {"query": "naïve", "k": 3, "x": [True, None, 1.5]}) == _old_request_hash(
        TOOL, {"query": "naïve", "k": 3, "x": [True, None, 1.5]}
    )


def test_a_retry_that_respells_its_arguments_is_the_same_request(gate, fake_facilitator):
    tool = Tool()
    header = payment_header(challenge(gate))
    paid = call(gate, tool, header=header)
    respelled = json.loads('{"k": 3.0, "query": "invoices 2024 confidential"}')
    same = call(gate, tool, header=header, args=respelled)
    assert same.kind == "replayed" and same.result == paid.result and tool.calls == 1
