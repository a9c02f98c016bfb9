"""The site's own middleware (admin, status page, health, metrics):
:class:`RequestMetrics` counts its requests for ``/metrics`` and
:class:`SecurityHeaders` adds the headers every surface sends.

The MCP endpoint and the REST mirror bypass the site's middleware; they
count their own requests with :func:`observe.observe_request` and write the
same headers where they write their answers (``mcp_gateway/security_headers.py``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponseBase

from kernel import observe
from mcp_gateway import security_headers

# Any: Django hands a middleware a sync or an async get_response, told apart
# at run time (iscoroutinefunction); its answer is a response or a coroutine.
GetResponse = Callable[[HttpRequest], Any]


class _AfterResponse:
    """A middleware that works on each answer (:meth:`after`), sync or async
    as the chain below it is."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> HttpResponseBase | Awaitable[HttpResponseBase]:
        is_async = iscoroutinefunction(self)  # a bool: mypy would narrow self by the check itself
        if is_async:
            return self._acall(request)
        response: HttpResponseBase = self.get_response(request)
        self.after(request, response)
        return response

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        response: HttpResponseBase = await self.get_response(request)
        self.after(request, response)
        return response

    def after(self, request: HttpRequest, response: HttpResponseBase) -> None:
        raise NotImplementedError


class RequestMetrics(_AfterResponse):
    def after(self, request: HttpRequest, response: HttpResponseBase) -> None:
        observe.observe_request(request.method, response.status_code, endpoint="site")


class SecurityHeaders(_AfterResponse):
    """``mcp_gateway.security_headers`` on every answer of the site, a
    Content-Security-Policy among them (a view's own value is kept)."""

    def after(self, request: HttpRequest, response: HttpResponseBase) -> None:
        security_headers.add_to(response.headers, secure=request.is_secure())
