"""The REST mirror's edge: its one error writer (:func:`error_response`),
CORS for allowed origins, and JSON errors where Django would answer with an
HTML page.

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
  envelope as every other REST error, never Django's HTML;
- every answer carries the security headers and ``Cache-Control: no-store``
  (``security_headers.py``): the mirror skips the site's middleware.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from asgiref.sync import markcoroutinefunction
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse

from kernel import errors
from mcp_gateway import security_headers, transport

ALLOW_METHODS = "GET, POST, OPTIONS"
ALLOW_HEADERS = "Authorization, Content-Type, Accept, PAYMENT-SIGNATURE"
EXPOSE_HEADERS = "Retry-After, WWW-Authenticate, PAYMENT-REQUIRED, PAYMENT-RESPONSE"
CONTENT_TYPE = "application/json; charset=utf-8"  # what django-ninja's JSON renderer sends


def error_response(
    code: str,
    message: str,
    *,
    status: int | None = None,
    headers: dict[str, str] | None = None,
    retryable: bool | None = None,
) -> HttpResponse:
    """Every REST error: the envelope of ``errors.rest_error_body``, with the
    code's status (``errors.http_status``) unless ``status`` says otherwise."""
    body = errors.rest_error_body(code, message, retryable=retryable)
    response = JsonResponse(body, status=status or errors.http_status(code), content_type=CONTENT_TYPE)
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def _is_json(response: HttpResponseBase) -> bool:
    return response.get("Content-Type", "").startswith("application/json")


def _as_envelope(request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
    """Django's HTML 404 and 405 pages as the REST error envelope."""
    if response.status_code == 404 and not _is_json(response):
        return error_response(errors.NOT_FOUND, "no such endpoint; see /api/v1/docs", retryable=False)
    if response.status_code == 405 and not _is_json(response):
        allow = response.get("Allow", "")
        message = f"{request.method} is not allowed here; allowed: {allow}"
        return error_response(errors.METHOD_NOT_ALLOWED, message, headers={"Allow": allow}, retryable=False)
    return response


def _with_length(response: HttpResponseBase) -> None:
    """``Content-Length`` on an answer held whole (every JSON answer; not a
    streamed one, nor a 204 or 304, which may not carry it), as Django's
    CommonMiddleware sets it, which the mirror skips. Without it daphne's
    twisted wrote the answer chunked, as streams are written, so it counted
    against ``server.max_unread_mb``: an answer of known size is never cut
    (``bounded.BoundedChannel.writeSequence``)."""
    if isinstance(response, HttpResponse) and response.status_code not in (204, 304):
        if not response.has_header("Content-Length"):
            response["Content-Length"] = str(len(response.content))


def rest_edge(
    get_response: Callable[[HttpRequest], Awaitable[HttpResponseBase]],
) -> Callable[[HttpRequest], Awaitable[HttpResponseBase]]:
    """Django middleware (async) for the REST mirror."""

    async def middleware(request: HttpRequest) -> HttpResponseBase:
        origin = request.headers.get("Origin")  # an allowed one, or the gate refused the request
        if request.method == "OPTIONS" and origin is not None:
            response: HttpResponseBase = HttpResponse(
                status=204, headers=transport.preflight_headers(ALLOW_METHODS, ALLOW_HEADERS)
            )
        else:
            response = _as_envelope(request, await get_response(request))
        if origin is not None:
            transport.allow_origin(response.headers, origin, EXPOSE_HEADERS)
        security_headers.add_to(response.headers, secure=request.is_secure(), no_store=True)
        _with_length(response)
        return response

    markcoroutinefunction(middleware)
    return middleware
