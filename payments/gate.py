"""The x402 gate for tool calls: challenge, verify, run, settle, audit.

Transport-independent, and called only at the gateway's request boundary:
``tools/call`` (mcp_gateway/dispatch.py, over HTTP or stdio) and the REST
mirror (mcp_gateway/rest.py, one :class:`Route` per endpoint, priced as the
tool it runs) call
:meth:`Gate.handle` with the tool name, the ``PAYMENT-SIGNATURE`` header (or
the in-band ``_meta["x402/payment"]`` object) and a ``run`` callable, and
turn the returned :class:`~payments.outcome.Outcome` into their answer.
``initialize``, ``tools/list`` and ``ping`` never reach the gate.

Once a verified payment's tool has run, its result is stored with the
intent to settle (nonce, payer, amount, request hash) before settlement is
asked for (payments/replay.py): a retry with the same payment after a
facilitator outage, or after this process died at any point, only retries
settlement, and never runs the tool again once its result is stored. A
payment answers only the request it was first sent with (its request hash):
any other request carrying it is refused ``payment_already_used``, since a
settled authorization is public on chain. If the
facilitator then says the nonce is already used and an earlier settle
request for this payment went unanswered, that request is what settled it:
the retry gets the stored result, and nothing is charged twice.

The gate is synchronous and uses the Django ORM: call it from a worker
thread (``asgiref.sync.sync_to_async``), like any other tool call.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TypedDict, Unpack

from django.db import transaction
from x402 import PaymentPayload, PaymentPayloadV1, PaymentRequired, PaymentRequirements, SettleResponse
from x402.http import PAYMENT_RESPONSE_HEADER, decode_payment_signature_header, encode_payment_response_header
from x402.mcp.constants import MCP_PAYMENT_RESPONSE_META_KEY

from kernel import errors
from kernel.config import Config
from kernel.jsontypes import JsonObject
from kernel.output import utc_stamp
from payments import challenge, owners, replay
from payments.audit import AuditTrail, Entry
from payments.bazaar import ToolInfo, catalog_from, discovery_extension
from payments.crashpoints import crash_point
from payments.evm import ERR_NONCE_ALREADY_USED
from payments.facilitator import Facilitator, FacilitatorUnavailable
from payments.models import PaymentAttempt, SettlementLog
from payments.outcome import Outcome, in_progress, request_hash, unavailable
from payments.policy import LIFECYCLE_METHODS, Policy, PolicyProblems, Price, build_policy, write_snapshot

__all__ = [
    "Gate",
    "Outcome",
    "Price",
    "Route",
    "Verdict",
    "from_config",
    "gated_method",
    "problems",
    "request_hash",
    "verdict",
]

logger = logging.getLogger(__name__)
Status = SettlementLog.Status
SETTLE_TAKEOVER_FACTOR = 4


@dataclass(frozen=True)
class Route:
    """A REST mirror route sold like its tool (``GET``, ``/api/v1/search``)."""

    method: str
    path: str


def gated_method(method: str) -> bool:
    """Only ``tools/call`` is ever priced; lifecycle and discovery calls never are."""
    return method == "tools/call" and method not in LIFECYCLE_METHODS


def _match_problem(price: Price, accepted: PaymentRequirements) -> str | None:
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


def _from_header(header: str) -> PaymentPayload | PaymentPayloadV1:
    """The payload of a ``PAYMENT-SIGNATURE`` header: base64 of a JSON object.
    The x402 SDK's decoder calls ``.get`` on whatever the JSON is, so a header
    of ``[]``, ``"x"``, ``1`` or ``null`` (or JSON nested past Python's
    recursion limit) was an INTERNAL_ERROR and a traceback for anyone holding
    the token (until session 21); each is ValueError here, so an unreadable
    payment, answered with a fresh challenge."""
    try:
        data = json.loads(base64.b64decode(header.encode("utf-8"), validate=False).decode("utf-8"))
    except RecursionError:
        raise ValueError("the payment is nested too deeply") from None
    if not isinstance(data, dict):
        raise ValueError("the payment is not a JSON object")
    return decode_payment_signature_header(header)


def _decode(header: str | None, meta_payment: object) -> PaymentPayload:
    """The payment payload from the header (preferred) or the in-band ``_meta`` object."""
    if header:
        payload = _from_header(header.strip())
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
        emit: Callable[[JsonObject], None] | None = None,
        facilitator: Facilitator | None = None,
        tools: Mapping[str, ToolInfo | JsonObject] | None = None,
        bazaar_examples: Mapping[str, JsonObject] | None = None,
        bazaar_description: str = "",
    ) -> None:
        self.policy = policy
        self.state_dir = Path(state_dir)
        self.facilitator = facilitator or Facilitator(policy.facilitator_url)
        self.audit = AuditTrail(state_dir, emit)
        self._process_lock: owners.ProcessLock | None = None  # made at the first payment
        self._process_lock_made = threading.Lock()
        #: a payment left ``settling`` this long by a process that cannot be
        #: probed (payments/owners.py; a dead one is taken over at once) is
        #: settled again by a retry; httpx applies the facilitator's timeout to
        #: connect, write, read and pool separately, hence the factor
        self.settle_takeover = timedelta(seconds=SETTLE_TAKEOVER_FACTOR * self.facilitator.timeout)
        self._catalog: dict[str, ToolInfo] = catalog_from(tools)
        self._examples = dict(bazaar_examples or {})
        self._bazaar_description = bazaar_description

    def close(self) -> None:
        """Close the facilitator's HTTP connections and drop this process's owner lock (at shutdown)."""
        self.facilitator.close()
        if self._process_lock is not None:
            self._process_lock.close()

    @property
    def owner(self) -> str:
        """This process's owner token (payments/owners.py), locked at the first payment."""
        with self._process_lock_made:
            if self._process_lock is None:
                self._process_lock = owners.ProcessLock(self.state_dir)
                owners.sweep(self.state_dir, keep=replay.unfinished_owners())
            return self._process_lock.token

    def _owner_state(self, token: str) -> str:
        return owners.ALIVE if token == self.owner else owners.probe(self.state_dir, token)

    def price_for(self, tool_name: str) -> Price | None:
        """The tool's price, or ``None`` for a free tool."""
        return self.policy.price_for(tool_name)

    def payment_required(
        self, tool_name: str, *, error: str = challenge.NO_PAYMENT, route: Route | None = None
    ) -> PaymentRequired:
        """The PaymentRequired for ``tool_name``: on the MCP endpoint, or on a REST ``route``."""
        price = self.price_for(tool_name)
        if price is None:
            raise ValueError(f"{tool_name} is free")
        extensions = None
        if self.policy.bazaar and route is None:  # the Bazaar entry describes the MCP tool
            extensions = discovery_extension(
                tool_name,
                self._catalog.get(tool_name),
                example=self._examples.get(tool_name),
                description=self._bazaar_description,
            )
        url, description = self.policy.resource_url, ""
        if route is not None:
            url = self.policy.resource_base + route.path
            description = f"REST call: {route.method} {route.path} (the MCP tool {tool_name})"
        return challenge.payment_required(
            tool_name, price, url, error=error, extensions=extensions, description=description
        )

    def handle(
        self,
        *,
        tool_name: str,
        arguments: JsonObject | None,
        header: str | None,
        meta_payment: JsonObject | None,
        request_hash: str,
        run: Callable[[], JsonObject],
        route: Route | None = None,
    ) -> Outcome:
        """Answer one paid call of ``tool_name`` (see :class:`Outcome`).

        ``route`` is set for a REST mirror call (header variant only): the
        challenge then names that route as the resource.
        """
        price = self.price_for(tool_name)
        if price is None:
            return Outcome("free", 200, result=run())
        variant = "http" if header else ("inband" if meta_payment is not None else "http")
        entry = Entry(status=Status.REQUIRED, tool=tool_name, price=price, request_hash=request_hash)
        if not header and meta_payment is None:
            self.audit.record(entry)
            required = self.payment_required(tool_name, route=route)
            return Outcome(
                "challenge", 402, "http", challenge.headers(required), error=challenge.jsonrpc_error(required)
            )
        try:
            payload = _decode(header, meta_payment)
        except (ValueError, TypeError) as exc:
            # As the x402 SDK's servers do: a payment that cannot be read is no
            # payment, so the answer is a fresh challenge (naming the reason).
            logger.info("undecodable x402 payment for %s: %s", tool_name, type(exc).__name__)
            self.audit.record(_with(entry, Status.FAILED, error_reason="invalid_payload"))
            return self._rejected(tool_name, variant, "invalid_payload", route=route)
        payload_dict = payload.model_dump(by_alias=True, exclude_none=True, mode="json")
        key = replay.payment_key(payload_dict)
        attempt, fresh = replay.claim(key, tool=tool_name, request_hash=request_hash, owner=self.owner)
        entry = _with(entry, Status.REQUIRED, payment_key=key, payer=_payer(payload_dict))
        step = _Step(attempt, entry, price, payload, variant, route)
        if not fresh and attempt.request_hash != request_hash:
            # A payment answers the request it was first sent with, and no
            # other: once settled its authorization is public on chain, and
            # anyone could rebuild it to read that request's stored answer.
            return self._used(step)
        if not fresh and not self._take_over(step):
            return self._again(step)
        try:
            return self._process(step, run)
        except BaseException:
            replay.release(attempt)  # a claim that never ran the tool; later states are kept
            raise

    def _process(self, step: _Step, run: Callable[[], JsonObject]) -> Outcome:
        entry, price, payload = step.entry, step.price, step.payload
        mismatch = _match_problem(price, payload.accepted)
        if mismatch:
            self.audit.record(_with(entry, Status.FAILED, error_reason=mismatch))
            return step.done(self._rejected(entry.tool, step.variant, mismatch, route=step.route))
        try:
            verified = self.facilitator.verify(payload, price.requirements())
        except FacilitatorUnavailable as exc:
            self.audit.record(_with(entry, Status.FAILED, error_reason="facilitator_unavailable"))
            replay.release(step.attempt)  # nothing ran, nothing was settled: the payment may be retried
            return unavailable(step.variant, exc.status, exc.detail)
        payer = verified.payer or entry.payer
        if not verified.is_valid:
            reason = verified.invalid_reason or "invalid_payload"
            self.audit.record(_with(entry, Status.FAILED, error_reason=reason, payer=payer))
            return step.done(self._rejected(entry.tool, step.variant, reason, route=step.route))
        # From here the facilitator has accepted the payment its payer signed.
        step.entry = entry = _with(entry, Status.VERIFIED, payer=payer, payer_verified=True)
        self.audit.record(entry)
        result = run()
        crash_point("after_run")
        if result.get("isError"):
            outcome = Outcome("tool_error", 200, step.variant, result=result, reason="tool_error")
            return self._finish(step, outcome, _with(entry, Status.FAILED, error_reason="tool_error"))
        # From here on the tool has run: its result and the intent to settle are
        # stored before settlement is asked for, so a retry after a settle outage,
        # or after this process died, never runs it again.
        with transaction.atomic():
            replay.hold(
                step.attempt,
                Outcome("ran", 200, step.variant, result=result).to_dict(),
                nonce=_authorization(step.payload).get("nonce", ""),
                payer=payer,
                amount=price.amount,
            )
            self._record_after_run(_with(entry, Status.SETTLING))
        return self._settle(step, result)

    def _take_over(self, step: _Step) -> bool:
        """A ``pending`` payment whose process died: this request (the same one) starts it again."""
        attempt = step.attempt
        if attempt.state != attempt.State.PENDING or self._owner_state(attempt.owner) != owners.DEAD:
            return False
        return replay.take_over(attempt, owner=self.owner, request_hash=step.entry.request_hash)

    def _used(self, step: _Step) -> Outcome:
        """The payment is another request's: ``payment_already_used``, a fresh
        challenge for this request's tool. Its row is left as it is."""
        reason = "payment_already_used"
        self.audit.record(_with(step.entry, Status.FAILED, error_reason=reason))
        return self._rejected(step.entry.tool, step.variant, reason, route=step.route)

    def _again(self, step: _Step) -> Outcome:
        """A payment seen before: its stored outcome, or a retry of its settlement only."""
        attempt = step.attempt
        if attempt.state == attempt.State.DONE:
            if attempt.outcome:
                return Outcome.from_dict(attempt.outcome).as_replay()
            return self._used(step)  # the outcome was purged after its retention: the payment stays used
        if attempt.state not in (attempt.State.RAN, attempt.State.SETTLING):
            return in_progress(step.variant)
        dead = attempt.state == attempt.State.SETTLING and self._owner_state(attempt.owner) == owners.DEAD
        if not replay.take_settlement(
            attempt,
            owner=self.owner,
            request_hash=step.entry.request_hash,
            stale_after=self.settle_takeover,
            owner_dead=dead,
        ):
            return in_progress(step.variant)
        price = self.price_for(attempt.tool) or step.price
        step.price = price
        step.entry = _with(
            step.entry,
            Status.VERIFIED,
            tool=attempt.tool,
            price=price,
            request_hash=attempt.request_hash,
            payer=attempt.payer or step.entry.payer,
            payer_verified=bool(attempt.payer),  # held only once verified (_process)
        )
        mismatch = _match_problem(price, step.payload.accepted)
        if mismatch:  # same signature and nonce, other terms: not this payment
            replay.await_settlement(attempt, sent=False)
            self._record_after_run(_with(step.entry, Status.FAILED, error_reason=mismatch))
            return self._rejected(attempt.tool, step.variant, mismatch, route=step.route)
        self._record_after_run(_with(step.entry, Status.SETTLING))
        held = attempt.outcome
        result = Outcome.from_dict(held).result if held is not None else None
        assert result is not None, "a payment in RAN or SETTLING holds its tool's result"
        return self._settle(step, result)

    def _settle(self, step: _Step, result: JsonObject) -> Outcome:
        """Settle a payment whose tool ran and succeeded, its intent recorded;
        only the facilitator is retried."""
        entry, variant = step.entry, step.variant
        crash_point("before_settle")
        try:
            settled = self.facilitator.settle(step.payload, step.price.requirements())
        except FacilitatorUnavailable as exc:
            replay.await_settlement(step.attempt, sent=exc.delivered)
            self._record_after_run(_with(entry, Status.FAILED, error_reason="facilitator_unavailable"))
            return unavailable(variant, exc.status, exc.detail, tool_ran=True)
        except BaseException:
            replay.await_settlement(step.attempt)
            raise
        crash_point("after_settle")
        payer = settled.payer or entry.payer
        note = ""
        if _settled_earlier(settled, step.attempt):
            # An earlier settle request for this very payment reached the
            # facilitator and its answer was lost (this process died, or it
            # timed out): that request used the nonce. Its transaction hash
            # never came back.
            note = settled.error_reason or ""
            settled = SettleResponse(
                success=True,
                transaction="",
                network=settled.network or step.price.network,
                payer=payer or None,
                extra={"reconciled": note},
            )
        receipt = settled.model_dump(by_alias=True, exclude_none=True, mode="json")
        if not settled.success:
            reason = settled.error_reason or "unexpected_settle_error"
            outcome = self._rejected(entry.tool, variant, reason, receipt=receipt, route=step.route)
            return self._finish(step, outcome, _with(entry, Status.FAILED, error_reason=reason, payer=payer))
        headers = {PAYMENT_RESPONSE_HEADER: encode_payment_response_header(settled)}
        if variant == "inband":
            meta = {**(result.get("_meta") or {}), MCP_PAYMENT_RESPONSE_META_KEY: receipt}
            result = {**result, "_meta": meta}
        outcome = Outcome("paid", 200, variant, headers, result=result)
        settled_entry = _with(
            entry, Status.SETTLED, payer=payer, transaction=settled.transaction, error_reason=note
        )
        self._finish(step, outcome, settled_entry)
        crash_point("after_store")
        return outcome

    def _finish(self, step: _Step, outcome: Outcome, audit: Entry) -> Outcome:
        """Store the payment's final answer and its audit record in one transaction.

        The record alone may fail (a locked database, an unwritable log): it is
        then logged, and the answer is stored all the same, so an audit that
        fails cannot lose a paid result.
        """
        with transaction.atomic():
            step.done(outcome)
            self._record_after_run(audit)
        return outcome

    def _record_after_run(self, entry: Entry) -> None:
        """Audit an event once the tool has run: a failure is logged, never raised.

        By then the payment's answer is stored (or its settlement is awaited), and
        the client must get it; the log line names the event, never the payment.
        """
        try:
            with transaction.atomic():  # a failed insert leaves no broken transaction behind
                self.audit.record(entry)
        except Exception as exc:
            logger.error(
                "payment audit record lost: %s %s for %s (transaction %s): %s",
                entry.status,
                entry.error_reason or "-",
                entry.tool,
                entry.transaction or "-",
                type(exc).__name__,
            )

    def _rejected(
        self,
        tool: str,
        variant: str,
        reason: str,
        *,
        receipt: JsonObject | None = None,
        route: Route | None = None,
    ) -> Outcome:
        """A payment that was refused: the challenge again, naming the reason."""
        required = self.payment_required(tool, error=reason, route=route)
        headers = challenge.headers(required)
        if receipt is not None:
            headers[PAYMENT_RESPONSE_HEADER] = challenge.encode_receipt(receipt)
        if variant == "inband":
            result = challenge.inband_result(required)
            if receipt is not None:
                result["_meta"] = {MCP_PAYMENT_RESPONSE_META_KEY: receipt}
            return Outcome("failed", 200, variant, {}, result=result, reason=reason)
        error = challenge.jsonrpc_error(required, message=f"Payment rejected: {reason}")
        return Outcome("failed", 402, variant, headers, error=error, reason=reason)


