"""``completion/complete``: values for a prompt's arguments and for the path
of the resource templates, as a person types them.

Paths complete one segment at a time, case-insensitively: ``sr`` gives
``src/``, ``src/`` gives the entries of ``src`` (folders end with ``/``; a
folder holding a single readable file completes straight to it). Symbols
complete over the names the index knows to be defined (a code unit's
signature line, and the enclosing definitions in its ``context``),
restricted to one file when the client has already chosen ``path``.

Both come from in-memory sorted tables of the listable documents (live,
not secret-bearing), so a request is a dictionary lookup and two binary
searches however large the corpus is (docs/benchmarks.md: "Completion").
A table is rebuilt, on a background thread while the old one keeps
serving, when the index's stamp (its documents, live ones, newest id and
write times) has moved; the stamp is read only while completions are asked
for, at most once every :data:`CHECK_SECONDS`, so a change shows within a
few seconds. Every value is judged by the exclusion engine again before it
is sent (a file, a folder's files, a name's defining files), within bounds
(:data:`JUDGED`, :data:`PASSED_OVER`).
"""

from __future__ import annotations

import bisect
import logging
import re
import threading
import time
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import groupby, islice
from operator import itemgetter
from typing import Generic, TypeVar

from django.db import connection
from django.db.models import Count, Max, Q, QuerySet, Sum

from corpus import files, slices, uris
from corpus.definitions import signature_line
from corpus.models import Chunk, Document, IndexKind
from corpus.security import ExclusionEngine, canonical_rel_path
from kernel import errors
from kernel.jsontypes import JsonObject
from mcp_gateway import prompts
from mcp_gateway.context import Context
from mcp_gateway.prompts import invalid

_Table = TypeVar("_Table")
_Value = TypeVar("_Value")

log = logging.getLogger(__name__)

MAX_VALUES = 100  # the spec's bound on one answer
#: the most values an answer offers before it stops judging: a range
#: holding more has no total (counted unjudged, it told a client of the
#: files excluded since the index was written: review of session 26)
JUDGED = 4 * (MAX_VALUES + 1)
#: files one answer finds excluded before it stops judging
PASSED_OVER = 1000
#: refusals in all (kept verdicts: a dictionary lookup each) before it stops
REFUSALS = 20 * PASSED_OVER
#: paths whose stored-text verdicts are judged a query (a file is read once a version)
PRIMED = 32
MAX_VALUE_CHARS = 4096
#: how often, at most, a table asks whether the index changed (seconds)
CHECK_SECONDS = 2.0
#: how much of a unit's text holds its signature line (after comments, decorators)
_HEAD_CHARS = 600
_LAST = "\U0010ffff"  # sorts after every character a name holds
_NAME = r"[A-Za-z_$][\w$]*"
_KEYWORD = r"def|class|function|func|fn|struct|interface|enum|trait|type|module|namespace|union|record"
# Words that start a line which uses a name rather than declaring it.
_USING = (
    r"return|await|yield|if|elif|else|while|for|with|print|raise|throw|new|assert|not|case|echo|del"
    r"|delete|typeof|import|from|go|defer|switch|catch|lambda|and|or|in|is"
)
# Where a declaration line names what it declares, most telling first (the
# shapes corpus.definitions.defines accepts, without a pattern per name).
_DECLARED = (
    # def f(, class C, func (r *T) M(, fn f<, type T =, interface I
    re.compile(rf"\b(?:{_KEYWORD})\s+(?:\([^)]*\)\s*)?\*?({_NAME})"),
    # const f = () => …
    re.compile(rf"^\s*(?:export\s+)?(?:const|let|var)\s+({_NAME})\s*[=:]"),
    # exports.f = function …, A.prototype.m = (…) => …
    re.compile(rf"^\s*(?:{_NAME}\.)+({_NAME})\s*=\s*(?:async\s+)?(?:function\b|\()"),
    # static int *f(, public void run(
    re.compile(rf"^\s*(?!(?:{_USING})\b)(?:[\w$*&<>\[\],.:]+\s+)+\**({_NAME})\s*(?:<[^>()]*>)?\s*\("),
    # getN(): number {, run() {
    re.compile(rf"^\s*(?!(?:{_USING})\b)({_NAME})\s*(?:<[^>()]*>)?\([^)]*\)\s*[:{{]"),
    # readonly name?: string;
    re.compile(
        rf"^\s*(?:(?:readonly|public|private|protected|static|declare)\s+)*({_NAME})\??\s*:\s*[\w\[{{(<'\"|]"
    ),
)


