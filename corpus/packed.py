"""Texts stored compressed on SQLite (issue #37: storage proportional to the text).

A chunk's and a representation's text are stored zlib-compressed behind
:data:`MAGIC` when that is smaller, as a BLOB in the same column; a row
written before (a plain TEXT value) still reads as it is. Measured on a
kernel subset (docs/benchmarks.md), this took ``meta.sqlite`` further
toward the text's own size than chunks holding offsets into their
representation would, and touches no reader that goes through the ORM.

PostgreSQL stores these columns as they were: TOAST already compresses a
long text there (lz4 where the server has it, migration 0009), and its
``text`` column could not hold bytes.

A compressed column cannot be searched by SQL: ``text__contains`` and the
other pattern look-ups raise on SQLite instead of matching nothing, so a
check that a secret is not stored cannot pass vacuously; decode the rows
(:func:`unpack`) and look in the text.
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING, Any, overload

from django.db import NotSupportedError, models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models.expressions import Combinable
from django.db.models.lookups import Lookup

if TYPE_CHECKING:  # the compiler's module is only needed for an annotation
    from django.db.models.sql.compiler import SQLCompiler

    # Django's field classes take type arguments in the stubs only, not at run time.
    _TextField = models.TextField[str | Combinable, str]
else:
    _TextField = models.TextField

#: the first bytes of a compressed value; no UTF-8 text starts with 0xff
MAGIC = b"\xffz1"
#: shorter texts are stored as they are: zlib's header outweighs its gain
MIN_CHARS = 96
_PATTERN_LOOKUPS = frozenset(
    {"contains", "icontains", "startswith", "istartswith", "endswith", "iendswith", "regex", "iregex"}
)


def pack(text: str) -> str | bytes:
    """What a text is stored as on SQLite: compressed when that is smaller."""
    if len(text) < MIN_CHARS:
        return text
    data = MAGIC + zlib.compress(text.encode("utf-8"), 6)
    return data if len(data) < len(text) else text


def stored_form(text: str, connection: BaseDatabaseWrapper) -> str | bytes | None:
    """What ``connection`` stores of ``text`` in a packed column (:func:`pack`
    on SQLite), worked out where the text is made (a preparing worker) so the
    writing process need not compress it (:class:`Packed`); None on the others."""
    return pack(text) if connection.vendor == "sqlite" else None


def column_value(text: str, connection: BaseDatabaseWrapper) -> str | bytes:
    """What a packed column of ``connection`` holds for ``text``, for SQL
    that writes the column itself (an UPDATE of many rows at once)."""
    stored = stored_form(text, connection)
    return text if stored is None else stored


class Packed(str):
    """A text with its stored form worked out already (:func:`stored_form`):
    a packed column stores that instead of compressing the text again."""

    stored: str | bytes

    def __new__(cls, text: str, stored: str | bytes) -> Packed:
        made = super().__new__(cls, text)
        made.stored = stored
        return made

    def __reduce__(self) -> tuple[type[Packed], tuple[str, str | bytes]]:
        return Packed, (str(self), self.stored)


@overload
def unpack(value: str | bytes | memoryview) -> str: ...
@overload
def unpack(value: None) -> None: ...
def unpack(value: str | bytes | memoryview | None) -> str | None:
    """A stored value as its text (a plain text, a row from before, reads as it is)."""
    if isinstance(value, memoryview):
        value = bytes(value)
    if isinstance(value, bytes):
        if not value.startswith(MAGIC):
            return value.decode("utf-8")
        return zlib.decompress(value[len(MAGIC) :]).decode("utf-8")
    return value


class PackedTextField(_TextField):
    """A ``TextField`` stored with :func:`pack` on SQLite (the module's docstring)."""

    # Any: Field.get_db_prep_value's signature (a value of any field type)
    def get_db_prep_value(self, value: Any, connection: BaseDatabaseWrapper, prepared: bool = False) -> Any:
        value = super().get_db_prep_value(value, connection, prepared)
        if connection.vendor == "sqlite" and isinstance(value, str):
            return value.stored if isinstance(value, Packed) else pack(value)
        return value

    def from_db_value(
        self, value: str | bytes | memoryview | None, expression: object, connection: BaseDatabaseWrapper
    ) -> str | None:
        return unpack(value)

    # Any: RegisterLookupMixin.get_lookup's signature (a lookup of any value type)
    def get_lookup(self, lookup_name: str) -> type[Lookup[Any]] | None:
        lookup = super().get_lookup(lookup_name)
        if lookup_name in _PATTERN_LOOKUPS and lookup is not None:
            return _refused_on_sqlite(lookup)
        return lookup


_SqlParams = tuple[str | int, ...]  # django-stubs' _ParamsT, what a compiler's as_sql gives


def _refused_on_sqlite(lookup: type[Lookup[Any]]) -> type[Lookup[Any]]:  # Any: as get_lookup's
    # A subclass of a class known only at run time: mypy takes no variable as a base.
    class Refused(lookup):  # type: ignore[valid-type,misc]
        def as_sql(self, compiler: SQLCompiler, connection: BaseDatabaseWrapper) -> tuple[str, _SqlParams]:
            if connection.vendor == "sqlite":
                raise NotSupportedError(
                    f"{self.lhs.target.name}__{self.lookup_name}: the text is stored compressed "
                    "(corpus/packed.py); read the rows and search the decoded text"
                )
            sql: tuple[str, _SqlParams] = super().as_sql(compiler, connection)
            return sql

    return Refused
