"""Counts the site's requests (admin, status page, health) for ``/metrics``.

The MCP endpoint bypasses Django's middleware; the transport counts its own
requests with :func:`observe.observe_request`.
"""

from __future__ import annotations

from asgiref.sync import iscoroutinefunction, markcoroutinefunction

from corpus import observe


class RequestMetrics:
    sync_capable = True
    async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request):
        if iscoroutinefunction(self):
            return self._acall(request)
        response = self.get_response(request)
        observe.observe_request(request.method, response.status_code, endpoint="site")
        return response

    async def _acall(self, request):
        response = await self.get_response(request)
        observe.observe_request(request.method, response.status_code, endpoint="site")
        return response
