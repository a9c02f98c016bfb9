"""Per-client token buckets for ``server.rate_limit_per_minute``.

In-process: each daphne process keeps its own buckets, so N processes
behind a proxy allow up to N times the rate. That bounds abuse of one
process's CPU, which is what it is for; a global quota belongs to the
proxy in front.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

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


_limiters: dict[int, RateLimiter] = {}


def limiter(per_minute: int) -> RateLimiter | None:
    if per_minute <= 0:
        return None
    if per_minute not in _limiters:
        _limiters[per_minute] = RateLimiter(per_minute)
    return _limiters[per_minute]
