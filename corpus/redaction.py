"""Redaction of credentials (``security.secret_mode: redact``, issue #32).

In redact mode a file that holds a detected credential is indexed and
served with each credential replaced by a marker naming the rule that found
it (``[REDACTED:aws-access-key]``), so the rest of the file stays
searchable. The indexer (:mod:`corpus.ingest.prepare`) and every read of a
file (:mod:`corpus.files`, :mod:`corpus.documents`) call the same
:func:`redact`, through :meth:`corpus.security.ExclusionEngine.redact`, so
what is indexed and what is read can never disagree.

A replacement keeps the line and page breaks of what it replaces (a
private-key block of 26 lines becomes the marker and 25 newlines), so
every line number, and every citation, is the file's own.

What a rule matched is widened to the whole credential, never narrowed
below it:

* a private-key block (``BEGIN … PRIVATE KEY``) runs to its ``END`` line, a
  PuTTY key file to its ``Private-MAC`` line, or either to the end of the
  text when that line is missing (the rule matches only the head);
* a rule's ``secret`` group, else its checked ``value``/``mixed`` group, is
  the credential (the password of a connection string, not the user);
* otherwise the credential is the last word of the match (``AccountKey=``
  and ``token =`` are labels, and stay), without the character a rule
  matched before or after it to see where it starts or ends, and it runs
  on while the characters of keys do (a rule that needs 30 characters of
  an 88-character key matches 30).

Text whose redaction still matches a rule after :data:`MAX_PASSES` passes
(a rule a marker cannot quench) cannot be redacted: the caller excludes it
as it would without redaction.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass

from kernel.secret_scan import Match, SecretScanner

MARKER = "[REDACTED:{}]"
MAX_PASSES = 4
#: kept from a replaced span, in order: line and page breaks
_BREAKS = frozenset("\n\r\f")
#: the characters of keys and tokens (base64, base64url)
_KEY_CHARS = frozenset(string.ascii_letters + string.digits + "+/=_-")
_PEM_BEGIN = re.compile(r"BEGIN[ A-Z0-9]{0,40}PRIVATE KEY")
_PEM_END = re.compile(r"-{4,5} ?END[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)? ?-{4,5}")
_PUTTY = "PuTTY-User-Key-File-"
_PUTTY_END = re.compile(r"Private-MAC:[ \t]*[0-9A-Fa-f]*")
#: a match up to the last character that ends a label before a value: a
#: space, a quote, or ``:``/``=`` followed by more than base64 padding
_LABEL = re.compile(r"(?s:.*)(?:[\s'\"`]|[:=](?=[^=]))")
#: the rest of a key a rule matched the head of
_KEY_RUN = re.compile(r"[A-Za-z0-9+/=_-]*")


@dataclass(frozen=True)
class Redacted:
    """Text with its credentials replaced, and the names of the rules that
    found them (first found first; empty when there was none)."""

    text: str
    rules: tuple[str, ...] = ()
    count: int = 0


def credential_span(text: str, match: Match) -> tuple[int, int]:
    """Where the credential ``match`` found begins and ends in ``text``."""
    start, end = match.start, match.end
    matched = text[start:end]
    if _PEM_BEGIN.search(matched):
        block_end = _PEM_END.search(text, end)
        return start, block_end.end() if block_end else len(text)
    if _PUTTY in matched:
        block_end = _PUTTY_END.search(text, end)
        return start + matched.index(_PUTTY), block_end.end() if block_end else len(text)
    if match.group is not None and match.group[0] < match.group[1]:
        return match.group
    return _last_word(text, start, end)


def _last_word(text: str, start: int, end: int) -> tuple[int, int]:
    while end > start and text[end - 1] not in _KEY_CHARS:  # what the rule matched after it
        end -= 1
    label = _LABEL.match(text, start, end)
    word = label.end() if label else start
    while word < end and not text[word].isalnum():  # what the rule matched before it
        word += 1
    if word >= end:  # no word: the whole match
        return start, max(end, start + 1)
    run = _KEY_RUN.match(text, end)
    assert run is not None  # the pattern's `*` matches the empty string
    return word, run.end()


def _merged(spans: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """Overlapping or touching spans as one, named by the rule of the first."""
    out: list[tuple[int, int, int]] = []
    for start, end, rule in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end), out[-1][2])
        else:
            out.append((start, end, rule))
    return out


def _replaced(text: str, spans: list[tuple[int, int, int]], names: list[str]) -> str:
    pieces, done = [], 0
    for start, end, rule in spans:
        breaks = "".join(char for char in text[start:end] if char in _BREAKS)
        pieces += [text[done:start], MARKER.format(names[rule]), breaks]
        done = end
    pieces.append(text[done:])
    return "".join(pieces)


def redact(scanner: SecretScanner, text: str, names: list[str]) -> Redacted | None:
    """``text`` with every credential the rules find replaced by a marker
    naming its rule (``names[i]`` for rule ``i``); None when it cannot be
    made clean. Text that holds none comes back as it is."""
    rules: dict[str, None] = {}
    count = 0
    for _ in range(MAX_PASSES):
        found = scanner.matches(text)
        if not found:
            return Redacted(text, tuple(rules), count)
        spans = _merged([(*credential_span(text, match), match.rule) for match in found])
        rules.update(dict.fromkeys(names[rule] for _, _, rule in spans))
        count += len(spans)
        text = _replaced(text, spans, names)
    return None if scanner.matches(text) else Redacted(text, tuple(rules), count)