# -- sorted tables ------------------------------------------------------------------


@dataclass(frozen=True)
class Sorted:
    """Values in the order of their lowercase keys, for prefix lookups."""

    keys: tuple[str, ...]
    values: tuple[str, ...]

    @classmethod
    def of(cls, pairs: Iterable[tuple[str, str]]) -> Sorted:
        ordered = sorted(pairs)
        return cls(tuple(k for k, _ in ordered), tuple(v for _, v in ordered))

    def matching(self, prefix: str) -> tuple[int, int]:
        """The ``[lo, hi)`` range of entries whose key starts with ``prefix`` (lowercase)."""
        lo = bisect.bisect_left(self.keys, prefix)
        return lo, bisect.bisect_left(self.keys, prefix + _LAST, lo)


EMPTY = Sorted((), ())


@dataclass(frozen=True)
class Completion:
    values: list[str]
    total: int | None  # None: not known without judging more values than JUDGED

    def as_result(self) -> JsonObject:
        shown = self.values[:MAX_VALUES]
        if self.total is None:
            return {"completion": {"values": shown, "hasMore": True}}
        return {"completion": {"values": shown, "total": self.total, "hasMore": self.total > len(shown)}}


class PathTable:
    """Each folder's entries (lowercase folder → :class:`Sorted` of its
    entries; a folder ends with ``/``), and every file in one
    :class:`Sorted`, so that the files under a folder are one range."""

    def __init__(self, paths: Iterable[str]) -> None:
        entries: dict[str, dict[str, str]] = {}  # folder -> {entry's name, lowercase: entry}
        files: list[str] = []
        for path in paths:
            files.append(path)
            parts = path.split("/")
            folder = ""
            for depth, part in enumerate(parts):
                name = part if depth == len(parts) - 1 else part + "/"
                entries.setdefault(folder.lower(), {}).setdefault(name.lower(), folder + name)
                folder += name
        # a lowercase path is its own key: one string, not two (most paths are)
        self.files = Sorted.of(
            ((lowered if (lowered := path.lower()) != path else path), path) for path in files
        )
        #: value -> whether the exclusion engine lets it through (see Judge)
        self.verdicts = Verdicts()
        self.folders = {folder: Sorted.of(children.items()) for folder, children in entries.items()}

    def matching(self, typed: str) -> Iterator[str]:
        """The entries ``typed`` begins (case-insensitively), in order."""
        folder, slash, name = typed.lower().rpartition("/")
        table = self.folders.get(folder + slash, EMPTY)
        lo, hi = table.matching(name)
        return iter(table.values[lo:hi])

    def below(self, folder: str) -> Iterator[str]:
        """The files under ``folder`` (ending with ``/``), in order."""
        lo, hi = self.files.matching(folder.lower())
        return iter(self.files.values[lo:hi])


class SymbolTable:
    """The defined names of the index, as one :class:`Sorted`, and for each
    name every file that defines it (in the order the index holds them), so
    an answer can leave out a name whose files the rules exclude now and
    offer one a readable file defines however many excluded ones come first."""

    def __init__(self, definitions: Iterable[tuple[str, str]]) -> None:
        """``definitions``: (a defined name, the file defining it) pairs."""
        paths: dict[str, int] = {}
        pairs = dict.fromkeys((name, paths.setdefault(path, len(paths))) for name, path in definitions)
        names: list[str] = []
        #: the files of the name at position i: files[starts[i]:starts[i + 1]]
        self.starts, self.files = array("I"), array("I")
        # sorted as Sorted.of sorts, each name's files kept in the order read (a stable sort)
        for name, group in groupby(sorted(pairs, key=lambda pair: (pair[0].lower(), pair[0])), itemgetter(0)):
            names.append(name)
            self.starts.append(len(self.files))
            self.files.extend(index for _, index in group)
        self.starts.append(len(self.files))
        self.names = Sorted(tuple(name.lower() for name in names), tuple(names))
        self.paths = tuple(paths)
        #: a defining file -> whether the exclusion engine lets it through (see Judge)
        self.verdicts = Verdicts()

    def matching(self, typed: str) -> Iterator[tuple[str, Iterator[str]]]:
        """The names ``typed`` begins, in order, each with its files."""
        lo, hi = self.names.matching(typed.lower())
        for at in range(lo, hi):
            files = self.files[self.starts[at] : self.starts[at + 1]]
            yield self.names.values[at], (self.paths[index] for index in files)


