"""Answers with citations (spec §9.3–9.4).

With a chat model, the retrieved chunks go into the prompt, each headed by
the exact citation the model must copy; the reply's citations are checked
against those contexts. Without one (or with ``mode="search_only"``) the
answer is the list of hits with their citations.

Every answer says which mode answered (``mode``: ``answer`` when the chat
model wrote it, else ``search_only``) and why (``generation``: its status,
the ``reason`` and a ``message`` when no model wrote it, the ``model`` that
did); a search-only answer ends with a line saying why.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from corpus.citations import SpanRef, find_citations, format_citation, place_dict
from corpus.index.dense import status as dense_status
from corpus.providers.base import ChatMessage, ChatModel
from corpus.retrieval import Filters, Hit, Searcher, SearchResult
from corpus.status import no_chat_reason
from kernel import errors
from kernel.config import Config
from kernel.jsontypes import JsonObject
from kernel.output import printable

log = logging.getLogger(__name__)

MODES = ("answer", "search_only")
#: ``generation.reason``: why no chat model wrote the answer
REASONS = ("search_only", "no_chat_model", "generate_answer_off", "no_hits", "chat_failed")
INSTRUCTIONS = (
    "Answer the question using only the numbered sources below. After every claim, cite its source by "
    "copying the source's bracketed citation exactly, for example {example}. If the sources do not "
    "contain the answer, say so plainly."
)


@dataclass(frozen=True)
class Citation:
    chunk_id: int
    rel_path: str
    span: SpanRef
    #: the hit's human pointer ("slide 7", "sheet 'Q2'"), if its span has one
    label: str | None = None

    @property
    def text(self) -> str:
        return format_citation(self.rel_path, self.span)

    def as_dict(self) -> JsonObject:
        return place_dict(self.chunk_id, self.rel_path, self.span, self.label)


@dataclass(frozen=True)
class Answer:
    question: str
    answer: str
    citations: list[Citation]
    hits: list[Hit]
    indexing_complete: bool
    generated: bool
    #: the search's dense status (corpus/index/dense/status.py): "unavailable" means lexical-only hits
    dense: JsonObject = field(default_factory=dense_status.off)
    #: "weak" when nothing matched the question well (corpus/ranking.py)
    match: str = "good"
    #: whether the chat model wrote the answer: ok (with its ``model``), off
    #: (not asked for, no model, generation turned off, nothing retrieved) or
    #: unavailable (it failed: the answer is the list of hits), in the shape
    #: of ``dense`` plus ``reason`` (one of REASONS), ``message`` and ``model``
    generation: JsonObject = field(default_factory=dense_status.off)

    @property
    def mode(self) -> str:
        """The mode that answered: ``answer`` (the chat model) or ``search_only``."""
        return "answer" if self.generated else "search_only"

    def as_dict(self) -> JsonObject:
        return {
            "question": self.question,
            "answer": self.answer,
            "citations": [c.as_dict() for c in self.citations],
            "hits": [h.as_dict() for h in self.hits],
            "indexing_complete": self.indexing_complete,
            "dense": dict(self.dense),
            "match": self.match,
            "mode": self.mode,
            "generation": dict(self.generation),
        }


def citation_of(hit: Hit) -> Citation:
    return Citation(hit.chunk_id, hit.rel_path, hit.span, hit.label)


def build_prompt(question: str, hits: list[Hit], config: Config) -> tuple[list[ChatMessage], list[Hit]]:
    """System prompt, instructions and as many contexts as fit the budget."""
    budget = config.rag.max_context_chars
    used: list[Hit] = []
    blocks: list[str] = []
    for number, hit in enumerate(hits, start=1):
        header = f"Source {number} {format_citation(hit.rel_path, hit.span)}\n"
        room = budget - sum(len(b) for b in blocks) - len(header)
        if room < 200:
            break
        blocks.append(header + hit.text[:room] + "\n")
        used.append(hit)
    example = format_citation(used[0].rel_path, used[0].span) if used else "[src/app.py:L10-L20]"
    system = config.rag.system_prompt.strip() + "\n\n" + INSTRUCTIONS.format(example=example)
    user = "Sources:\n\n" + "\n".join(blocks) + f"\nQuestion: {question}"
    return [ChatMessage("system", system), ChatMessage("user", user)], used


def _label(hit: Hit) -> str:
    return f" ({hit.label})" if hit.label else ""


def search_only_text(hits: list[Hit]) -> str:
    """One line a hit. A name or snippet from the directory is made
    :func:`printable`: a newline in a file's name forged a hit of its
    choosing, and an ESC in either drove the terminal of ``dir2mcp ask``
    (the hits themselves keep the exact names)."""
    if not hits:
        return "No matching content found."
    lines = [
        printable(f"{n}. {format_citation(h.rel_path, h.span)}{_label(h)} {h.snippet}")
        for n, h in enumerate(hits, start=1)
    ]
    return "Top matches:\n" + "\n".join(lines)


def ask(
    question: str,
    *,
    searcher: Searcher,
    chat: ChatModel | None,
    config: Config,
    k: int = 10,
    mode: str = "answer",
    index: str = "auto",
    filters: Filters | None = None,
    on_retrieved: Callable[[SearchResult], None] | None = None,
) -> Answer:
    if mode not in MODES:
        raise errors.Dir2mcpError(errors.INVALID_FIELD, f"mode must be one of {', '.join(MODES)}")
    result = searcher.search(question, k=k, index=index, filters=filters or Filters())
    if on_retrieved is not None:  # e.g. report progress, or stop a cancelled call before generating
        on_retrieved(result)
    skipped = _why_not_generated(mode, chat, config, bool(result.hits))
    if skipped is not None:
        return _hits_only(question, result, skipped)
    assert chat is not None  # _why_not_generated answered when there is none
    model = f"{chat.provider}/{chat.model}"
    messages, used = build_prompt(question, result.hits, config)
    try:
        reply = chat.complete(
            messages, max_tokens=config.chat.max_tokens, temperature=config.chat.temperature
        )
    except Exception as exc:  # any provider failure (after its retries): the retrieval still stands
        generation = dense_status.unavailable(exc, chat.provider, what="chat model")
        generation |= {"reason": "chat_failed", "model": model}
        log.warning(
            "answer generation unavailable (%s: %s); answering with the top matches",
            generation["code"],
            generation["message"],
        )
        return _hits_only(question, result, generation)
    by_text = {citation_of(h).text: citation_of(h) for h in used}
    cited = [by_text[c] for c in find_citations(reply) if c in by_text]
    return Answer(
        question,
        reply.strip(),
        cited or list(by_text.values()),
        result.hits,
        result.indexing_complete,
        True,
        dense=result.dense,
        match=result.match,
        generation=dense_status.ok() | {"model": model},
    )


def _why_not_generated(
    mode: str, chat: ChatModel | None, config: Config, retrieved: bool
) -> JsonObject | None:
    """The ``generation`` status of an answer no chat model writes, or None when one does."""
    if mode == "search_only":
        reason, message = "search_only", "mode=search_only was asked for"
    elif chat is None:
        reason, message = "no_chat_model", f"no chat model is configured ({no_chat_reason(config)})"
    elif not config.rag.generate_answer:
        reason, message = "generate_answer_off", "rag.generate_answer is false"
    elif not retrieved:
        reason, message = "no_hits", "nothing was retrieved to answer from"
    else:
        return None
    return dense_status.off() | {"reason": reason, "message": message}


def _hits_only(question: str, result: SearchResult, generation: JsonObject) -> Answer:
    """The answer without a chat model's reply: the hits, each with its
    citation, and (unless the chat model failed, which ``generation_notice``
    says) a last line saying why no model wrote it."""
    text = search_only_text(result.hits)
    if generation["status"] != dense_status.UNAVAILABLE:
        text += f"\n\n(search only: {generation['message']})"
    return Answer(
        question,
        text,
        [citation_of(h) for h in result.hits],
        result.hits,
        result.indexing_complete,
        generated=False,
        dense=result.dense,
        match=result.match,
        generation=generation,
    )
