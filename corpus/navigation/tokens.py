"""The token estimate every budget uses: one token per :data:`CHARS_PER_TOKEN`
characters, rounded up, the usual rule of thumb for English and code (a
client's own tokenizer may count 10–30% either way)."""

from __future__ import annotations

import math

CHARS_PER_TOKEN = 4


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)
