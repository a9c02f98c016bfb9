"""The one HTTP client every provider uses: timeouts, retries, error mapping, metrics.

JSON calls, multipart uploads (speech-to-text) and binary answers (speech)
all go through one retry loop, :meth:`ProviderClient._send`, which counts
every attempt in ``dir2mcp_provider_calls`` (kernel/observe.py).
Retries cover 429, 5xx and transport failures (connect errors, timeouts),
with exponential backoff plus jitter, or the server's ``Retry-After`` (seconds
or an HTTP date) when it sends one, capped at ``max_wait``. A final failure
becomes a :class:`ProviderError` with the provider's canonical code
(``<PREFIX>_AUTH``, ``<PREFIX>_RATE_LIMIT``, ``<PREFIX>_FAILED``). Messages
are built from the status and the server's own error text, scrubbed of the
API key; request headers never reach a message or a log line.

A failure that says nothing about the request itself (429, 5xx, a timeout, a
refused connection) is ``retryable``: the same call may succeed later, so
ingestion marks the file for a later retry. Credentials (401/403), a request
the provider rejects (4xx) and a malformed answer are not.

A search's query embedding uses :func:`query_options` instead: a search that
would wait through five attempts with backoff while the provider is down
falls back to lexical results (corpus/retrieval.py) within seconds instead.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import time
import weakref
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import NotRequired, TypedDict, Unpack

import httpx

from kernel import errors
from kernel.jsontypes import JsonObject
from kernel.observe import observe_provider_call

logger = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
_DETAIL_LIMIT = 500


@dataclass(frozen=True)
class HttpOptions:
    """Timeouts (seconds) and the retry policy for one provider client."""

    connect_timeout: float = 10.0
    read_timeout: float = 60.0
    max_attempts: int = 5
    backoff_initial: float = 0.5
    backoff_max: float = 20.0
    #: ceiling on any single wait, including a server's Retry-After
    max_wait: float = 60.0
    #: a Retry-After longer than this ends the retries at once (None: wait it, up to max_wait)
    max_retry_after: float | None = None
    #: whether a timed-out call is tried again (its time is already spent)
    retry_timeouts: bool = True


#: The query-embedding budget (a search waits on it): one retry after a quick
#: failure (429, 5xx, a refused connection), none after a timeout, a server's
#: Retry-After honoured only up to 1 s. Worst case about 5 s, then the search
#: answers from the lexical index.
QUERY_OPTIONS = HttpOptions(
    connect_timeout=2.0,
    read_timeout=5.0,
    max_attempts=2,
    backoff_initial=0.2,
    backoff_max=0.5,
    max_wait=1.0,
    max_retry_after=1.0,
    retry_timeouts=False,
)


def _least(a: float | None, b: float | None) -> float | None:
    """The lower of two caps, None meaning none."""
    return b if a is None else a if b is None else min(a, b)


def query_options(base: HttpOptions) -> HttpOptions:
    """:data:`QUERY_OPTIONS`, never slower than the client's own ``base`` policy."""
    q = QUERY_OPTIONS
    return HttpOptions(
        connect_timeout=min(base.connect_timeout, q.connect_timeout),
        read_timeout=min(base.read_timeout, q.read_timeout),
        max_attempts=max(1, min(base.max_attempts, q.max_attempts)),
        backoff_initial=min(base.backoff_initial, q.backoff_initial),
        backoff_max=min(base.backoff_max, q.backoff_max),
        max_wait=min(base.max_wait, q.max_wait),
        max_retry_after=_least(base.max_retry_after, q.max_retry_after),
        retry_timeouts=base.retry_timeouts and q.retry_timeouts,
    )


