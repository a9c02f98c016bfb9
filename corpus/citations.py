"""The one citation formatter (spec §9.3) and the span shape of §15.1.1."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class SpanRef:
    """Where a chunk came from: ``lines`` (1-based, inclusive), ``page`` or ``time`` (ms)."""

    kind: str
    start: int
    end: int

    def as_dict(self) -> dict:
        if self.kind == "page":
            return {"kind": "page", "page": self.start}
        if self.kind == "time":
            return {"kind": "time", "start_ms": self.start, "end_ms": self.end}
        return {"kind": "lines", "start_line": self.start, "end_line": self.end}


def format_ms(ms: int) -> str:
    """``mm:ss`` (or ``h:mm:ss`` past an hour)."""
    seconds = max(0, int(ms)) // 1000
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


def format_citation(rel_path: str, span: SpanRef) -> str:
    """``[path:L10-L20]``, ``[path#p=3]`` or ``[path@t=01:05-01:35]``."""
    if span.kind == "page":
        return f"[{rel_path}#p={span.start}]"
    if span.kind == "time":
        return f"[{rel_path}@t={format_ms(span.start)}-{format_ms(span.end)}]"
    return f"[{rel_path}:L{span.start}-L{span.end}]"


_CITATION_RE = re.compile(r"\[([^\[\]\n]+?(?::L\d+-L\d+|#p=\d+|@t=[\d:]+-[\d:]+))\]")


def find_citations(text: str) -> list[str]:
    """Bracketed citations in ``text``, in order of first appearance."""
    seen: dict[str, None] = {}
    for match in _CITATION_RE.finditer(text):
        seen.setdefault(f"[{match.group(1)}]", None)
    return list(seen)
