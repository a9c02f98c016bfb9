"""Storing a batch's vectors while the next batch is embedded
(corpus.index.dense.embedding._embed_batches), and what a batch stores."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import pytest

from corpus.index.dense.embedding import embed_chunks, embed_pending, from_bytes
from corpus.models import Chunk, EmbeddingStatus
from corpus.providers.base import Embedder, ModelInfo
from tests.factories import ChunkFactory

#: how long a test waits for the other thread before calling it stuck (never reached when it works)
STUCK = 120


class _Numbered(Embedder):
    """Each text's vector says which call embedded it and on which thread."""

    provider = "fake"
    texts_per_call = 4

    def __init__(self) -> None:
        self.threads: list[int] = []
        self.second_call = threading.Event()

    def model_info(self, kind: str) -> ModelInfo:
        return ModelInfo(self.provider, "fake", 4)

    def embed(self, texts: Sequence[str], *, kind: str) -> np.ndarray:
        self.threads.append(threading.get_ident())
        if len(self.threads) == 2:
            self.second_call.set()
        row = np.float32([len(self.threads), 1, 0, 0])
        return np.tile(row / np.linalg.norm(row), (len(texts), 1))


@pytest.mark.django_db
def test_the_next_batch_is_embedded_while_the_last_one_is_stored() -> None:
    ids = [chunk.chunk_id for chunk in ChunkFactory.create_batch(10, index_kind="code")]
    fake = _Numbered()
    overlapped: list[bool] = []

    def on_stored(count: int) -> None:
        # inside the first batch's transaction: the second call must start meanwhile
        if not overlapped:
            overlapped.append(fake.second_call.wait(STUCK))

    stored = embed_chunks(fake, ids, batch_size=4, on_stored=on_stored)

    assert stored == 10
    assert overlapped == [True]
    assert threading.get_ident() not in fake.threads  # the storing thread never embeds
    rows = Chunk.objects.filter(chunk_id__in=ids).order_by("chunk_id").values_list("embedding", flat=True)
    calls = [round(float(from_bytes(blob)[0] / from_bytes(blob)[1])) for blob in rows]
    assert calls == [1] * 4 + [2] * 4 + [3] * 2  # each batch got its own call's vectors


@pytest.mark.django_db
def test_a_batch_stores_only_the_chunks_still_pending_and_counts_them(state) -> None:
    chunks = ChunkFactory.create_batch(6, index_kind="code")
    done = chunks[2]
    Chunk.objects.filter(chunk_id=done.chunk_id).update(
        embedding=np.float32([0, 0, 0, 1]).tobytes(), embedding_status=EmbeddingStatus.OK
    )

    stored = embed_pending(_Numbered(), state, batch_size=4)

    assert stored == 5
    kept = Chunk.objects.get(chunk_id=done.chunk_id)
    assert from_bytes(kept.embedding).tolist() == [0, 0, 0, 1]  # not overwritten
    statuses = set(Chunk.objects.values_list("embedding_status", "embedding_error"))
    assert statuses == {(EmbeddingStatus.OK, None)}
    seqs = Chunk.objects.exclude(chunk_id=done.chunk_id).values_list("embed_seq", flat=True)
    assert None not in seqs and len(set(seqs)) == 2  # two batches of 4 texts a call, each its own version
