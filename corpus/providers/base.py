"""The provider interfaces: embedding and chat.

Every provider returns float32, L2-normalised vectors, so cosine similarity
is a dot product and the hnswlib indices use the ``ip`` space.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ModelInfo:
    """What produced a vector: recorded in settings, checked on every run."""

    provider: str
    model: str
    dim: int


class Interrupted(Exception):  # noqa: N818  (a stop asked for, not an error)
    """An ``embed`` call given ``stop`` saw it set between its forward passes:
    it returns nothing, and the texts stay to be embedded another time."""


class Embedder(ABC):
    """Turns chunk texts into vectors, for ``kind`` "text" or "code"."""

    provider: str = ""
    #: texts per request/forward pass
    max_batch: int = 32
    #: roughly how many characters of code the model reads before it
    #: truncates (None: more than any chunk)
    window_chars: int | None = None

    @abstractmethod
    def model_info(self, kind: str) -> ModelInfo: ...

    @abstractmethod
    def embed(self, texts: Sequence[str], *, kind: str) -> np.ndarray:
        """A ``(len(texts), dim)`` float32 array of L2-normalised rows."""

    def embed_query(self, text: str, *, kind: str) -> np.ndarray:
        """One search query's vector. A search waits on it, so remote providers
        override this to fail fast (short timeouts, one retry) rather than retry
        for minutes as indexing does."""
        vector: np.ndarray = self.embed([text], kind=kind)[0]
        return vector


@dataclass(frozen=True)
class ChatMessage:
    role: str  # "system" | "user" | "assistant"
    content: str


class ChatModel(ABC):
    provider: str = ""
    model: str = ""

    @abstractmethod
    def complete(self, messages: Sequence[ChatMessage], *, max_tokens: int, temperature: float) -> str:
        """The assistant's reply text."""


def normalize_rows(vectors: np.ndarray) -> np.ndarray:
    """L2-normalise each row (zero rows stay zero), as float32."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    normalized: np.ndarray = vectors / np.maximum(norms, 1e-12)
    return normalized
