"""A list of ids (or paths) a query compares with, bound as one parameter.

One bound variable a value let a query's variables grow with the candidate
pool (``search.candidates`` times ``CROWDED_DEPTH``: up to 80,000), past the
32,766 a default SQLite build allows (sessions 30 and 31). The list is one
JSON array instead, read back as rows by ``json_each`` on SQLite and
``jsonb_array_elements_text`` on PostgreSQL. It sits below every module
that reads by id (``corpus.slices`` too), importing none of them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from django.db import connection
from django.db.models.expressions import RawSQL


def select_each(values: Iterable[str] | Iterable[int], *, text: bool = False) -> tuple[str, str]:
    """A query selecting each of ``values``, and its one parameter (a JSON
    array). On PostgreSQL the values are integers (``bigint``) unless
    ``text``: the type is the caller's to say, since an empty list has none
    to tell it by and PostgreSQL refuses ``bigint = text`` even over no rows."""
    listed = list(values)
    if connection.vendor == "sqlite":
        return "SELECT value FROM json_each(%s)", json.dumps(listed)
    cast = "" if text else "::bigint"
    return f"SELECT value{cast} FROM jsonb_array_elements_text(%s::jsonb)", json.dumps(listed)


def each_of(values: Iterable[str] | Iterable[int], *, text: bool = False) -> RawSQL:
    """The ``values`` as a subquery for an ORM ``__in`` lookup
    (``chunk_id__in=each_of(ids)``): a list given to ``__in`` binds a
    variable a value."""
    select, listed = select_each(values, text=text)
    return RawSQL(select, [listed])
