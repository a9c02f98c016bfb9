"""The lexical index's word splitter, shared by its backends.

A compound identifier (``snake_case``, ``camelCase``, ``a.b.c``, ``a/b.py``,
``a::b``) yields its joined form, then each piece followed by its camelCase
and digit sub-words, so ``parseConfigFile`` is found by "parse config file"
and ``os.path.join`` by "path join". Indexing and queries go through the same
splitter on every database.
"""

from __future__ import annotations

import functools
import re
from itertools import chain
from operator import itemgetter

MAX_QUERY_TERMS = 32
#: How many times both backends count a word of a code chunk's head
#: (:func:`head_and_body`) against one of its body. Measured at 1-4 on every
#: corpus of bench/retrieval.py (docs/benchmarks.md, 2026-11-29).
HEAD_WEIGHT = 3.0
# Longer joined forms are URLs and blobs, not identifiers anyone types.
MAX_JOINED = 64
# An identifier with its connectors: snake_case, kebab-case, a.b.c, a/b.py, a::b.
COMPOUND = re.compile(r"\w+(?:[-./\\:]{1,3}\w+)*")
_PIECE = re.compile(r"[^\W_]+")
_ALL = itemgetter(0)  # of _expand's (all tokens, extra tokens)


def tokens(text: str) -> list[str]:
    """The lower-cased search tokens of ``text`` in order.

    Each compound yields its joined form (``ospathjoin``), then each piece
    (``os``, ``path``, ``join``) followed by its camelCase and digit
    sub-words (``http``, ``server`` after ``httpserver``).
    """
    # map and chain keep the per-compound loop in C: this runs over every chunk
    return list(chain.from_iterable(map(_ALL, map(_expand, COMPOUND.findall(text)))))


def index_text(text: str) -> str:
    """What the index stores for a chunk: its text plus the extra sub-tokens
    of each distinct compound (once: the text itself carries the counts)."""
    # map and filter keep the per-compound loop in C (a preparing worker runs
    # this over every chunk: issue #37)
    extras = " ".join(filter(None, map(_extras, dict.fromkeys(COMPOUND.findall(text)))))
    return f"{text}\n{extras}" if extras else text


#: A ``#`` line that is a comment (``# note``, ``#!``, ``##``), not a C
#: preprocessor line (``#define``, ``# if``) or a Rust attribute (``#[test]``).
_HASH_COMMENT = re.compile(
    r"#(?![ \t]*(?:define|undef|if|ifdef|ifndef|elif|else|endif|include|pragma)\b)(?:[\s#!]|$)"
)


def head_and_body(context: str, text: str, kind: str) -> tuple[str, str]:
    """A code chunk's head, its context and its first line, and the rest of
    its text: the lexical index's two columns. The first line is the one that
    names what the unit defines: the comments before it (a JSDoc, Javadoc or
    Rust doc block, ``//`` and ``#`` lines) go to the rest, blank lines and
    decorators (``@…``, ``#[…]``) stay in the head. A prose chunk (any other
    ``kind``) has no head: its first line is no name, and weighing it cost
    prose MRR (docs/benchmarks.md)."""
    if kind != "code":
        return "", (f"{context}\n{text}" if context else text)
    lines = text.split("\n")
    head: list[str] = []
    notes: list[str] = []
    first = 0
    in_block = False
    while first < len(lines) - 1:
        line = lines[first].lstrip()
        if in_block:
            notes.append(lines[first])
            in_block = "*/" not in line
        elif line.startswith("/*"):
            end = line.find("*/", 2)
            if end >= 0 and line[end + 2 :].strip():  # /* a note */ then the definition
                break
            notes.append(lines[first])
            in_block = end < 0
        elif line.startswith("//") or _HASH_COMMENT.match(line):
            notes.append(lines[first])
        elif not line or line.startswith(("@", "#[")):
            head.append(lines[first])
        else:
            break
        first += 1
    head.append(lines[first])
    joined = "\n".join(head)
    return (f"{context}\n{joined}" if context else joined), "\n".join([*notes, *lines[first + 1 :]])


