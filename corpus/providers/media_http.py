"""Bounded concurrency for OCR, speech and annotation calls.

:class:`MediaClient` is the shared :class:`ProviderClient` (same send loop,
timeouts, backoff honouring ``Retry-After``, error mapping, key scrubbing and
metrics) with the key in a header of the provider's choosing and a bound on
how many calls run at once across threads.

The bound is per provider and per process: clients built with the same
``limit_key`` (every OCR client, every Mistral transcription client, every
TTS call, ...) share one :class:`Limiter`, so the configured concurrency
holds across indexing workers and concurrent tool calls alike, however many
clients they build.
"""

from __future__ import annotations

import threading
from typing import TypedDict, Unpack

from corpus.providers.http import ClientOptions, HttpOptions, ProviderClient
from corpus.providers.mistral import AUTH_HINT as MISTRAL_HINT
from kernel.config import Config, OcrConfig, SttConfig

ELEVENLABS_HINT = "Check ELEVENLABS_API_KEY: set env ELEVENLABS_API_KEY=... or run: dir2mcp config init"


class Limiter:
    """A counting limit that can be resized while in use (the latest config wins)."""

    def __init__(self, limit: int) -> None:
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

    def __exit__(self, *exc: object) -> None:
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

    ``client`` are :class:`ProviderClient`'s keywords (``api_key``,
    ``prefix``, ``label``, ...). ``auth_header`` names the header carrying the
    key (``Authorization`` gets ``Bearer``; ElevenLabs uses ``xi-api-key``).
    ``concurrency`` bounds the calls in flight: across every client with the
    same ``limit_key``, or through this client alone without one.
    """

    def __init__(
        self,
        base_url: str,
        *,
        auth_header: str = "Authorization",
        concurrency: int = 4,
        limit_key: str | None = None,
        **client: Unpack[ClientOptions],
    ) -> None:
        super().__init__(base_url, **client)
        api_key = client.get("api_key")
        if auth_header != "Authorization" and api_key:
            self._http.headers.pop("Authorization", None)
            self._http.headers[auth_header] = api_key
        self._slots = shared_limiter(limit_key, concurrency) if limit_key else Limiter(concurrency)


class Limits(TypedDict):
    """:func:`media_client`'s call limits, as keyword arguments."""

    timeout: float
    concurrency: int
    max_attempts: int


def limits(section: OcrConfig | SttConfig) -> Limits:
    """The call limits of a config section with ``timeout_seconds``,
    ``concurrency`` and ``max_attempts`` (``ocr``, ``stt``)."""
    return {
        "timeout": section.timeout_seconds,
        "concurrency": section.concurrency,
        "max_attempts": section.max_attempts,
    }


#: the label of each media service in messages and metrics, by its limit key
LABELS = {
    "mistral/ocr": "Mistral OCR",
    "mistral/stt": "Mistral transcription",
    "mistral/annotations": "Mistral annotations",
    "elevenlabs/stt": "ElevenLabs",
    "elevenlabs/tts": "ElevenLabs",
}
#: the header carrying a provider's key, where it is not ``Authorization: Bearer``
_KEY_HEADERS = {"elevenlabs": "xi-api-key"}


def media_client(
    config: Config,
    api_key: str | None,
    service: str,
    *,
    timeout: float,
    concurrency: int,
    max_attempts: int = HttpOptions.max_attempts,
) -> MediaClient:
    """A client of ``service`` (``<provider>/<service>``, a key of :data:`LABELS`),
    bounded with every other client of it in the process."""
    provider = service.partition("/")[0]
    return MediaClient(
        getattr(config, provider).base_url,
        api_key=api_key,
        prefix=provider.upper(),
        label=LABELS[service],
        auth_hint=MISTRAL_HINT if provider == "mistral" else ELEVENLABS_HINT,
        options=HttpOptions(read_timeout=timeout, max_attempts=max_attempts),
        auth_header=_KEY_HEADERS.get(provider, "Authorization"),
        concurrency=concurrency,
        limit_key=service,
    )
