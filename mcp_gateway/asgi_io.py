"""Plain ASGI requests and responses for the MCP endpoint.

``/mcp`` is served as a bare ASGI app rather than a Django view: Django's
handler costs a thread hop for the request signals and another for the view
machinery on every call, about a third of the endpoint's own CPU per
``tools/call`` (docs/benchmarks.md). What the endpoint took from Django is
kept here, to the letter: the Host check against ``ALLOWED_HOSTS`` (with
``USE_X_FORWARDED_HOST``), repeated headers joined with commas, and a body
that never grows past the limit while it is read. Every answer written here
(the endpoint's and the gate's refusals) carries the security headers and
``Cache-Control: no-store`` (``security_headers.py``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from django.conf import settings
from django.http.request import split_domain_port, validate_host

from kernel.jsontypes import JsonObject
from mcp_gateway import security_headers

# The ASGI callables, as Django's ASGIHandler takes them.
# Any: a scope and a message hold values of many types under string keys, our
# own keys among them (route_gate.PASSED), which asgiref.typing's closed TypedDicts refuse.
Message: TypeAlias = dict[str, Any]
Scope: TypeAlias = Message
Receive: TypeAlias = Callable[[], Awaitable[Message]]
Send: TypeAlias = Callable[[Mapping[str, object]], Awaitable[None]]
App: TypeAlias = Callable[[Scope, Receive, Send], Awaitable[None]]


class ClientGone(Exception):
    """The client hung up before its request body arrived."""


class BodyTooLarge(Exception):
    pass


class Request:
    """The parts of an ASGI HTTP request the endpoint reads."""

    __slots__ = ("method", "headers", "client", "server", "scheme", "_receive")

    def __init__(self, scope: Scope, receive: Receive) -> None:
        self.method: str = scope["method"]
        headers: dict[str, str] = {}
        for raw_name, raw_value in scope.get("headers", ()):
            name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
            headers[name] = f"{headers[name]},{value}" if name in headers else value
        self.headers = headers
        client = scope.get("client") or ("", 0)
        self.client: str = client[0] or ""
        self.server = scope.get("server") or ("", None)
        self.scheme: str = scope.get("scheme") or "http"
        self._receive = receive

    def is_secure(self) -> bool:
        """Whether the client reached us over https, read as Django's
        ``is_secure()`` reads it (``SECURE_PROXY_SSL_HEADER`` behind a proxy)."""
        proxy = settings.SECURE_PROXY_SSL_HEADER
        if proxy:
            name, secure = proxy
            forwarded = self.headers.get(name.removeprefix("HTTP_").replace("_", "-").lower())
            if forwarded is not None:
                return forwarded.split(",", 1)[0].strip() == secure
        return self.scheme == "https"

    def host(self) -> str:
        """The host the client asked for, read as Django's ``get_host()`` reads it."""
        if settings.USE_X_FORWARDED_HOST and "x-forwarded-host" in self.headers:
            return self.headers["x-forwarded-host"]
        if "host" in self.headers:
            return self.headers["host"]
        name, port = self.server
        return f"{name}:{port}" if port else str(name)

    def host_allowed(self) -> bool:
        """Django's ``get_host()`` check, without building an HttpRequest."""
        domain, _port = split_domain_port(self.host())
        allowed = settings.ALLOWED_HOSTS
        if settings.DEBUG and not allowed:
            allowed = [".localhost", "127.0.0.1", "[::1]"]
        return bool(domain) and validate_host(domain, allowed)

    async def body(self, limit: int) -> bytes:
        """The whole body; :class:`BodyTooLarge` as soon as it passes ``limit``."""
        parts, size = [], 0
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                raise ClientGone()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge()
            parts.append(chunk)
            if not message.get("more_body", False):
                return b"".join(parts)

    async def disconnected(self) -> None:
        """Returns when the client hangs up (after the body was read)."""
        while (await self._receive())["type"] != "http.disconnect":
            pass


def _raw_headers(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    return [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()]


@dataclass
class Response:
    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def json(
        cls, message: JsonObject | None, status: int = 200, headers: dict[str, str] | None = None
    ) -> Response:
        if message is None:
            return cls(status, b"", dict(headers or {}))
        body = json.dumps(message, ensure_ascii=False).encode("utf-8")
        return cls(status, body, {"Content-Type": "application/json", **(headers or {})})

    async def send(self, send: Send, request: Request) -> None:
        headers = {**self.headers, "Content-Length": str(len(self.body))}
        security_headers.add_to(headers, secure=request.is_secure(), no_store=True)
        await send({"type": "http.response.start", "status": self.status, "headers": _raw_headers(headers)})
        await send({"type": "http.response.body", "body": self.body})


@dataclass
class StreamResponse:
    """An SSE answer: each item of ``events`` is sent as it comes. When the
    client hangs up, the iterator is cancelled, which stops its work.
    ``on_close`` runs once the answer has ended, however it ended (even
    when ``events`` never started: its own ``finally`` would not run)."""

    events: AsyncGenerator[bytes, None]
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    on_close: Callable[[], None] | None = None

    async def send(self, send: Send, request: Request) -> None:
        try:
            await self._send(send, request)
        finally:
            if self.on_close is not None:
                self.on_close()

    async def _send(self, send: Send, request: Request) -> None:
        headers = {"Content-Type": "text/event-stream", "X-Accel-Buffering": "no", **self.headers}
        security_headers.add_to(headers, secure=request.is_secure(), no_store=True)
        events = self.events
        start = {"type": "http.response.start", "status": self.status, "headers": _raw_headers(headers)}
        try:
            await send(start)
        except BaseException:
            await events.aclose()
            raise
        gone = asyncio.ensure_future(request.disconnected())
        try:
            while True:
                step = asyncio.ensure_future(anext(events))
                await asyncio.wait({step, gone}, return_when=asyncio.FIRST_COMPLETED)
                if not step.done():  # the client left: stop the work, send nothing more
                    step.cancel()
                    await asyncio.gather(step, return_exceptions=True)
                    return
                try:
                    chunk = step.result()
                except StopAsyncIteration:
                    break
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            gone.cancel()
            await events.aclose()
