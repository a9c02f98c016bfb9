"""The chunk rows the dense side reads: live chunks of an index kind with a
stored vector, and those vectors. The vectors' files (``vectors.py``) hold
labels that may be tombstoned since; a search keeps only what these say is
live and embedded."""

from __future__ import annotations

import numpy as np
from django.db import connection
from django.db.models import QuerySet

from corpus.index.dense.embedding import from_bytes
from corpus.index.tables import one_of
from corpus.models import Chunk, EmbeddingStatus


def live_chunks(kind: str) -> QuerySet[Chunk]:
    """The live chunks of index ``kind`` that have a stored vector (the rule
    :func:`live_embedded` writes in SQL, for the search's hot path)."""
    return Chunk.objects.filter(deleted=False, index_kind=kind, embedding_status=EmbeddingStatus.OK)


def stored_vectors(ids: list[int]) -> dict[int, tuple[str, np.ndarray]]:
    """(index kind, stored vector) of each embedded live chunk of ``ids``, in
    the order of ``ids``."""
    if not ids:
        return {}
    among, listed = one_of("chunk_id", ids)  # one parameter, whatever the pool (session 31)
    # Each by its id: with no statistics, SQLite's planner read every live
    # embedded chunk's entry of the index on (deleted, embedding_status)
    # for these few (review 31b; lexical.live says the same).
    by_id = " NOT INDEXED" if connection.vendor == "sqlite" else ""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT chunk_id, index_kind, embedding FROM chunks{by_id} WHERE {among} "
            "AND deleted = %s AND embedding_status = %s",
            [listed, False, EmbeddingStatus.OK],
        )
        found = {cid: (kind, from_bytes(blob)) for cid, kind, blob in cursor.fetchall() if blob}
    return {cid: found[cid] for cid in ids if cid in found}


def live_embedded(ids: list[int], kind: str) -> set[int]:
    """Those of ``ids`` that are live chunks of ``kind`` with a stored vector."""
    if not ids:
        return set()
    among, listed = one_of("chunk_id", ids)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT chunk_id FROM chunks WHERE {among} AND deleted = %s AND index_kind = %s "
            "AND embedding_status = %s",
            [listed, False, kind, EmbeddingStatus.OK],
        )
        return {row[0] for row in cursor.fetchall()}
