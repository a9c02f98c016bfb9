from django.apps import AppConfig


class McpGatewayConfig(AppConfig):
    name = "mcp_gateway"
    verbose_name = "MCP gateway"

    def ready(self) -> None:
        # The handlers import corpus services that read models: not before the app registry is ready.
        from mcp_gateway import media_tools, registry, tools

        registry.register((*tools.TOOLS, *media_tools.TOOLS))
