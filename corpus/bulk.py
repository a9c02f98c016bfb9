"""Inserting many new rows at once: on SQLite one prepared INSERT run over
every row, on PostgreSQL a binary COPY, elsewhere ``bulk_create``.

Django's ``bulk_create`` on PostgreSQL sends each column as an array
(``INSERT ... SELECT * FROM UNNEST(...)``). psycopg builds those arrays in
Python, escaping every quote and backslash of every text with a regular
expression, and Django compiles a placeholder per value: for chunk and span
rows that was most of a worker's cost of writing them. A binary COPY
escapes nothing, and psycopg formats its rows in C. The ids come first, in
one round trip, from the table's own sequence, so the objects come back
with their primary keys set, as ``bulk_create`` leaves them
(docs/benchmarks.md, "Scale-out").

On SQLite, ``bulk_create`` compiles a placeholder and a converted value
per field of every row in Python (``INSERT ... VALUES (...), (...)
RETURNING``): indexing the Linux kernel spent about 40% of its CPU there
(docs/benchmarks.md, "A big tree"). Here each row is a tuple of values
handed to ``executemany``, which binds them in C; a field whose class
stores its Python value as it is (integers, text, booleans, a foreign
key's id) is not converted. The ids are the table's next ones, read under
the write lock this transaction holds (``AUTOINCREMENT``: past every id
the table ever gave, so a deleted chunk's id, an ANN label, never comes
back).

What is not done here, as with ``bulk_create``: ``save()`` and signals.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from django.db import DEFAULT_DB_ALIAS, connection, connections, models, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper

if TYPE_CHECKING:  # the driver's types, for annotations only (SQLite needs no psycopg)
    from psycopg import Cursor
    from psycopg.rows import TupleRow

    #: a field of any model
    # Any: its value's type differs by field (Django's field classes take
    # type arguments in the stubs only, not at run time)
    _AnyField = models.Field[Any, Any]

M = TypeVar("M", bound=models.Model)
#: a row's column values
# Any: values of every type the driver binds, as get_db_prep_save returns them
# (Any in django-stubs) and CursorWrapper.executemany takes them (a union of its own)
_Row = Sequence[Any]
#: how a field's value is stored: (object, attribute, database) -> the stored value
# Any: get_db_prep_save's return type, as in _Row
_Converter = Callable[[models.Model, str, BaseDatabaseWrapper], Any]

BATCH = 500
_PARAMETERS = re.compile(r"\(.*\)")
_sequences: dict[tuple[str, str], str] = {}


def create(model: type[M], objs: Sequence[M]) -> list[M]:
    """Insert these new objects (their primary keys unset) and set their
    primary keys; on other databases this is ``bulk_create``."""
    objs = list(objs)
    if not objs:
        return objs
    if connection.vendor == "sqlite":
        return _sqlite_create(model, objs)
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
    return _inserted(objs, ids)


def insert(model: type[models.Model], attnames: Sequence[str], rows: Sequence[_Row]) -> None:
    """Insert rows given as tuples of these attributes' values, in that order,
    whose ids nobody needs (a file's symbols and references: tens of
    thousands a batch on a large tree, where building a model object for
    each cost as much as writing it). Values are stored as ``create`` would
    store them; the ids are the table's own."""
    if not rows:
        return
    if connection.vendor != "sqlite":
        objs = [model(**dict(zip(attnames, row, strict=True))) for row in rows]
        if isinstance(model._meta.pk, models.CompositePrimaryKey):  # keyed by its columns: no id to give
            model._default_manager.bulk_create(objs, batch_size=BATCH)
        else:
            create(model, objs)
        return
    quote = connection.ops.quote_name
    columns = ", ".join(quote(_column(_concrete(model, name))) for name in attnames)
    sql = (
        f"INSERT INTO {quote(model._meta.db_table)} ({columns}) VALUES ({', '.join(['%s'] * len(attnames))})"
    )
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.executemany(sql, _stored(model, attnames, rows))


def insert_returning_ids(
    model: type[models.Model], attnames: Sequence[str], rows: Sequence[_Row]
) -> Sequence[int]:
    """:func:`insert` of new rows whose ids the caller needs (new chunks,
    for their lexical rows and spans), without a model object for each:
    every column but the primary key is given. Returns the ids, in order."""
    if not rows:
        return range(0)
    if connection.vendor != "sqlite":
        objs = create(model, [model(**dict(zip(attnames, row, strict=True))) for row in rows])
        return [obj.pk for obj in objs]
    table, pk_column, _, _ = _sqlite_shape(model)
    quote = connection.ops.quote_name
    columns = ", ".join([pk_column, *(quote(_column(_concrete(model, name))) for name in attnames)])
    sql = f"INSERT INTO {table} ({columns}) VALUES ({', '.join(['%s'] * (len(attnames) + 1))})"
    stored = _stored(model, attnames, rows)
    with transaction.atomic(), connection.cursor() as cursor:
        ids = _next_ids(cursor, model, table, pk_column, len(rows))
        cursor.executemany(sql, [(pk, *row) for pk, row in zip(ids, stored, strict=True)])
    return ids


def _stored(model: type[models.Model], attnames: Sequence[str], rows: Sequence[_Row]) -> Sequence[_Row]:
    """``rows`` of these attributes' values as SQLite stores them: each
    value through its field's conversion where it has one (a compressed
    text, JSON), with no model object built; a foreign key is given by its
    id, and None is stored as NULL (as every such field stores it)."""
    converted = [
        (at, field)
        for at, field in enumerate(_concrete(model, name) for name in attnames)
        if type(field) not in _AS_IS and not isinstance(field, models.ForeignKey)
    ]
    if not converted:
        return rows
    db = connections[DEFAULT_DB_ALIAS]
    stored = []
    for row in rows:
        values = list(row)
        for at, field in converted:
            if values[at] is not None:
                values[at] = field.get_db_prep_save(values[at], db)
        stored.append(values)
    return stored


