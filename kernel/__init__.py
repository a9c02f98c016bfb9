"""The shared kernel: what every app of the project may use and which uses none of them."""

#: dir2mcp's version (pyproject.toml's), in the lowest package so every layer can name it.
__version__ = "0.1.0"
