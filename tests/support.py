"""Helpers for tests: waiting on a condition, reading a state's database, and real OS behaviour."""

from __future__ import annotations

import contextlib
import ctypes
import io
import math
import sqlite3
import time
import zipfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import anyio
import httpx
from django.db import models

from corpus.models import Chunk
from corpus.packed import unpack

T = TypeVar("T")

#: One TLS context for every request the tests send (``verify=TLS``). httpx
#: builds a context for each ``httpx.get``/``post`` and each ``Client``, and
#: loading certifi's bundle into it costs 15-50 ms of CPU, though nearly
#: every server under test speaks plain HTTP: the suite sends thousands.
#: It is the context httpx would build (``verify=True``), made once.
TLS = httpx.create_ssl_context()

Message = str | Callable[[], str]


def read_only(db: Path | str, *, timeout: float = 30) -> contextlib.closing[sqlite3.Connection]:
    """A read-only connection to a state's SQLite database, closed on exit.
    It never writes, so its close never checkpoints another process's
    write-ahead log."""
    return contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=timeout))


#: a chunk's stored text, offsets and its representation's text, over chunks
#: ``c`` joined to representations ``r``: :func:`chunk_text` reads them as
#: the chunk's text (a slice of its representation's: corpus/slices.py)
CHUNK_TEXT = "c.text, c.text_start, c.text_end, r.text"


def chunk_text(stored, start: int | None, end: int | None, rep_text) -> str:
    """The text of a chunk read with :data:`CHUNK_TEXT` by plain SQL."""
    return unpack(stored) if start is None else unpack(rep_text)[start:end]


def packed_texts(db: Path) -> list[str]:
    """The chunk and representation texts a state's database stores
    compressed (corpus/packed.py), decoded: what a scan of its raw bytes
    cannot see."""
    with read_only(db) as conn:
        return [
            unpack(value)
            for table in ("chunks", "representations")
            for (value,) in conn.execute(f"SELECT text FROM {table} WHERE typeof(text) = 'blob'")
        ]


def stored_text(path: Path) -> str:
    """A state file as text to scan for a secret: its bytes, and for the
    database every text it stores compressed, decoded, so the scan cannot
    pass because a secret was stored compressed."""
    text = path.read_bytes().decode("latin-1")
    if path.name == "meta.sqlite":
        text += "\n".join(packed_texts(path))
    return text


def holds(path: Path, needle: str) -> bool:
    """Whether a state file holds ``needle`` (see :func:`stored_text`)."""
    return needle in stored_text(path)


def texts_hold(model: type[models.Model], needle: str) -> bool:
    """Whether any stored text of ``model`` (Chunk, Representation) holds
    ``needle``, decoded: on SQLite ``text__contains`` cannot look into a
    compressed text and refuses to (corpus/packed.py)."""
    rows = model.objects.all()
    if model is Chunk:  # a chunk may read its text from its representation's
        rows = rows.select_related("representation")
    return any(needle in row.text for row in rows.iterator())


def wait_until(
    predicate: Callable[[], T],
    *,
    timeout: float = 30.0,
    interval: float = 0.1,
    message: Message = "the condition",
    ignoring: tuple[type[BaseException], ...] = (),
) -> T:
    """Poll ``predicate()`` until it returns something truthy, and return that.

    An exception listed in ``ignoring`` counts as "not yet". After ``timeout``
    seconds fail with an AssertionError naming ``message`` (a string, or a
    callable evaluated then, to show the state the wait gave up on).
    """
    end = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
        except ignoring:
            value = None
        if value:
            return value
        if time.monotonic() >= end:
            shown = message() if callable(message) else message
            raise AssertionError(f"timed out after {timeout:g} s waiting for {shown}")
        time.sleep(interval)


async def wait_until_async(predicate: Callable[[], Awaitable[T]], **options) -> T:
    """``wait_until`` for an async predicate: the same loop in a worker thread,
    each ``predicate()`` run on the event loop, which stays free meanwhile."""
    return await anyio.to_thread.run_sync(
        lambda: wait_until(lambda: anyio.from_thread.run(predicate), **options)
    )


def cpu_seconds(work: Callable[[], object]) -> float:
    """The CPU time this process spent in ``work()`` (other processes' load does not count)."""
    began = time.process_time()
    work()
    return time.process_time() - began


def assert_linear(small: Callable[[], object], large: Callable[[], object], *, most: float = 10.0) -> None:
    """``large()``, four times ``small()``'s input, costs less than ``most``
    times its CPU time: about 4x when the work is linear, 16x when it is
    quadratic. A ratio in one process, never a duration, so no machine is
    too slow for it. Each side is the least of up to five rounds, taken in
    turn and only until the ratio holds: on a busy machine another process
    can slow either side (a shared cache, a busy hyperthread), never speed
    it up, so the least is the work's own cost, and a quadratic cost stays
    above the line however often it is measured."""
    least_small = least_large = math.inf
    for _ in range(5):
        least_small = min(least_small, cpu_seconds(small))
        least_large = min(least_large, cpu_seconds(large))
        if least_large < most * max(least_small, 0.01):
            return
    raise AssertionError(f"not linear: {least_small:.3f} CPU s, then {least_large:.3f} for 4x the input")


def drop_file_permission_override() -> None:
    # Root bypasses permission bits through CAP_DAC_OVERRIDE and
    # CAP_DAC_READ_SEARCH. Dropping them from the bounding set before exec
    # leaves the child a root that chmod 000 really stops.
    libc = ctypes.CDLL(None, use_errno=True)
    pr_capbset_drop, cap_dac_override, cap_dac_read_search = 24, 1, 2
    for cap in (cap_dac_override, cap_dac_read_search):
        if libc.prctl(pr_capbset_drop, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


def zip_bytes(members: dict[str, bytes | str], compression: int = zipfile.ZIP_STORED) -> bytes:
    """A zip archive holding ``members`` (name to content), in memory."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()
