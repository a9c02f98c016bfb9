"""Provider-backed representations: ``ocr_markdown`` for PDFs and images (spec §7.4 B).

:func:`extract_media` returns ``None`` when a document is not for a provider
(the plain extractors then handle it), an :class:`Extracted` when a provider
made one, and raises provider errors for the caller to record as retryable.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from corpus.ingest.extract import extract_pdf_text as _text_layer
from corpus.ingest.extracted import PAGE_SEPARATOR, Extracted, NeedsProvider, Page
from corpus.ingest.transcripts import transcribe_audio
from corpus.providers.ocr import PROVIDER as OCR_PROVIDER
from corpus.providers.ocr import MistralOcr, image_mime
from corpus.providers.stt import ElevenLabsStt, MistralStt
from kernel.config import Config
from kernel.jsontypes import JsonObject
from kernel.state import StateDir

OCR_MARKDOWN = "ocr_markdown"


@dataclass
class MediaProviders:
    """The providers available to ingestion (``None`` when a key is missing)."""

    ocr: MistralOcr | None = None
    stt: MistralStt | ElevenLabsStt | None = None

    def close(self) -> None:
        for provider in (self.ocr, self.stt):
            if provider is not None:
                provider.close()


def _paged(pages: list[Page], meta: JsonObject) -> Extracted:
    text = PAGE_SEPARATOR.join(page.text for page in pages)
    return Extracted(rep_type=OCR_MARKDOWN, text=text, pages=tuple(pages), meta=meta)


def ocr_pdf(data: bytes, mode: str, ocr: MistralOcr) -> Extracted:
    """``mode`` ``ocr`` reads every page with OCR; ``auto`` only pages without a text layer."""
    layer: Extracted | None = None
    if mode == "auto":
        try:
            layer = _text_layer(data)
        except NeedsProvider:
            layer = None
    if layer is not None and not layer.meta.get("pages_without_text"):
        return layer
    wanted = None if layer is None else [number - 1 for number in layer.meta["pages_without_text"]]
    result = ocr.pdf(data, wanted)
    kept = {page.number - 1: page.text for page in layer.pages or ()} if layer is not None else {}
    texts = {**kept, **result.pages}
    pages = [Page(number=index + 1, text=texts[index].strip()) for index in sorted(texts)]
    meta = {
        "provider": OCR_PROVIDER,
        "model": result.model,
        "pages": len(pages),
        "ocr_pages": sorted(index + 1 for index in result.pages),
        "source": "ocr" if layer is None else "pdf_text_layer+ocr",
    }
    return _paged(pages, meta)


def ocr_image(name: str, data: bytes, ocr: MistralOcr) -> Extracted:
    result = ocr.image(data, image_mime(name))
    page = Page(number=1, text=result.pages.get(0, "").strip())
    return _paged([page], {"provider": OCR_PROVIDER, "model": result.model, "pages": 1, "source": "ocr"})


def extract_media(
    doc_type: str, name: str, data: bytes, config: Config, providers: MediaProviders
) -> Extracted | None:
    """The provider-made representation of ``data``, or ``None`` when no provider applies."""
    if doc_type == "pdf" and providers.ocr is not None and config.ingest.pdf.mode in ("ocr", "auto"):
        return ocr_pdf(data, config.ingest.pdf.mode, providers.ocr)
    if doc_type == "image" and providers.ocr is not None:
        return ocr_image(name, data, providers.ocr)
    if doc_type == "audio" and providers.stt is not None:
        return transcribe_audio(name, data, providers.stt)
    return None


class Wanted(Protocol):
    """Which provider-backed conversions can run: corpus.ingest.prepare's
    Capabilities, which imports this module."""

    @property
    def ocr(self) -> bool: ...

    @property
    def stt(self) -> bool: ...


def media_providers(
    config: Config,
    state: StateDir,
    capabilities: Wanted,
    secret: Callable[[str], str | None],
    *,
    holds_secret: Callable[[str], object] | None = None,
) -> MediaProviders:
    """The OCR and speech providers whose keys are set, caching under ``state``
    (a transcript or OCR text for which ``holds_secret(text)`` is truthy is not cached)."""
    providers = MediaProviders()
    if capabilities.ocr:
        providers.ocr = MistralOcr(config, api_key=secret("mistral_api_key"), cache_dir=state.cache / "ocr")
        providers.ocr.holds_secret = holds_secret
    if capabilities.stt and config.ingest.audio.mode != "off":
        cache = state.cache / "transcribe" if config.ingest.audio.cache else None
        if config.stt.provider == "elevenlabs":
            providers.stt = ElevenLabsStt(config, api_key=secret("elevenlabs_api_key"), cache_dir=cache)
        else:
            providers.stt = MistralStt(config, api_key=secret("mistral_api_key"), cache_dir=cache)
        providers.stt.holds_secret = holds_secret
    return providers
