"""The standalone SSE stream (``GET /mcp``): what the server tells a session unasked.

One stream per session: a second GET while one is open, on this process or
another (the holder is recorded on the session row), is refused with 409,
unless it resumes this very stream with ``Last-Event-ID``: a client resumes
only a stream it has given up on, so the resuming request takes over.

Each session's stream in this process has an :class:`Outbox` (the sink
``notify.HUB`` delivers to): its events numbered ``<stream key>.<n>``, the
key random per stream, so ids are unique within the session and name their
stream. The outbox keeps the last :data:`REPLAY_EVENTS` events of the last
:data:`REPLAY_SECONDS`, while the stream is open and for as long after a
disconnect, and a GET whose ``Last-Event-ID`` names one of them gets what
followed it, then the live stream. An id of another stream, or older than
the window, gets no replay: the stream starts with ``list_changed`` so the
client lists and reads again. A client slower than the events meets the same
bound: the oldest unsent events are dropped and ``list_changed`` sent.

The stream opens with a priming event (an id, empty data, a ``retry``
hint), sends a keep-alive comment every :data:`KEEPALIVE_SECONDS` (which
also renews the holder and notices a session deleted or expired on any
process), and ends on DELETE, on expiry, and when the server stops (daphne
cancels it; nothing here waits on the database on the way out).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
import time
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass

from django.conf import settings
from django.db import connection

from kernel import errors
from kernel.jsontypes import JsonObject
from mcp_gateway import notify, sessions
from mcp_gateway.asgi_io import StreamResponse
from mcp_gateway.transport import HttpError

#: Events kept for replay per session, and for how long.
REPLAY_EVENTS = 500
REPLAY_SECONDS = 600.0
#: What the priming event asks a client to wait before it reconnects (ms).
RETRY_MS = 2000
_PRIMING = None  # a log entry that is the priming event of one connection


def keepalive_seconds() -> float:
    return float(getattr(settings, "DIR2MCP_SSE_KEEPALIVE", 15.0))


class Outbox:
    """One session's standalone stream in this process (see the module's docstring).

    ``send`` and ``close`` may be called from any thread; one consumer (the
    open connection, :func:`_events`) reads on the server's event loop."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.key = secrets.token_hex(6)
        self.generation = 0  # the connection now reading; an older one stops
        self.sent = 0  # the last seq the consumer sent
        self.detached_at: float | None = time.monotonic()
        self.closed = False
        self._seq = 0
        self._log: deque[tuple[int, float, JsonObject | None]] = deque()
        self._lock = threading.Lock()
        self._wake: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None

    # -- producers --

    def send(self, notification: JsonObject | None) -> None:
        if self.stale():  # nobody came back for it within the replay window
            self.close()
        with self._lock:
            if self.closed:
                return
            if notification is not None and any(
                seq > self.sent and entry == notification for seq, _, entry in self._log
            ):
                return  # the same notification is still waiting to go
            self._append(notification)
        self._kick()

    def close(self) -> None:
        with self._lock:
            self.closed = True
        self._kick()
        notify.HUB.detach(self.session_id, self)

    def _append(self, entry: JsonObject | None) -> int:
        self._seq += 1
        self._log.append((self._seq, time.monotonic(), entry))
        now = time.monotonic()
        while self._log and (len(self._log) > REPLAY_EVENTS or now - self._log[0][1] > REPLAY_SECONDS):
            self._log.popleft()
        return self._seq

    def _kick(self) -> None:
        wake = self._wake
        if wake is None:
            return
        loop, event = wake
        try:
            loop.call_soon_threadsafe(event.set)
        except RuntimeError:  # the loop has closed: the server is stopping
            pass

    # -- the consumer --

    def attach(self, loop: asyncio.AbstractEventLoop, resume_after: int | None) -> _Reader:
        """A connection starts reading after ``resume_after`` (None: after
        what is logged now); its priming event is logged after everything
        it will replay."""
        reader = _Reader(asyncio.Event())
        self._kick()  # a connection this one takes over from wakes up and stops
        with self._lock:
            self.generation += 1
            self._wake = (loop, reader.wake)
            self.detached_at = None
            reader.cursor = self.sent = self._seq if resume_after is None else resume_after
            reader.generation, reader.priming = self.generation, self._append(_PRIMING)
        return reader

    def detach(self, generation: int) -> None:
        with self._lock:
            if generation == self.generation:
                self._wake = None
                self.detached_at = time.monotonic()

    def can_resume(self, seq: int) -> bool:
        """Whether every event after ``seq`` is still here."""
        with self._lock:
            oldest = self._log[0][0] if self._log else self._seq + 1
            return seq <= self._seq and seq >= oldest - 1

    def take(self, cursor: int, own_priming: int) -> tuple[list[tuple[int, JsonObject | None]], int]:
        """The entries after ``cursor`` to send (other connections' priming
        events left out) and the new cursor; when some were dropped unsent,
        a ``list_changed`` goes at the end."""
        with self._lock:
            if self._log and self._log[0][0] > cursor + 1:
                self._append(notify.LIST_CHANGED)
            entries = [
                (seq, e) for seq, _, e in self._log if seq > cursor and (e is not None or seq == own_priming)
            ]
            if entries:
                self.sent = entries[-1][0]
            return entries, (entries[-1][0] if entries else cursor)

    def stale(self) -> bool:
        detached = self.detached_at
        return detached is not None and time.monotonic() - detached > REPLAY_SECONDS


