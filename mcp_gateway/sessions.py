"""Session lifecycle (spec §10.3): create, look up, touch, expire, evict, end;
who holds a session's standalone GET stream; its resource subscriptions.

Sync functions over the ORM; the endpoint calls them in a worker thread.
An expired session is deleted when it is looked up, and a sweep evicts the
rest every :data:`SWEEP_EVERY` seconds, so the table never grows without
bound. ``last_seen`` is written at most every :func:`_touch_interval`, so a
busy session costs one read per request, not a write.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import time
from dataclasses import dataclass

from django.db import transaction
from django.db.models import Q

from kernel.jsontypes import JsonObject
from mcp_gateway.models import McpSession, McpSubscription

log = logging.getLogger(__name__)

SWEEP_EVERY = 60.0
MAX_SESSIONS = 10_000
#: A stream holder that has not renewed its claim for this long (three
#: keep-alives, mcp_gateway/standalone.py) is taken for gone: a crashed process.
STREAM_STALE_SECONDS = 45.0
#: Subscriptions one session may hold.
MAX_SUBSCRIPTIONS = 1000
#: Of those, URIs naming one file (``dir2mcp:///f.txt``, ``?lines=1-1``,
#: ``?lines=1-2``, ...): each change of the file is one update for each,
#: encoded and written on the event loop. At 1,000 (session 28), 16 reading
#: streams cost 16,000 updates a change, and another client's ``tools/list``
#: waited 0.03 to 0.2 s meanwhile (session 29).
MAX_SPELLINGS = 16
_last_sweep = 0.0


@dataclass(frozen=True)
class Limits:
    inactivity: float  # seconds; 0 disables
    max_lifetime: float  # seconds; 0 disables
    per_token: int = 64  # sessions one credential may hold


class SessionGone(Exception):
    """Unknown or expired; ``reason`` is "inactivity", "max-lifetime" or ""."""

    def __init__(self, reason: str = "") -> None:
        super().__init__(reason or "unknown session")
        self.reason = reason


def token_digest(token: str | None) -> str:
    return hashlib.sha256(token.encode()).hexdigest() if token else ""


def new_id() -> str:
    """A CSPRNG id in visible ASCII, as the transport spec requires."""
    return "sess_" + secrets.token_urlsafe(24)


def create(
    *, protocol_version: str, client_info: JsonObject, token: str | None, limits: Limits
) -> McpSession:
    sweep(limits)
    now = time.time()
    info = client_info if isinstance(client_info, dict) else {}
    _make_room(token_digest(token), limits.per_token)
    session = McpSession.objects.create(
        session_id=new_id(),
        auth_digest=token_digest(token),
        protocol_version=protocol_version,
        client_name=str(info.get("name", ""))[:200],
        client_version=str(info.get("version", ""))[:100],
        created_unix=now,
        last_seen_unix=now,
    )
    return session


def _make_room(digest: str, per_token: int) -> None:
    """Evict the credential's least recently seen sessions so that one more fits."""
    held = McpSession.objects.filter(auth_digest=digest)
    surplus = held.count() - per_token + 1
    if surplus > 0:
        oldest = list(held.order_by("last_seen_unix").values_list("session_id", flat=True)[:surplus])
        McpSession.objects.filter(session_id__in=oldest).delete()
        log.info("evicted %d sessions of one credential (limit %d)", len(oldest), per_token)


def expiry_reason(session: McpSession, limits: Limits, now: float) -> str:
    if limits.max_lifetime and now - session.created_unix > limits.max_lifetime:
        return "max-lifetime"
    if limits.inactivity and now - session.last_seen_unix > limits.inactivity:
        return "inactivity"
    return ""


def _touch_interval(limits: Limits) -> float:
    return min(30.0, limits.inactivity / 20) if limits.inactivity else 30.0


def lookup(session_id: str, *, token: str | None, limits: Limits, write: bool = True) -> McpSession:
    """The live session, touched; :class:`SessionGone` otherwise.

    A session opened with another credential is reported as unknown: ids are
    not bearer secrets and must not let one client ride another's session.

    ``write=False`` only reads (a reader never waits on SQLite's write lock,
    which another writer may hold for seconds): an expired session is
    still gone but not deleted, and nothing is touched or swept; the caller
    runs :func:`upkeep` where waiting on the lock costs no other client
    (mcp_gateway/api.py: its write lane) when :func:`upkeep_due` says so.
    """
    if write:
        sweep(limits)
    now = time.time()
    session = McpSession.objects.filter(session_id=session_id).first()
    if session is None or (session.auth_digest and session.auth_digest != token_digest(token)):
        raise SessionGone()
    reason = expiry_reason(session, limits, now)
    if reason:
        if write:
            McpSession.objects.filter(session_id=session_id).delete()
            log.info("session %s expired (%s)", session_id, reason)
        raise SessionGone(reason)
    if write and now - session.last_seen_unix > _touch_interval(limits):
        McpSession.objects.filter(session_id=session_id).update(last_seen_unix=now)
        session.last_seen_unix = now
    return session


def upkeep_due(session: McpSession | None, limits: Limits) -> bool:
    """Whether a read-only :func:`lookup` of ``session`` (None: one that
    found it expired) left a write to do: the sweep, its touch, or its
    deletion."""
    now = time.time()
    if now - _last_sweep >= SWEEP_EVERY or session is None:
        return True
    return now - session.last_seen_unix > _touch_interval(limits)


