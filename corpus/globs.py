"""Path globs (``list_files`` ``glob``, ``find`` ``name_glob``, ``search`` and
``ask`` ``file_glob``) matched without catastrophic backtracking.

The syntax and meaning are gitignore's, as ``pathspec.GitIgnoreSpec`` with
one line gave them before (issue #23): a glob without a slash matches a name
at any depth, one with a slash is anchored at the root, ``**`` spans
directories, a trailing ``/`` or ``/**`` selects what is under a directory,
and a glob that matches a directory matches everything under it. Two edges
follow git rather than pathspec's regular expressions: a bracket
expression never matches ``/`` (pathspec's ``a[!x]b`` matched ``a/b``), and a
newline in a path is an ordinary character.

pathspec turned a glob into a Python regular expression with one unbounded
quantifier per ``*`` and ``**``; on a long path name the backtracking engine
tries every way to split it between them (``*?*?*?*?*?*?*?Z`` held the GIL
for 10 s). Here each ``*`` gap and each ``**`` gap is matched leftmost and
committed to in an atomic group, which gives the same answer because
what follows each gap has a fixed length in characters (inside a name) or
in names (across ``**``): the earliest place that works leaves the most room
for the rest. Matching is O(path length x glob length), in C, and a glob is
at most :data:`MAX_GLOB_CHARS` characters.
"""

from __future__ import annotations

import functools
import re
import warnings

from kernel import errors

MAX_GLOB_CHARS = 1000
#: compiled globs kept (each at most MAX_GLOB_CHARS long, so a few MB at most)
CACHE_SIZE = 256

_STAR = object()
_ANY = "[^/]"


class _RangeError(ValueError):
    """An unclosed bracket expression: git ignores such a pattern, so it matches nothing."""


def _invalid(glob: str, why: str) -> errors.Dir2mcpError:
    return errors.Dir2mcpError(errors.INVALID_FIELD, f"invalid glob {glob[:80]!r}: {why}")


def _segment_tokens(segment: str) -> list[str | object]:  # object: _STAR
    """A segment's tokens: regex text for one character, or ``_STAR``."""
    tokens: list[str | object] = []
    i, end = 0, len(segment)
    while i < end:
        char = segment[i]
        i += 1
        if char == "\\":
            if i >= end:
                raise ValueError("a backslash at the end escapes nothing")
            tokens.append(re.escape(segment[i]))
            i += 1
        elif char == "*":
            if not tokens or tokens[-1] is not _STAR:
                tokens.append(_STAR)
        elif char == "?":
            tokens.append(_ANY)
        elif char == "[":
            j = i
            if j < end and segment[j] in "!^":
                j += 1
            if j < end and segment[j] == "]":
                j += 1
            while j < end and segment[j] != "]":
                j += 1
            if j >= end:
                raise _RangeError(segment)
            body = segment[i:j]
            negate = body[:1] in ("!", "^")
            body = body[1:] if negate else body
            # As pathspec: the bracket body is a Python character class, with
            # backslashes literal. Unlike it, never a slash (git's rule).
            tokens.append("(?!/)[" + ("^" if negate else "") + body.replace("\\", "\\\\") + "]")
            i = j + 1
        else:
            tokens.append(re.escape(char))
    return tokens


def _segment_regex(segment: str) -> str:
    """One path name: pieces of fixed length between ``*`` gaps.

    Every gap but the last is matched lazily inside an atomic group (the
    earliest place the next piece fits, then committed); the last piece must
    end the name, so its gap is the only one that backtracks, within one name.
    """
    if segment == "*":
        return "[^/]+(?![^/])"
    pieces: list[list[str]] = [[]]
    for token in _segment_tokens(segment):
        if isinstance(token, str):
            pieces[-1].append(token)
        else:  # _STAR
            pieces.append([])
    if len(pieces) == 1:
        return "".join(pieces[0]) + "(?![^/])"
    first, *middle, last = ("".join(piece) for piece in pieces)
    out = first + "".join(f"(?>[^/]*?{piece})" for piece in middle if piece)
    return out + f"[^/]*{last}(?![^/])"


