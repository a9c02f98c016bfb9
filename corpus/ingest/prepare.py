"""Turning one file or archive member into what the store should hold.

Everything here is pure: it reads bytes and returns a :class:`Prepared`
record. :mod:`corpus.ingest.known` decides what has changed and
:mod:`corpus.ingest.batch` writes the records inside transactions, so no
database lock is held while files are read, decoded, scanned for secrets
and chunked.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

from corpus.ingest.chunking import ChunkDraft
from corpus.ingest.classify import classify, index_kind_for
from corpus.ingest.cut import chunk_document
from corpus.ingest.extract import extract
from corpus.ingest.extracted import PAGE_SEPARATOR, Extracted, NeedsProvider
from corpus.ingest.generated import RULE_VERSION as GENERATED_RULE_VERSION
from corpus.ingest.generated import TABLE, generated_kind
from corpus.ingest.media import MediaProviders, extract_media
from corpus.ingest.units import parse
from corpus.navigation import symbols
from corpus.providers.http import ProviderError
from corpus.security import ExclusionEngine
from kernel import errors
from kernel.config import Config
from kernel.jsontypes import JsonObject

# Bump when extraction or chunking changes what a document produces: every
# document is then re-processed on the next run.
EXTRACTOR_VERSION = "2"
OFFICE_READER_VERSION = "1"
# Bump when what the symbol index stores of a code file changes: code files are then re-read.
SYMBOLS_VERSION = "2"
HEAD_BYTES = 8192
NEEDS_PROVIDER_TYPES = ("pdf", "image", "audio")
#: ends the error of a document whose provider failed for a passing reason
#: (outage, timeout, rate limit); the watcher retries those (corpus.ingest.watch)
RETRYABLE_NOTE = "(retryable, tried again later)"


def sha256_hex(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    return hashlib.sha256(data).hexdigest()


@dataclass
class Ahead:
    """What writing a prepared document as a new representation works out
    with no database, worked out beforehand where the document was prepared
    (a worker process: corpus/ingest/prepare_pool.py), so that the writing
    process only writes (issue #37). :func:`corpus.ingest.writer.precompute`
    makes it last; whatever changes the document afterwards drops it."""

    #: the representation's hash (its text, meta and the policy that cut it)
    rep_hash: str
    #: each draft's (start, end) in the text, located in order as a new
    #: representation's chunks are; None: not there (the chunk holds its text)
    places: list[tuple[int, int] | None]
    #: what each draft's lexical row holds after its head and after its body
    #: (corpus.index.lexical.Tails); None where the writer works that out
    #: (corpus.index.lexical.row_tails)
    tails: list[tuple[str, str]] | None
    #: the text as its column stores it (compressed on SQLite: corpus/packed.py); None: the writer packs it
    stored_text: str | bytes | None = None


@dataclass
class Prepared:
    """What one document should look like in the store after this run."""

    rel_path: str
    source_type: str
    doc_type: str
    size: int
    mtime_ns: int
    content_hash: str = ""
    policy_hash: str = ""
    status: str = "ok"
    #: why it is not indexed, as shown; ``error_code`` is its canonical code ("" for none)
    error: str | None = None
    error_code: str = ""
    index_kind: str = "text"
    extracted: Extracted | None = None
    drafts: list[ChunkDraft] = field(default_factory=list)
    #: a provider failed: keep what the store already holds for this document
    keep_existing: bool = False
    #: a code file's definitions and uses (the symbol index); None when no grammar reads it
    navigation: symbols.Navigation | None = None
    #: what the writer would otherwise work out from it (None: the writer does)
    ahead: Ahead | None = None

    @property
    def has_text(self) -> bool:
        return self.status == "ok" and self.extracted is not None

    def fail(self, status: str, code: str, message: str) -> Prepared:
        """Record why this document is ``skipped`` or in ``error``: the code,
        and the text shown, which leads with the code when there is one."""
        self.status, self.error_code = status, code
        self.error = f"{code}: {message}" if code else message
        return self

    @property
    def error_message(self) -> str:
        """``error`` without the code it leads with."""
        return (self.error or "").removeprefix(f"{self.error_code}: " if self.error_code else "")


@dataclass(frozen=True)
class Capabilities:
    """Which provider-backed conversions can run, and why not if not."""

    ocr: bool = False
    stt: bool = False
    ocr_missing: str = "needs MISTRAL_API_KEY"
    stt_missing: str = "needs MISTRAL_API_KEY"


def capabilities_for(config: Config, secret: Callable[[str], str | None]) -> Capabilities:
    """Provider-backed conversions available now: those whose key is set.

    ``secret(name)`` is the one secret resolver (kernel.secrets), so a key in
    the keychain or the secret file counts as much as one in the environment.
    """
    key = bool(secret("mistral_api_key"))
    elevenlabs = config.stt.provider == "elevenlabs"
    stt_key = bool(secret("elevenlabs_api_key" if elevenlabs else "mistral_api_key"))
    stt_var = "ELEVENLABS_API_KEY" if elevenlabs else "MISTRAL_API_KEY"
    return Capabilities(
        ocr=key,
        stt=stt_key,
        ocr_missing="" if key else "needs MISTRAL_API_KEY",
        stt_missing="" if stt_key else f"needs {stt_var}",
    )


class Preparer:
    """Classifies, extracts, screens and chunks documents under one config."""

    def __init__(
        self,
        config: Config,
        engine: ExclusionEngine,
        capabilities: Capabilities,
        providers: MediaProviders | None = None,
    ) -> None:
        self.config = config
        self.engine = engine
        self.capabilities = capabilities
        self.providers = providers or MediaProviders()

    @cached_property
    def _base_policy(self) -> JsonObject:
        cfg = self.config
        return {
            "v": EXTRACTOR_VERSION,
            "chunking": cfg.chunking.model_dump(mode="json"),
            "secret_patterns": list(cfg.security.secret_patterns),
            "archives": cfg.ingest.archives.model_dump(mode="json"),
            "limits": [cfg.ingest.max_file_mb, cfg.ingest.max_file_mb_by_type],
        }

    def policy_hash(self, doc_type: str, *, secret: bool = False) -> str:
        """A fingerprint of every setting that shapes a ``doc_type`` document;
        ``secret``: of one that holds a credential, which ``security.secret_mode``
        shapes too (so flipping it re-reads those documents, and only those)."""
        policy = dict(self._base_policy)
        if secret:
            policy["secret_mode"] = self.config.security.secret_mode
        ingest = self.config.ingest
        caps = self.capabilities
        # The reason a provider is missing is part of the policy, so a file
        # skipped for "needs MISTRAL_API_KEY" is retried once a key is set.
        ocr_model = self.config.mistral.ocr_model if caps.ocr else None
        if doc_type == "pdf":
            policy["mode"] = [ingest.pdf.mode, caps.ocr, caps.ocr_missing, ocr_model]
        elif doc_type == "image":
            policy["mode"] = [ingest.images.mode, caps.ocr, caps.ocr_missing, ocr_model]
        elif doc_type == "audio":
            stt = self.config.stt
            model = getattr(stt, stt.provider).model if caps.stt else None
            policy["mode"] = [ingest.audio.mode, caps.stt, caps.stt_missing, stt.provider, model]
        elif doc_type == "office":
            # Office files were skipped before they were read; this re-reads them.
            policy["office"] = OFFICE_READER_VERSION
        elif doc_type == "code":
            # Code indexed before the symbol index (or by an older one) is read again.
            policy["symbols"] = SYMBOLS_VERSION
            # An index cut before the generated-file rule re-cuts its code
            # (chunks whose text survives keep their ids and embeddings).
            policy["generated"] = GENERATED_RULE_VERSION
        return sha256_hex(json.dumps(policy, sort_keys=True))[:32]

    def classify(self, name: str, head: bytes) -> str:
        return classify(name, head)

    def too_large(self, doc_type: str, size: int) -> bool:
        return size > self.config.max_bytes_for(doc_type)

    def skipped(self, base: Prepared, code: str, reason: str) -> Prepared:
        return base.fail("skipped", code, reason)

    def prepare(self, base: Prepared, data: bytes) -> Prepared:
        """Fill ``base`` (whose doc_type, size and mtime are set) from ``data``."""
        base.content_hash = base.content_hash or sha256_hex(data)
        base.index_kind = index_kind_for(base.doc_type, base.rel_path)
        skip = self._policy_skip(base.doc_type)
        if skip:
            return self.skipped(base, *skip)
        name = base.rel_path.rsplit("/", 1)[-1]
        try:
            extracted = extract_media(base.doc_type, name, data, self.config, self.providers)
            if extracted is None:
                extracted = extract(base.doc_type, name, data)
        except NeedsProvider as exc:
            missing = self.capabilities.stt_missing if exc.what == "stt" else self.capabilities.ocr_missing
            return self.skipped(base, "", missing)
        except ProviderError as exc:
            # An outage must not cost what an earlier run indexed; the error
            # status makes the next run try this document again, and a
            # running watcher retries the retryable ones by itself.
            again = RETRYABLE_NOTE if exc.retryable else "(tried again on the next run)"
            base.keep_existing = True
            return base.fail("error", exc.code, f"{exc.message} {again}")
        except errors.Dir2mcpError as exc:
            if exc.code == errors.DOC_TYPE_UNSUPPORTED:
                return self.skipped(base, exc.code, exc.message)
            return base.fail("error", exc.code, exc.message)
        rule, screened = screen_extracted(self.engine, extracted)
        if rule:
            base.policy_hash = self.policy_hash(base.doc_type, secret=True)
            if screened is None:
                return self.skipped(base, errors.SECRET_DETECTED, secret_reason(self.engine, rule))
        assert screened is not None  # None only under a rule, skipped above
        extracted = screened
        if extracted.pages and extracted.meta.get("pages_without_text"):
            pending = self.capabilities.ocr_missing if not self.capabilities.ocr else ""
            if pending:
                extracted.meta["ocr_pending"] = pending
        base.extracted = extracted
        # One parse for the units and the symbol index; none for a table of
        # constants, which keeps no names (corpus/ingest/generated.py).
        parsed, generated = None, None
        if base.index_kind == "code" and extracted.pages is None and not extracted.segments:
            generated = generated_kind(extracted.text)
            if generated == TABLE:
                extracted.meta["table_of_constants"] = True
            else:
                parsed = parse(extracted.text, base.rel_path)
            base.navigation = symbols.extract(parsed) if parsed is not None else None
        base.drafts = chunk_document(
            extracted,
            kind=base.index_kind,
            config=self.config.chunking,
            rel_path=base.rel_path,
            doc_type=base.doc_type,
            parsed=parsed,
            generated=generated is not None,
        )
        return base

    def _policy_skip(self, doc_type: str) -> tuple[str, str] | None:
        ingest = self.config.ingest
        if doc_type == "binary_ignored":
            return errors.BINARY_SKIPPED, "binary file"
        if doc_type == "pdf" and ingest.pdf.mode == "off":
            return "", "disabled by ingest.pdf.mode=off"
        if doc_type == "image":
            if ingest.images.mode == "off":
                return "", "disabled by ingest.images.mode=off"
            if not self.capabilities.ocr:
                return "", self.capabilities.ocr_missing
        if doc_type == "audio":
            if ingest.audio.mode == "off":
                return "", "disabled by ingest.audio.mode=off"
            if not self.capabilities.stt:
                return "", self.capabilities.stt_missing
        return None


def screen_extracted(engine: ExclusionEngine, extracted: Extracted) -> tuple[str | None, Extracted | None]:
    """How the index holds ``extracted``: the rule that found a credential in
    it (None when none did), and what to store: ``extracted`` as it is,
    redacted (``security.secret_mode: redact``), or None when the document
    is skipped for it. The indexer and on-demand transcription both call it,
    so what either stores agrees."""
    rule = engine.find_secret(extracted.text)
    if rule is None:
        return None, extracted
    return rule, redact_extracted(engine, extracted) if engine.redacts else None


def secret_reason(engine: ExclusionEngine, rule: str) -> str:
    """Why a document is skipped for the credential ``rule`` found (never the credential)."""
    return f"content matches {rule}" + ("; it could not be redacted" if engine.redacts else "")


def _redacted_text(engine: ExclusionEngine, text: str) -> str | None:
    redacted = engine.redact(text)
    return None if redacted is None else redacted.text


def redact_extracted(engine: ExclusionEngine, extracted: Extracted) -> Extracted | None:
    """``extracted`` with each credential replaced (:meth:`ExclusionEngine.redact`),
    its pages and timed segments too, and the rules that found them in its
    meta (``redacted``); None when it cannot be made clean."""
    whole = engine.redact(extracted.text)
    if whole is None:
        return None
    pages, segments = extracted.pages, extracted.segments
    if pages is not None:
        found: list[str | None]
        if extracted.text == PAGE_SEPARATOR.join(page.text for page in pages):
            found = list(whole.text.split(PAGE_SEPARATOR))  # a marker keeps the page breaks it replaced
        else:
            found = [_redacted_text(engine, page.text) for page in pages]
        texts = [text for text in found if text is not None]
        if len(texts) != len(found) or len(texts) != len(pages):
            return None
        pages = tuple(dataclasses.replace(page, text=text) for page, text in zip(pages, texts, strict=True))
    if segments is not None:
        found = [_redacted_text(engine, segment.text) for segment in segments]
        texts = [text for text in found if text is not None]
        if len(texts) != len(found):
            return None
        segments = tuple(dataclasses.replace(s, text=text) for s, text in zip(segments, texts, strict=True))
    meta = extracted.meta | {"redacted": {"rules": list(whole.rules), "count": whole.count}}
    return dataclasses.replace(extracted, text=whole.text, pages=pages, segments=segments, meta=meta)