def upkeep(session_id: str, limits: Limits) -> None:
    """The writes a read-only :func:`lookup` left: the sweep when due, then
    the session's touch, or its deletion once expired."""
    sweep(limits)
    now = time.time()
    session = McpSession.objects.filter(session_id=session_id).first()
    if session is None:
        return
    reason = expiry_reason(session, limits, now)
    if reason:
        McpSession.objects.filter(session_id=session_id).delete()
        log.info("session %s expired (%s)", session_id, reason)
    elif now - session.last_seen_unix > _touch_interval(limits):
        McpSession.objects.filter(session_id=session_id).update(last_seen_unix=now)


def set_log_level(session_id: str, level: str) -> None:
    McpSession.objects.filter(session_id=session_id).update(log_level=level)


def end(session_id: str) -> bool:
    """DELETE: forget the session; False when it was not there."""
    deleted, _ = McpSession.objects.filter(session_id=session_id).delete()
    return bool(deleted)


def sweep(limits: Limits, *, force: bool = False) -> int:
    """Evict expired sessions, and the least recently seen past the cap."""
    global _last_sweep
    now = time.time()
    if not force and now - _last_sweep < SWEEP_EVERY:
        return 0
    _last_sweep = now
    evicted = 0
    with transaction.atomic():
        if limits.inactivity:
            evicted += McpSession.objects.filter(last_seen_unix__lt=now - limits.inactivity).delete()[0]
        if limits.max_lifetime:
            evicted += McpSession.objects.filter(created_unix__lt=now - limits.max_lifetime).delete()[0]
        surplus = McpSession.objects.count() - MAX_SESSIONS
        if surplus > 0:
            oldest = McpSession.objects.order_by("last_seen_unix").values_list("session_id", flat=True)[
                :surplus
            ]
            evicted += McpSession.objects.filter(session_id__in=list(oldest)).delete()[0]
    if evicted:
        log.info("evicted %d expired MCP sessions", evicted)
    return evicted


# -- the standalone GET stream ----------------------------------------------------


def claim_stream(session_id: str, holder: str, *, take_over: bool = False) -> bool:
    """Make ``holder`` the session's one standalone stream; False when another
    live one holds it. ``take_over`` (a client resuming its own stream,
    whose old connection it has given up on) replaces the holder."""
    now = time.time()
    rows = McpSession.objects.filter(session_id=session_id)
    if not take_over:
        rows = rows.filter(Q(stream_holder="") | Q(stream_seen_unix__lt=now - STREAM_STALE_SECONDS))
    return rows.update(stream_holder=holder, stream_seen_unix=now) == 1


def renew_stream(session_id: str, holder: str, limits: Limits) -> bool:
    """A keep-alive: False when the stream must end (the session was deleted
    or expired, or another stream took over). An open stream is activity."""
    now = time.time()
    session = McpSession.objects.filter(session_id=session_id).first()
    if session is None or session.stream_holder != holder:
        return False
    reason = expiry_reason(session, limits, now)
    if reason:
        McpSession.objects.filter(session_id=session_id).delete()
        log.info("session %s expired (%s)", session_id, reason)
        return False
    rows = McpSession.objects.filter(session_id=session_id, stream_holder=holder)
    return rows.update(stream_seen_unix=now, last_seen_unix=now) == 1


def release_stream(session_id: str, holder: str) -> None:
    McpSession.objects.filter(session_id=session_id, stream_holder=holder).update(stream_holder="")


# -- resource subscriptions ----------------------------------------------------------


class TooManySubscriptions(Exception):
    pass


class TooManySpellings(Exception):
    """More than :data:`MAX_SPELLINGS` URIs naming one file."""

    def __init__(self, rel_path: str) -> None:
        super().__init__(rel_path)
        self.rel_path = rel_path

    def message(self) -> str:
        return (
            f"at most {MAX_SPELLINGS} subscribed URIs may name one file "
            f"({self.rel_path[:200]} is named that many times already): each is sent each change"
        )


def subscribe(session_id: str, uri: str, rel_path: str) -> None:
    """Idempotent; :class:`TooManySubscriptions` past :data:`MAX_SUBSCRIPTIONS`,
    :class:`TooManySpellings` past :data:`MAX_SPELLINGS` URIs of ``rel_path``."""
    held = McpSubscription.objects.filter(session_id=session_id)
    if held.filter(uri=uri).exists():
        return
    if held.count() >= MAX_SUBSCRIPTIONS:
        raise TooManySubscriptions()
    if held.filter(rel_path=rel_path).count() >= MAX_SPELLINGS:
        raise TooManySpellings(rel_path)
    McpSubscription.objects.get_or_create(
        session_id=session_id, uri=uri, defaults={"rel_path": rel_path, "created_unix": time.time()}
    )


def unsubscribe(session_id: str, uri: str) -> None:
    McpSubscription.objects.filter(session_id=session_id, uri=uri).delete()


def subscribers(session_ids: list[str], rel_paths: list[str]) -> list[tuple[str, str]]:
    """``(session_id, uri)`` of these sessions' subscriptions to these files."""
    rows = McpSubscription.objects.filter(session_id__in=session_ids, rel_path__in=rel_paths)
    return list(rows.values_list("session_id", "uri"))
