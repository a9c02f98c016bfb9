"""One gate for every route: the Host allowlist, the Origin check, and where
a route takes them, the bearer token and the rate limit (issue #24).

``dir2mcp_site/asgi.py`` wraps the whole ASGI application in :func:`gate`, so
``/mcp``, the REST mirror, the admin, ``/ops/``, ``/healthz``, ``/metrics``,
``/static/`` and any unknown path pass the same checks, in this order, before
any of them runs:

1. ``Host`` on ``ALLOWED_HOSTS`` (Django's rule, :meth:`Request.host_allowed`;
   ``up --public`` allows any): else 400.
2. ``Origin``, when one is sent, on ``security.allowed_origins``: else 403
   ``FORBIDDEN_ORIGIN``. A route that does not take the bearer token (the
   admin, ``/ops/``, health, static files, the API docs) also accepts the
   request's own origin, which is what the admin's login form sends when
   the server is reached under a name that is not on the list. Sessions are
   cookies bound to that name, so a page elsewhere gains nothing by it.
3. Where the route takes them, the bearer token (401, constant time) and
   then ``server.rate_limit_per_minute`` (429): ``/mcp``, every ``/api/v1/``
   path but the OpenAPI document and the docs page, and ``/metrics`` when
   the server listens beyond loopback (:func:`beyond_loopback`). A CORS
   preflight (``OPTIONS``) carries no credential and is not asked for one.

The route is read from the path Django will resolve, never from one a
request can shift: daphne copies a ``Daphne-Root-Path`` request header into
``scope["root_path"]``, which Django strips from the path before routing, so
a route decided on the raw path could be one surface to the gate and another
to Django (issue #34). The gate replaces the scope's ``root_path`` with the
deployment's own prefix (``FORCE_SCRIPT_NAME``, ``DJANGO_FORCE_SCRIPT_NAME``;
none by default) and decides on the path less that prefix, which is what
Django routes. ``X-Forwarded-Prefix``, ``X-Script-Name`` and the like are
read by nothing here.

A WebSocket handshake, on any path, is refused (403) before anything runs:
no route speaks WebSocket.

A refusal is written the way its surface writes errors: a JSON-RPC error on
``/mcp``, the REST envelope ``{"error": {"code", "message", "retryable"}}``
everywhere else, with CORS headers for an allowed Origin on ``/mcp`` and
``/api/v1/``. A request that passes carries its :class:`Route` in
``scope[PASSED]``: the application behind dispatches on it, and the REST
mirror refuses a request without it (served some other way, unchecked).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.conf import settings
from django.http.request import split_domain_port

from kernel import errors, observe
from kernel.jsontypes import JsonObject
from mcp_gateway import api, context, current, ratelimit, rest_edge, transport
from mcp_gateway.asgi_io import App, Message, Receive, Request, Response, Scope, Send
from mcp_gateway.listen import parse_listen
from mcp_gateway.transport import HttpError

log = logging.getLogger(__name__)
# Where Django reports a refused Host (settings.LOGGING prints it on one line): a
# misconfigured proxy shows there, whichever route it hit.
host_log = logging.getLogger("django.security.DisallowedHost")

#: The scope key of a request the gate let through: its :class:`Route`.
PASSED = "dir2mcp.route"

# Surfaces: where a request goes and how its refusals are written.
MCP, REST, SITE = "mcp", "rest", "site"
# When a route asks for the bearer token (and so the rate limit).
ALWAYS, NEVER, BEYOND_LOOPBACK = "always", "never", "beyond loopback"

#: The one place a route that takes no token takes a body: the admin's forms
#: (its sign-in, an action on a page of rows), each at most SITE_BODY_MAX bytes.
ADMIN_PREFIX = "/admin/"
SITE_BODY_MAX = 64 * 1024
REST_PREFIX = "/api/v1/"
#: The REST mirror's public pages (rest.py: openapi_url, docs_url): they hold no data.
REST_PUBLIC = frozenset({REST_PREFIX + "openapi.json", REST_PREFIX + "docs"})
METRICS_PATH = "/metrics"


@dataclass(frozen=True)
class Route:
    """What the gate asks of a path, and where the request goes after it."""

    surface: str  # MCP, REST or SITE
    bearer: str  # ALWAYS, NEVER or BEYOND_LOOPBACK


MCP_ROUTE = Route(MCP, ALWAYS)
REST_ROUTE = Route(REST, ALWAYS)
REST_DOCS = Route(REST, NEVER)
METRICS_ROUTE = Route(SITE, BEYOND_LOOPBACK)
SITE_ROUTE = Route(SITE, NEVER)

_mcp_path: list[str] = []


def route_of(path: str) -> Route:
    if not _mcp_path:  # known once the settings are: the installed context's, or the config's
        _mcp_path.append("/" + current.mcp_path().strip("/"))
    if path == _mcp_path[0]:
        return MCP_ROUTE
    if path.startswith(REST_PREFIX):
        return REST_DOCS if path in REST_PUBLIC else REST_ROUTE
    if path == METRICS_PATH:
        return METRICS_ROUTE
    return SITE_ROUTE


def resolved(scope: Scope) -> tuple[Scope, str]:
    """``scope`` with the deployment's prefix as its ``root_path``, and the
    path Django routes for it (``ASGIRequest.path_info``, by the same rule)."""
    prefix = settings.FORCE_SCRIPT_NAME or ""
    path = scope.get("path", "")
    return {**scope, "root_path": prefix}, path.removeprefix(prefix) if prefix else path


def beyond_loopback(ctx: context.Context) -> bool:
    """Whether the server may be reached from other machines: ``up --public``
    (or ``server.public``, ``DIR2MCP_PUBLIC``), or a ``--listen`` address that
    is not loopback. A bare daphne deployment says so with ``DIR2MCP_PUBLIC=1``
    (its proxy restricts ``/metrics`` otherwise, as deploy/nginx does)."""
    config = ctx.config
    if ctx.public or config.server.public:
        return True
    try:
        return not parse_listen(config.server.listen).loopback
    except errors.Dir2mcpError:  # unreadable: assume the worst
        return True


async def check_rate(request: Request, ctx: context.Context) -> None:
    """429 once this client (address and credential) is over its budget.
    Counted in Redis, when configured, off the event loop (session 29)."""
    bucket = ratelimit.limiter(ctx.config.server.rate_limit_per_minute)
    if bucket is None:
        return
    key = ratelimit.client_key("", request.client, request.headers.get("x-real-ip"), ctx.auth.token)
    wait = await ratelimit.retry_after_async(bucket, key)
    if wait:
        raise HttpError(
            429,
            errors.RATE_LIMITED,
            f"too many requests; retry in {wait}s",
            headers={"Retry-After": str(wait)},
        )


def own_origin(request: Request, scope: JsonObject) -> str:
    """``scheme://host:port`` of the request itself, as a browser names the
    page it came from (behind a proxy, from its forwarded headers, as Django)."""
    scheme = scope.get("scheme") or "http"
    proxy = settings.SECURE_PROXY_SSL_HEADER
    if proxy:
        name, secure = proxy
        forwarded = request.headers.get(name.removeprefix("HTTP_").replace("_", "-").lower())
        if forwarded is not None:
            scheme = "https" if forwarded.split(",", 1)[0].strip() == secure else "http"
    domain, port = split_domain_port(request.host())
    return f"{scheme}://{domain}:{port or (443 if scheme == 'https' else 80)}"


def check_host(request: Request) -> None:
    """400 unless the ``Host`` is on ``ALLOWED_HOSTS``."""
    if not request.host_allowed():
        host_log.warning("Invalid HTTP_HOST header: %r; it is not on ALLOWED_HOSTS", request.host()[:200])
        raise HttpError(400, errors.FORBIDDEN_ORIGIN, "Host header is not allowed")


def check_origin(request: Request, route: Route, scope: JsonObject, ctx: context.Context) -> None:
    """403 ``FORBIDDEN_ORIGIN`` for a sent ``Origin`` that ``route`` does not accept."""
    origin = request.headers.get("origin")
    if origin is None:
        return
    allowed = ctx.allowed_origins
    if route.bearer == NEVER:
        allowed = (*allowed, own_origin(request, scope))
    transport.check_origin(origin, allowed)


async def check_edge(request: Request, route: Route, scope: JsonObject) -> context.Context | None:
    """Host, then Origin; raises :class:`HttpError`. The context, when the
    Origin check needed it."""
    check_host(request)
    if "origin" not in request.headers:
        return None
    ctx = await api.context_async()
    check_origin(request, route, scope, ctx)
    return ctx


def _never_asks(request: Request, route: Route) -> bool:
    """Whether ``route`` takes no token from this request whatever the
    context (a public route, a CORS preflight)."""
    return route.bearer == NEVER or (request.method == "OPTIONS" and route.surface != SITE)


def asks_credential(request: Request, route: Route, ctx: context.Context) -> bool:
    """Whether ``route`` asks this request for the bearer token (and so the rate limit)."""
    if _never_asks(request, route):
        return False
    return route.bearer != BEYOND_LOOPBACK or beyond_loopback(ctx)


async def check_credential(request: Request, route: Route, ctx: context.Context | None) -> None:
    """The bearer token, then the rate limit, where ``route`` takes them."""
    if _never_asks(request, route):
        return  # known without the context
    ctx = ctx or await api.context_async()
    if not asks_credential(request, route, ctx):
        return
    transport.check_bearer(request.headers.get("authorization"), ctx.auth.token)
    await check_rate(request, ctx)


async def _no_body() -> Message:
    raise RuntimeError("a request head checked before its body has no body to read")


def head_refusal(scope: Scope) -> Response | None:
    """The gate's refusal of a request whose head alone has arrived, or None
    when the gate may let it pass (or cannot tell yet: no context installed).

    Called by the connection (``mcp_gateway/bounded.py``) before it reads a
    request body: daphne hands a request on only once its whole body is in,
    so until session 28 a client without the token had up to 4 MiB read and
    buffered (on disk past 100 kB, and counted against every client's
    ``server.max_body_buffer_mb``) before its 401, held its connection for
    as long as it trickled the body, and was invited to send it with
    ``100 Continue``. Host, Origin and the bearer token are checked here as
    the gate checks them, in the same order and with the same answers; the
    rate limit is left to the gate (it counts the request).

    A route that takes no token takes no body either (:func:`check_body`),
    but a POST of the admin's, up to :data:`SITE_BODY_MAX`: until session
    29 anyone could have 4 MiB read on any site page, a CORS preflight or
    the admin's sign-in before its answer."""
    ctx = current.peek()
    if ctx is None:
        return None
    scope, path = resolved(scope)
    request = Request(scope, _no_body)
    route = route_of(path)
    cors_origin = None
    try:
        check_host(request)
        check_origin(request, route, scope, ctx)
        cors_origin = request.headers.get("origin")
        if asks_credential(request, route, ctx):
            transport.check_bearer(request.headers.get("authorization"), ctx.auth.token)
        else:
            check_body(request, path)
    except HttpError as exc:
        if route.surface != REST:  # counted as the gate counts its refusals
            observe.observe_request(request.method, exc.status, endpoint=route.surface)
        return refusal(route, exc, cors_origin)
    return None


