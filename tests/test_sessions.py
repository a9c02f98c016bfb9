"""Session lifecycle in the database: expiry reasons, eviction, binding."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time

import pytest

from mcp_gateway import sessions
from mcp_gateway.models import McpSession
from mcp_gateway.ratelimit import RateLimiter, RedisRateLimiter
from tests.mcp_http import free_port
from tests.support import wait_until

pytestmark = pytest.mark.django_db

LIMITS = sessions.Limits(inactivity=600, max_lifetime=3600)


def make(token="t0k"):
    return sessions.create(
        protocol_version="2025-11-25", client_info={"name": "c", "version": "1"}, token=token, limits=LIMITS
    )


def age(session, *, created=0.0, seen=0.0):
    McpSession.objects.filter(pk=session.pk).update(
        created_unix=session.created_unix - created, last_seen_unix=session.last_seen_unix - seen
    )


def test_a_new_session_is_found_and_stores_no_credential():
    session = make()
    assert sessions.lookup(session.session_id, token="t0k", limits=LIMITS).client_name == "c"
    row = McpSession.objects.get(pk=session.pk)
    assert "t0k" not in str(row.__dict__)


def test_inactivity_expires_with_its_reason_then_the_id_is_unknown():
    session = make()
    age(session, seen=601)
    with pytest.raises(sessions.SessionGone) as gone:
        sessions.lookup(session.session_id, token="t0k", limits=LIMITS)
    assert gone.value.reason == "inactivity"
    with pytest.raises(sessions.SessionGone) as again:
        sessions.lookup(session.session_id, token="t0k", limits=LIMITS)
    assert again.value.reason == ""


def test_max_lifetime_expires_even_an_active_session():
    session = make()
    age(session, created=3601)
    with pytest.raises(sessions.SessionGone) as gone:
        sessions.lookup(session.session_id, token="t0k", limits=LIMITS)
    assert gone.value.reason == "max-lifetime"


def test_zero_limits_never_expire():
    session = make()
    age(session, created=10**7, seen=10**7)
    unlimited = sessions.Limits(0, 0)
    assert sessions.lookup(session.session_id, token="t0k", limits=unlimited)


def test_lookup_touches_last_seen_but_not_on_every_request():
    session = make()
    age(session, seen=100)
    before = McpSession.objects.get(pk=session.pk).last_seen_unix
    sessions.lookup(session.session_id, token="t0k", limits=LIMITS)
    touched = McpSession.objects.get(pk=session.pk).last_seen_unix
    assert touched > before
    sessions.lookup(session.session_id, token="t0k", limits=LIMITS)
    assert McpSession.objects.get(pk=session.pk).last_seen_unix == touched


def test_a_session_is_bound_to_the_credential_that_opened_it():
    session = make(token="alice")
    with pytest.raises(sessions.SessionGone):
        sessions.lookup(session.session_id, token="mallory", limits=LIMITS)


def test_sweep_evicts_expired_sessions_and_caps_the_table(monkeypatch):
    live, idle, old = make(), make(), make()
    age(idle, seen=601)
    age(old, created=3601)
    assert sessions.sweep(LIMITS, force=True) == 2
    assert list(McpSession.objects.values_list("pk", flat=True)) == [live.pk]
    monkeypatch.setattr(sessions, "MAX_SESSIONS", 2)
    newer = [make(), make()]
    age(live, seen=10)
    sessions.sweep(LIMITS, force=True)
    assert set(McpSession.objects.values_list("pk", flat=True)) == {s.pk for s in newer}


def test_one_credential_holds_at_most_its_limit_and_loses_its_least_recently_used():
    limits = sessions.Limits(inactivity=600, max_lifetime=3600, per_token=3)

    def open_one(token):
        return sessions.create(protocol_version="2025-11-25", client_info={}, token=token, limits=limits)

    first, second, third = (open_one("a") for _ in range(3))
    other = open_one("b")
    age(first, seen=100)  # first was used least recently... until it is used again
    age(second, seen=200)
    fourth = open_one("a")

    held = set(
        McpSession.objects.filter(auth_digest=sessions.token_digest("a")).values_list("session_id", flat=True)
    )
    assert held == {first.session_id, third.session_id, fourth.session_id}
    assert McpSession.objects.filter(session_id=other.session_id).exists()  # other credentials untouched


def test_end_deletes():
    session = make()
    assert sessions.end(session.session_id) is True
    assert sessions.end(session.session_id) is False


def test_ids_are_unique_and_visible_ascii():
    ids = {sessions.new_id() for _ in range(200)}
    assert len(ids) == 200
    assert all(all(0x21 <= ord(c) <= 0x7E for c in i) for i in ids)


def test_rate_limiter_buckets_refill_at_the_configured_rate():
    limiter = RateLimiter(per_minute=60)  # 1/s, burst 6
    now = time.monotonic()
    assert [limiter.retry_after("a", now) for _ in range(6)] == [0] * 6
    assert limiter.retry_after("a", now) == 1
    assert limiter.retry_after("b", now) == 0  # another client has its own bucket
    assert limiter.retry_after("a", now + 1.01) == 0


def test_a_failure_budget_is_read_without_being_spent():
    """The sign-in throttle's use (dir2mcp_site/ops/logins.py): ``blocked``
    asks, ``retry_after`` spends; 3 at once, then one every 100 s."""
    limiter = RateLimiter(per_minute=3 * 60 / 300, capacity=3)
    now = time.monotonic()
    assert [limiter.blocked("a", now) for _ in range(10)] == [0] * 10
    assert [limiter.retry_after("a", now) for _ in range(3)] == [0, 0, 0]
    assert limiter.blocked("a", now) == 100 and limiter.blocked("b", now) == 0
    assert limiter.blocked("a", now + 100.5) == 0


@pytest.fixture
def redis_url():
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        wait_until(lambda: _answers(port), timeout=30, message="redis-server", ignoring=(OSError,))
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


def _answers(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
        conn.sendall(b"PING\r\n")
        return conn.recv(16).startswith(b"+PONG")


def test_a_shared_failure_budget_is_read_without_being_spent(redis_url):
    limiter = RedisRateLimiter(redis_url, 3, window=300)
    now = 300 * 1000 + 10.0  # 10 s into a window
    assert [limiter.blocked("a", now) for _ in range(10)] == [0] * 10
    assert [limiter.retry_after("a", now) for _ in range(3)] == [0, 0, 0]
    assert limiter.blocked("a", now) == 290 and limiter.blocked("b", now) == 0
    assert limiter.blocked("a", now + 290) == 0  # the next window


def test_a_shared_limiter_that_cannot_reach_redis_lets_requests_through(caplog):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    limiter = RedisRateLimiter(f"redis://127.0.0.1:{port}/0", per_minute=1)

    assert [limiter.retry_after("client") for _ in range(3)] == [0, 0, 0]
    assert sum("rate limit store unreachable" in r.getMessage() for r in caplog.records) == 1
