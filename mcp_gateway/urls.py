"""Routes of the gateway in Django: the REST mirror of its tools under
``/api/v1/``. The MCP endpoint itself is a plain ASGI app that
``dir2mcp_site/asgi.py`` routes ``server.mcp_path`` to."""

from django.urls import path

from mcp_gateway.rest import api as rest_api

urlpatterns = [
    path("api/v1/", rest_api.urls),
]
