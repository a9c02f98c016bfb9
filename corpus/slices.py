"""Chunk texts stored as slices of their representation's text (issue #37:
storage proportional to the text).

A chunk is almost always a run of its representation's text (a code unit's
lines, a window, a section). Such a chunk stores no text of its own: its
``text`` is "" and ``text_start``/``text_end`` give where it sits in the
representation's text (character offsets). A chunk that is not a slice (a
transcript window joined from segments, a page piece reflowed) keeps its
text in ``text`` with no offsets. Measured on a kernel subset
(docs/benchmarks.md), this took ``meta.sqlite`` from 2.52× the text it
indexes toward 2×, since a unit's text alone compressed poorly.

Offsets hold only while the representation keeps the text they were cut
from: the writer (corpus/ingest/writer.py) moves the units that survive a
new text to their new place, and writes out the text of every other chunk
of that representation before the text changes (:func:`materialize`), so
a tombstoned chunk still reads its own text.

Readers get a chunk's text with :func:`texts` (rows of any query that
selected :data:`FIELDS`) or a chunk's :attr:`corpus.models.Chunk.text`.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from itertools import accumulate
from typing import Any

from django.db import connection

from corpus.index.idlists import each_of
from corpus.models import Chunk, Representation
from corpus.packed import column_value, unpack

#: what a query selects of a chunk for :func:`texts`, in this order
FIELDS = ("representation_id", "stored_text", "text_start", "text_end")
#: the same columns in raw SQL over ``chunks c``
SQL_FIELDS = "c.representation_id, c.text, c.text_start, c.text_end"


class Locator:
    """Finds chunk texts in one representation's text."""

    def __init__(self, text: str):
        self.text = text
        self._line_starts: list[int] | None = None
        self._last = 0

    def find(self, piece: str, line: int | None = None) -> tuple[int, int] | None:
        """(start, end) of ``piece`` in the text, looked for first at the
        start of 1-based ``line`` when given (else where the last piece
        found starts: chunks come in order); None when it is not there."""
        if not piece:
            return None
        hint = self._line_offset(line) if line else self._last
        if self.text.startswith(piece, hint):
            found = hint
        else:
            found = self.text.find(piece, hint)
            if found < 0 and hint:
                found = self.text.find(piece, 0, hint + len(piece))
        if found < 0:
            return None
        self._last = found
        return found, found + len(piece)

    def _line_offset(self, line: int) -> int:
        if self._line_starts is None:
            # each line's length and its newline, added up in C (no call back per line)
            steps = map((1).__add__, map(len, self.text.split("\n")))
            self._line_starts = list(accumulate(steps, initial=0))[:-1]
        return self._line_starts[min(line, len(self._line_starts)) - 1]


# Any: the rows are values_list tuples of any query (django-stubs types them
# tuple[Any, ...]), whose other columns are the caller's.
def texts(rows: Iterable[tuple[Any, ...]], at: int) -> list[tuple[Any, ...]]:
    """``rows`` with the four :data:`FIELDS` starting at index ``at`` replaced
    by the chunk's text (one query reads the representations sliced)."""
    rows = list(rows)
    wanted = {row[at] for row in rows if row[at + 2] is not None}
    reps = representation_texts(wanted)
    out = []
    for row in rows:
        rep_id, stored, start, end = row[at : at + 4]
        text = unpack(stored) if start is None else reps.get(rep_id, "")[start:end]
        out.append((*row[:at], text, *row[at + 4 :]))
    return out


class _Texts:
    """Representation texts read lately, decoded, by (id, hash): a search
    slices its hits from a few files again and again, and reading and
    decompressing a whole file's text for each cost about a quarter of a
    search's time on the kernel subset. A text rewritten in place has a new
    hash (``rep_hash`` covers the text), so it is never served stale."""

    def __init__(self, max_chars: int):
        self.max_chars = max_chars
        self._texts: OrderedDict[tuple[int, str], str] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    def get(self, rep_ids: list[int]) -> dict[int, str]:
        hashes = dict(
            Representation.objects.filter(rep_id__in=each_of(rep_ids)).values_list("rep_id", "rep_hash")
        )
        found: dict[int, str] = {}
        with self._lock:
            for rep_id, rep_hash in hashes.items():
                text = self._texts.get((rep_id, rep_hash))
                if text is not None:
                    self._texts.move_to_end((rep_id, rep_hash))
                    found[rep_id] = text
        missing = [rep_id for rep_id in hashes if rep_id not in found]
        if missing:
            rows = Representation.objects.filter(rep_id__in=each_of(missing)).values_list(
                "rep_id", "rep_hash", "text"
            )
            with self._lock:
                for rep_id, rep_hash, text in rows:
                    found[rep_id] = text
                    self._keep((rep_id, rep_hash), text)
        return found

    def _keep(self, key: tuple[int, str], text: str) -> None:
        if len(text) > self.max_chars // 4 or key in self._texts:
            return
        self._texts[key] = text
        self._chars += len(text)
        while self._chars > self.max_chars:
            _, dropped = self._texts.popitem(last=False)
            self._chars -= len(dropped)


#: at most this many characters of decoded texts kept per process
CACHE_CHARS = 16_000_000
_recent = _Texts(CACHE_CHARS)


def representation_texts(rep_ids: Iterable[int]) -> dict[int, str]:
    ids = list(rep_ids)
    return _recent.get(ids) if ids else {}


def materialize(rep_id: int, old_text: str, *, keep: Iterable[int] = ()) -> None:
    """Before representation ``rep_id`` takes a new text: its chunks that
    hold offsets into ``old_text``, except ``keep`` (units the writer moves
    into the new text), get their text written out and lose the offsets.
    One UPDATE statement for them all (Django's ``bulk_update`` built a
    CASE expression per row: 30% of the writer's time switching the
    kernel's ``kernel/``, docs/benchmarks.md session 26)."""
    kept = set(keep)
    rows = Chunk.objects.filter(representation_id=rep_id, text_start__isnull=False).values_list(
        "chunk_id", "text_start", "text_end"
    )
    written = [
        (column_value(old_text[start:end], connection), chunk_id)
        for chunk_id, start, end in rows
        if chunk_id not in kept
    ]
    if written:
        with connection.cursor() as cursor:
            cursor.executemany(
                "UPDATE chunks SET text = %s, text_start = NULL, text_end = NULL WHERE chunk_id = %s", written
            )
