"""Provider calls beyond JSON-in/JSON-out: multipart uploads, audio answers, concurrency.

:class:`MediaClient` extends the shared :class:`ProviderClient` (same
timeouts, backoff honouring ``Retry-After``, error mapping and key scrubbing)
with multipart form posts and binary responses, and bounds how many calls
run at once across threads.

The bound is per provider and per process: clients built with the same
``limit_key`` (every OCR client, every Mistral transcription client, every
TTS call, ...) share one :class:`Limiter`, so the configured concurrency
holds across indexing workers and concurrent tool calls alike, however many
clients they build.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import httpx

from corpus.providers.http import RETRY_STATUSES, HttpOptions, ProviderClient, retry_after_seconds


class Limiter:
    """A counting limit that can be resized while in use (the latest config wins)."""

    def __init__(self, limit: int):
        self.limit = max(1, limit)
        self.busy = 0
        self._cond = threading.Condition()

    def resize(self, limit: int) -> None:
        with self._cond:
            self.limit = max(1, limit)
            self._cond.notify_all()

    def __enter__(self) -> Limiter:
        with self._cond:
            while self.busy >= self.limit:
                self._cond.wait()
            self.busy += 1
        return self

    def __exit__(self, *exc) -> None:
        with self._cond:
            self.busy -= 1
            self._cond.notify_all()


_LIMITERS: dict[str, Limiter] = {}
_LIMITERS_LOCK = threading.Lock()


def shared_limiter(key: str, limit: int) -> Limiter:
    """The process-wide limiter for ``key`` (e.g. ``"mistral/ocr"``), set to ``limit``."""
    with _LIMITERS_LOCK:
        limiter = _LIMITERS.get(key)
        if limiter is None:
            limiter = _LIMITERS[key] = Limiter(limit)
    if limiter.limit != max(1, limit):
        limiter.resize(limit)
    return limiter


class MediaClient(ProviderClient):
    """A provider client for OCR, speech and annotations.

    ``auth_header`` names the header carrying the key (``Authorization`` gets
    ``Bearer``; ElevenLabs uses ``xi-api-key``). ``concurrency`` bounds the
    calls in flight: across every client with the same ``limit_key``, or
    through this client alone without one.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None,
        prefix: str,
        label: str,
        auth_hint: str = "",
        options: HttpOptions | None = None,
        auth_header: str = "Authorization",
        concurrency: int = 4,
        limit_key: str | None = None,
    ):
        super().__init__(
            base_url, api_key=api_key, prefix=prefix, label=label, auth_hint=auth_hint, options=options
        )
        if auth_header != "Authorization" and api_key:
            self._http.headers.pop("Authorization", None)
            self._http.headers[auth_header] = api_key
        self._slots = shared_limiter(limit_key, concurrency) if limit_key else Limiter(concurrency)

    def post_json(self, path: str, body: dict) -> dict:
        with self._slots:
            return super().post_json(path, body)

    def post_form(self, path: str, data: dict[str, Any], files: dict[str, tuple[str, bytes, str]]) -> dict:
        """POST multipart/form-data; list values become repeated fields (as the SDKs send them)."""
        response = self._send(path, lambda url: self._http.post(url, data=data, files=files))
        return self._decode(path, response)

    def post_for_bytes(self, path: str, body: dict) -> tuple[bytes, str]:
        """POST JSON and return the raw body with its content type (audio answers)."""
        response = self._send(path, lambda url: self._http.post(url, json=body, headers={"Accept": "*/*"}))
        return response.content, response.headers.get("Content-Type", "application/octet-stream")

    def _send(self, path: str, call: Callable[[str], httpx.Response]) -> httpx.Response:
        url = self.base_url + path
        attempts = max(1, self.options.max_attempts)
        with self._slots:
            for attempt in range(1, attempts + 1):
                last = attempt == attempts
                try:
                    response = call(url)
                except httpx.TransportError as exc:
                    failure = self._transport_failure(path, exc)
                    if last:
                        raise failure from None
                    self._wait(path, attempt, None, failure.message)
                    continue
                if response.status_code in RETRY_STATUSES and not last:
                    after = retry_after_seconds(response.headers.get("Retry-After"))
                    self._wait(path, attempt, after, f"HTTP {response.status_code}")
                    continue
                if response.is_success:
                    return response
                raise self._status_failure(path, response, attempts)
        raise AssertionError("unreachable")  # pragma: no cover
