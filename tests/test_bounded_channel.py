"""The HTTP channel (mcp_gateway/bounded.py) in process, on twisted's
in-memory transport, with a stand-in for daphne's ``Server`` (the part of
daphne the channel's requests call: it hands a request to the application).
"""

from __future__ import annotations

import logging

import pytest
from twisted.internet.address import IPv4Address
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from mcp_gateway import bounded
from mcp_gateway.asgi_io import Response, Scope


class Queue:
    """The application's input queue, as daphne's request fills it."""

    def __init__(self) -> None:
        self.messages: list[dict] = []

    def put_nowait(self, message: dict) -> None:
        self.messages.append(message)


class DaphneServer:
    """What daphne's ``Server`` gives the channel's requests: each request
    handed to the application is recorded with its scope and queue."""

    root_path = ""
    proxy_forwarded_address_header = None
    request_buffer_size = 8192

    def __init__(self, head_check: bounded.HeadCheck | None) -> None:
        self.limits = bounded.ConnectionLimits()
        self.head_check = head_check
        self.connections: dict[object, dict] = {}
        self.handed: list[tuple[dict, Queue]] = []

    def protocol_connected(self, protocol: object) -> None:
        self.connections[protocol] = {}

    def protocol_disconnected(self, protocol: object) -> None:
        self.connections[protocol]["disconnected"] = True

    def create_application(self, protocol: object, scope: dict) -> Queue:
        queue = Queue()
        self.handed.append((scope, queue))
        return queue


def connection(server: DaphneServer) -> StringTransport:
    factory = bounded.BoundedHTTPFactory(server)
    factory.reactor = Clock()  # the head and idle deadlines, never reached here
    protocol = factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 50000))
    transport = StringTransport(
        hostAddress=IPv4Address("TCP", "127.0.0.1", 8000), peerAddress=IPv4Address("TCP", "127.0.0.1", 50000)
    )
    protocol.makeConnection(transport)
    transport.protocol = protocol
    return transport


REQUEST = (
    b"POST /api/v1/search HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nAuthorization: Bearer sekrit-token\r\n"
    b"Content-Type: application/json\r\nContent-Length: 13\r\n\r\n"
    b'{"query":"x"}'
)


def test_a_head_check_that_fails_leaves_the_request_to_the_gate(caplog):
    """The gate's early check runs inside twisted's parse of the head: an
    exception there went up into twisted, which dropped the connection with
    no answer at all, where the gate (run again on the whole request by the
    application) answers properly. Now the request goes on to the
    application, whole, and one warning is logged, without the headers."""

    def failing(scope: Scope) -> Response | None:
        raise ValueError(f"a bug, quoting {scope['headers']}")

    server = DaphneServer(failing)
    transport = connection(server)
    logger = logging.getLogger("mcp_gateway.bounded.head_check")
    logger.addHandler(caplog.handler)  # the project's LOGGING may keep it from the root's
    try:
        with caplog.at_level(logging.WARNING, logger="mcp_gateway.bounded.head_check"):
            transport.protocol.dataReceived(REQUEST)
    finally:
        logger.removeHandler(caplog.handler)
    assert not transport.disconnecting
    assert transport.value() == b""  # nothing answered by the channel: the application answers
    [(scope, queue)] = server.handed
    assert (scope["method"], scope["path"]) == ("POST", "/api/v1/search")
    assert [m["body"] for m in queue.messages] == [b'{"query":"x"}']
    warnings = [r for r in caplog.records if r.name == "mcp_gateway.bounded.head_check"]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    assert "ValueError" in warnings[0].getMessage()
    assert "sekrit" not in caplog.text and warnings[0].exc_info is None


@pytest.mark.parametrize("refuse", [False, True])
def test_a_head_check_that_answers_still_decides(refuse):
    """The control: a check that returns its refusal closes the connection
    with it, before the body; one that returns None lets the request on."""
    refusal = Response(401, b'{"error":"no"}', {"Content-Type": "application/json"})
    server = DaphneServer(lambda scope: refusal if refuse else None)
    transport = connection(server)
    transport.protocol.dataReceived(REQUEST)
    if refuse:
        assert transport.value().startswith(b"HTTP/1.1 401 Unauthorized\r\n")
        assert transport.value().endswith(b'{"error":"no"}')
        assert server.handed == []
    else:
        assert transport.value() == b"" and len(server.handed) == 1
