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
from typing import overload

from django.db import NotSupportedError, models

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


class PackedTextField(models.TextField):
    """A ``TextField`` stored with :func:`pack` on SQLite (the module's docstring)."""

    def get_db_prep_value(self, value, connection, prepared=False):
        value = super().get_db_prep_value(value, connection, prepared)
        if connection.vendor == "sqlite" and isinstance(value, str):
            return pack(value)
        return value

    def from_db_value(self, value, expression, connection):
        return unpack(value)

    def get_lookup(self, lookup_name):
        lookup = super().get_lookup(lookup_name)
        if lookup_name in _PATTERN_LOOKUPS and lookup is not None:
            return _refused_on_sqlite(lookup)
        return lookup


def _refused_on_sqlite(lookup: type) -> type:
    class Refused(lookup):
        def as_sql(self, compiler, connection):
            if connection.vendor == "sqlite":
                raise NotSupportedError(
                    f"{self.lhs.target.name}__{self.lookup_name}: the text is stored compressed "
                    "(corpus/packed.py); read the rows and search the decoded text"
                )
            return super().as_sql(compiler, connection)

    return Refused