class Verdicts:
    """Whether the exclusion engine lets each path of a table through, kept
    :data:`CHECK_SECONDS`: the rules may change without the index moving (a
    new ``.gitignore`` line is seen by the walk it starts, and under ``up
    --no-index`` never), so a verdict kept for the table's life answered
    by rules that no longer held."""

    def __init__(self) -> None:
        self._kept: dict[str, tuple[bool, float]] = {}

    def of(self, engine: ExclusionEngine, path: str, now: float) -> bool:
        """Whether ``path`` (a folder when it ends with ``/``) passes the rules."""
        kept = self._kept.get(path)
        if kept is not None and now - kept[1] < CHECK_SECONDS:
            return kept[0]
        if path.endswith("/"):
            passes = engine.excluded_reason(path.rstrip("/"), is_dir=True) is None
        else:
            passes = engine.listed_reason(path) is None
        self._kept[path] = (passes, now)
        return passes


# -- what the index holds -----------------------------------------------------------


def stamp() -> tuple[object, ...]:
    """What moves when the listable documents do: how many rows, the newest
    id, how many are live, and the sum of their write times (a rewrite, to
    secret-bearing or back, sets ``indexed_unix``). One scan of the table,
    no filter on its text columns: about half the cost of counting the
    listable ones (docs/benchmarks.md)."""
    row = Document.objects.aggregate(
        n=Count("doc_id"),
        top=Max("doc_id"),
        live=Count("doc_id", filter=Q(deleted=False)),
        written=Sum("indexed_unix"),
    )
    return row["n"], row["top"], row["live"], row["written"]


