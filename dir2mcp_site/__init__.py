"""The dir2mcp Django project."""