@dataclass
class _Step:
    """One paid request in progress: its replay row, audit entry, price and payment."""

    attempt: PaymentAttempt
    entry: Entry
    price: Price
    payload: PaymentPayload
    variant: str
    route: Route | None

    def done(self, outcome: Outcome) -> Outcome:
        """Store ``outcome`` as this payment's final answer, and return it."""
        replay.complete(self.attempt, outcome.to_dict())
        return outcome


class _Changes(TypedDict, total=False):
    tool: str
    price: Price
    request_hash: str
    payer: str
    payer_verified: bool
    transaction: str
    error_reason: str
    payment_key: str


def _with(entry: Entry, status: str, **changes: Unpack[_Changes]) -> Entry:
    return dataclasses.replace(entry, status=status, **changes)


def _payer(payload: JsonObject) -> str:
    inner = payload.get("payload") or {}
    auth = inner.get("authorization") if isinstance(inner, dict) else None
    return str(auth.get("from", "")) if isinstance(auth, dict) else ""


def _authorization(payload: PaymentPayload) -> dict[str, str]:
    """The EIP-3009 authorization's fields, as strings (empty for another payload shape)."""
    auth = (payload.payload or {}).get("authorization")
    return {str(k): str(v) for k, v in auth.items()} if isinstance(auth, dict) else {}


