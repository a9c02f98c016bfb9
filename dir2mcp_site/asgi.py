"""ASGI entry point, served by daphne.

Requests to the MCP endpoint and the REST mirror skip the site's middleware
(sessions, CSRF, auth, messages, which only the admin uses): those views do
their own Host, Origin and bearer checks, and each middleware costs a thread
hop per request under ASGI (about 3 ms of CPU per call, docs/benchmarks.md).
Everything else, the admin included, goes through the full stack.
"""

import os

from dir2mcp_site import bootstrap

bootstrap.prepare([])
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dir2mcp_site.settings")

from django.core.asgi import get_asgi_application  # noqa: E402
from django.core.handlers.asgi import ASGIHandler  # noqa: E402
from django.core.handlers.exception import convert_exception_to_response  # noqa: E402

site = get_asgi_application()


class GatewayHandler(ASGIHandler):
    """Django's ASGI handler with an empty middleware chain."""

    def load_middleware(self, is_async=False):
        self._view_middleware = []
        self._template_response_middleware = []
        self._exception_middleware = []
        handler = convert_exception_to_response(self._get_response_async if is_async else self._get_response)
        self._middleware_chain = self.adapt_method_mode(is_async, handler, is_async)


gateway = GatewayHandler()
REST_PREFIX = "/api/v1/"
_mcp_path: list[str] = []


def _is_gateway(path: str) -> bool:
    if not _mcp_path:
        from mcp_gateway import context

        _mcp_path.append("/" + context.mcp_path().strip("/"))
    return path == _mcp_path[0] or path.startswith(REST_PREFIX)


async def application(scope, receive, send):
    if scope["type"] == "http" and _is_gateway(scope.get("path", "")):
        return await gateway(scope, receive, send)
    return await site(scope, receive, send)