def _normalize(segments: list[str], is_dir: bool) -> tuple[list[str] | None, str | None]:
    """pathspec's normalisation of a gitignore pattern's segments (or a whole-pattern regex)."""
    if not segments[0]:
        del segments[0]
    elif len(segments) == 1 or (len(segments) == 2 and not segments[1]):
        if segments[0] != "**":
            segments.insert(0, "**")
    if not segments:
        raise ValueError("it names nothing")
    if not segments[-1]:
        segments[-1] = "**"
    for i in range(len(segments) - 1, 0, -1):
        if segments[i - 1] == "**" and segments[i] == "**":
            del segments[i]
    if segments == ["**"]:
        return None, "/" if is_dir else "."
    if segments == ["**", "*"]:
        return None, "."
    if segments == ["**", "*", "**"]:
        return None, "/"
    return segments, None


def translate(glob: str) -> tuple[str | None, bool]:
    """A regular expression for ``re.match`` over a relative path (None: it
    matches nothing: blank, a comment, ``/``, an unclosed ``[``), and whether
    it selects (False for a negation, which alone selects nothing).
    ``ValueError`` for a glob that is not one."""
    text = glob if glob.endswith("\\ ") else glob.rstrip()
    if not text or text.startswith("#") or text == "/":
        return None, True
    negated = text.startswith("!")
    if negated:
        text = text[1:]
    segments = text.split("/")
    is_dir = not segments[-1]
    normalized, whole = _normalize(segments, is_dir)
    if whole is not None:
        # "**", "*": any path; "**/", "*/": any path below a directory.
        return ("(?s).*/" if whole == "/" else "(?s)."), not negated
    assert normalized is not None  # _normalize gives the segments or a whole-pattern regex
    try:
        return _translate_segments(normalized), not negated
    except _RangeError:
        return None, True


def _translate_segments(segments: list[str]) -> str:
    """Groups of names joined by ``/``, separated by ``**`` gaps.

    A gap spans whole names, so the earliest place the next group fits is as
    good as any: each gap and its group form an atomic group that scans
    lazily for it.
    """
    groups: list[list[str]] = [[]]
    for segment in segments:
        if segment == "**":
            groups.append([])
        else:
            groups[-1].append(_segment_regex(segment))
    trailing = not groups[-1]  # "dir/**": what is below, never the name itself
    if trailing:
        groups.pop()
    tail = "/" if trailing else "(?:/|\\Z)"
    out = ["(?s)"]
    for index, group in enumerate(groups):
        body = "/".join(group)
        last = index == len(groups) - 1
        if index == 0:
            if not body:  # a leading "**": any leading directories
                continue
            out.append(body + (tail if last else ""))
        elif index == 1 and not groups[0]:
            out.append(f"(?>(?:.*?/)??{body}{tail if last else ''})")
        else:
            out.append(f"(?>.*?/{body}{tail if last else ''})")
    return "".join(out)


class Glob:
    """A compiled glob: ``match_file(rel_path)`` is whether it selects the path."""

    __slots__ = ("glob", "_match")

    def __init__(self, glob: str, regex: str | None, selects: bool = True) -> None:
        self.glob = glob
        compiled = re.compile(regex) if regex is not None else None  # a negation is checked too
        self._match = compiled.match if compiled is not None and selects else None

    def match_file(self, rel_path: str) -> bool:
        return self._match is not None and self._match(rel_path) is not None


@functools.lru_cache(maxsize=CACHE_SIZE)
def _compiled(glob: str) -> Glob:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "possible nested set" in a bracket body
            return Glob(glob, *translate(glob))
    except (ValueError, re.error) as exc:
        raise _invalid(glob, str(exc)) from None


def compile_glob(glob: object) -> Glob:
    """The compiled glob; ``INVALID_FIELD`` for a non-string, an overlong or a malformed one."""
    if not isinstance(glob, str):
        raise errors.Dir2mcpError(errors.INVALID_FIELD, "a glob must be a string")
    if len(glob) > MAX_GLOB_CHARS:
        raise errors.Dir2mcpError(errors.INVALID_FIELD, f"a glob is longer than {MAX_GLOB_CHARS} characters")
    return _compiled(glob)