def check_body(request: Request, path: str) -> None:
    """For a request that announces a body (this is asked of no other) on a
    route that takes no token: 413 unless it is a POST to the admin of at
    most :data:`SITE_BODY_MAX` bytes with its length declared (a form, as a
    browser sends it: a chunked one is refused 411)."""
    if request.method != "POST" or not path.startswith(ADMIN_PREFIX):
        what = (
            "a CORS preflight (OPTIONS)" if request.method == "OPTIONS" else f"{request.method} {path[:200]}"
        )
        raise HttpError(413, errors.INVALID_RANGE, f"{what} takes no request body")
    declared = request.headers.get("content-length")
    if declared is None:
        raise HttpError(411, errors.INVALID_FIELD, "a form sent to the admin must declare its Content-Length")
    if not declared.isdigit() or int(declared) > SITE_BODY_MAX:
        raise HttpError(
            413, errors.INVALID_RANGE, f"a form sent to the admin is at most {SITE_BODY_MAX} bytes"
        )


def refusal(route: Route, exc: HttpError, cors_origin: str | None) -> Response:
    if route.surface == MCP:
        response = Response.json(exc.body(), exc.status, exc.headers)
        expose = api.EXPOSED
    else:
        response = Response.json(errors.rest_error_body(exc.code, exc.message), exc.status, exc.headers)
        expose = rest_edge.EXPOSE_HEADERS
    if cors_origin and route.surface != SITE:
        transport.allow_origin(response.headers, cors_origin, expose)
    return response


