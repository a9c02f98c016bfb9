"""The security headers of every answer, whichever surface writes it (issue #34).

Four writers, each calling :func:`add_to` once: the MCP endpoint and the
gate's refusals (``asgi_io.Response`` and ``StreamResponse``), the REST
mirror's edge (``rest_edge.py``), the site's middleware (the admin, the
status page, health, metrics; ``dir2mcp_site/ops/middleware.py``), and the
connection's own refusals before any app runs (408, 413, 414, 431;
``bounded.py``). So every
route sends the same ``X-Content-Type-Options``, ``X-Frame-Options``,
``Referrer-Policy``, ``Cross-Origin-Opener-Policy`` and
``Content-Security-Policy``, and ``Strict-Transport-Security`` over https.

An HTML page gets :data:`PAGE_POLICY`: scripts, styles, fonts and fetches
from the server itself only (the admin, the status page and Swagger UI load
every asset from ``/static/``; Swagger's CSS draws icons as ``data:`` images).
Anything else (JSON, SSE, text) gets :data:`DATA_POLICY`, which lets nothing
run should a browser ever render it. The MCP and REST surfaces, which carry
corpus text, also send ``Cache-Control: no-store``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from django.conf import settings

PAGE_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "font-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    )
)
DATA_POLICY = "default-src 'none'; frame-ancestors 'none'"
NO_STORE = "no-store"


def security_headers(content_type: str, *, secure: bool) -> dict[str, str]:
    """The headers for an answer of ``content_type``; ``secure``: sent over https.

    Values Django's own middleware also sends come from the same settings,
    so the site and the gateway cannot disagree."""
    is_page = content_type.split(";", 1)[0].strip().lower() == "text/html"
    headers = {
        "X-Content-Type-Options": "nosniff",
        "X-Frame-Options": settings.X_FRAME_OPTIONS,
        "Referrer-Policy": settings.SECURE_REFERRER_POLICY,
        "Cross-Origin-Opener-Policy": settings.SECURE_CROSS_ORIGIN_OPENER_POLICY,
        "Content-Security-Policy": PAGE_POLICY if is_page else DATA_POLICY,
    }
    if secure and settings.SECURE_HSTS_SECONDS:
        hsts = f"max-age={settings.SECURE_HSTS_SECONDS}"
        if settings.SECURE_HSTS_INCLUDE_SUBDOMAINS:
            hsts += "; includeSubDomains"
        headers["Strict-Transport-Security"] = hsts
    return headers


class Headers(Protocol):
    """A response's headers: a dict, or Django's ``ResponseHeaders`` (not a MutableMapping)."""

    def items(self) -> Iterable[tuple[str, str]]: ...
    def setdefault(self, key: str, value: str) -> object: ...
    def __setitem__(self, key: str, value: str) -> None: ...


def add_to(headers: Headers, *, secure: bool, no_store: bool = False) -> None:
    """Add the security headers to a response's ``headers`` (a value already
    there is kept); with ``no_store``, ``Cache-Control: no-store`` replaces
    any other caching rule."""
    content_type = next((value for name, value in headers.items() if name.lower() == "content-type"), "")
    for name, value in security_headers(content_type, secure=secure).items():
        if value:
            headers.setdefault(name, value)
    if no_store:
        headers["Cache-Control"] = NO_STORE
