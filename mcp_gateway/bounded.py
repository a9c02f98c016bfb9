"""Refuse oversized request bodies before daphne buffers them.

daphne (through twisted.web) reads a whole request body into memory or a
temporary file before the ASGI application sees the request, so a size
check in the view runs too late: an unauthenticated client could make the
server buffer gigabytes. ``up`` serves with this request class instead,
which answers 413 from the declared ``Content-Length``, or as soon as a
chunked body passes the limit, and closes the connection.

A deployment that runs ``daphne`` directly should set the same limit on its
reverse proxy (``client_max_body_size`` in nginx).
"""

from __future__ import annotations

import json

from daphne.http_protocol import HTTPFactory, WebRequest

from mcp_gateway.transport import MAX_BODY_BYTES


def _refusal(limit: int) -> bytes:
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "error": {
                "code": -32600,
                "message": f"request body over the {limit}-byte limit",
                "data": {"code": "INVALID_RANGE"},
            },
        }
    ).encode()
    head = (
        "HTTP/1.1 413 Payload Too Large\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


class BoundedRequest(WebRequest):
    max_body = MAX_BODY_BYTES

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # twisted.web parses form bodies (and, for that, every POST's
        # Content-Type, through the email package) into ``args``, which
        # daphne never reads: about a tenth of the event loop's time per call.
        self._parsePOSTFormSubmission = False

    def gotLength(self, length):  # noqa: N802 (twisted's naming)
        self._received = 0
        self._refused = length is not None and length > self.max_body
        if self._refused:
            self._refuse()
            return
        super().gotLength(length)

    def handleContentChunk(self, data):  # noqa: N802
        if self._refused:
            return
        self._received += len(data)
        if self._received > self.max_body:
            self._refused = True
            self._refuse()
            return
        super().handleContentChunk(data)

    def requestReceived(self, command, path, version):  # noqa: N802
        if not self._refused:
            super().requestReceived(command, path, version)

    def _refuse(self) -> None:
        transport = self.channel.transport
        transport.write(_refusal(self.max_body))
        transport.loseConnection()


class BoundedHTTPFactory(HTTPFactory):
    def buildProtocol(self, addr):  # noqa: N802
        protocol = super().buildProtocol(addr)
        protocol.requestFactory = BoundedRequest
        return protocol
