from django.apps import AppConfig

from mcp_gateway import registry


def _gateway_tools() -> tuple[registry.Tool, ...]:
    # The handlers import most of corpus (~0.45 s, measured): loaded on the
    # tool table's first use, not by every process that sets up Django.
    from mcp_gateway import media_tools, navigation, read_tools, tools

    return (*tools.TOOLS, *navigation.TOOLS, *read_tools.TOOLS, *media_tools.TOOLS)


class McpGatewayConfig(AppConfig):
    name = "mcp_gateway"
    verbose_name = "MCP gateway"

    def ready(self) -> None:
        registry.load_with(_gateway_tools)
