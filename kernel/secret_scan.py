"""Screening text for credentials in one linear-time pass (issue #34).

Every rule of ``security.secret_patterns`` that RE2 can compile goes into
one ``re2.Set``: the whole list is matched in a single pass over the text,
in time linear in its length whatever the rules or the text (RE2 builds an
automaton; it never backtracks). A rule RE2 refuses (a look-around, a
back-reference, a possessive repeat: a rule a user wrote for Python's
``re``) still works, run by ``re`` after the set, with the word test of
:mod:`kernel.literals`; only such rules can be slow, and the defaults have
none (``tests/test_secret_rules.py`` checks they all compile in RE2).

A rule may name a group that the match must also pass, for what a regular
expression cannot say:

* ``(?P<mixed>…)``: the group holds a lower-case letter, an upper-case
  letter and a digit, as generated keys and passwords do (placeholders,
  words and identifiers do not);
* ``(?P<value>…)``: the group is not a placeholder (``password``,
  ``changeme``, ``${DB_PASSWORD}``, ``<pass>``, ``%s``, ``xxxx``, ``****``,
  a word of fewer than 12 letters, a number of fewer than 8 digits).

Such a rule is confirmed by running it alone over the text (RE2 again,
linear) only when the set says it matched somewhere.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple

import re2

from kernel import literals

#: a file screened in blocks (one too large to index) is read this much at a time,
#: each block screened with the end of the one before it
BLOCK_BYTES = 8 << 20
OVERLAP_CHARS = 64 << 10
#: RE2's memory for the set's program and automaton; the default 8 MiB is
#: enough for the defaults, this leaves room for users' rules.
MAX_MEM = 64 << 20

_PLACEHOLDERS = frozenset(
    """password passwd pass pwd secret changeme change_me changeit example
    mypassword yourpassword your_password my_password mysecretpassword
    secretpassword p@ssw0rd password1 password123 passw0rd test testing
    admin root user username guest redacted hidden none null nil true false
    foo bar baz qux dummy fake sample placeholder value token""".split()
)
_TEMPLATE_CHARS = frozenset("${}<>%[]()`")


def is_placeholder(value: str) -> bool:
    """A value that stands for a credential rather than being one: a known
    stand-in, a template, one character repeated, a short word or number
    (documentation's examples: ``scott:tiger``, ``guest:guest``, ``abc:123``)."""
    lowered = value.strip("'\"").lower()
    return (
        not lowered
        or lowered in _PLACEHOLDERS
        or len(set(lowered)) == 1  # xxxx, ****, ....
        or any(char in _TEMPLATE_CHARS for char in lowered)
        or (len(lowered) < 12 and lowered.isalpha())
        or (len(lowered) < 8 and lowered.isdigit())
    )


def is_mixed(value: str) -> bool:
    """Holds a lower-case letter, an upper-case letter and a digit."""
    lower = upper = digit = False
    for char in value:
        lower = lower or "a" <= char <= "z"
        upper = upper or "A" <= char <= "Z"
        digit = digit or "0" <= char <= "9"
    return lower and upper and digit


#: the group names a rule may use, and the test each group's text must pass
CHECKS: dict[str, Callable[[str], bool]] = {
    "mixed": is_mixed,
    "value": lambda value: not is_placeholder(value),
}
#: a group that holds the credential itself (what redaction replaces), checked or not
SECRET_GROUP = "secret"


def compiles_in_re2(pattern: str) -> bool:
    try:
        re2.compile(pattern, _options())
    except re2.error:
        return False
    return True


def _options() -> re2.Options:
    options = re2.Options()
    options.max_mem = MAX_MEM
    options.log_errors = False
    return options


def _encoded(text: str) -> bytes:
    # Lone surrogates (undecodable bytes kept by "surrogateescape") cannot
    # be UTF-8; they become invalid bytes, which RE2 reads as no character.
    return text.encode("utf-8", "surrogatepass")


class Match(NamedTuple):
    """Where rule ``rule`` matched, in characters of the text, and the span
    of the group holding the credential itself when the rule names one
    (``secret``, else a checked ``value`` or ``mixed``)."""

    rule: int
    start: int
    end: int
    group: tuple[int, int] | None = None


def _credential_group(groupindex: Mapping[str, int] | Mapping[bytes, int]) -> int | None:
    """The number of the group that holds the credential, if the rule names one."""
    names = {(name.decode() if isinstance(name, bytes) else name): n for name, n in groupindex.items()}
    for name in (SECRET_GROUP, *CHECKS):
        if name in names:
            return names[name]
    return None


class _Checked:
    """An RE2 rule with named checks: which matches count."""

    def __init__(self, pattern: str) -> None:
        self.rx = re2.compile(pattern.encode(), _options())
        # (group number, test); the bytes API names groups in bytes
        self.checks = [
            (number, CHECKS[name.decode()])
            for name, number in self.rx.groupindex.items()
            if name.decode() in CHECKS
        ]
        self.group = _credential_group(self.rx.groupindex)

    def passes(self, match: re2.Match) -> bool:
        return all(check((match.group(n) or b"").decode("utf-8", "replace")) for n, check in self.checks)

    def confirmed(self, data: bytes) -> bool:
        return any(self.passes(match) for match in self.rx.finditer(data))


class _CharOffsets:
    """Byte offsets of the UTF-8 text RE2 matched, as offsets in the ``str``.

    A byte offset inside a character (RE2 reads the bytes of a lone
    surrogate as three invalid bytes) moves to that character's start, or
    past its end with ``up``: a span only ever grows."""

    def __init__(self, text: str, data: bytes) -> None:
        self.data = data
        self.ascii = len(data) == len(text)
        self._known: dict[int, int] = {0: 0}

    def _aligned(self, offset: int, up: bool) -> int:
        data = self.data
        while 0 < offset < len(data) and data[offset] & 0xC0 == 0x80:
            offset += 1 if up else -1
        return offset

    def prepare(self, offsets: Iterable[tuple[int, bool]]) -> None:
        """Decode once, in order, up to each offset that will be asked for."""
        if self.ascii:
            return
        wanted = sorted({self._aligned(offset, up) for offset, up in offsets})
        done, chars = 0, 0
        for offset in wanted:
            chars += len(self.data[done:offset].decode("utf-8", "surrogatepass"))
            self._known[offset], done = chars, offset

    def char(self, offset: int, *, up: bool = False) -> int:
        return offset if self.ascii else self._known[self._aligned(offset, up)]


class SecretScanner:
    """The rules of ``security.secret_patterns``, compiled once."""

    def __init__(self, patterns: Iterable[str]) -> None:
        self.patterns = tuple(patterns)
        self._set = re2.Set.SearchSet(_options())
        #: set index -> rule index; rule index -> its checks (if it has any)
        self._set_rules: list[int] = []
        self._checked: dict[int, _Checked] = {}
        #: every rule in the set, compiled alone, to find where it matches
        self._alone: dict[int, _Checked] = {}
        #: rules RE2 refuses, run by Python's re: (rule index, pattern, word test)
        self._python: list[tuple[int, re.Pattern[str], Callable[[str, str | None], bool]]] = []
        for index, pattern in enumerate(self.patterns):
            if compiles_in_re2(pattern):
                self._set.Add(pattern.encode())
                self._set_rules.append(index)
                checked = self._alone[index] = _Checked(pattern)
                if checked.checks:
                    self._checked[index] = checked
            else:
                rx = re.compile(pattern)
                self._python.append((index, rx, literals.prefilter(rx)))
        if self._set_rules:
            self._set.Compile()

    @property
    def linear(self) -> bool:
        """Whether every rule runs under RE2 (none can be slow)."""
        return not self._python

    def first(self, text: str) -> int | None:
        """The index of the first rule that ``text`` matches, else ``None``."""
        hits: list[int] = []
        data = b""
        if self._set_rules:
            data = _encoded(text)
            hits = sorted(self._set_rules[i] for i in self._set.Match(data) or ())
        found = next((i for i in hits if i not in self._checked or self._checked[i].confirmed(data)), None)
        if self._python:
            lowered = literals.lowered_if_ascii(text)
            for index, rx, may_match in self._python:
                if found is not None and index >= found:
                    break
                if may_match(text, lowered) and rx.search(text):
                    return index
        return found

    def first_in_stream(self, read: Callable[[int], bytes], start: bytes = b"") -> int | None:
        """:meth:`first` over a file too large to hold: ``start``, then
        ``read(BLOCK_BYTES)`` until it returns nothing, as UTF-8 (undecodable
        bytes replaced), each block with the last :data:`OVERLAP_CHARS` of the
        one before, so a credential across a boundary is seen whole."""
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        tail, data = "", start
        while True:
            text = tail + decoder.decode(data, final=not data)
            found = self.first(text)
            if found is not None or not data:
                return found
            tail = text[-OVERLAP_CHARS:]
            data = read(BLOCK_BYTES)

    def matches(self, text: str) -> list[Match]:
        """Every match of every rule in ``text`` (each rule's own matches do
        not overlap; two rules' may), in characters: the set says which
        rules match, then each of those runs alone (RE2, linear)."""
        found: list[tuple[int, int, int, tuple[int, int] | None]] = []
        data = _encoded(text) if self._set_rules else b""
        for i in sorted(self._set.Match(data) or ()) if self._set_rules else ():
            rule = self._set_rules[i]
            checked = self._alone[rule]
            for match in checked.rx.finditer(data):
                if checked.passes(match):
                    group = match.span(checked.group) if checked.group is not None else None
                    found.append((rule, *match.span(), group if group and group[0] >= 0 else None))
        offsets = _CharOffsets(text, data)
        # starts move down and ends up to a character boundary: a span only grows
        offsets.prepare(
            bound
            for _, start, end, group in found
            for bound in (
                (start, False),
                (end, True),
                *(((group[0], False), (group[1], True)) if group else ()),
            )
        )

        def chars(start: int, end: int) -> tuple[int, int]:
            return offsets.char(start), offsets.char(end, up=True)

        out = [
            Match(rule, *chars(start, end), chars(*group) if group else None)
            for rule, start, end, group in found
        ]
        for index, rx, _ in self._python:
            number = _credential_group(rx.groupindex)
            for match in rx.finditer(text):
                group = match.span(number) if number is not None and match.start(number) >= 0 else None
                out.append(Match(index, *match.span(), group))
        return out
