"""Providers for any server speaking the OpenAI embeddings and chat API.

Ollama, TEI, vLLM and llama.cpp all serve ``{base_url}/embeddings`` and
``{base_url}/chat/completions``. Mistral's API returns the same shapes, so the
response parsers here serve :mod:`corpus.providers.mistral` as well.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from corpus.providers.base import ChatMessage, ChatModel, Embedder, ModelInfo, normalize_rows
from corpus.providers.http import HttpOptions, ProviderClient, query_options
from kernel import errors
from kernel.config import OpenAICompatibleConfig
from kernel.jsontypes import JsonObject

logger = logging.getLogger(__name__)

KINDS = ("text", "code")
#: what model_info embeds to learn an unknown model's dimension
DIM_PROBE = "dimension probe"


def check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"unknown embedding kind {kind!r}; expected one of {', '.join(KINDS)}")


def embedding_rows(body: JsonObject, count: int, client: ProviderClient) -> np.ndarray:
    """The vectors of an embeddings response, reordered by each item's ``index``."""
    data = body.get("data")
    if not isinstance(data, list) or len(data) != count:
        got = len(data) if isinstance(data, list) else "no"
        raise client.fail(f"{client.label} returned {got} embeddings for {count} inputs")
    rows: list[object] = [None] * count
    for position, item in enumerate(data):
        item = item if isinstance(item, dict) else {}
        index = item.get("index", position)
        if not isinstance(index, int) or not 0 <= index < count or rows[index] is not None:
            raise client.fail(f"{client.label} returned embeddings with a bad or repeated index {index!r}")
        rows[index] = item.get("embedding")
    try:
        array = np.array(rows, dtype=np.float32)
    except (TypeError, ValueError):
        array = None
    if array is None or array.ndim != 2 or array.shape[1] == 0:
        raise client.fail(f"{client.label} returned malformed embedding vectors")
    return array


def chat_request(
    model: str, messages: Sequence[ChatMessage], *, max_tokens: int, temperature: float
) -> JsonObject:
    """The body of a ``/chat/completions`` call, as Mistral and OpenAI-compatible servers take it."""
    return {
        "model": model,
        "messages": [{"role": m.role, "content": m.content} for m in messages],
        "max_tokens": max_tokens,
        "temperature": temperature,
    }


def chat_reply(body: JsonObject, client: ProviderClient) -> str:
    """``choices[0].message.content``, joining text chunks when content is a list."""
    try:
        content = body["choices"][0]["message"].get("content")
    except (KeyError, IndexError, TypeError, AttributeError):
        raise client.fail(f"{client.label} returned a chat response without choices[0].message") from None
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        return "".join(
            chunk.get("text") or ""
            for chunk in content
            if isinstance(chunk, dict) and chunk.get("type") == "text"
        )
    raise client.fail(f"{client.label} returned chat content of type {type(content).__name__}")


def _require_model(section: OpenAICompatibleConfig, setting: str) -> str:
    model = section.model.strip()
    if not model:
        raise errors.Dir2mcpError(
            errors.CONFIG_INVALID,
            f"{setting}.model is required when the provider is openai_compatible",
            hint=f"Set {setting}.model in .dir2mcp.yaml to the model your server serves.",
        )
    return model


class _ServedModel:
    """What both models of an OpenAI-compatible server hold: the model that
    ``setting`` names (required) and one client of the server."""

    provider = "openai_compatible"

    def __init__(
        self, section: OpenAICompatibleConfig, setting: str, api_key: str | None, options: HttpOptions | None
    ) -> None:
        self.model = _require_model(section, setting)
        self._client = ProviderClient(
            section.base_url,
            api_key=api_key,
            prefix="PROVIDER",
            label="openai-compatible server",
            auth_hint=f"Check the key in ${section.api_key_env} for {section.base_url}.",
            options=options,
        )

    def close(self) -> None:
        self._client.close()


class OpenAICompatibleEmbedder(_ServedModel, Embedder):
    """One model for both kinds; its dimension is learned from the server."""

    def __init__(
        self,
        section: OpenAICompatibleConfig,
        *,
        api_key: str | None = None,
        batch_size: int = 32,
        options: HttpOptions | None = None,
        setting: str = "embed.openai_compatible",
    ) -> None:
        super().__init__(section, setting, api_key, options)
        self.max_batch = batch_size
        self._dim = 0

    def model_info(self, kind: str) -> ModelInfo:
        check_kind(kind)
        if not self._dim:
            self._embed_batch([DIM_PROBE])
        return ModelInfo(self.provider, self.model, self._dim)

    def embed(self, texts: Sequence[str], *, kind: str) -> np.ndarray:
        check_kind(kind)
        if not texts:
            return np.zeros((0, self.model_info(kind).dim), dtype=np.float32)
        step = self.max_batch
        parts = [self._embed_batch(list(texts[i : i + step])) for i in range(0, len(texts), step)]
        return normalize_rows(np.vstack(parts))

    def embed_query(self, text: str, *, kind: str) -> np.ndarray:
        check_kind(kind)
        rows = normalize_rows(self._embed_batch([text], options=query_options(self._client.options)))
        vector: np.ndarray = rows[0]
        return vector

    def _embed_batch(self, texts: list[str], options: HttpOptions | None = None) -> np.ndarray:
        body = self._client.post_json("/embeddings", {"model": self.model, "input": texts}, options=options)
        rows = embedding_rows(body, len(texts), self._client)
        if self._dim and rows.shape[1] != self._dim:
            raise self._client.fail(
                f"{self._client.label} returned {rows.shape[1]}-dim vectors for {self.model}, "
                f"earlier {self._dim}"
            )
        self._dim = rows.shape[1]
        return rows


class OpenAICompatibleChat(_ServedModel, ChatModel):
    def __init__(
        self,
        section: OpenAICompatibleConfig,
        *,
        api_key: str | None = None,
        options: HttpOptions | None = None,
        setting: str = "chat.openai_compatible",
    ) -> None:
        super().__init__(section, setting, api_key, options or HttpOptions(read_timeout=120.0))

    def complete(self, messages: Sequence[ChatMessage], *, max_tokens: int, temperature: float) -> str:
        body = chat_request(self.model, messages, max_tokens=max_tokens, temperature=temperature)
        return chat_reply(self._client.post_json("/chat/completions", body), self._client)
