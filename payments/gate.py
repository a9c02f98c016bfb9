"""The x402 gate for ``tools/call``: challenge, verify, run, settle, audit.

Transport-independent: the MCP HTTP endpoint calls :meth:`Gate.handle` with
the tool name, the ``PAYMENT-SIGNATURE`` header (or the in-band
``_meta["x402/payment"]`` object) and a ``run`` callable, and turns the
returned :class:`~payments.outcome.Outcome` into its answer. ``initialize``,
``tools/list`` and ``ping`` never reach the gate.

The gate is synchronous and uses the Django ORM: call it from a worker
thread (``asgiref.sync.sync_to_async``), like any other tool call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from x402 import PaymentPayload
from x402.http import PAYMENT_RESPONSE_HEADER, decode_payment_signature_header, encode_payment_response_header
from x402.mcp.constants import MCP_PAYMENT_RESPONSE_META_KEY

from corpus import errors
from corpus.events import utc_stamp
from payments import challenge, replay
from payments.audit import AuditTrail, Entry
from payments.bazaar import ToolInfo, catalog_from, discovery_extension
from payments.facilitator import Facilitator, FacilitatorUnavailable
from payments.models import SettlementLog
from payments.outcome import Outcome, in_progress, request_hash, unavailable
from payments.policy import LIFECYCLE_METHODS, Policy, PolicyProblems, Price, build_policy, write_snapshot

__all__ = ["Gate", "Outcome", "Price", "from_config", "gated_method", "problems", "request_hash"]

logger = logging.getLogger(__name__)
Status = SettlementLog.Status


def gated_method(method: str) -> bool:
    """Only ``tools/call`` is ever priced; lifecycle and discovery calls never are."""
    return method == "tools/call" and method not in LIFECYCLE_METHODS


def _match_problem(price: Price, accepted) -> str | None:
    """Why the payment's ``accepted`` is not what this tool asks for, or ``None``."""
    if accepted.scheme != price.scheme:
        return "unsupported_scheme"
    if accepted.network != price.network:
        return "invalid_network"
    if accepted.pay_to.lower() != price.pay_to.lower():
        return "invalid_exact_evm_payload_recipient_mismatch"
    if accepted.asset.lower() != price.asset.lower() or accepted.amount != price.amount:
        return "invalid_exact_evm_payload_authorization_value_mismatch"
    return None


def _decode(header: str | None, meta_payment: Any) -> PaymentPayload:
    """The payment payload from the header (preferred) or the in-band ``_meta`` object."""
    if header:
        payload = decode_payment_signature_header(header.strip())
    elif isinstance(meta_payment, dict):
        payload = PaymentPayload.model_validate(meta_payment)
    else:
        raise ValueError('_meta["x402/payment"] must be a PaymentPayload object')
    if not isinstance(payload, PaymentPayload) or payload.x402_version != 2:
        raise ValueError("only x402 version 2 payments are accepted")
    return payload