class _Stamp:
    """:func:`stamp`, read at most once per :data:`CHECK_SECONDS` for all tables."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._value: tuple[object, ...] = ()
        self._read = float("-inf")

    def get(self, *, fresh: bool = False) -> tuple[object, ...]:
        with self._lock:
            if fresh or time.monotonic() - self._read >= CHECK_SECONDS:
                self._value, self._read = stamp(), time.monotonic()
            return self._value


STAMP = _Stamp()


def build_paths() -> PathTable:
    return PathTable(
        prompts.listable_documents().values_list("rel_path", flat=True).iterator(chunk_size=5000)
    )


def declared_name(line: str) -> str | None:
    """The name a declaration line (a unit's signature line, or a context line) declares."""
    for pattern in _DECLARED:
        match = pattern.search(line)
        if match:
            return match.group(1)
    return None


def unit_names(head: str, context: str) -> set[str]:
    """The names a code unit defines: its own, and its enclosing definitions'."""
    lines = [signature_line(head), *context.split("\n")[1:]]  # context: the unit's path, then signatures
    return {name for name in map(declared_name, lines) if name}


def _code_units(rel_path: str | None = None) -> QuerySet[Chunk, tuple[int, str, str, str]]:
    units = Chunk.objects.filter(
        deleted=False, index_kind=IndexKind.CODE, representation__deleted=False
    ).filter(representation__document__in=prompts.listable_documents())
    if rel_path is not None:
        units = units.filter(representation__document__rel_path=rel_path)
    return units.order_by("chunk_id").values_list(
        "chunk_id", "context", *slices.FIELDS, "representation__document__rel_path"
    )


#: code units read per query while building the symbol table
SYMBOL_PAGE = 2000


def build_symbols(rel_path: str | None = None) -> SymbolTable:
    definitions: list[tuple[str, str]] = []
    after = 0
    # A page per query, each read whole: no read transaction is held across
    # the table (one kept the write-ahead log from restarting: corpus/wal.py).
    while batch := list(_code_units(rel_path).filter(chunk_id__gt=after)[:SYMBOL_PAGE]):
        after = batch[-1][0]
        for _, context, text, defined_in in slices.texts(batch, 2):
            definitions += ((name, defined_in) for name in unit_names(text[:_HEAD_CHARS], context))
    return SymbolTable(definitions)


class Cached(Generic[_Table]):
    """One table per process, rebuilt off the request path when the index moved.

    The first request builds it; later ones get the table as it is and, at
    most once per :data:`CHECK_SECONDS`, start a background check of the
    stamp (and a rebuild if it moved)."""

    def __init__(self, build: Callable[[], _Table]) -> None:
        self._build = build
        self._lock = threading.Lock()
        self._table: _Table | None = None
        self._stamp: tuple[object, ...] | None = None
        self._checked = 0.0
        self._refreshing = False

    def get(self) -> _Table:
        with self._lock:
            if self._table is None:
                self._stamp, self._table = STAMP.get(fresh=True), self._build()
                self._checked = time.monotonic()
            elif not self._refreshing and time.monotonic() - self._checked >= CHECK_SECONDS:
                self._refreshing = True
                threading.Thread(target=self._refresh, name="completion-refresh", daemon=True).start()
            return self._table

    def _refresh(self) -> None:
        try:
            now = STAMP.get()
            table = self._build() if now != self._stamp else None
            with self._lock:
                if table is not None:
                    self._stamp, self._table = now, table
                self._checked = time.monotonic()
        except Exception:  # a failed refresh keeps the table it has
            log.exception("refreshing a completion table failed")
        finally:
            self._refreshing = False
            connection.close()  # this thread's own connection


PATHS = Cached(build_paths)
SYMBOLS = Cached(build_symbols)


# -- completers -----------------------------------------------------------------------


class Stop(Exception):
    """An answer met :data:`PASSED_OVER` refusals: it judges no more."""


class Judge:
    """One answer's verdicts (a table's :class:`Verdicts`), counting the
    files they refuse. Past :data:`PASSED_OVER` such files, or
    :data:`REFUSALS` refusals in all (one file defining many names of the
    range is refused once for each), it raises :class:`Stop`: what that
    tells is "more than 1,000 of the files judged for this range (a name's
    defining files, a folder's files) are excluded now", never one."""

    def __init__(self, ctx: Context, verdicts: Verdicts) -> None:
        self.ctx, self.verdicts, self.now = ctx, verdicts, time.monotonic()
        self.refused: set[str] = set()
        self.refusals = 0

    def passes(self, path: str) -> bool:
        if self.verdicts.of(self.ctx.engine, path, self.now):
            return True
        self.refused.add(path)
        self.refusals += 1
        if len(self.refused) > PASSED_OVER or self.refusals > REFUSALS:
            raise Stop
        return False

    def refuse(self) -> None:
        """Count a value left out for itself (a name holding a credential)."""
        self.refusals += 1
        if self.refusals > REFUSALS:
            raise Stop

    def first(self, paths: Iterable[str], wanted: int = 1) -> list[str]:
        """The first ``wanted`` of ``paths`` that pass (fewer when the rest fail),
        their stored-text verdicts judged :data:`PRIMED` a query."""
        return list(islice(filter(self.passes, self.primed(paths)), wanted))

    def primed(self, paths: Iterable[str]) -> Iterator[str]:
        """``paths``, the stored-text verdicts of a batch judged together
        before they are asked one by one (a query a file until session 31)."""
        return files.primed(self.ctx.engine, paths, str, size=PRIMED)


def _screened(
    ctx: Context, candidates: Iterator[_Value], offered: Callable[[_Value], str | None]
) -> Completion:
    """The values ``offered`` makes of ``candidates`` (a range, in order;
    None: left out), judged one by one against the rules as they are now (a
    file may be excluded since it was indexed). The total only when the
    range ended within :data:`JUDGED` values offered and :data:`PASSED_OVER`
    refusals: counting the range's values unjudged counted any the rules
    exclude now, which a client could narrow down by prefix (review of
    session 26), and so did leaving the total out whenever the range,
    excluded values included, was longer than JUDGED (session 29)."""
    kept: list[str] = []
    with ctx.engine.pinned():
        try:
            for candidate in candidates:
                value = offered(candidate)
                if value is not None:
                    if len(kept) == JUDGED:
                        return Completion(kept, None)
                    kept.append(value)
        except Stop:
            return Completion(kept, None)
    return Completion(kept, len(kept))


def complete_path(ctx: Context, typed: str, _context: JsonObject) -> Completion:
    """Entries of the folder typed so far. A folder is offered while a file
    under it passes the rules, and as that file when it is the only one
    that does: an entry made of files all excluded now named a folder only
    they occupy, and a folder offered as a folder where one readable file
    lay under it told of another, excluded (session 29)."""
    table = PATHS.get()
    judge = Judge(ctx, table.verdicts)

    def offered(entry: str) -> str | None:
        if not judge.passes(entry):  # a folder excluded whole: one verdict, not one a file
            return None
        if not entry.endswith("/"):
            return entry
        readable = judge.first(table.below(entry), wanted=2)
        return entry if len(readable) == 2 else readable[0] if readable else None

    return _screened(ctx, judge.primed(table.matching(typed)), offered)


def _symbols(ctx: Context, table: SymbolTable, typed: str) -> Completion:
    """The names ``typed`` begins, each while a file defining it passes the
    rules as they are now (session 26: a file excluded since the index was
    written, by a ``.gitignore`` line say, kept its names in the answer
    until the walk that change starts had ended). A name's files are judged
    in turn until one passes: until session 29 only its first four were
    kept, so a name only a fifth, readable file defined was not offered."""
    judge = Judge(ctx, table.verdicts)

    def offered(entry: tuple[str, Iterator[str]]) -> str | None:
        name, files = entry
        # The name itself is text of the index: a secret pattern added since
        # it was written may call it a credential (session 29's review).
        if ctx.engine.find_secret(name) is not None:
            judge.refuse()
            return None
        return name if judge.first(files) else None

    return _screened(ctx, table.matching(typed), offered)


def complete_symbol(ctx: Context, typed: str, context: JsonObject) -> Completion:
    """Defined names; only those of ``path`` once the client has chosen one."""
    path = context.get("path", "").strip()
    if not path:
        return _symbols(ctx, SYMBOLS.get(), typed)
    try:
        rel = canonical_rel_path(path)
    except errors.Dir2mcpError:  # names no file under the root: nothing is defined there
        return Completion([], 0)
    if not ctx.readable(rel):  # excluded since it was indexed: as the explain prompt refuses it
        return Completion([], 0)
    return _symbols(ctx, build_symbols(rel), typed)


def complete_date(_ctx: Context, typed: str, _context: JsonObject) -> Completion:
    """Today, yesterday, a week and a month ago (UTC), for a ``since``."""
    today = datetime.now(UTC).date()
    days = [today - timedelta(days=n) for n in (0, 1, 7, 30)]
    values = [d.isoformat() for d in days if d.isoformat().startswith(typed.strip())]
    return Completion(values, len(values))


def _nothing(_ctx: Context, _typed: str, _context: JsonObject) -> Completion:
    return Completion([], 0)


COMPLETERS: dict[str, Callable[[Context, str, JsonObject], Completion]] = {
    "path": complete_path,
    "symbol": complete_symbol,
    "date": complete_date,
}
#: the resource templates' variables that complete (the slice ones do not)
TEMPLATE_VARIABLES = {"path": "path", "lines": None, "page": None, "time": None}


# -- the method -----------------------------------------------------------------------


def complete(ctx: Context, params: JsonObject) -> JsonObject:
    """A ``CompleteResult``; :class:`PromptError` for a request to fix."""
    ref, argument = params.get("ref"), params.get("argument")
    if not isinstance(ref, dict) or not isinstance(argument, dict):
        raise invalid("completion/complete needs params.ref and params.argument (objects)")
    name, typed = argument.get("name"), argument.get("value")
    if not isinstance(name, str) or not isinstance(typed, str):
        raise invalid("argument.name and argument.value must be strings")
    if len(typed) > MAX_VALUE_CHARS:
        raise invalid(f"argument.value is longer than {MAX_VALUE_CHARS} characters")
    kind = _kind(ref, name)
    completer = COMPLETERS.get(kind, _nothing) if kind else _nothing
    return completer(ctx, typed, _context_arguments(params)).as_result()


def _kind(ref: JsonObject, name: str) -> str | None:
    """What ``name`` of ``ref`` is (``path``, ``symbol``, ``date`` or None)."""
    if ref.get("type") == "ref/prompt":
        ref_name = ref.get("name")
        prompt = prompts.REGISTRY.get(ref_name) if isinstance(ref_name, str) else None
        if prompt is None:
            raise invalid(f"Unknown prompt: {str(ref.get('name'))[:128]}")
        argument = next((a for a in prompt.arguments if a.name == name), None)
        if argument is None:
            raise invalid(f"prompt {prompt.name} has no argument {name[:128]!r}")
        return argument.kind
    if ref.get("type") == "ref/resource":
        if ref.get("uri") not in (uris.FILE_TEMPLATE, uris.SLICE_TEMPLATE):
            raise invalid(
                f"ref.uri must be a resource template of this server: {uris.FILE_TEMPLATE} "
                f"or {uris.SLICE_TEMPLATE}"
            )
        if name not in TEMPLATE_VARIABLES:
            raise invalid(f"the template has no variable {name[:128]!r}")
        return TEMPLATE_VARIABLES[name]
    raise invalid("ref.type must be ref/prompt or ref/resource")


def _context_arguments(params: JsonObject) -> JsonObject:
    context = params.get("context")
    arguments = context.get("arguments") if isinstance(context, dict) else None
    if arguments is None:
        return {}
    if not isinstance(arguments, dict) or not all(isinstance(v, str) for v in arguments.values()):
        raise invalid("context.arguments must map names to strings")
    return arguments
