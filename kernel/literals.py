"""What every match of a regular expression must contain, as a quick test
that rules texts out before the expression runs.

A secret rule such as ``(?i)token\\s*[:=]\\s*[A-Za-z0-9_.-]{20,}`` can only
match a text holding "token". Python's ``re`` walks every position of a
text trying such a rule; ``"token" in text.lower()`` is a C search many
times faster, and most files hold none of the rules' words. The words are
read from the parsed expression, so any rule a user configures gets one
(or none, when it has no required word: then it simply runs).

The test never rules out a text the expression would match:

- only what every match must contain counts: a literal run in the
  expression's main sequence, in a group or a repeat of at least one, or
  one word from each branch of an alternation (then any of them will do);
  lookarounds, optional parts and classes add nothing;
- a case-insensitive word is compared in the lower-cased text only when
  the text is ASCII. Elsewhere ``re``'s case rules reach beyond
  ``str.lower`` (``(?i)s`` matches the long s, which ``lower`` leaves as
  it is), so such texts are not ruled out.

``re._parser`` is private; if it cannot read an expression (another
Python), that expression gets no test and runs on every text.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # typeshed types re's private parser only under its old public names
    import sre_constants as sre
    import sre_parse
else:
    try:  # Python 3.11+
        from re import _constants as sre
        from re import _parser as sre_parse
    except ImportError:  # pragma: no cover - Python 3.10
        import sre_constants as sre
        import sre_parse

#: (word, case-insensitive): a text passes if it holds any of them.
Words = frozenset[tuple[str, bool]]
_REPEATS = {sre.MAX_REPEAT, sre.MIN_REPEAT, getattr(sre, "POSSESSIVE_REPEAT", sre.MAX_REPEAT)}
_ATOMIC = getattr(sre, "ATOMIC_GROUP", None)


def required_words(pattern: re.Pattern[str]) -> Words | None:
    """Words one of which every match contains; None if none is known."""
    try:
        parsed = sre_parse.parse(pattern.pattern, pattern.flags)
    except Exception:  # noqa: BLE001 - any failure only means no test
        return None
    return _sequence(parsed.data, bool(pattern.flags & re.IGNORECASE))


@functools.lru_cache(maxsize=256)  # every ingestion task builds its engine: parse each rule once
def prefilter(pattern: re.Pattern[str]) -> Callable[[str, str | None], bool]:
    """``test(text, lowered)``: False only if ``pattern`` cannot match
    ``text``; ``lowered`` is ``text.lower()`` for an ASCII text, else None."""
    words = required_words(pattern)
    if not words:
        return _always
    cased = tuple(word for word, folded in words if not folded)
    folded = tuple(word.lower() for word, fold in words if fold)

    def test(text: str, lowered: str | None) -> bool:
        if any(word in text for word in cased):
            return True
        if not folded:
            return False
        if lowered is None:  # not ASCII: re's case rules are wider than lower()
            return True
        return any(word in lowered for word in folded)

    return test


def lowered_if_ascii(text: str) -> str | None:
    return text.lower() if text.isascii() else None


def _always(text: str, lowered: str | None) -> bool:
    return True


# Any: an item's argument is an int, a tuple or a SubPattern depending on its
# opcode, a union the stubs give without tying it to the opcode.
def _sequence(items: Iterable[tuple[object, Any]], fold: bool) -> Words | None:
    """The most selective requirement among a sequence's parts (each part
    must match, so any one part's words are required)."""
    best: Words | None = None
    run: list[str] = []

    def close() -> None:
        nonlocal best
        if run:
            best = _better(best, frozenset({("".join(run), fold)}))
            run.clear()

    for op, arg in items:
        if op is sre.LITERAL and not (fold and not chr(arg).isascii()):
            run.append(chr(arg))
            continue
        close()
        if op is sre.SUBPATTERN:
            _group, add, remove, body = arg
            inner = (fold or bool(add & sre.SRE_FLAG_IGNORECASE)) and not remove & sre.SRE_FLAG_IGNORECASE
            best = _better(best, _sequence(list(body), inner))
        elif op in _REPEATS and arg[0] >= 1:
            best = _better(best, _sequence(list(arg[2]), fold))
        elif _ATOMIC is not None and op is _ATOMIC:
            best = _better(best, _sequence(list(arg), fold))
        elif op is sre.BRANCH:
            branches = [_sequence(list(branch), fold) for branch in arg[1]]
            known = [words for words in branches if words]
            if branches and len(known) == len(branches):
                best = _better(best, frozenset().union(*known))
    close()
    return best


def _better(a: Words | None, b: Words | None) -> Words | None:
    """The requirement less likely to be met by chance: its shortest word longer."""
    if not a:
        return b
    if not b:
        return a
    return b if min(len(w) for w, _ in b) > min(len(w) for w, _ in a) else a
