"""Routes of the gateway: the MCP endpoint at ``server.mcp_path``."""

from django.urls import path

from mcp_gateway import context
from mcp_gateway.api import mcp_endpoint

urlpatterns = [
    path(context.mcp_path().strip("/"), mcp_endpoint, name="mcp"),
]