def _next_ids(
    cursor: CursorWrapper, model: type[models.Model], table: str, pk_column: str, count: int
) -> range:
    """The next ``count`` ids of ``model``'s table (read under the write lock
    the caller's transaction holds)."""
    cursor.execute(
        f"SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = %s), 0), "
        f"coalesce((SELECT max({pk_column}) FROM {table}), 0))",
        [model._meta.db_table],
    )
    first: int = cursor.fetchone()[0] + 1
    return range(first, first + count)


def _inserted(objs: list[M], ids: Sequence[int]) -> list[M]:
    """Only once the rows are in, the objects as bulk_create leaves them."""
    for obj, pk in zip(objs, ids, strict=True):
        obj.pk = pk
        obj._state.adding = False
        obj._state.db = connection.alias
    return objs


#: Field classes whose Python value SQLite stores as it is (subclasses, such
#: as a compressed text field, convert theirs; bytes are a BLOB as the
#: memoryview BinaryField makes of them is).
_AS_IS = frozenset(
    {
        models.BinaryField,
        models.BigIntegerField,
        models.IntegerField,
        models.SmallIntegerField,
        models.PositiveIntegerField,
        models.CharField,
        models.TextField,
        models.BooleanField,
        models.FloatField,
    }
)


def _sqlite_create(model: type[M], objs: list[M]) -> list[M]:
    table, pk_column, insert_sql, named = _sqlite_shape(model)
    db = connections[DEFAULT_DB_ALIAS]
    rows = [
        tuple(getattr(obj, name) if prep is None else prep(obj, name, db) for name, prep in named)
        for obj in objs
    ]
    # A savepoint (or the transaction, IMMEDIATE: the write lock) around the
    # id read and the insert: no other writer takes these ids meanwhile, and
    # a refused row leaves none of the others written.
    with transaction.atomic(), connection.cursor() as cursor:
        ids = _next_ids(cursor, model, table, pk_column, len(objs))
        cursor.executemany(insert_sql, [(pk, *row) for pk, row in zip(ids, rows, strict=True)])
    return _inserted(objs, ids)


@functools.cache
def _sqlite_shape(model: type[models.Model]) -> tuple[str, str, str, list[tuple[str, _Converter | None]]]:
    """A model's quoted table and primary key column, its INSERT (the id
    first) and each other field's attribute with its converter (None: as it is)."""
    meta = model._meta
    quote = connection.ops.quote_name
    fields = [field for field in meta.concrete_fields if field is not meta.pk]
    columns = ", ".join(quote(_column(field)) for field in [meta.pk, *fields])
    marks = ", ".join(["%s"] * (len(fields) + 1))
    insert_sql = f"INSERT INTO {quote(meta.db_table)} ({columns}) VALUES ({marks})"
    return quote(meta.db_table), quote(_column(meta.pk)), insert_sql, [_converter(field) for field in fields]


def _concrete(model: type[models.Model], attname: str) -> _AnyField:
    """The field of a column attribute (``document_id`` names the foreign key)."""
    field = model._meta.get_field(attname)
    assert isinstance(field, models.Field)  # a column's attribute, never a reverse relation
    return field


def _column(field: _AnyField) -> str:
    assert field.column is not None  # a concrete field, which has a column
    return field.column


def _converter(field: _AnyField) -> tuple[str, _Converter | None]:
    """(attribute, how its value is stored: None when as it is)."""
    if type(field) in _AS_IS:
        return field.attname, None
    if isinstance(field, models.ForeignKey):
        return field.attname, functools.partial(_related_id, field)
    return field.attname, lambda obj, name, db: field.get_db_prep_save(getattr(obj, name), db)


def _related_id(
    field: models.ForeignKey[Any, Any],  # Any: a foreign key to any model
    obj: models.Model,
    name: str,
    db: BaseDatabaseWrapper,
) -> object:
    """A foreign key's id, or that of the object it was given before that
    object had one (as ``save()`` reads it)."""
    value = getattr(obj, name)
    if value is None and field.is_cached(obj):
        related = field.get_cached_value(obj)
        value = related.pk if related is not None else None
    return value


@functools.cache
def _shape(
    model: type[models.Model],
) -> tuple[str, str, int, str, list[tuple[_AnyField, str]], list[str]]:
    """A model's table, primary key column and its place in a row, COPY
    statement, (field, attribute) pairs and PostgreSQL type names, worked
    out once: deriving a foreign key's type builds a field each time."""
    meta = model._meta
    fields = list(meta.concrete_fields)
    quote = connection.ops.quote_name
    columns = ", ".join(quote(_column(field)) for field in fields)
    copy_sql = f"COPY {quote(meta.db_table)} ({columns}) FROM STDIN (FORMAT BINARY)"
    types = [_PARAMETERS.sub("", _db_type(field)).strip() for field in fields]
    named = [(field, field.attname) for field in fields]
    return meta.db_table, _column(meta.pk), fields.index(meta.pk), copy_sql, named, types


def _db_type(field: _AnyField) -> str:
    db_type = field.db_type(connection)
    assert db_type is not None  # a concrete field has a column type
    return db_type


def _sequence(cursor: Cursor[TupleRow], table: str, column: str) -> str:
    key = (table, column)
    if key not in _sequences:
        cursor.execute("SELECT pg_get_serial_sequence(%s, %s)", [table, column])
        row = cursor.fetchone()
        assert row is not None  # the query returns one row
        _sequences[key] = row[0]
    return _sequences[key]
