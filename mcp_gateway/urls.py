"""Routes of the gateway: the MCP endpoint at ``server.mcp_path``, and the
REST mirror of its tools under ``/api/v1/``."""

from django.urls import path

from mcp_gateway import context
from mcp_gateway.api import mcp_endpoint
from mcp_gateway.rest import api as rest_api

urlpatterns = [
    path(context.mcp_path().strip("/"), mcp_endpoint, name="mcp"),
    path("api/v1/", rest_api.urls),
]
