"""Which identifiers a query names, and whether a unit defines one.

An agent that types ``get_boundary`` wants the unit that defines it before
the units that call it. A unit defines a name when its signature line (its
first line that is not blank, a comment or a decorator) names it as what is
being declared: ``def get_boundary(``, ``function getBoundary``,
``getBoundary(): string;``, ``class Boundary``, ``func (m *M) Boundary(``,
``const boundary =``. Language-agnostic on purpose: units of every grammar
share these shapes.
"""

from __future__ import annotations

import functools
import re

# A compound the user could only have copied from code: snake_case,
# camelCase, dotted or scoped names.
_IDENTIFIER = re.compile(r"[A-Za-z_$][\w$]*(?:(?:\.|::|->)[A-Za-z_$][\w$]*)*")
_CODE_SHAPED = re.compile(r"_|[a-z][A-Z]|[A-Z]{2,}[a-z]|\.|::|->|\d[A-Za-z]|[A-Za-z]\d")
_SKIP_LINE = re.compile(r"\s*(?:$|#|//|/\*|\*|--|@|\"\"\"|'''|\[|<!--)")
MAX_NAMES = 4
# Words that start a line which uses a name rather than declaring it.
_NOT_DECLARING = "return|await|yield|if|elif|while|for|print|raise|throw|new|assert|not|else|case|echo"


def query_identifiers(query: str) -> list[str]:
    """The names a query asks for: its code-shaped words, or the query itself
    when it is one word. The last part of a dotted name is what is defined."""
    words = _IDENTIFIER.findall(query)
    if len(words) == 1 and len(query.split()) == 1:
        chosen = words
    else:
        chosen = [word for word in words if _CODE_SHAPED.search(word)]
    names = [re.split(r"\.|::|->", word)[-1] for word in chosen]
    return [name for name in dict.fromkeys(names) if len(name) > 1][:MAX_NAMES]


def signature_line(text: str) -> str:
    """A unit's first line of code (after comments, decorators, attributes)."""
    for line in text.split("\n"):
        if not _SKIP_LINE.match(line):
            return line
    return ""


@functools.lru_cache(maxsize=512)
def _declares(name: str) -> re.Pattern[str]:
    word = re.escape(name)
    return re.compile(
        # name( / name< / name: / name = / name { ... after a keyword or at the start
        rf"^\s*(?!(?:{_NOT_DECLARING})\b)(?:[\w$.*&<>\[\],:]+\s+)*?(?:\([^)]*\)\s*)?\*?{word}\s*(?:[(<:={{;]|$|\s+(?:extends|implements)\b)"
        # a keyword right before the name: class X, type X, struct X
        rf"|\b(?:class|struct|interface|enum|trait|type|module|namespace|union|record)\s+{word}\b"
        # a Go method: func (r *T) Name(
        rf"|^\s*func\s*\([^)]*\)\s*{word}\s*\("
    )


@functools.lru_cache(maxsize=512)
def _declares_inside(name: str) -> re.Pattern[str]:
    """A declaration on any line of a unit (a method of a short class, a
    member of an interface): a keyword before the name, or ``name: type``."""
    word = re.escape(name)
    keyword = r"def|function|func|fn|class|struct|interface|enum|trait|type|module|namespace|union|record"
    return re.compile(
        rf"^\s*(?:[\w$]+\s+)*?(?:{keyword})\s+(?:\([^)]*\)\s*)?\*?{word}\b"
        rf"|^\s*(?:(?:readonly|public|private|protected|static|declare)\s+)*{word}\??\s*:\s*[\w\[{{(<'\"|]"
        # a method with a body: getN(): number {, public int getN() {
        rf"|^\s*(?!(?:{_NOT_DECLARING})\b)(?:[\w$<>\[\],.]+\s+)*{word}\s*(?:<[^>]*>)?\([^;]*\)\s*(?::[^;]*)?\{{",
        re.MULTILINE,
    )


def defines(text: str, name: str) -> bool:
    """True when the unit declares ``name``: on its signature line, or as a
    member inside it (a method of a class kept whole, an interface field)."""
    if name not in text:  # both patterns match the name literally; most candidates lack it
        return False
    line = signature_line(text)
    if line and _declares(name).search(line):
        return True
    return bool(_declares_inside(name).search(text))


# The name a signature line declares: after a declaring keyword (``def x``,
# ``function x``, ``class X``, ``const x``), or first on the line after
# modifiers and at most two types (``x = …``, ``x(…)``, ``int x(…)``,
# ``readonly x: T``, ``<T> List<T> x(``). Only a
# signature line's first ``SIGNATURE_CHARS`` characters are read.
SIGNATURE_CHARS = 400
_DECLARED = re.compile(
    r"\b(?:def|class|function|interface|enum|type|struct|trait|fn|func|var|let|const|record)\s+\*?([A-Za-z_$][\w$]*)"
    r"|^\s*(?:(?:export|default|async|static|public|private|protected|readonly|declare|abstract|final)\s+)*"
    rf"(?!(?:{_NOT_DECLARING})\b)(?:[\w$<>\[\],.?]+\s+){{0,2}}([A-Za-z_$][\w$.]*)\s*(?:=|:|\(|<)"
)


def declared_name(text: str) -> str | None:
    """The name a unit's signature line declares (its last dotted part), or
    None for a unit that declares nothing there (a comment, a statement)."""
    match = _DECLARED.search(signature_line(text)[:SIGNATURE_CHARS])
    if match is None:
        return None
    return (match.group(1) or match.group(2)).split(".")[-1]
