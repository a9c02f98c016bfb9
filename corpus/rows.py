"""Reading a query's rows as a stream that is closed when the reader is done."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, TypeVar

from django.db.models import QuerySet

Row = TypeVar("Row")


@contextlib.contextmanager
# Any: the model the rows come from does not matter here, only what a row is
def streamed(rows: QuerySet[Any, Row], chunk_size: int) -> Iterator[Iterator[Row]]:
    """``rows.iterator(chunk_size=...)``, closed when the block ends. On
    PostgreSQL the rows come from a server-side cursor: a reader that stopped
    early left it to be closed when its generator went, and an error's
    traceback kept that past the transaction (the next statement then failed:
    "current transaction is aborted")."""
    found = rows.iterator(chunk_size=chunk_size)
    try:
        yield found
    finally:
        close = getattr(found, "close", None)  # a generator: Django's iterator()
        if close is not None:
            close()
