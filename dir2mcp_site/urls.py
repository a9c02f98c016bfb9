from django.conf import settings
from django.contrib import admin
from django.contrib.staticfiles.views import serve as serve_static
from django.http import HttpRequest, HttpResponseBase
from django.urls import URLPattern, URLResolver, include, path, re_path

from dir2mcp_site.ops.logins import ThrottledLoginForm

# Says so when a sign-in is refused by the throttle (dir2mcp_site/ops/logins.py).
admin.site.login_form = ThrottledLoginForm


def static_files(request: HttpRequest, path: str) -> HttpResponseBase:
    """The admin's CSS and JS under daphne, found in the installed apps (no
    collectstatic needed). Behind nginx, nginx serves STATIC_ROOT instead."""
    return serve_static(request, path, insecure=True)


urlpatterns: list[URLPattern | URLResolver] = [
    path("admin/", admin.site.urls),
    path("", include("dir2mcp_site.ops.urls")),
]
if settings.DIR2MCP_SERVE_STATIC:
    urlpatterns.append(re_path(r"^static/(?P<path>.*)$", static_files))
urlpatterns.append(path("", include("mcp_gateway.urls")))
