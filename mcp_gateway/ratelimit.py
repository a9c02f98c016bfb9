"""Per-client limits for ``server.rate_limit_per_minute``.

One server process keeps token buckets in memory. Several processes behind
one address share the limit through Redis when ``REDIS_URL`` (or a Redis
Celery broker) is set: one-minute windows counted with INCR, so N processes
allow the rate once, not N times. If Redis cannot be reached the request is
let through and a warning logged: a limiter outage must not take the server
down with it.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass

log = logging.getLogger(__name__)

MAX_CLIENTS = 50_000


@dataclass
class _Bucket:
    tokens: float
    stamp: float


class RateLimiter:
    def __init__(self, per_minute: int):
        self.rate = per_minute / 60.0
        self.capacity = float(max(5, per_minute // 10))
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()

    def retry_after(self, key: str, now: float | None = None) -> int:
        """0 when the request may go; else whole seconds until it may."""
        now = time.monotonic() if now is None else now
        with self._lock:
            bucket = self._buckets.get(key)
            if bucket is None:
                if len(self._buckets) >= MAX_CLIENTS:
                    self._buckets.clear()
                bucket = self._buckets[key] = _Bucket(self.capacity, now)
            bucket.tokens = min(self.capacity, bucket.tokens + (now - bucket.stamp) * self.rate)
            bucket.stamp = now
            if bucket.tokens >= 1:
                bucket.tokens -= 1
                return 0
            return max(1, math.ceil((1 - bucket.tokens) / self.rate))


class RedisRateLimiter:
    """Fixed one-minute windows in Redis, shared by every server process."""

    PREFIX = "dir2mcp:rate:"

    def __init__(self, url: str, per_minute: int):
        import redis

        self.per_minute = per_minute
        self._redis = redis.Redis.from_url(url, socket_timeout=1.0, socket_connect_timeout=1.0)
        self._warned = False

    def retry_after(self, key: str, now: float | None = None) -> int:
        now = time.time() if now is None else now
        window = int(now // 60)
        name = f"{self.PREFIX}{window}:{key}"
        try:
            pipe = self._redis.pipeline()
            pipe.incr(name)
            pipe.expire(name, 120)
            count = pipe.execute()[0]
        except Exception as exc:  # redis.RedisError or a socket error: let the call through
            if not self._warned:
                log.warning("rate limit store unreachable, not limiting: %s", type(exc).__name__)
                self._warned = True
            return 0
        self._warned = False
        if count <= self.per_minute:
            return 0
        return max(1, math.ceil((window + 1) * 60 - now))


_limiters: dict[tuple[int, str], RateLimiter | RedisRateLimiter] = {}


def limiter(per_minute: int) -> RateLimiter | RedisRateLimiter | None:
    if per_minute <= 0:
        return None
    from django.conf import settings

    url = getattr(settings, "REDIS_URL", "")
    key = (per_minute, url)
    if key not in _limiters:
        _limiters[key] = RedisRateLimiter(url, per_minute) if url else RateLimiter(per_minute)
    return _limiters[key]