def _settled_earlier(settled: SettleResponse, attempt: PaymentAttempt) -> bool:
    """The facilitator refused because the nonce is used, and an earlier settle
    request for this payment may have reached it unanswered (payments/replay.py)."""
    return (
        not settled.success and settled.error_reason == ERR_NONCE_ALREADY_USED and attempt.settle_attempts > 1
    )


@dataclass(frozen=True)
class Verdict:
    """x402's start-up verdict on a configuration: the policy that gates
    tool calls (``None``: calls are free), and why mode ``on`` serves free."""

    policy: Policy | None
    problems: list[str]

    @property
    def warning(self) -> str | None:
        """What a server in mode ``on`` with an incomplete policy says, or ``None``."""
        if not self.problems:
            return None
        return "x402 mode 'on' but payments are NOT enforced (tools are free): " + "; ".join(self.problems)


def verdict(config: Config) -> Verdict:
    """The verdict on ``config.x402``; mode ``required`` with an incomplete or
    invalid policy raises ``CONFIG_INVALID`` (exit 2)."""
    x402 = config.x402
    if x402.mode == "off":
        return Verdict(None, [])
    try:
        return Verdict(build_policy(x402, mcp_path=config.server.mcp_path), [])
    except PolicyProblems as exc:
        if x402.mode == "required":
            raise errors.Dir2mcpError(
                errors.CONFIG_INVALID,
                "x402 mode 'required' needs a complete payment configuration: " + "; ".join(exc.problems),
                hint="Set --x402-facilitator-url, --x402-resource-base-url, --x402-network, --x402-price "
                "and x402.route_policy.tools_call.pay_to (see docs/payments.md).",
            ) from None
        return Verdict(None, exc.problems)


def problems(config: Config) -> list[str]:
    """What keeps ``config.x402`` from gating: empty when the policy is complete."""
    try:
        build_policy(config.x402, mcp_path=config.server.mcp_path)
    except PolicyProblems as exc:
        return exc.problems
    return []


def from_config(
    config: Config,
    state_dir: Path,
    *,
    emit: Callable[[JsonObject], None] | None = None,
    tools: Mapping[str, ToolInfo | JsonObject] | None = None,
    facilitator: Facilitator | None = None,
) -> Gate | None:
    """The gate for ``config``; ``None`` when payments are off (or ``on`` but incomplete).

    ``required`` with an incomplete or invalid configuration raises
    ``CONFIG_INVALID`` (exit 2). ``on`` with one logs and emits a warning
    and serves ungated (:func:`verdict` says so once, for every caller).
    """
    found = verdict(config)
    if found.warning is not None:
        logger.warning(found.warning)
        if emit is not None:
            data = {"message": found.warning, "problems": found.problems}
            emit({"ts": utc_stamp(), "level": "warn", "event": "warning", "data": data})
    policy = found.policy
    if policy is None:
        return None
    x402 = config.x402
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
