"""ASGI entry point, served by daphne.

Every request first passes the gate (``mcp_gateway/route_gate.py``): the
Host allowlist, the Origin check, and where the route takes them the bearer
token and the rate limit, the same for every route. Then the MCP endpoint is
a plain ASGI app (``mcp_gateway/api.py``) that skips Django's request
machinery, which costs thread hops on every call (docs/benchmarks.md). The
REST mirror is a Django view that skips the site's middleware (sessions,
CSRF, auth, messages, which only the admin uses). Everything else, the admin
included, goes through the full stack.
"""

import os
from collections.abc import Awaitable, Callable
from typing import cast

from dir2mcp_site import bootstrap
from dir2mcp_site.cli import load_settings_or_exit

bootstrap.prepare([])
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dir2mcp_site.settings")
load_settings_or_exit()  # a bad setting is one CONFIG_INVALID line and exit 2, not a traceback

from django.core.asgi import get_asgi_application  # noqa: E402
from django.core.handlers.asgi import ASGIHandler  # noqa: E402
from django.core.handlers.exception import convert_exception_to_response  # noqa: E402
from django.http import HttpRequest, HttpResponseBase  # noqa: E402

site = get_asgi_application()

# These need the app registry ready.
from mcp_gateway import api, route_gate  # noqa: E402
from mcp_gateway.asgi_io import Receive, Scope, Send  # noqa: E402
from mcp_gateway.rest_edge import rest_edge  # noqa: E402

# What adapt_method_mode returns when asked for async (its stub says either).
AsyncGetResponse = Callable[[HttpRequest], Awaitable[HttpResponseBase]]


class GatewayHandler(ASGIHandler):
    """Django's ASGI handler for the REST mirror: none of the site's
    middleware, only the mirror's own edge (CORS, JSON errors)."""

    def load_middleware(self, is_async: bool = False) -> None:
        self._view_middleware: list[Callable[..., object]] = []
        self._template_response_middleware: list[Callable[..., object]] = []
        self._exception_middleware: list[Callable[..., object]] = []
        # Django's BaseHandler defines both; django-stubs does not list its private methods.
        get_response = self._get_response_async if is_async else self._get_response  # type: ignore[attr-defined]
        handler = convert_exception_to_response(get_response)
        handler = self.adapt_method_mode(is_async, handler, is_async)
        if is_async:  # under ASGI, the REST mirror's CORS and JSON 404/405 (mcp_gateway/rest_edge.py)
            handler = convert_exception_to_response(rest_edge(cast(AsyncGetResponse, handler)))
        self._middleware_chain = handler


gateway = GatewayHandler()


async def routes(scope: Scope, receive: Receive, send: Send) -> None:
    """Where a request the gate let through goes (it names the surface)."""
    if scope["type"] == "http":
        surface = scope[route_gate.PASSED].surface
        if surface == route_gate.MCP:
            return await api.app(scope, receive, send)
        if surface == route_gate.REST:
            return await gateway(scope, receive, send)
    return await site(scope, receive, send)


application = route_gate.gate(routes)
