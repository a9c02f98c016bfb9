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

In a TypeScript declaration file (``.d.ts``) nearly every unit is a member
of one line with no body (``load(): void;`` in ``interface
HTMLMediaElement``), and the units of one interface differ only in that
line: the view then names the member as the documentation does,
``HTMLMediaElement.load(): void;``, followed by the owner's and the
member's names in words (``html media element: load``), which the model
reads better than the compound names, and the vector leans on it as much
as on the unit (``MEMBER_VIEW_WEIGHT``; docs/benchmarks.md, 2026-11-29,
session 22). The view's version is recorded with an index's vectors
(``VIEW_VERSION``), as the weight is: an index keeps the view its vectors
were made with until a full reindex, so its vectors never mix two views.
"""

from __future__ import annotations

import re

from corpus.index.words import piece_tokens
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
#: The signature view's version, recorded with an index's code vectors:
#: 1, the context and the definition line; 2, declaration files' members
#: named ``Owner.member`` with their names in words.
VIEW_VERSION = 2
#: the least weight of a declaration file member's view (version 2): its
#: unit, one bodiless line, says nothing the view does not, and the view
#: says it in words the model reads (docs/benchmarks.md, session 22)
MEMBER_VIEW_WEIGHT = 1.0
#: the signature view's longest definition line (a long one is cut)
SIGNATURE_LINE_CHARS = 240


def signature_text(context: str, text: str, version: int = VIEW_VERSION) -> str:
    """The unit's signature view: its file's name and enclosing definitions
    (its context, whose first line is the path, without the folders), then
    its first definition line, or failing one (a member, a window inside a
    long definition) its first line of code; decorators and comments are
    skipped. The folders stay in the unit's own view: in a view this short
    they outweigh the name (docs/benchmarks.md). A one-line member of a
    declaration file has its own view from ``version`` 2 (:func:`member_text`)."""
    return signature_view(context, text, version)[0]


def signature_view(context: str, text: str, version: int = VIEW_VERSION) -> tuple[str, bool]:
    """:func:`signature_text`, and whether it is a declaration file member's
    view (:func:`member_text`), which weighs as much as the unit's own
    (``MEMBER_VIEW_WEIGHT``)."""
    lines = [line.strip() for line in text.split("\n") if line.strip()]
    code = [line for line in lines if not line.startswith(_NOT_CODE)]
    head = next((line for line in code if _DEFINITION.match(line)), code[0] if code else "")
    path, _, enclosing = context.partition("\n")
    if version >= 2 and len(code) == 1 and enclosing and _DECLARATION_FILE.search(path):
        member = member_text(enclosing.rsplit("\n", 1)[-1], code[0])
        if member is not None:
            return member, True
    named = with_context(path.rsplit("/", 1)[-1], enclosing) if enclosing else path.rsplit("/", 1)[-1]
    return (with_context(named, head[:SIGNATURE_LINE_CHARS]) if head else named), False


#: TypeScript declaration files (``lib.dom.d.ts``, ``index.d.mts``)
_DECLARATION_FILE = re.compile(r"\.d\.[cm]?ts$")
#: the name an enclosing definition line defines
_OWNER = re.compile(r"\b(?:interface|class|namespace|module|enum|type|var|let|const)\s+([A-Za-z_$][\w$]*)")
#: a member line's name, after its modifiers (``readonly``, ``static``, …)
_MEMBER = re.compile(
    r"(?:(?:readonly|static|abstract|declare|public|private|protected|get|set)\s+)*"
    r"[\"']?([A-Za-z_$][\w$]*)"
)


def member_text(owner_line: str, line: str) -> str | None:
    """The view of a one-line member ``line`` of a declaration file whose
    nearest enclosing definition line is ``owner_line``:
    ``Owner.line``, then the owner's and the member's names as lower-case
    words; None when either has no name (a call or index signature)."""
    owner, member = _OWNER.search(owner_line), _MEMBER.match(line)
    if owner is None or member is None:
        return None
    name = owner.group(1)
    return f"{name}.{line[:SIGNATURE_LINE_CHARS]}\n{_words(name)}: {_words(member.group(1))}"


def _words(name: str) -> str:
    """``HTMLMediaElement`` → ``html media element`` (the lexical index's split)."""
    found = piece_tokens(name)
    return " ".join(found[1:] or found)
