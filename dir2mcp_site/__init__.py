"""The dir2mcp Django project."""

__version__ = "0.1.0"
