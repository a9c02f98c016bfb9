"""Admin sign-in throttling (dir2mcp_site/ops/logins.py) through Django's
test client: the admin's login view, its form and the backend, with a
password hasher that counts its work, so "refused before the hash" is a
count, not a timing. The same on a real `up`: tests/test_web_security.py.
"""

from __future__ import annotations

import itertools

import pytest
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.contrib.auth.models import User

pytestmark = pytest.mark.django_db

LOGIN = "/admin/login/"
PASSWORD = "a-Login-passw0rd-41c2"
THROTTLED = "Too many failed sign-ins"
WRONG = "Please enter the correct username and password"
_unique = itertools.count()  # the counters outlive a test: each test signs in as its own clients and users


class CountingHasher(PBKDF2PasswordHasher):
    """PBKDF2 (cheap here) that counts every hash it computes, as a check
    (``verify``) or for a username that does not exist (Django hashes then too)."""

    algorithm = "pbkdf2_counting"
    iterations = 1000
    calls = 0

    def encode(self, password, salt, iterations=None):
        CountingHasher.calls += 1
        return super().encode(password, salt, iterations)


@pytest.fixture
def counting(settings):
    settings.PASSWORD_HASHERS = ["tests.test_logins.CountingHasher"]
    CountingHasher.calls = 0
    return CountingHasher


@pytest.fixture
def staff(counting):
    name = f"staff{next(_unique)}"
    User.objects.create_superuser(name, f"{name}@example.com", PASSWORD)
    counting.calls = 0
    return name


def address() -> str:
    return f"10.9.{next(_unique) // 250}.{next(_unique) % 250 + 1}"


def sign_in(client, username: str, password: str, remote: str, **headers):
    client.cookies.clear()  # a fresh session every time
    return client.post(
        LOGIN, {"username": username, "password": password, "next": "/admin/"}, REMOTE_ADDR=remote, **headers
    )


def test_a_locked_sign_in_is_refused_before_the_password_is_hashed(client, settings, staff, counting):
    remote = address()
    for i in range(settings.DIR2MCP_LOGIN_FAILURES):
        assert WRONG in sign_in(client, staff, f"guess-{i}", remote).content.decode()
    hashed = counting.calls
    assert hashed == settings.DIR2MCP_LOGIN_FAILURES

    refused = [sign_in(client, staff, PASSWORD, remote), sign_in(client, "someone-else", "x", remote)]
    refused += [sign_in(client, staff, f"more-{i}", remote) for i in range(20)]

    assert counting.calls == hashed  # not one more hash for 22 sign-ins
    assert all(r.status_code == 200 and THROTTLED in r.content.decode() for r in refused)
    assert "_auth_user_id" not in client.session


def test_a_username_is_locked_whatever_the_client(client, settings, staff, counting):
    for _ in range(settings.DIR2MCP_LOGIN_FAILURES):
        sign_in(client, staff, "guess", address())
    hashed = counting.calls

    right = sign_in(client, staff, PASSWORD, address())

    assert THROTTLED in right.content.decode() and counting.calls == hashed
    assert "_auth_user_id" not in client.session


def test_a_success_under_the_limit_signs_in(client, settings, staff):
    remote = address()
    for _ in range(settings.DIR2MCP_LOGIN_FAILURES - 1):
        sign_in(client, staff, "typo", remote)
    answer = sign_in(client, staff, PASSWORD, remote)
    assert answer.status_code == 302 and client.session["_auth_user_id"]


@pytest.mark.parametrize(
    ("behind_proxy", "separate"),
    [
        pytest.param(True, True, id="behind the proxy: X-Real-IP names the client"),
        pytest.param(False, False, id="no proxy: a forged X-Real-IP changes nothing"),
    ],
)
def test_the_client_behind_the_proxy(client, settings, counting, behind_proxy, separate):
    settings.DJANGO_BEHIND_PROXY = behind_proxy
    peer = address()  # the proxy, or the one client forging headers
    for _ in range(settings.DIR2MCP_LOGIN_FAILURES):
        sign_in(client, f"user{next(_unique)}", "guess", peer, HTTP_X_REAL_IP=address())
    answer = sign_in(client, f"user{next(_unique)}", "guess", peer, HTTP_X_REAL_IP=address())
    assert (THROTTLED not in answer.content.decode()) is separate


@pytest.mark.parametrize("behind_proxy", [True, False], ids=["X-Real-IP", "the peer"])
def test_one_ipv6_host_stepping_through_its_64_is_one_client(client, settings, counting, behind_proxy):
    """Each IPv6 address was a client of its own (session 21): one host hands
    itself any address of its /64, so each guess came from a fresh address,
    under other usernames, and the client's budget never ran out. The same
    for an IPv4 client spelled as an IPv4-mapped IPv6 address."""
    settings.DJANGO_BEHIND_PROXY = behind_proxy
    net = f"2001:db8:{next(_unique):x}:7"
    spellings = [f"{net}::{i:x}" for i in range(1, settings.DIR2MCP_LOGIN_FAILURES + 1)]
    v4 = address()
    mapped = [f"::ffff:{v4}" if i % 2 else v4 for i in range(settings.DIR2MCP_LOGIN_FAILURES + 1)]
    for addresses in (spellings + [f"{net}:ffff:ffff:ffff:ffff"], mapped):
        answers = []
        for remote in addresses:
            if behind_proxy:
                answers.append(
                    sign_in(client, f"user{next(_unique)}", "guess", "127.0.0.1", HTTP_X_REAL_IP=remote)
                )
            else:
                answers.append(sign_in(client, f"user{next(_unique)}", "guess", remote))
        assert [THROTTLED in a.content.decode() for a in answers] == [False] * (len(addresses) - 1) + [True]
