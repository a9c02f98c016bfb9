"""The facilitator adapter: the x402 package's HTTP client, with outages made explicit.

``HTTPFacilitatorClientSync`` raises ``httpx`` errors when the facilitator
cannot be reached and ``ValueError`` on any non-200 answer or malformed
body. The gate needs one thing from all of those: "the facilitator is not
answering, nothing was verified or settled, retry later", so they all
become :class:`FacilitatorUnavailable`, with the HTTP status to answer
(503 unreachable, 502 bad answer, like the SDK's own middleware).

It also says whether the request may have reached the facilitator
(``delivered``): a refused or timed-out connection never did, so a settle
request lost that way cannot have settled anything; a timeout while waiting
for the answer, or a 5xx, may have come after the facilitator settled.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

import httpx
from x402 import PaymentPayload, PaymentRequirements, SettleResponse, VerifyResponse
from x402.http import FacilitatorConfig, HTTPFacilitatorClientSync
from x402.http.facilitator_client_base import FacilitatorResponseError

_Answer = TypeVar("_Answer", VerifyResponse, SettleResponse)

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 15.0
#: no connection was made: the request never reached the facilitator
_NEVER_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


class FacilitatorUnavailable(Exception):
    """The facilitator could not give an answer; ``status`` is 502 or 503.

    ``delivered`` is False only when the request certainly never reached it.
    """

    def __init__(self, operation: str, status: int, detail: str, *, delivered: bool = True) -> None:
        super().__init__(f"facilitator {operation} unavailable: {detail}")
        self.operation = operation
        self.status = status
        self.detail = detail
        self.delivered = delivered


class Facilitator:
    """``/verify`` and ``/settle`` on one facilitator URL."""

    def __init__(
        self, url: str, *, timeout: float = DEFAULT_TIMEOUT, http_client: httpx.Client | None = None
    ) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._client = HTTPFacilitatorClientSync(
            FacilitatorConfig(url=self.url, timeout=timeout, http_client=http_client)
        )

    def verify(self, payload: PaymentPayload, requirements: PaymentRequirements) -> VerifyResponse:
        return self._call("verify", self._client.verify, payload, requirements)

    def settle(self, payload: PaymentPayload, requirements: PaymentRequirements) -> SettleResponse:
        return self._call("settle", self._client.settle, payload, requirements)

    def close(self) -> None:
        self._client.close()

    def _call(
        self,
        operation: str,
        method: Callable[[PaymentPayload, PaymentRequirements], _Answer],
        payload: PaymentPayload,
        requirements: PaymentRequirements,
    ) -> _Answer:
        delivered = True
        try:
            return method(payload, requirements)
        except _NEVER_SENT as exc:
            detail, status, delivered = type(exc).__name__, 503, False
        except httpx.HTTPError as exc:
            detail = type(exc).__name__
            status = 503
        except FacilitatorResponseError:
            detail, status = "the facilitator answered with a malformed body", 502
        except ValueError as exc:
            # "Facilitator verify failed (500): <body>": keep the status, drop the body.
            text = str(exc)
            detail = text.split(":", 1)[0] if text.startswith("Facilitator") else "bad answer"
            status = 502
        logger.warning("x402 facilitator %s failed: %s", operation, detail)
        raise FacilitatorUnavailable(operation, status, detail, delivered=delivered)
