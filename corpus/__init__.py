"""The corpus: ingestion, indices, retrieval and the commands over them."""

#: dir2mcp's version (pyproject.toml's), in the lowest package so every layer can name it.
__version__ = "0.1.0"