@dataclass
class _Reader:
    """One connection reading an outbox."""

    wake: asyncio.Event
    generation: int = 0
    priming: int = 0
    cursor: int = 0


def event_bytes(event_id: str, message: JsonObject | None) -> bytes:
    if message is None:
        return f"id: {event_id}\nretry: {RETRY_MS}\ndata: \n\n".encode()
    data = json.dumps(message, ensure_ascii=False)
    return f"id: {event_id}\nevent: message\ndata: {data}\n\n".encode()


def parse_event_id(value: str | None) -> tuple[str, int] | None:
    """``(stream key, seq)`` of a ``Last-Event-ID``, or None when it is not one of ours."""
    key, sep, seq = (value or "").strip().partition(".")
    if not sep or not key or not (seq.isascii() and seq.isdigit()) or len(seq) > 12:  # int() refuses "²"
        return None
    return key, int(seq)


# -- opening a stream -----------------------------------------------------------------

Run = Callable[..., Awaitable[object]]


async def open_stream(
    session_id: str, last_event_id: str | None, limits: sessions.Limits, run: Run
) -> StreamResponse:
    """The GET's answer for a live session; 409 when its stream is open elsewhere.

    ``run(fn, *args)`` runs a database call in a worker thread (api.py's)."""
    resume = parse_event_id(last_event_id)
    current = notify.HUB.sink(session_id)
    same_stream = isinstance(current, Outbox) and resume is not None and resume[0] == current.key
    resuming = (
        same_stream and isinstance(current, Outbox) and resume is not None and current.can_resume(resume[1])
    )
    holder = secrets.token_hex(12)
    if not await run(sessions.claim_stream, session_id, holder, take_over=same_stream):
        raise HttpError(
            409,
            errors.INVALID_FIELD,
            "this session's stream is already open; resume it with Last-Event-ID, or close it first",
        )
    if resuming and isinstance(current, Outbox) and resume is not None:  # (resuming says both)
        outbox, after = current, resume[1]
    else:
        if isinstance(current, Outbox):
            current.close()
        outbox, after = Outbox(session_id), None
        notify.HUB.attach(session_id, outbox)
        if last_event_id:  # a stream the server no longer has: events may have been missed
            outbox.send(notify.LIST_CHANGED)
            after = 0
    return StreamResponse(_events(outbox, after, holder, limits, run))


async def _events(
    outbox: Outbox, after: int | None, holder: str, limits: sessions.Limits, run: Run
) -> AsyncGenerator[bytes, None]:
    reader = outbox.attach(asyncio.get_running_loop(), after)
    every = keepalive_seconds()
    renewed = time.monotonic()
    try:
        while not outbox.closed and outbox.generation == reader.generation:
            reader.wake.clear()
            entries, reader.cursor = outbox.take(reader.cursor, reader.priming)
            for seq, message in entries:
                yield event_bytes(f"{outbox.key}.{seq}", message)
            if time.monotonic() - renewed >= every:
                if not await run(sessions.renew_stream, outbox.session_id, holder, limits):
                    outbox.close()
                    return
                renewed = time.monotonic()
            if entries:
                continue
            try:
                await asyncio.wait_for(reader.wake.wait(), max(0.1, every - (time.monotonic() - renewed)))
            except TimeoutError:
                yield b": keep-alive\n\n"
    finally:
        outbox.detach(reader.generation)
        # Never awaited: a stopping server must not wait on the database.
        threading.Thread(
            target=_release, args=(outbox.session_id, holder), name="dir2mcp-stream-release", daemon=True
        ).start()


def _release(session_id: str, holder: str) -> None:
    try:
        sessions.release_stream(session_id, holder)
    except Exception:  # the session is gone, or the database: the claim goes stale anyway
        pass
    finally:
        connection.close()
