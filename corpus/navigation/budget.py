"""Search under a token budget (issue #32 item 4).

An agent reads hits in rank order, each costing the lines it cites. With a
budget, search returns the cited text itself, as many hits as fit in rank
order, and merges the hits of one file whose line spans overlap or touch
into one passage, so no line is read twice. Tokens are estimated by
:func:`corpus.navigation.tokens.estimate_tokens`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import overload

from corpus.citations import SpanRef, format_citation
from corpus.models import Chunk
from corpus.navigation.tokens import estimate_tokens
from corpus.retrieval import Hit
from kernel.jsontypes import JsonObject

#: what a passage costs beyond its text: its citation line and fields
PASSAGE_OVERHEAD_TOKENS = 24


@dataclass
class Passage:
    """Hits of one file merged into one span; ``best`` is the highest ranked."""

    best: Hit
    span: SpanRef
    chunk_ids: list[int] = field(default_factory=list)
    content: str = ""

    @property
    def tokens(self) -> int:
        return estimate_tokens(self.content) + PASSAGE_OVERHEAD_TOKENS

    def as_dict(self) -> JsonObject:
        """The best hit's fields with the passage's span and text; its snippet
        is empty (the text is there whole: a budget pays for it once)."""
        return self.best.as_dict() | {
            "snippet": "",
            "span": self.span.as_dict(),
            "chunk_ids": self.chunk_ids,
            "content": self.content,
            "tokens": self.tokens,
        }

    def citation(self) -> str:
        return format_citation(self.best.rel_path, self.span)


def merge(hits: list[Hit]) -> list[Passage]:
    """Passages in the rank order of their best hit: line spans of one file
    that overlap or touch become one span (a hit between two passages joins
    them); pages and time ranges stay apart."""
    passages: list[Passage] = []
    for hit in hits:
        touched = [p for p in passages if _touches(p.span, p.best.rel_path, hit)]
        if not touched:
            passages.append(Passage(hit, hit.span, [hit.chunk_id]))
            continue
        first = touched[0]  # the best ranked: the passage keeps its place
        for other in touched[1:]:
            first.chunk_ids += other.chunk_ids
            passages.remove(other)
        spans = [hit.span, *(p.span for p in touched)]
        first.span = SpanRef("lines", min(s.start for s in spans), max(s.end for s in spans))
        first.chunk_ids.append(hit.chunk_id)
    return passages


def _touches(span: SpanRef, rel_path: str, hit: Hit) -> bool:
    if rel_path != hit.rel_path or span.kind != "lines" or hit.span.kind != "lines":
        return False
    return hit.span.start <= span.end + 1 and span.start <= hit.span.end + 1


class Contents:
    """Each passage's text: the cited lines of the text its hits were cut
    from (one read of it per document), or the hit's own text for a page or
    a time range."""

    def __init__(self) -> None:
        self._lines: dict[int, list[str]] = {}

    def __call__(self, passage: Passage) -> str:
        if passage.span.kind != "lines":
            return passage.best.text
        rep_id, text = (
            Chunk.objects.filter(chunk_id=passage.best.chunk_id)
            .values_list("representation_id", "representation__text")
            .first()
        ) or (None, None)
        if rep_id is None:
            return passage.best.text
        lines = self._lines.get(rep_id)
        if lines is None:
            lines = self._lines[rep_id] = (text or "").split("\n")
        return "\n".join(lines[passage.span.start - 1 : passage.span.end])


@overload
def cut_passage(passage: JsonObject, chars: int) -> JsonObject | None: ...
@overload
def cut_passage(passage: JsonObject, chars: None) -> int: ...
def cut_passage(passage: JsonObject, chars: int | None) -> JsonObject | int | None:
    """A passage (as :meth:`Passage.as_dict` gives it) cut to at most
    ``chars`` characters of its text, after its last whole line for a line
    span (its ``end_line`` moved up to match), marked ``truncated``; None
    when not one line fits. ``chars`` None: the length of its text."""
    content = passage.get("content")
    if content is None:  # a hit without its text (search without max_tokens): nothing to cut
        return None if chars is not None else 0
    if chars is None:
        return len(content)
    cut, span = content[:chars], dict(passage["span"])
    if span["kind"] == "lines":
        if len(content) > chars:
            end = cut.rfind("\n")
            if end <= 0:
                return None
            cut = content[:end]
        span["end_line"] = span["start_line"] + cut.count("\n")
    elif not cut:
        return None
    tokens = estimate_tokens(cut) + PASSAGE_OVERHEAD_TOKENS
    return passage | {"content": cut, "span": span, "truncated": True, "tokens": tokens}
