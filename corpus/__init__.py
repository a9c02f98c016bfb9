"""The corpus: ingestion, indices, retrieval and the commands over them."""
