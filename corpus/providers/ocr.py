"""Mistral OCR (``POST /v1/ocr``, wire-formats.md §1.2) with a content-addressed cache.

Results are cached per page in ``<state>/cache/ocr/<sha256>-<model>.json``, so
an unchanged file is never sent twice, across reindexes too, and a later run
that needs more pages of the same file sends only the missing ones. PDFs over
the API's page or size limits are split into smaller PDFs first.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from corpus.providers.media_http import limits, media_client
from kernel.config import Config
from kernel.jsontypes import JsonObject

PROVIDER = "mistral"
_IMAGE_MIME = {
    "png": "image/png", "jpg": "image/jpeg", "jpeg": "image/jpeg", "gif": "image/gif", "webp": "image/webp",
    "tif": "image/tiff", "tiff": "image/tiff", "bmp": "image/bmp",
}  # fmt: skip


def image_mime(name: str) -> str:
    return _IMAGE_MIME.get(name.rsplit(".", 1)[-1].lower(), "image/png")


class OcrResult:
    """Markdown per 0-based page index, and the model that produced it."""

    def __init__(self, model: str, pages: dict[int, str]) -> None:
        self.model = model
        self.pages = pages


class MistralOcr:
    """OCR through one Mistral client; thread-safe, bounded by ``ocr.concurrency``."""

    def __init__(self, config: Config, *, api_key: str | None, cache_dir: Path | None) -> None:
        ocr = config.ocr
        self.model = config.mistral.ocr_model
        self.max_pages = ocr.max_pages_per_call
        self.max_bytes = int(ocr.max_mb_per_call * 1024 * 1024)
        self.cache_dir = cache_dir
        #: ``holds_secret(text)`` truthy for a page: the document's pages are
        #: not cached, so the state directory keeps no credential they hold
        self.holds_secret: Callable[[str], object] | None = None
        self.calls = 0
        self._workers = ocr.concurrency
        self.client = media_client(config, api_key, "mistral/ocr", **limits(ocr))

    def close(self) -> None:
        self.client.close()

    # -- public --------------------------------------------------------------

    def pdf(self, data: bytes, pages: Sequence[int] | None = None) -> OcrResult:
        """OCR these 0-based ``pages`` of a PDF (all when ``None``)."""
        # imported on the first PDF, as corpus.ingest.extract does: 0.11 CPU-s at every process's start
        from pypdf import PdfReader

        total = len(PdfReader(io.BytesIO(data)).pages)
        wanted = sorted(set(range(total) if pages is None else pages))
        cached = self._cached(data)
        missing = [p for p in wanted if p not in cached.pages]
        if missing:
            fresh = self._pdf_parts(data, total, missing)
            cached = self._store(data, OcrResult(fresh.model, {**cached.pages, **fresh.pages}))
        return OcrResult(cached.model, {p: cached.pages.get(p, "") for p in wanted})

    def image(self, data: bytes, mime: str) -> OcrResult:
        cached = self._cached(data)
        if 0 in cached.pages:
            return cached
        url = f"data:{mime};base64,{base64.b64encode(data).decode()}"
        result = self._call({"type": "image_url", "image_url": url}, offsets=[0])
        return self._store(data, result)

    # -- calls ---------------------------------------------------------------

    def _pdf_parts(self, data: bytes, total: int, wanted: list[int]) -> OcrResult:
        if len(wanted) == total and total <= self.max_pages and len(data) <= self.max_bytes:
            return self._call(_pdf_document(data), offsets=list(range(total)))
        parts = list(self._split(data, wanted))
        with ThreadPoolExecutor(max_workers=min(self._workers, len(parts))) as pool:
            results = list(pool.map(lambda part: self._call(_pdf_document(part[0]), offsets=part[1]), parts))
        merged: dict[int, str] = {}
        for result in results:
            merged.update(result.pages)
        return OcrResult(results[0].model, merged)

    def _split(self, data: bytes, wanted: list[int]) -> Iterator[tuple[bytes, list[int]]]:
        """Sub-PDFs of at most ``max_pages`` pages and ``max_bytes`` bytes, with their page indices."""
        from pypdf import PdfReader, PdfWriter  # on first use, as in pdf() above

        reader = PdfReader(io.BytesIO(data))
        groups = [wanted[i : i + self.max_pages] for i in range(0, len(wanted), self.max_pages)]
        while groups:
            group = groups.pop(0)
            writer = PdfWriter()
            for index in group:
                writer.add_page(reader.pages[index])
            out = io.BytesIO()
            writer.write(out)
            if out.tell() > self.max_bytes and len(group) > 1:
                half = len(group) // 2
                groups[:0] = [group[:half], group[half:]]
                continue
            yield out.getvalue(), group

    def _call(self, document: JsonObject, *, offsets: list[int]) -> OcrResult:
        self.calls += 1
        body = self.client.post_json("/v1/ocr", {"model": self.model, "document": document})
        pages = body.get("pages")
        if not isinstance(pages, list):
            raise self.client.fail("Mistral OCR returned no pages")
        result: dict[int, str] = {}
        for page in pages:
            index = page.get("index") if isinstance(page, dict) else None
            if not isinstance(index, int) or not 0 <= index < len(offsets):
                raise self.client.fail(f"Mistral OCR returned a page index out of range: {index!r}")
            result[offsets[index]] = str(page.get("markdown") or "")
        return OcrResult(str(body.get("model") or self.model), result)

    # -- cache ---------------------------------------------------------------

    def _cache_path(self, data: bytes) -> Path | None:
        if self.cache_dir is None:
            return None
        digest = hashlib.sha256(data).hexdigest()
        safe_model = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in self.model)
        return self.cache_dir / f"{digest}-{safe_model}.json"

    def _cached(self, data: bytes) -> OcrResult:
        path = self._cache_path(data)
        try:
            raw = json.loads(path.read_text("utf-8")) if path else None
        except (OSError, ValueError):
            raw = None  # a missing or damaged entry is simply not a hit
        if not isinstance(raw, dict) or not isinstance(raw.get("pages"), dict):
            return OcrResult(self.model, {})
        return OcrResult(str(raw.get("model", self.model)), {int(k): str(v) for k, v in raw["pages"].items()})

    def _store(self, data: bytes, result: OcrResult) -> OcrResult:
        path = self._cache_path(data)
        held = self.holds_secret is not None and any(map(self.holds_secret, result.pages.values()))
        if path is not None and not held:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.{id(result)}.tmp")
            tmp.write_text(json.dumps({"model": result.model, "pages": result.pages}), "utf-8")
            os.replace(tmp, path)
        return result


def _pdf_document(data: bytes) -> JsonObject:
    return {
        "type": "document_url",
        "document_url": "data:application/pdf;base64," + base64.b64encode(data).decode(),
    }