def gate(app: App) -> App:
    """``app`` behind the gate: every HTTP request is checked before it runs."""

    async def gated(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            return await refuse_websocket(receive, send)
        if scope["type"] != "http":  # lifespan
            return await app(scope, receive, send)
        scope, path = resolved(scope)
        request = Request(scope, receive)
        route = route_of(path)
        cors_origin = None  # set once the Origin is known to be allowed
        try:
            ctx = await check_edge(request, route, scope)
            cors_origin = request.headers.get("origin")
            await check_credential(request, route, ctx)
        except HttpError as exc:
            return await _refuse(request, route, exc, cors_origin, send)
        except errors.Dir2mcpError as exc:  # the server itself cannot serve (config, store)
            log.error("cannot serve %s: %s", path, exc)
            return await _refuse(request, route, transport.unavailable(exc), cors_origin, send)
        except Exception:  # a bug: logged here, a JSON error (never an HTML page) on the wire
            log.exception("the gate failed on %s %s", request.method, path)
            return await _refuse(request, route, transport.internal_error(), cors_origin, send)
        return await app({**scope, PASSED: route}, receive, send)

    return gated


async def refuse_websocket(receive: Receive, send: Send) -> None:
    """No route speaks WebSocket, but daphne accepts the handshake on any
    path and hands it on as a ``websocket`` scope: refused here, before
    anything (Django raised on it, a traceback in the log for each
    handshake from anyone; found 2026-11-29). Closing before accepting is
    answered 403 by daphne."""
    message = await receive()
    if message["type"] == "websocket.connect":
        await send({"type": "websocket.close", "code": 1008})


async def _refuse(
    request: Request, route: Route, exc: HttpError, cors_origin: str | None, send: Send
) -> None:
    response = refusal(route, exc, cors_origin)
    if route.surface != REST:  # the REST mirror is not counted (it skips the site's middleware)
        observe.observe_request(request.method, response.status, endpoint=route.surface)
    await response.send(send, request)
