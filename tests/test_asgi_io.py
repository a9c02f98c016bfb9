"""The endpoint's own ASGI request reading: what it took over from Django."""

from __future__ import annotations

import asyncio

import pytest

from mcp_gateway.asgi_io import BodyTooLarge, ClientGone, Request


def scope(headers: list[tuple[str, str]], server=("127.0.0.1", 8000)) -> dict:
    return {
        "type": "http",
        "method": "POST",
        "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers],
        "client": ("10.0.0.5", 5555),
        "server": server,
    }


def channel(*messages: dict):
    queue = list(messages)

    async def receive():
        return queue.pop(0)

    return receive


def read(request: Request, limit: int):
    return asyncio.run(request.body(limit))


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("127.0.0.1:8000", True),
        ("localhost", True),
        ("[::1]:9", True),
        ("evil.example.com", False),
        ("127.0.0.1.evil.example.com", False),
        ("", False),
        ("bad host", False),
    ],
)
def test_host_is_checked_against_allowed_hosts(settings, host, allowed):
    settings.ALLOWED_HOSTS = ["127.0.0.1", "localhost", "[::1]"]
    assert Request(scope([("Host", host)]), channel()).host_allowed() is allowed


def test_without_a_host_header_the_server_name_is_checked(settings):
    settings.ALLOWED_HOSTS = ["127.0.0.1"]
    assert Request(scope([]), channel()).host_allowed()
    assert not Request(scope([], server=("10.1.1.1", 80)), channel()).host_allowed()


def test_forwarded_host_counts_only_when_the_proxy_is_trusted(settings):
    settings.ALLOWED_HOSTS = ["mcp.example.com"]
    headers = [("Host", "127.0.0.1:8000"), ("X-Forwarded-Host", "mcp.example.com")]
    settings.USE_X_FORWARDED_HOST = False
    assert not Request(scope(headers), channel()).host_allowed()
    settings.USE_X_FORWARDED_HOST = True
    assert Request(scope(headers), channel()).host_allowed()


def test_repeated_headers_are_joined_as_django_joins_them():
    request = Request(scope([("Authorization", "Bearer a"), ("authorization", "Bearer b")]), channel())
    assert request.headers["authorization"] == "Bearer a,Bearer b"
    assert request.client == "10.0.0.5"


def test_a_body_in_pieces_is_joined():
    receive = channel(
        {"type": "http.request", "body": b'{"a":', "more_body": True},
        {"type": "http.request", "body": b"1}", "more_body": False},
    )
    assert read(Request(scope([]), receive), 100) == b'{"a":1}'


def test_a_body_is_refused_as_soon_as_it_passes_the_limit():
    # Two pieces of a longer body: reading a third would fail with IndexError.
    pieces = [{"type": "http.request", "body": b"x" * 60, "more_body": True} for _ in range(2)]
    with pytest.raises(BodyTooLarge):
        read(Request(scope([]), channel(*pieces)), 100)


def test_a_client_that_leaves_mid_body_is_reported():
    receive = channel({"type": "http.request", "body": b"x", "more_body": True}, {"type": "http.disconnect"})
    with pytest.raises(ClientGone):
        read(Request(scope([]), receive), 100)