class Gate:
    """Prices, challenges and settles paid tool calls for one server process."""

    def __init__(
        self,
        policy: Policy,
        state_dir: Path,
        *,
        emit: Callable[[dict], None] | None = None,
        facilitator: Facilitator | None = None,
        tools: Mapping[str, Any] | None = None,
        bazaar_examples: Mapping[str, dict] | None = None,
        bazaar_description: str = "",
    ):
        self.policy = policy
        self.facilitator = facilitator or Facilitator(policy.facilitator_url)
        self.audit = AuditTrail(state_dir, emit)
        self._catalog: dict[str, ToolInfo] = catalog_from(tools)
        self._examples = dict(bazaar_examples or {})
        self._bazaar_description = bazaar_description

    def close(self) -> None:
        """Close the facilitator's HTTP connections (at server shutdown)."""
        self.facilitator.close()

    def price_for(self, tool_name: str) -> Price | None:
        """The tool's price, or ``None`` for a free tool."""
        return self.policy.price_for(tool_name)

    def payment_required(self, tool_name: str, *, error: str = challenge.NO_PAYMENT):
        price = self.price_for(tool_name)
        if price is None:
            raise ValueError(f"{tool_name} is free")
        extensions = None
        if self.policy.bazaar:
            extensions = discovery_extension(
                tool_name,
                self._catalog.get(tool_name),
                example=self._examples.get(tool_name),
                description=self._bazaar_description,
            )
        return challenge.payment_required(
            tool_name, price, self.policy.resource_url, error=error, extensions=extensions
        )

    def handle(
        self,
        *,
        tool_name: str,
        arguments: dict | None,
        header: str | None,
        meta_payment: dict | None,
        request_hash: str,
        run: Callable[[], dict],
    ) -> Outcome:
        """Answer one ``tools/call`` of ``tool_name`` (see :class:`Outcome`)."""
        price = self.price_for(tool_name)
        if price is None:
            return Outcome("free", 200, result=run())
        variant = "http" if header else ("inband" if meta_payment is not None else "http")
        entry = Entry(status=Status.REQUIRED, tool=tool_name, price=price, request_hash=request_hash)
        if not header and meta_payment is None:
            self.audit.record(entry)
            required = self.payment_required(tool_name)
            return Outcome(
                "challenge", 402, "http", challenge.headers(required), error=challenge.jsonrpc_error(required)
            )
        try:
            payload = _decode(header, meta_payment)
        except (ValueError, TypeError) as exc:
            logger.info("undecodable x402 payment for %s: %s", tool_name, type(exc).__name__)
            self.audit.record(_with(entry, Status.FAILED, error_reason="invalid_payload"))
            return self._rejected(tool_name, variant, "invalid_payload", status=400)
        payload_dict = payload.model_dump(by_alias=True, exclude_none=True, mode="json")
        key = replay.payment_key(payload_dict)
        attempt, fresh = replay.claim(key, tool=tool_name, request_hash=request_hash)
        if not fresh:
            if attempt.state == attempt.State.DONE and attempt.outcome:
                return Outcome.from_dict(attempt.outcome).as_replay()
            return in_progress(variant)
        entry = _with(entry, Status.REQUIRED, payment_key=key, payer=_payer(payload_dict))
        try:
            outcome = self._process(entry, price, payload, variant, run)
        except BaseException:
            replay.release(attempt)
            raise
        if outcome.kind == "unavailable":
            replay.release(attempt)  # nothing was settled: the same payment may be retried
        else:
            replay.complete(attempt, outcome.to_dict())
        return outcome

    def _process(self, entry: Entry, price: Price, payload: PaymentPayload, variant: str, run) -> Outcome:
        tool = entry.tool
        mismatch = _match_problem(price, payload.accepted)
        if mismatch:
            self.audit.record(_with(entry, Status.FAILED, error_reason=mismatch))
            return self._rejected(tool, variant, mismatch)
        requirements = price.requirements()
        try:
            verified = self.facilitator.verify(payload, requirements)
        except FacilitatorUnavailable as exc:
            self.audit.record(_with(entry, Status.FAILED, error_reason="facilitator_unavailable"))
            return unavailable(variant, exc.status, exc.detail)
        payer = verified.payer or entry.payer
        if not verified.is_valid:
            reason = verified.invalid_reason or "invalid_payload"
            self.audit.record(_with(entry, Status.FAILED, error_reason=reason, payer=payer))
            return self._rejected(tool, variant, reason)
        self.audit.record(_with(entry, Status.VERIFIED, payer=payer))
        result = run()
        if result.get("isError"):
            self.audit.record(_with(entry, Status.FAILED, error_reason="tool_error", payer=payer))
            return Outcome("tool_error", 200, variant, result=result, reason="tool_error")
        try:
            settled = self.facilitator.settle(payload, requirements)
        except FacilitatorUnavailable as exc:
            self.audit.record(
                _with(entry, Status.FAILED, error_reason="facilitator_unavailable", payer=payer)
            )
            return unavailable(variant, exc.status, exc.detail)
        receipt = settled.model_dump(by_alias=True, exclude_none=True, mode="json")
        if not settled.success:
            reason = settled.error_reason or "unexpected_settle_error"
            self.audit.record(_with(entry, Status.FAILED, error_reason=reason, payer=payer))
            return self._rejected(tool, variant, reason, receipt=receipt)
        self.audit.record(
            _with(entry, Status.SETTLED, payer=settled.payer or payer, transaction=settled.transaction)
        )
        headers = {PAYMENT_RESPONSE_HEADER: encode_payment_response_header(settled)}
        if variant == "inband":
            meta = {**(result.get("_meta") or {}), MCP_PAYMENT_RESPONSE_META_KEY: receipt}
            result = {**result, "_meta": meta}
        return Outcome("paid", 200, variant, headers, result=result)

    def _rejected(
        self, tool: str, variant: str, reason: str, *, status: int = 402, receipt: dict | None = None
    ) -> Outcome:
        """A payment that was refused: the challenge again, naming the reason."""
        required = self.payment_required(tool, error=reason)
        headers = challenge.headers(required)
        if receipt is not None:
            headers[PAYMENT_RESPONSE_HEADER] = challenge.encode_receipt(receipt)
        if variant == "inband":
            result = challenge.inband_result(required)
            if receipt is not None:
                result["_meta"] = {MCP_PAYMENT_RESPONSE_META_KEY: receipt}
            return Outcome("failed", 200, variant, {}, result=result, reason=reason)
        error = challenge.jsonrpc_error(required, message=f"Payment rejected: {reason}")
        return Outcome("failed", status, variant, headers, error=error, reason=reason)


