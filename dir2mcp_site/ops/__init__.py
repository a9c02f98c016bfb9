"""The operator's pages: status page and its live stream, health, metrics."""
