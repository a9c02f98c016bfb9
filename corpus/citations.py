"""The one citation formatter (spec §9.3) and the span shape of §15.1.1."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple

from kernel.jsontypes import JsonObject


class SpanForms(NamedTuple):
    """How one span is written: in a citation, in a slice URI's query, and as fields."""

    anchor: str  # after the path in a citation: ``:L10-L20``, ``#p=3``, ``@t=01:05-01:35``
    query: str  # a slice URI's query: ``lines=10-20``, ``page=3``, ``time=65000-95000``
    fields: JsonObject  # ``start_line``/``end_line``, ``page``, or ``start_ms``/``end_ms``


@dataclass(frozen=True)
class SpanRef:
    """Where a chunk came from: ``lines`` (1-based, inclusive), ``page`` or ``time`` (ms)."""

    kind: str
    start: int
    end: int

    def forms(self) -> SpanForms:
        """The span written each way; the one place that switches on its kind
        (any kind but ``page`` and ``time`` is lines)."""
        if self.kind == "page":
            return SpanForms(f"#p={self.start}", f"page={self.start}", {"page": self.start})
        if self.kind == "time":
            return SpanForms(
                f"@t={format_ms(self.start)}-{format_ms(self.end)}",
                f"time={self.start}-{self.end}",
                {"start_ms": self.start, "end_ms": self.end},
            )
        return SpanForms(
            f":L{self.start}-L{self.end}",
            f"lines={self.start}-{self.end}",
            {"start_line": self.start, "end_line": self.end},
        )

    def as_dict(self) -> JsonObject:
        kind = self.kind if self.kind in ("page", "time") else "lines"
        return {"kind": kind, **self.forms().fields}


def format_ms(ms: int) -> str:
    """``mm:ss`` (or ``h:mm:ss`` past an hour)."""
    seconds = max(0, int(ms)) // 1000
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


def format_citation(rel_path: str, span: SpanRef) -> str:
    """``[path:L10-L20]``, ``[path#p=3]`` or ``[path@t=01:05-01:35]``."""
    return f"[{rel_path}{span.forms().anchor}]"


_CITATION_RE = re.compile(r"\[([^\[\]\n]+?(?::L\d+-L\d+|#p=\d+|@t=[\d:]+-[\d:]+))\]")


def place_dict(
    chunk_id: int, rel_path: str, span: SpanRef, label: str | None, details: JsonObject | None = None
) -> JsonObject:
    """A cited chunk's place as JSON, as search hits and answer citations give
    it: its chunk and file, ``details`` (a hit's type, score and snippet), its
    span, and its human label when it has one."""
    out = {"chunk_id": chunk_id, "rel_path": rel_path, **(details or {}), "span": span.as_dict()}
    if label:
        out["label"] = label
    return out


def find_citations(text: str) -> list[str]:
    """Bracketed citations in ``text``, in order of first appearance."""
    seen: dict[str, None] = {}
    for match in _CITATION_RE.finditer(text):
        seen.setdefault(f"[{match.group(1)}]", None)
    return list(seen)
