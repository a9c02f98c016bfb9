"""Admin sign-in throttled per client and per username (issue #34).

Each password check costs about 0.9 s of CPU (PBKDF2 at Django's 1,000,000
iterations), so a guesser is refused *before* the hash is computed: the one
authentication backend (:class:`ThrottledModelBackend`) looks up both
counters first and raises ``PermissionDenied``, which ends Django's
``authenticate()`` at once. A failed check counts against the client's
address and against the username, so neither fresh sessions, nor another
username from the same address, nor many addresses on one username get
more than ``DIR2MCP_LOGIN_FAILURES`` tries; one more comes back every
``DIR2MCP_LOGIN_WINDOW / DIR2MCP_LOGIN_FAILURES`` seconds. While locked, the
right password is refused too.

The counters are the gate's (``mcp_gateway/ratelimit.py``): memory of this
process, or Redis shared by every process when ``REDIS_URL`` is set. Nothing
is written to the database, so a flood of wrong passwords never competes
with the indexer for SQLite's write lock.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest

from mcp_gateway import ratelimit

#: The request attribute naming the seconds a refused sign-in must wait.
LOCKED_FOR = "dir2mcp_login_locked_for"


def client_address(request: HttpRequest) -> str:
    """The client's address (:func:`mcp_gateway.ratelimit.client_address`)."""
    return ratelimit.client_address(request.META.get("REMOTE_ADDR", ""), request.META.get("HTTP_X_REAL_IP"))


def _keys(request: HttpRequest, username: str) -> tuple[str, str]:
    return f"login|client|{client_address(request)}", f"login|user|{username.casefold()}"


def _limiter() -> ratelimit.RateLimiter | ratelimit.RedisRateLimiter:
    return ratelimit.failure_limiter(settings.DIR2MCP_LOGIN_FAILURES, settings.DIR2MCP_LOGIN_WINDOW)


def locked_for(request: HttpRequest, username: str) -> int:
    """0 when a sign-in as ``username`` from this client may be checked; else
    the seconds until it may."""
    limiter = _limiter()
    return max(limiter.blocked(key) for key in _keys(request, username))


def count_failure(request: HttpRequest, username: str) -> None:
    limiter = _limiter()
    for key in _keys(request, username):
        limiter.retry_after(key)


class ThrottledModelBackend(ModelBackend):
    """Django's password check, refused before it runs while the client or
    the username is locked, and counted when it fails."""

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,  # Any: ModelBackend.authenticate's own signature
    ) -> User | None:
        if request is None:  # not a web sign-in (createadmin, a shell): nothing to throttle by
            return super().authenticate(request, username, password, **kwargs)
        name = str(username or kwargs.get("username") or "")
        wait = locked_for(request, name)
        if wait:
            setattr(request, LOCKED_FOR, wait)
            raise PermissionDenied(f"too many failed sign-ins; retry in {wait}s")
        user = super().authenticate(request, username, password, **kwargs)
        if user is None:
            count_failure(request, name)
        return user


class ThrottledLoginForm(AdminAuthenticationForm):
    """The admin's login form, saying when a sign-in was refused unchecked."""

    def clean(self) -> dict[str, Any]:  # Any: Form.clean's signature (cleaned values of every field type)
        try:
            return super().clean()
        except forms.ValidationError:
            wait = getattr(self.request, LOCKED_FOR, 0)
            if wait:
                minutes = max(1, -(-wait // 60))
                raise forms.ValidationError(
                    f"Too many failed sign-ins from this address or for this username. "
                    f"Try again in {minutes} minute{'s' if minutes > 1 else ''}.",
                    code="throttled",
                ) from None
            raise
