"""What the lexical index's backends share: the protocol each implements,
the table-keeping both the SQLite and the PostgreSQL backend do alike, and
the one join and liveness rule of every query over chunks.

A chunk ``c`` reaches its document ``d`` through its representation ``r``
(:data:`TO_DOCUMENT`); it is live when neither it nor its document is a
tombstone (:data:`LIVE`). Both backends and ``chunks.py`` write their SQL
with these, so a filter over ``d`` (``corpus.retrieval.Filters.sql``) means
the same in each."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence, Sized
from itertools import islice
from typing import Protocol, TypeVar

from django.db import connection, transaction
from django.db.backends.utils import CursorWrapper

from corpus import slices
from corpus.index.idlists import select_each
from corpus.models import Chunk

_T = TypeVar("_T")
#: The parameters of a query: what the filters compare with.
SqlParams = Sequence[str | int | float | bytes | None]

BATCH = 500

#: joins a chunk ``c`` to its document ``d``, through its representation ``r``
TO_DOCUMENT = (
    "JOIN representations r ON r.rep_id = c.representation_id JOIN documents d ON d.doc_id = r.document_id"
)
#: neither the chunk ``c`` nor its document ``d`` is a tombstone
LIVE = "c.deleted = FALSE AND d.deleted = FALSE"


def one_of(column: str, values: Iterable[str] | Iterable[int], *, text: bool = False) -> tuple[str, str]:
    """``column IN`` the ``values``, and its one parameter (a JSON array),
    whatever their number: one mark per value let a query's variables grow
    with ``search.candidates``, past the 32,766 a default SQLite build allows
    (session 30; ``idlists.select_each``)."""
    select, listed = select_each(values, text=text)
    return f"{column} IN ({select})", listed


def marks(ids: Sized) -> str:
    """One ``%s`` per id, for an ``IN (...)`` list."""
    return ", ".join(["%s"] * len(ids))


def scored(sql: str, params: SqlParams, *, sign: float = 1.0) -> list[tuple[int, float]]:
    """(chunk id, score times ``sign``) of each row of a ranked query: both
    backends' scores are best highest once bm25's (best lowest) is negated."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [(chunk_id, sign * float(score)) for chunk_id, score in cursor.fetchall()]


def refill(backend: Inserts, recreate: Callable[[CursorWrapper], None]) -> int:
    """Empty the index (``recreate(cursor)``) and write every live chunk into
    it, in one transaction; returns the row count. Shared by the backends."""
    live = Chunk.objects.filter(deleted=False).values_list(
        "chunk_id", "context", *slices.FIELDS, "index_kind"
    )
    count = 0
    with transaction.atomic():
        with connection.cursor() as cursor:
            recreate(cursor)
        for batch in batches(live.iterator(chunk_size=BATCH)):
            backend.insert(
                [(cid, context, text, kind) for cid, context, text, kind in slices.texts(batch, 2)]
            )
            count += len(batch)
    return count


def batches(items: Iterable[_T]) -> Iterator[list[_T]]:
    iterator = iter(items)
    while batch := list(islice(iterator, BATCH)):
        yield batch


#: A chunk as the lexical index reads it: (chunk_id, context, text, index_kind).
Row = tuple[int, str, str, str]


class Inserts(Protocol):
    def insert(self, rows: list[Row]) -> None: ...


class Backend(Protocol):
    def replace(self, rows: list[Row]) -> None: ...
    def insert(self, rows: list[Row]) -> None: ...
    def delete(self, chunk_ids: list[int]) -> None: ...
    def query(
        self, terms: list[str], *, require_all: bool, limit: int, filter_sql: str, params: SqlParams
    ) -> list[tuple[int, float]]: ...
    def rebuild(self) -> int: ...
    def clear(self) -> None: ...
    def count(self) -> int: ...
    def answers(self) -> None: ...
    def ids(self) -> set[int]: ...


class TableBackend:
    """What both backends do alike, each over its own table: ``TABLE``, keyed
    by ``ID_COLUMN`` (the chunk id), made by ``create(cursor)``."""

    TABLE: str
    ID_COLUMN: str

    def create(self, cursor: CursorWrapper) -> None:
        raise NotImplementedError

    def insert(self, rows: list[Row]) -> None:
        raise NotImplementedError

    def empty(self, cursor: CursorWrapper) -> None:
        """Remove every row of the table."""
        cursor.execute(f"DELETE FROM {self.TABLE}")

    def rebuild(self) -> int:
        def recreate(cursor: CursorWrapper) -> None:
            self.create(cursor)
            self.empty(cursor)

        return refill(self, recreate)

    def clear(self) -> None:
        with connection.cursor() as cursor:
            self.empty(cursor)

    def count(self) -> int:
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT count(*) FROM {self.TABLE}")
            count: int = cursor.fetchone()[0]
            return count

    def answers(self) -> None:
        """Read one row (DatabaseError when the table cannot be queried):
        the same work however many rows it holds, unlike :meth:`count`."""
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT {self.ID_COLUMN} FROM {self.TABLE} LIMIT 1")
            cursor.fetchone()

    def ids(self) -> set[int]:
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT {self.ID_COLUMN} FROM {self.TABLE}")
            return {row[0] for row in cursor.fetchall()}
