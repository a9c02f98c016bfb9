"""Grounding checks (issue #32 item 7): is each citation in a text real?

For every citation in the §9.3 form (``[path:L1-L9]``, ``[doc.pdf#p=3]``,
``[talk.wav@t=01:05-01:35]``) the cited slice is opened as ``open_file``
opens it (the one check and open: containment, exclusions, secrets) and
checked: the file exists, the span lies inside it, and every quotation the
text makes right before the citation (in "double quotes", “curly quotes” or
`backticks`, since the previous citation) is found in the slice, compared
with whitespace and case folded.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from corpus import files
from corpus.citations import find_citations
from corpus.security import ExclusionEngine
from kernel import errors
from kernel.jsontypes import JsonObject

#: citations checked in one text; the rest are counted, not opened
MAX_CITATIONS = 50
#: shorter quotations say too little to check
MIN_QUOTE_CHARS = 8
_SLICE_CHARS = 50_000
# Numbers of at most 18 digits and clocks of at most three parts (h:m:s):
# a citation's numbers come from the caller, and Python's int() refuses
# 4,300 digits (an INTERNAL_ERROR) and a clock of 49,000 parts cost seconds of
# big-integer arithmetic (found 2026-11-29). Anything else is no citation.
_NUMBER = r"\d{1,18}"
_CLOCK = rf"(?:{_NUMBER}:){{0,2}}{_NUMBER}"
_LINES = re.compile(rf"^(?P<path>.+):L(?P<start>{_NUMBER})-L(?P<end>{_NUMBER})$")
_PAGE = re.compile(rf"^(?P<path>.+)#p=(?P<page>{_NUMBER})$")
_TIME = re.compile(rf"^(?P<path>.+)@t=(?P<start>{_CLOCK})-(?P<end>{_CLOCK})$")
_QUOTE = re.compile(r"\"([^\"\n]+)\"|“([^”\n]+)”|`([^`\n]+)`")


def parse(citation: str) -> tuple[str, JsonObject]:
    """A citation's path and the ``open_file`` arguments of its span."""
    inner = citation.strip()[1:-1]
    if match := _LINES.match(inner):
        return match["path"], {"start_line": int(match["start"]), "end_line": int(match["end"])}
    if match := _PAGE.match(inner):
        return match["path"], {"page": int(match["page"])}
    if match := _TIME.match(inner):
        return match["path"], {"start_ms": _ms(match["start"]), "end_ms": _ms(match["end"])}
    raise errors.Dir2mcpError(errors.INVALID_FIELD, f"{citation} is not a citation")


def _ms(clock: str) -> int:
    seconds = 0
    for part in clock.split(":"):
        seconds = seconds * 60 + int(part or 0)
    return seconds * 1000


def _fold(text: str) -> str:
    return " ".join(text.split()).casefold()


def verify(engine: ExclusionEngine, text: str, *, check: Callable[[], None] = lambda: None) -> JsonObject:
    """Each citation of ``text`` checked, in order of first appearance.
    ``check`` is called as each slice is read: a caller that stops the work raises from it."""
    cited = find_citations(text)
    checked = [_check(engine, text, citation, check) for citation in cited[:MAX_CITATIONS]]
    return {
        "citations": checked,
        "checked": len(checked),
        "unchecked": max(0, len(cited) - MAX_CITATIONS),
        "ok": sum(1 for c in checked if c["ok"]),
        "all_ok": all(c["ok"] for c in checked),
    }


def _check(engine: ExclusionEngine, text: str, citation: str, check: Callable[[], None]) -> JsonObject:
    out: JsonObject = {"citation": citation, "exists": False, "in_bounds": False, "quotes": [], "ok": False}
    try:
        rel_path, span = parse(citation)
        opened = files.open_file(engine, rel_path=rel_path, max_chars=_SLICE_CHARS, check=check, **span)
    except errors.Dir2mcpError as exc:
        out["exists"] = exc.code in (errors.INVALID_RANGE, errors.DOC_TYPE_UNSUPPORTED)
        return out | {"error": exc.as_dict()}
    out["rel_path"] = opened["rel_path"]
    out["exists"] = True
    # A slice cut at the size limit covers less than it was asked: not a sign the span is wrong.
    out["in_bounds"] = _within(span, opened.get("span")) or opened["truncated"]
    slice_text = _fold(opened["content"])
    out["quotes"] = [
        {"text": quote, "found": _fold(quote) in slice_text} for quote in _quotes_before(text, citation)
    ]
    out["ok"] = out["in_bounds"] and all(q["found"] for q in out["quotes"])
    return out


def _within(asked: JsonObject, served: JsonObject | None) -> bool:
    """Whether the slice served covers the whole span asked for."""
    if served is None:
        return False
    if "start_line" in asked:
        return bool(
            served.get("end_line", 0) >= asked["end_line"] and asked["start_line"] <= asked["end_line"]
        )
    if "page" in asked:
        return bool(served.get("page") == asked["page"])
    return bool(
        served.get("start_ms", -1) <= asked["start_ms"] and served.get("end_ms", -1) >= asked["end_ms"]
    )


def _quotes_before(text: str, citation: str) -> list[str]:
    """The quotations between the previous citation (or the line's start) and
    this one's first appearance."""
    at = text.find(citation)
    start = max(text.rfind("]", 0, at) + 1, text.rfind("\n", 0, at) + 1)
    return [
        next(group for group in match.groups() if group)
        for match in _QUOTE.finditer(text, start, at)
        if len(next(group for group in match.groups() if group).strip()) >= MIN_QUOTE_CHARS
    ]
