"""Inserting many new rows at once: ``bulk_create``, or on PostgreSQL a
binary COPY.

Django's ``bulk_create`` on PostgreSQL sends each column as an array
(``INSERT ... SELECT * FROM UNNEST(...)``). psycopg builds those arrays in
Python, escaping every quote and backslash of every text with a regular
expression, and Django compiles a placeholder per value: for chunk and span
rows that was most of a worker's cost of writing them. A binary COPY
escapes nothing, and psycopg formats its rows in C. The ids come first, in
one round trip, from the table's own sequence, so the objects come back
with their primary keys set, as ``bulk_create`` leaves them
(docs/benchmarks.md, "Scale-out").

What is not done here, as with ``bulk_create``: ``save()`` and signals.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import TypeVar

from django.db import DEFAULT_DB_ALIAS, connection, connections, models

M = TypeVar("M", bound=models.Model)

BATCH = 500
_PARAMETERS = re.compile(r"\(.*\)")
_sequences: dict[tuple[str, str], str] = {}


def create(model: type[M], objs: Sequence[M]) -> list[M]:
    """Insert these new objects (their primary keys unset) and set their
    primary keys; on other databases this is ``bulk_create``."""
    objs = list(objs)
    if not objs:
        return objs
    if connection.vendor != "postgresql":
        return model._default_manager.bulk_create(objs, batch_size=BATCH)
    table, pk_column, pk_at, copy_sql, named, types = _shape(model)
    db = connections[DEFAULT_DB_ALIAS]  # the wrapper itself, not the proxy: read per value
    # Errors reach the caller as Django's (IntegrityError, OperationalError),
    # as they would from bulk_create: COPY bypasses Django's cursor wrapper.
    with connection.wrap_database_errors, connection.cursor() as wrapper:
        cursor = wrapper.cursor
        cursor.execute(
            "SELECT nextval(%s) FROM generate_series(1, %s)",
            [_sequence(cursor, table, pk_column), len(objs)],
        )
        ids = sorted(row[0] for row in cursor.fetchall())
        with cursor.copy(copy_sql) as copy:
            copy.set_types(types)
            for obj, pk in zip(objs, ids, strict=True):
                row = [field.get_db_prep_save(getattr(obj, name), db) for field, name in named]
                row[pk_at] = pk
                copy.write_row(row)
    # Only once the rows are in, as bulk_create leaves them.
    for obj, pk in zip(objs, ids, strict=True):
        obj.pk = pk
        obj._state.adding = False
        obj._state.db = connection.alias
    return objs


@functools.cache
def _shape(model: type[models.Model]) -> tuple[str, str, int, str, list, list[str]]:
    """A model's table, primary key column and its place in a row, COPY
    statement, (field, attribute) pairs and PostgreSQL type names, worked
    out once: deriving a foreign key's type builds a field each time."""
    meta = model._meta
    fields = list(meta.concrete_fields)
    quote = connection.ops.quote_name
    columns = ", ".join(quote(field.column) for field in fields)
    copy_sql = f"COPY {quote(meta.db_table)} ({columns}) FROM STDIN (FORMAT BINARY)"
    types = [_PARAMETERS.sub("", field.db_type(connection)).strip() for field in fields]
    named = [(field, field.attname) for field in fields]
    return meta.db_table, meta.pk.column, fields.index(meta.pk), copy_sql, named, types


def _sequence(cursor, table: str, column: str) -> str:
    key = (table, column)
    if key not in _sequences:
        cursor.execute("SELECT pg_get_serial_sequence(%s, %s)", [table, column])
        _sequences[key] = cursor.fetchone()[0]
    return _sequences[key]