class ProviderError(errors.Dir2mcpError):
    """A provider call that failed for good; ``status`` is the HTTP status, if any."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        status: int | None = None,
        hint: str = "",
        retryable: bool | None = None,
    ) -> None:
        super().__init__(code, message, hint=hint, retryable=retryable)
        self.status = status


def retry_after_seconds(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` value (delta-seconds or HTTP date)."""
    if not value or not value.strip():
        return None
    text = value.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def describe_error_body(body: object) -> str:
    """The human part of an error body, in any of the shapes servers send:
    ``{"message": ...}``, ``{"detail": [...]}`` (FastAPI), ``{"error": {...}}``
    (OpenAI), or Mistral's 422 with the FastAPI detail nested in ``message``."""
    if isinstance(body, dict):
        for key in ("message", "detail", "error"):
            if body.get(key) not in (None, "", []):
                return describe_error_body(body[key])
        if "msg" in body:
            loc = ".".join(str(part) for part in body.get("loc") or [])
            return f"{loc}: {body['msg']}" if loc else str(body["msg"])
        return json.dumps(body)[:_DETAIL_LIMIT]
    if isinstance(body, list):
        return "; ".join(describe_error_body(item) for item in body)
    return str(body)


def _outcome(response: httpx.Response) -> str:
    return "ok" if response.is_success else f"http_{response.status_code}"


def _attempts(count: int) -> str:
    return f"{count} attempt" if count == 1 else f"{count} attempts"


class Request(TypedDict, total=False):
    """httpx's body arguments of one POST, as the retry loop sends them."""

    json: JsonObject
    data: JsonObject
    files: dict[str, tuple[str, bytes, str]]
    headers: dict[str, str]
    timeout: httpx.Timeout


class ClientOptions(TypedDict):
    """:class:`ProviderClient`'s keywords, for a subclass that passes them on."""

    api_key: str | None
    prefix: str
    label: str
    auth_hint: NotRequired[str]
    options: NotRequired[HttpOptions | None]


