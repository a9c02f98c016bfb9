"""Mistral embeddings (``mistral-embed``, ``codestral-embed``) and chat.

Request bodies carry only documented fields: the API rejects unknown ones
with 422. Embedding batches are bounded by item count and by an estimated
token budget, kept well under the limits users have observed (16,384 tokens
per request, ~8,192 per input; reference/wire-formats.md §1.1).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterator, Sequence

import numpy as np

from corpus.providers.base import ChatMessage, ChatModel, Embedder, ModelInfo, normalize_rows
from corpus.providers.http import HttpOptions, ProviderClient, ProviderError, query_options
from corpus.providers.openai_compatible import (
    DIM_PROBE,
    chat_reply,
    chat_request,
    check_kind,
    embedding_rows,
)
from kernel.config import Config

logger = logging.getLogger(__name__)

MISSING_KEY_HINT = "Set env: MISTRAL_API_KEY=...\nOr run: dir2mcp config init"
AUTH_HINT = "Check MISTRAL_API_KEY: set env MISTRAL_API_KEY=... or run: dir2mcp config init"
# mistral-embed is fixed at 1024; codestral-embed defaults to 1536 (max 3072).
DOCUMENTED_DIMS = {
    "mistral-embed": 1024,
    "mistral-embed-2312": 1024,
    "codestral-embed": 1536,
    "codestral-embed-2505": 1536,
}
# Estimated-token budgets, with margin under the observed 16,384 / 8,192.
REQUEST_TOKEN_BUDGET = 12_000
INPUT_TOKEN_BUDGET = 6_000
CHARS_PER_TOKEN = 3.5
# The chat API accepts temperature 0-1.5; the config allows up to 2.
MAX_TEMPERATURE = 1.5
_TOKEN_LIMIT_RE = re.compile(r"token|too long|context", re.IGNORECASE)
_MIN_SPLIT_CHARS = 64


def estimate_tokens(text: str) -> int:
    """A deliberately high token estimate: ASCII at 3.5 chars a token, anything else a token a char."""
    ascii_chars = len(text.encode("ascii", "ignore"))
    return math.ceil(ascii_chars / CHARS_PER_TOKEN + (len(text) - ascii_chars))


def truncate_to_tokens(text: str, budget: int) -> str:
    """The longest prefix of ``text`` whose estimate fits ``budget``."""
    if estimate_tokens(text) <= budget:
        return text
    low, high = 0, min(len(text), math.ceil(budget * CHARS_PER_TOKEN))
    while low < high:
        mid = (low + high + 1) // 2
        if estimate_tokens(text[:mid]) <= budget:
            low = mid
        else:
            high = mid - 1
    return text[:low]


def plan_batches(costs: Sequence[int], *, max_items: int, max_tokens: int) -> Iterator[tuple[int, int]]:
    """Consecutive ``(start, end)`` slices within both the item and the token bound."""
    start, used = 0, 0
    for i, cost in enumerate(costs):
        if i > start and (i - start >= max_items or used + cost > max_tokens):
            yield start, i
            start, used = i, 0
        used += cost
    if start < len(costs):
        yield start, len(costs)


def mistral_client(config: Config, api_key: str, options: HttpOptions | None = None) -> ProviderClient:
    return ProviderClient(
        config.mistral.base_url,
        api_key=api_key,
        prefix="MISTRAL",
        label="Mistral",
        auth_hint=AUTH_HINT,
        options=options,
    )


class MistralEmbedder(Embedder):
    """``mistral-embed`` for text chunks, ``codestral-embed`` for code."""

    provider = "mistral"

    def __init__(self, config: Config, *, api_key: str, options: HttpOptions | None = None) -> None:
        self._models = {"text": config.mistral.embed_text_model, "code": config.mistral.embed_code_model}
        self._dims = {kind: DOCUMENTED_DIMS.get(model, 0) for kind, model in self._models.items()}
        self._confirmed: set[str] = set()
        self.max_batch = config.embed.batch_size
        self._client = mistral_client(config, api_key, options)

    def model_info(self, kind: str) -> ModelInfo:
        check_kind(kind)
        if not self._dims[kind]:
            self._embed_batch(kind, [DIM_PROBE])
        return ModelInfo(self.provider, self._models[kind], self._dims[kind])

    def embed(self, texts: Sequence[str], *, kind: str) -> np.ndarray:
        check_kind(kind)
        if not texts:
            return np.zeros((0, self.model_info(kind).dim), dtype=np.float32)
        inputs = [truncate_to_tokens(text, INPUT_TOKEN_BUDGET) for text in texts]
        costs = [estimate_tokens(text) for text in inputs]
        slices = plan_batches(costs, max_items=self.max_batch, max_tokens=REQUEST_TOKEN_BUDGET)
        return normalize_rows(np.vstack([self._embed_batch(kind, inputs[a:b]) for a, b in slices]))

    def embed_query(self, text: str, *, kind: str) -> np.ndarray:
        check_kind(kind)
        query = truncate_to_tokens(text, INPUT_TOKEN_BUDGET)
        rows = self._embed_batch(kind, [query], options=query_options(self._client.options))
        vector: np.ndarray = normalize_rows(rows)[0]
        return vector

    def close(self) -> None:
        self._client.close()

    def _embed_batch(self, kind: str, texts: list[str], options: HttpOptions | None = None) -> np.ndarray:
        model = self._models[kind]
        try:
            body = self._client.post_json("/v1/embeddings", {"model": model, "input": texts}, options=options)
        except ProviderError as exc:
            if exc.status != 400 or not _TOKEN_LIMIT_RE.search(exc.message):
                raise
            return self._split(kind, texts, exc, options)
        rows = embedding_rows(body, len(texts), self._client)
        self._learn_dim(kind, rows.shape[1])
        return rows

    def _split(
        self, kind: str, texts: list[str], exc: ProviderError, options: HttpOptions | None = None
    ) -> np.ndarray:
        # The estimate is a heuristic; when the server counts more tokens
        # than we did, halve the batch (or the single text) and try again.
        logger.info("Mistral counted more tokens than estimated; splitting a batch of %d", len(texts))
        if len(texts) > 1:
            mid = len(texts) // 2
            return np.vstack(
                [self._embed_batch(kind, texts[:mid], options), self._embed_batch(kind, texts[mid:], options)]
            )
        if len(texts[0]) < _MIN_SPLIT_CHARS:
            raise exc
        return self._embed_batch(kind, [texts[0][: len(texts[0]) // 2]], options)

    def _learn_dim(self, kind: str, dim: int) -> None:
        # The first response settles the dimension (the documented one is a
        # default); after that a change would corrupt the index.
        known, model = self._dims[kind], self._models[kind]
        if known == dim:
            self._confirmed.add(kind)
            return
        if kind in self._confirmed:
            raise self._client.fail(f"Mistral returned {dim}-dim vectors for {model}, earlier {known}")
        if known:
            logger.warning("%s returned %d-dim vectors, not the documented %d", model, dim, known)
        self._dims[kind] = dim
        self._confirmed.add(kind)


class MistralChat(ChatModel):
    provider = "mistral"

    def __init__(self, config: Config, *, api_key: str, options: HttpOptions | None = None) -> None:
        self.model = config.mistral.chat_model
        self._client = mistral_client(config, api_key, options or HttpOptions(read_timeout=120.0))

    def complete(self, messages: Sequence[ChatMessage], *, max_tokens: int, temperature: float) -> str:
        body = chat_request(
            self.model, messages, max_tokens=max_tokens, temperature=min(temperature, MAX_TEMPERATURE)
        )
        return chat_reply(self._client.post_json("/v1/chat/completions", body), self._client)

    def close(self) -> None:
        self._client.close()