# Code repeats the same identifiers endlessly; memoising their expansion
# made indexing the standard library's lexical rows about 5x faster.
@functools.lru_cache(maxsize=200_000)
def _expand(compound: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(all tokens, extra tokens) of one compound; extra tokens are the ones
    the engine would not find by itself."""
    joined, pieces = parts(compound)
    every: list[str] = [joined] if joined else []
    extra: list[str] = list(every)
    for piece in pieces:
        words = piece_tokens(piece)
        every += words
        extra += words[1:]
    return tuple(every), tuple(extra)


@functools.lru_cache(maxsize=200_000)
def _extras(compound: str) -> str:
    """:func:`_expand`'s extra tokens of one compound, joined by spaces:
    what :func:`index_text` adds for it (its own cache: indexing needs no
    more, and a kernel tree meets about half a million compounds once)."""
    joined, pieces = parts(compound)
    extra = [joined] if joined else []
    for piece in pieces:
        found = piece_tokens(piece)
        if len(found) > 1:
            extra += found[1:]
    return " ".join(extra)


def parts(compound: str) -> tuple[str, list[str]]:
    """(its joined form, lower-cased, or "" if it has none; its pieces)."""
    if compound.isalnum():  # every character a piece character: one piece
        return "", [compound]
    pieces = _PIECE.findall(compound)
    if len(pieces) > 1:
        joined = "".join(pieces)
        if len(joined) <= MAX_JOINED and not joined.isdigit():
            return joined.lower(), pieces
    return "", pieces


# A new compound is mostly pieces seen before ("self.x", "self.y"): their
# splitting is memoised on its own, which made a process's first sight of
# each compound about a fifth cheaper.
@functools.lru_cache(maxsize=200_000)
def piece_tokens(piece: str) -> tuple[str, ...]:
    """One piece's tokens: the piece lower-cased, then its camelCase and
    digit sub-words if it has more than one."""
    subwords = _subwords(piece)
    if len(subwords) > 1:
        return (piece.lower(), *(word.lower() for word in subwords))
    return (piece.lower(),)


def _subwords(piece: str) -> list[str]:
    """Split at camelCase, acronym (``HTTPServer``) and letter/digit boundaries."""
    if piece.isdigit() or (piece.isalpha() and (piece.islower() or piece.isupper() or piece[1:].islower())):
        return [piece]
    if piece.isascii():
        return _ASCII_SUBWORDS.findall(piece)
    return _split_by_rule(piece)


#: ``_split_by_rule``'s cuts for an ASCII piece, in one pass in C: digit
#: runs; capitals before a capital that starts a lower-case word
#: (HTTP|Server); a word with its leading capitals; other capitals.
#: tests/test_lexical.py checks it against the rule on every string of up
#: to 7 characters over two letters of each case and two digits.
_ASCII_SUBWORDS = re.compile(r"[0-9]+|[A-Z]+(?=[A-Z][a-z]{2})|[A-Z]*[a-z]+|[A-Z]+")


def _split_by_rule(piece: str) -> list[str]:
    """Cut where a digit meets a non-digit, a lower-case letter meets a
    capital, and before a capital that follows a capital and starts two
    lower-case letters (any script's letters and digits)."""
    cuts = [0]
    for i in range(1, len(piece)):
        prev, cur = piece[i - 1], piece[i]
        if (
            prev.isdigit() != cur.isdigit()
            or (prev.islower() and cur.isupper())
            or (prev.isupper() and cur.isupper() and _is_lower_word(piece[i + 1 : i + 3]))
        ):
            cuts.append(i)
    return [piece[a:b] for a, b in zip(cuts, cuts[1:] + [len(piece)], strict=True)]


def _is_lower_word(text: str) -> bool:
    # Two lower-case letters: HTTPServer splits before S, URLs and IPv6 stay whole.
    return len(text) == 2 and text.isalpha() and text.islower()


def query_terms(query: str) -> list[str]:
    """Distinct query tokens, at most MAX_QUERY_TERMS, in query order."""
    return list(dict.fromkeys(tokens(query)))[:MAX_QUERY_TERMS]