class ProviderClient:
    """POSTs JSON or multipart forms to one provider; see the module docstring for the policy."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None,
        prefix: str,
        label: str,
        auth_hint: str = "",
        options: HttpOptions | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.label = label
        self.options = options or HttpOptions()
        self._api_key = api_key or ""
        self._auth_hint = auth_hint
        self._codes = {kind: getattr(errors, f"{prefix}_{kind}") for kind in ("AUTH", "RATE_LIMIT", "FAILED")}
        headers = {"Accept": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        opts = self.options
        self._http = httpx.Client(
            headers=headers,
            timeout=httpx.Timeout(opts.read_timeout, connect=opts.connect_timeout),
            follow_redirects=False,
        )
        # Providers live as long as the process and callers rarely close
        # them; closing the pool on collection avoids leaking sockets.
        self._finalizer = weakref.finalize(self, self._http.close)
        #: held around each call, retries included (a MediaClient's limiter)
        self._slots: AbstractContextManager[object, None] = contextlib.nullcontext()

    def close(self) -> None:
        self._finalizer()

    def post_json(self, path: str, body: JsonObject, *, options: HttpOptions | None = None) -> JsonObject:
        """POST ``body`` to ``base_url + path`` and return the decoded JSON object.

        ``options`` replaces the client's timeouts and retry policy for this
        call (e.g. :func:`query_options` on the search path)."""
        return self._decode(path, self._send(path, options, json=body))

    def post_form(self, path: str, data: JsonObject, files: dict[str, tuple[str, bytes, str]]) -> JsonObject:
        """POST multipart/form-data; list values become repeated fields (as the SDKs send them)."""
        return self._decode(path, self._send(path, None, data=data, files=files))

    def post_for_bytes(
        self, path: str, body: JsonObject, *, operation: str | None = None
    ) -> tuple[bytes, str]:
        """POST JSON and return the raw body with its content type (audio answers).

        ``operation`` names the call in the metrics when ``path`` carries
        per-call parts (an id, a query string)."""
        response = self._send(path, None, operation=operation, json=body, headers={"Accept": "*/*"})
        return response.content, response.headers.get("Content-Type", "application/octet-stream")

    def _send(
        self,
        path: str,
        options: HttpOptions | None,
        *,
        operation: str | None = None,
        **request: Unpack[Request],
    ) -> httpx.Response:
        """The one retry loop: ``request`` holds httpx's body arguments (json, data, files, headers)."""
        opts = options or self.options
        if options is not None:
            request["timeout"] = httpx.Timeout(opts.read_timeout, connect=opts.connect_timeout)
        # The slot is held across the retries' waits too: a retry does not
        # jump the queue of calls already waiting for one.
        with self._slots:
            for attempt in range(1, max(1, opts.max_attempts) + 1):
                response = self._attempt(path, operation or path, attempt, opts, request)
                if response is not None:
                    return response
        raise AssertionError("unreachable")  # pragma: no cover

    def _attempt(
        self, path: str, operation: str, attempt: int, opts: HttpOptions, request: Request
    ) -> httpx.Response | None:
        """One try: a successful response, ``None`` once the wait before the next
        try is over, or a raised :class:`ProviderError` when there is none."""
        last = attempt >= opts.max_attempts
        try:
            response = self._http.post(self.base_url + path, **request)
        except httpx.TransportError as exc:
            observe_provider_call(self.label, operation, "transport")
            failure = self._transport_failure(path, exc)
            if last or (isinstance(exc, httpx.TimeoutException) and not opts.retry_timeouts):
                raise failure from None
            self._wait(path, attempt, None, failure.message, opts)
            return None
        observe_provider_call(self.label, operation, _outcome(response))
        if response.is_success:
            return response
        retry_after = retry_after_seconds(response.headers.get("Retry-After"))
        too_long = opts.max_retry_after is not None and (retry_after or 0.0) > opts.max_retry_after
        if response.status_code in RETRY_STATUSES and not last and not too_long:
            self._wait(path, attempt, retry_after, f"HTTP {response.status_code}", opts)
            return None
        raise self._status_failure(path, response, attempt)

    def fail(self, message: str, *, status: int | None = None, retryable: bool = False) -> ProviderError:
        """A ``<PREFIX>_FAILED`` error; by default for a response the provider got wrong."""
        return ProviderError(self._codes["FAILED"], self.scrub(message), status=status, retryable=retryable)

    def scrub(self, text: str) -> str:
        return text.replace(self._api_key, "[redacted]") if self._api_key else text

    def _wait(
        self, path: str, attempt: int, retry_after: float | None, reason: str, opts: HttpOptions
    ) -> None:
        if retry_after is None:
            base = min(opts.backoff_max, opts.backoff_initial * 2 ** (attempt - 1))
            delay = base + random.uniform(0, base / 2)
        else:
            delay = retry_after
        delay = min(delay, opts.max_wait)
        logger.warning(
            "%s %s: %s; retry %d/%d in %.1f s",
            self.label,
            path,
            self.scrub(reason),
            attempt,
            opts.max_attempts - 1,
            delay,
        )
        time.sleep(delay)

    def _decode(self, path: str, response: httpx.Response) -> JsonObject:
        try:
            data = response.json()
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise self.fail(f"{self.label} {path} returned a malformed response (not a JSON object)")
        return data

    def _transport_failure(self, path: str, exc: httpx.TransportError) -> ProviderError:
        if isinstance(exc, httpx.TimeoutException):
            what = f"timed out ({type(exc).__name__})"
        else:
            what = f"could not connect ({type(exc).__name__}: {exc})"
        # An outage or a slow provider, not a bad request: worth trying later.
        return self.fail(f"{self.label} {path} {what}", retryable=True)

    def _status_failure(self, path: str, response: httpx.Response, attempts: int) -> ProviderError:
        status = response.status_code
        detail = self._detail(response)
        if status in (401, 403):
            return ProviderError(
                self._codes["AUTH"],
                f"{self.label} rejected the credentials (HTTP {status}): {detail}",
                status=status,
                hint=self._auth_hint,
                retryable=False,
            )
        if status == 429:
            return ProviderError(
                self._codes["RATE_LIMIT"],
                f"{self.label} rate limit still exceeded after {_attempts(attempts)}: {detail}",
                status=status,
                retryable=True,
            )
        transient = status in RETRY_STATUSES
        after = f" after {_attempts(attempts)}" if transient else ""
        return self.fail(
            f"{self.label} {path} failed (HTTP {status}){after}: {detail}", status=status, retryable=transient
        )

    def _detail(self, response: httpx.Response) -> str:
        try:
            text = describe_error_body(response.json())
        except ValueError:
            text = response.text.strip() or response.reason_phrase
        return self.scrub(text)[:_DETAIL_LIMIT]
