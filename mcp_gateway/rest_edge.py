"""The REST mirror's edge: CORS for allowed origins, and JSON errors where
Django would answer with an HTML page.

It wraps every ``/api/v1/`` request (``dir2mcp_site/asgi.py`` installs it as
the only middleware of the gateway's Django handler), behind the gate every
route passes (``mcp_gateway/route_gate.py``), which has already refused a
foreign Host or Origin (403 ``FORBIDDEN_ORIGIN``, as ``/mcp`` answers), a
missing or wrong bearer token and a client over its rate. So here:

- a CORS preflight (``OPTIONS`` with ``Origin``) gets 204 with the allowed
  methods and headers;
- answers to a request with an ``Origin`` (an allowed one: the gate let it
  through) carry ``Access-Control-Allow-Origin`` and ``Vary: Origin``,
  errors included, so a browser can read the envelope (and the x402
  ``PAYMENT-REQUIRED`` / ``PAYMENT-RESPONSE`` headers);
- an unknown route (404) or method (405, ``Allow`` kept) gets the same error
  envelope as every other REST error, never Django's HTML.
"""

from __future__ import annotations

from asgiref.sync import markcoroutinefunction
from django.http import HttpRequest, HttpResponse

ALLOW_METHODS = "GET, POST, OPTIONS"
ALLOW_HEADERS = "Authorization, Content-Type, Accept, PAYMENT-SIGNATURE"
EXPOSE_HEADERS = "Retry-After, WWW-Authenticate, PAYMENT-REQUIRED, PAYMENT-RESPONSE"
METHOD_NOT_ALLOWED = "METHOD_NOT_ALLOWED"


def _envelope(code: str, message: str, status: int, headers: dict | None = None) -> HttpResponse:
    # Imported on use: rest.py builds the whole API (ninja, every tool's models), which the
    # gate importing this module at startup must not wait for (mcp_gateway/server.py _load_urls).
    from mcp_gateway.rest import error_response

    return error_response(code, message, status=status, headers=headers, retryable=False)


def _with_cors(response: HttpResponse, origin: str) -> HttpResponse:
    response["Access-Control-Allow-Origin"] = origin
    response["Access-Control-Expose-Headers"] = EXPOSE_HEADERS
    response["Vary"] = "Origin"
    return response


def _is_json(response: HttpResponse) -> bool:
    return response.get("Content-Type", "").startswith("application/json")


def rest_edge(get_response):
    """Django middleware (async) for the REST mirror."""

    async def middleware(request: HttpRequest) -> HttpResponse:
        origin = request.headers.get("Origin")  # an allowed one, or the gate refused the request
        if request.method == "OPTIONS" and origin is not None:
            response = HttpResponse(status=204)
            response["Access-Control-Allow-Methods"] = ALLOW_METHODS
            response["Access-Control-Allow-Headers"] = ALLOW_HEADERS
            response["Access-Control-Max-Age"] = "600"
            return _with_cors(response, origin)
        response = await get_response(request)
        if response.status_code == 404 and not _is_json(response):
            response = _envelope("NOT_FOUND", "no such endpoint; see /api/v1/docs", 404)
        elif response.status_code == 405 and not _is_json(response):
            allow = response.get("Allow", "")
            response = _envelope(
                METHOD_NOT_ALLOWED,
                f"{request.method} is not allowed here; allowed: {allow}",
                405,
                {"Allow": allow},
            )
        return _with_cors(response, origin) if origin is not None else response

    markcoroutinefunction(middleware)
    return middleware
