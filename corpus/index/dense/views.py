"""What the embedder reads of a chunk.

A small model reads only its window (256 word pieces for MiniLM, about 30
lines of code), so the vector of a 200-line code chunk would describe its
first screen only. For code chunks longer than the window, the embedder
reads a digest instead: every definition line first (``def``, ``class``,
``func``, ...), then the other lines in order until the window is full.
Prose is left as it is: its opening usually says what it is about.

A code unit is also read a second way, by its **signature view**: its
file's name, enclosing definitions and own definition line, nothing else.
The stored vector leans towards that view (``embed.signature_weight``):
a question about what a function does often matches its name better than
its body (docs/benchmarks.md, "Retrieval quality").
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


_NOT_CODE = ("@", "#", "//", "/*", "*", '"""', "'''")
#: the signature view's longest definition line (a long one is cut)
SIGNATURE_LINE_CHARS = 240


def signature_text(context: str, text: str) -> str:
    """The unit's signature view: its file's name and enclosing definitions
    (its context, whose first line is the path, without the folders), then
    its first definition line, or failing one (a member, a window inside a
    long definition) its first line of code; decorators and comments are
    skipped. The folders stay in the unit's own view: in a view this short
    they outweigh the name (docs/benchmarks.md)."""
    lines = [line.strip() for line in text.split("\n") if line.strip()]
    code = [line for line in lines if not line.startswith(_NOT_CODE)]
    head = next((line for line in code if _DEFINITION.match(line)), code[0] if code else "")
    path, _, enclosing = context.partition("\n")
    named = with_context(path.rsplit("/", 1)[-1], enclosing) if enclosing else path.rsplit("/", 1)[-1]
    return with_context(named, head[:SIGNATURE_LINE_CHARS]) if head else named
