"""Per-client limits for ``server.rate_limit_per_minute``, and for failed
admin sign-ins (:func:`failure_limiter`, ``dir2mcp_site/ops/logins.py``).

One server process keeps token buckets in memory. Several processes behind
one address share the limit through Redis when ``REDIS_URL`` (or a Redis
Celery broker) is set: one-minute windows counted with INCR, so N processes
allow the rate once, not N times. If Redis cannot be reached a warning is
logged and for :data:`AWAY_SECONDS` each process counts on its own, as
without Redis, before it asks Redis again: a limiter outage must not take
the server down with it, nor lift the limit (each process still counts).
Until session 26 a Redis that took connections and never answered (hung,
or a route that drops its replies) held the event loop 1 s for every
request, and every other client's, even ``/healthz/live``, waited behind
them (p50 33 s under four clients' loops of requests). Session 26 made that
one wait of 0.25 s every :data:`AWAY_SECONDS`, still on the loop, and every
count the loop's: a Redis answering in 0.2 s held the loop that long for
each request. The gate now asks through :func:`retry_after_async`: the
count runs on a thread of its own (:data:`ASKING_THREADS`), and the request
waits for it at most :func:`wait_bound`; past that, or with too many asks
already waiting (:data:`ASKING_MAX`), the request is counted in this
process, as while Redis is away. The admin's sign-in throttle counts on
Django's thread for sync views, never on the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ipaddress
import logging
import math
import threading
import time
from dataclasses import dataclass

from django.conf import settings

from mcp_gateway import sessions

log = logging.getLogger(__name__)

MAX_CLIENTS = 50_000
#: how long a Redis the limiter could not reach is left alone (counting in this process meanwhile)
AWAY_SECONDS = 10.0
#: the longest the limiter waits for Redis to connect or answer (it answers in
#: well under a millisecond), unless ``DIR2MCP_REDIS_TIMEOUT`` says otherwise
REDIS_TIMEOUT_SECONDS = 0.25
#: threads that ask Redis for the gate (the event loop never waits on a socket)
ASKING_THREADS = 4
#: asks of Redis waiting or running at once; past this a request is counted in this process
ASKING_MAX = 64


def redis_timeout() -> float:
    return float(getattr(settings, "DIR2MCP_REDIS_TIMEOUT", REDIS_TIMEOUT_SECONDS))


def wait_bound() -> float:
    """The longest a request waits for its count in Redis: a connection and
    an answer, each within :func:`redis_timeout`, and a little for the thread."""
    return 2 * redis_timeout() + 0.25


_asking = concurrent.futures.ThreadPoolExecutor(ASKING_THREADS, thread_name_prefix="dir2mcp-ratelimit")


@dataclass
class _Bucket:
    tokens: float
    stamp: float


class RateLimiter:
    """Token buckets: ``capacity`` at once (by default a tenth of a minute's
    rate, at least 5), refilled at ``per_minute``."""

    def __init__(self, per_minute: float, *, capacity: int | None = None) -> None:
        self.rate = per_minute / 60.0
        self.capacity = float(capacity if capacity is not None else max(5, int(per_minute) // 10))
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()

    def retry_after(self, key: str, now: float | None = None) -> int:
        """0 when the request may go (it takes a token); else whole seconds until it may."""
        return self._take(key, now, take=True)

    def blocked(self, key: str, now: float | None = None) -> int:
        """:meth:`retry_after` without taking a token: 0, or whole seconds to wait."""
        return self._take(key, now, take=False)

    def _take(self, key: str, now: float | None, *, take: bool) -> int:
        now = time.monotonic() if now is None else now
        with self._lock:
            bucket = self._buckets.get(key)
            if bucket is None:
                if not take:
                    return 0
                if len(self._buckets) >= MAX_CLIENTS:
                    self._make_room(now)
                bucket = self._buckets[key] = _Bucket(self.capacity, now)
            bucket.tokens = min(self.capacity, bucket.tokens + (now - bucket.stamp) * self.rate)
            bucket.stamp = now
            if bucket.tokens >= 1:
                bucket.tokens -= take
                return 0
            return max(1, math.ceil((1 - bucket.tokens) / self.rate))

    def _make_room(self, now: float) -> None:
        """Forget the clients whose buckets have refilled (as good as new);
        when none has, the half nearest to a full bucket. Never every
        client: forgetting a throttled one gives it its burst back, so a
        table cleared whole let whoever brought the next new address (or
        username, for the sign-in throttle) reset every limit (found
        2026-11-29)."""

        def tokens(item: tuple[str, _Bucket]) -> float:
            bucket = item[1]
            return bucket.tokens + (now - bucket.stamp) * self.rate

        kept = {key: bucket for key, bucket in self._buckets.items() if tokens((key, bucket)) < self.capacity}
        if len(kept) >= MAX_CLIENTS:
            kept = dict(sorted(kept.items(), key=tokens)[: MAX_CLIENTS // 2])
        self._buckets = kept


class RedisRateLimiter:
    """Fixed windows (one minute unless ``window`` says otherwise) in Redis,
    shared by every server process: ``per_minute`` calls a window."""

    PREFIX = "dir2mcp:rate:"

    def __init__(
        self, url: str, per_minute: int, *, window: int = 60, fallback: RateLimiter | None = None
    ) -> None:
        """``fallback``: what counts while Redis is away (by default, buckets
        of the same rate in this process)."""
        import redis

        self.per_minute = per_minute
        self.window = window
        timeout = redis_timeout()
        self._redis = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
        self._fallback = fallback or RateLimiter(per_minute * 60 / window)
        self._away_until = float("-inf")  # time.monotonic() until which Redis is not asked
        self._warned = False
        self._waiting = 0  # asks of retry_after_async not yet answered (the event loop's count)

    def retry_after(self, key: str, now: float | None = None) -> int:
        """0 when the call may go (it is counted); else whole seconds until it may."""
        return self._count(key, now, take=True)

    def blocked(self, key: str, now: float | None = None) -> int:
        """:meth:`retry_after` without counting a call."""
        return self._count(key, now, take=False)

    async def retry_after_async(self, key: str) -> int:
        """:meth:`retry_after` for the event loop, which never waits on Redis:
        the count runs on one of the limiter's threads and is awaited at most
        :func:`wait_bound`; past that (Redis slow or away), or with
        :data:`ASKING_MAX` asks already waiting, the call is counted in this
        process, and Redis is left alone for :data:`AWAY_SECONDS`."""
        if time.monotonic() < self._away_until or self._waiting >= ASKING_MAX:
            return self._fallback.retry_after(key)
        self._waiting += 1
        try:
            asked = _asking.submit(self._count, key, None, take=True)
            return await asyncio.wait_for(asyncio.wrap_future(asked), wait_bound())
        except TimeoutError:
            self._away(TimeoutError())
            return self._fallback.retry_after(key)
        finally:
            self._waiting -= 1

    def _away(self, exc: BaseException) -> None:
        """Redis could not be reached: count here for :data:`AWAY_SECONDS`."""
        if not self._warned:
            log.warning(
                "rate limit store unreachable, limiting in this process for %gs at a time: %s",
                AWAY_SECONDS,
                type(exc).__name__,
            )
            self._warned = True
        self._away_until = time.monotonic() + AWAY_SECONDS

    def _count(self, key: str, now: float | None, *, take: bool) -> int:
        if time.monotonic() < self._away_until:
            return self._fallback.retry_after(key) if take else self._fallback.blocked(key)
        now = time.time() if now is None else now
        window = int(now // self.window)
        name = f"{self.PREFIX}{self.window}:{window}:{key}"
        try:
            if take:
                pipe = self._redis.pipeline()
                pipe.incr(name)
                pipe.expire(name, 2 * self.window)
                count = pipe.execute()[0]
            else:
                count = int(self._redis.get(name) or 0) + 1
        except Exception as exc:  # redis.RedisError or a socket error: count here for a while
            self._away(exc)
            return self._fallback.retry_after(key) if take else self._fallback.blocked(key)
        self._warned = False
        if count <= self.per_minute:
            return 0
        return max(1, math.ceil((window + 1) * self.window - now))


_limiters: dict[tuple[int, str], RateLimiter | RedisRateLimiter] = {}


def client_address(peer: str, real_ip: str | None) -> str:
    """Whom a budget is kept for: behind the documented proxy
    (``DJANGO_BEHIND_PROXY``), the ``X-Real-IP`` it sets itself from the
    connection (deploy/nginx), else the peer of the connection, which
    behind a proxy is the proxy for every client."""
    if settings.DJANGO_BEHIND_PROXY and real_ip:
        return network_of(real_ip.strip()[:64])
    return network_of(peer)


def network_of(address: str) -> str:
    """An address as one client: an IPv6 address by its /64, the block one
    host or site is handed (until session 21 each address was a client, so
    one host stepping through its /64 had a fresh rate budget, sign-in
    budget and share of the slots with each request), an IPv4-mapped one as
    its IPv4 address, either in one spelling. Anything else as it is."""
    try:
        ip = ipaddress.ip_address(address.partition("%")[0])  # a zone ("%eth0") names no other host
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


def client_key(surface: str, peer: str, real_ip: str | None, token: str | None) -> str:
    """Who a request is, for the rate limit and for a share of the call slots
    (``surface`` keeps the shares of the MCP endpoint and the REST mirror
    apart; the rate limit passes ""): its address (:func:`client_address`) and
    the credential the gate let it in with, ``token``, the server's own
    (None when auth is off). Never the ``Authorization`` header as sent: the
    gate accepts one token under many spellings (``bearer`` in any case, any
    whitespace around the token), and keyed by the header each spelling was
    a client of its own, with a fresh rate budget and a fresh share of the
    slots (found 2026-11-29, docs/security.md)."""
    return f"{surface}|{client_address(peer, real_ip)}|{sessions.token_digest(token)}"


async def retry_after_async(bucket: RateLimiter | RedisRateLimiter, key: str) -> int:
    """``bucket.retry_after(key)`` for the event loop: in memory at once, in
    Redis on a thread (:meth:`RedisRateLimiter.retry_after_async`)."""
    if isinstance(bucket, RedisRateLimiter):
        return await bucket.retry_after_async(key)
    return bucket.retry_after(key)


def limiter(per_minute: int) -> RateLimiter | RedisRateLimiter | None:
    if per_minute <= 0:
        return None
    url = getattr(settings, "REDIS_URL", "")
    key = (per_minute, url)
    if key not in _limiters:
        _limiters[key] = RedisRateLimiter(url, per_minute) if url else RateLimiter(per_minute)
    return _limiters[key]


def failure_limiter(failures: int, window: int) -> RateLimiter | RedisRateLimiter:
    """``failures`` at once, then one more every ``window / failures`` seconds
    (with Redis: ``failures`` per fixed ``window``), for a process or, with
    ``REDIS_URL``, for every process."""
    from django.conf import settings

    url = getattr(settings, "REDIS_URL", "")
    key = (-failures, f"{window}|{url}")
    if key not in _limiters:
        _limiters[key] = (
            RedisRateLimiter(
                url, failures, window=window, fallback=RateLimiter(failures * 60 / window, capacity=failures)
            )
            if url
            else RateLimiter(failures * 60 / window, capacity=failures)
        )
    return _limiters[key]
