"""What the embedder reads of a chunk.

A small model reads only its window (256 word pieces for MiniLM, about 30
lines of code), so the vector of a 200-line code chunk would describe its
first screen only. For code chunks longer than the window, the embedder
reads a digest instead: every definition line first (``def``, ``class``,
``func``, ...), then the other lines in order until the window is full.
Prose is left as it is: its opening usually says what it is about.
"""

from __future__ import annotations

import re

from corpus.models import with_context

_DEFINITION = re.compile(
    r"^\s*(?:@"
    r"|(?:export\s+|public\s+|private\s+|protected\s+|static\s+|async\s+|pub\s+)*"
    r"(?:def|class|func|fn|function|interface|struct|enum|trait|impl|type|module|object|record)\b"
    # Java/C#/C++ members: an access modifier, then a signature.
    r"|(?:public|private|protected|internal)\b.*\()"
)


def embedding_view(text: str, kind: str, window_chars: int | None) -> str:
    if window_chars is None or kind != "code" or len(text) <= window_chars:
        return text
    lines = [line.strip() for line in text.split("\n") if line.strip()]
    definitions = [i for i, line in enumerate(lines) if _DEFINITION.match(line)]
    chosen, used = set(), 0
    for i in (*definitions, *range(len(lines))):
        if i in chosen:
            continue
        if used + len(lines[i]) + 1 > window_chars:
            if i in definitions:
                continue
            break
        chosen.add(i)
        used += len(lines[i]) + 1
    return "\n".join(lines[i] for i in sorted(chosen))


def embedding_text(context: str, text: str, kind: str, window_chars: int | None) -> str:
    """The chunk as the embedder reads it: its context, then as much of its
    text as the window leaves room for."""
    room = None if window_chars is None else max(window_chars - len(context) - 1, window_chars // 2)
    return with_context(context, embedding_view(text, kind, room))