def _with(entry: Entry, status: str, **changes: str) -> Entry:
    return Entry(**{**entry.__dict__, "status": status, **changes})


def _payer(payload: dict) -> str:
    inner = payload.get("payload") or {}
    auth = inner.get("authorization") if isinstance(inner, dict) else None
    return str(auth.get("from", "")) if isinstance(auth, dict) else ""


def problems(config) -> list[str]:
    """What keeps ``config.x402`` from gating: empty when the policy is complete."""
    try:
        build_policy(config.x402, mcp_path=config.server.mcp_path)
    except PolicyProblems as exc:
        return exc.problems
    return []


def from_config(
    config,
    state_dir: Path,
    *,
    emit: Callable[[dict], None] | None = None,
    tools: Mapping[str, Any] | None = None,
    facilitator: Facilitator | None = None,
) -> Gate | None:
    """The gate for ``config``; ``None`` when payments are off (or ``on`` but incomplete).

    ``required`` with an incomplete or invalid configuration raises
    ``CONFIG_INVALID`` (exit 2). ``on`` with one logs and emits a warning
    and serves ungated; :func:`problems` gives the caller the reasons to print.
    """
    x402 = config.x402
    if x402.mode == "off":
        return None
    try:
        policy = build_policy(x402, mcp_path=config.server.mcp_path)
    except PolicyProblems as exc:
        if x402.mode == "required":
            raise errors.Dir2mcpError(
                errors.CONFIG_INVALID,
                "x402 mode 'required' needs a complete payment configuration: " + "; ".join(exc.problems),
                hint="Set --x402-facilitator-url, --x402-resource-base-url, --x402-network, --x402-price "
                "and x402.route_policy.tools_call.pay_to (see docs/payments.md).",
            ) from None
        message = "x402 mode 'on' but payments are NOT enforced (tools are free): " + "; ".join(exc.problems)
        logger.warning(message)
        if emit is not None:
            data = {"message": message, "problems": exc.problems}
            emit({"ts": utc_stamp(), "level": "warn", "event": "warning", "data": data})
        return None
    write_snapshot(policy, state_dir)
    return Gate(
        policy,
        state_dir,
        emit=emit,
        facilitator=facilitator,
        tools=tools,
        bazaar_examples=x402.bazaar.examples,
        bazaar_description=str(x402.bazaar.metadata.get("description") or ""),
    )
