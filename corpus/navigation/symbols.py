"""What a code file defines and what it uses, for ``dir2mcp.symbols`` and
``dir2mcp.references`` (corpus/navigation/names.py reads them back).

Both come from the parse the units are cut from (``units.Parsed``), at index
time: the definitions are exactly the outline's entries
(:func:`~corpus.navigation.outline.definitions`); the uses are the
identifier nodes of the syntax tree (so never a comment or a string), less
each definition's own name (not the names a computed one is made of) and
each parameter's name, rest and type parameters too (a local's
definition), less names too short or too common to look up
(:data:`MIN_NAME`, :data:`_NOT_SYMBOLS`). A C or C++ macro's body is one
token to the grammar, so its names are read by a scan of that token
(:func:`macro_names`): a macro that calls a function uses it. A use is kept once per line, and a
file's uses of one name are one row (:class:`Uses`): the rows stay few.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from operator import attrgetter
from typing import NamedTuple

import tree_sitter

from corpus.ingest import units
from corpus.navigation import outline

#: names shorter than this are not indexed as uses (``i``, ``x``)
MIN_NAME = 2
#: the longest name stored; longer names are cut (definitions) or not indexed (uses)
MAX_NAME = 200
# Identifier node types of each grammar (those it does not have are ignored).
_IDENTIFIERS = (
    "identifier",
    "type_identifier",
    "field_identifier",
    "property_identifier",
    "shorthand_property_identifier",
    "shorthand_property_identifier_pattern",
    "private_property_identifier",
    "namespace_identifier",
    "package_identifier",
    "constant",
    "variable_name",
)
# A parameter's name is the definition of a local, not a use: left out, per
# grammar by these patterns (those naming nodes a grammar lacks are skipped).
_PARAMETERS = (
    # Python
    "(parameters (identifier) @p)",
    "(lambda_parameters (identifier) @p)",
    "(default_parameter name: (identifier) @p)",
    "(typed_parameter . (identifier) @p)",
    "(typed_default_parameter name: (identifier) @p)",
    "(list_splat_pattern (identifier) @p)",
    "(dictionary_splat_pattern (identifier) @p)",
    # JavaScript, TypeScript
    "(formal_parameters (identifier) @p)",
    "(formal_parameters (assignment_pattern left: (identifier) @p))",
    "(formal_parameters (rest_pattern (identifier) @p))",
    "(required_parameter pattern: (identifier) @p)",
    "(required_parameter pattern: (rest_pattern (identifier) @p))",
    "(optional_parameter pattern: (identifier) @p)",
    # A type parameter (TypeScript, Rust; Go's below): a local type's definition
    "(type_parameter name: (type_identifier) @p)",
    # Go, C, C++
    "(parameter_declaration name: (identifier) @p)",
    "(variadic_parameter_declaration name: (identifier) @p)",
    "(type_parameter_declaration name: (identifier) @p)",
    "(parameter_declaration declarator: (identifier) @p)",
    "(parameter_declaration declarator: (pointer_declarator declarator: (identifier) @p))",
    # Rust
    "(parameter pattern: (identifier) @p)",
    "(closure_parameters (identifier) @p)",
    # Java
    "(formal_parameter name: (identifier) @p)",
    # A C or C++ function-like macro's parameters
    "(preproc_params (identifier) @p)",
    # Ruby
    "(method_parameters (identifier) @p)",
    "(block_parameters (identifier) @p)",
    "(optional_parameter name: (identifier) @p)",
)
# Receivers and contextual keywords that parse as identifiers: never a symbol.
_NOT_SYMBOLS = frozenset({"self", "cls", "this", "super", "undefined", "nil", "null"})
_SEPARATORS = (" for ", "::", ".", "->", "#")
_START = attrgetter("start_byte")
# A macro body's tokens: literals, comments and numbers are skipped whole, so
# are a name pasted to another (``reg##_BASE_IDX``) and a stringified one
# (``#x``); group 1 is a name.
_MACRO_TOKEN = re.compile(
    r"\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'|/\*.*?\*/|//[^\n]*|\.?\d[\w.]*"
    r"|##\s*\w+|#\s*[A-Za-z_]\w*|([A-Za-z_]\w*)\b(?!\s*##)",
    re.DOTALL,
)
# Words of C and C++ that the grammar parses as no identifier (keywords,
# primitive types, literals), so a scanned body leaves them out too.
_C_WORDS = frozenset(
    """auto break case char const continue default do double else enum extern float for goto if
    inline int long register restrict return short signed sizeof static struct switch typedef union
    unsigned void volatile while _Alignas _Alignof _Atomic _Bool _Complex _Generic _Imaginary
    _Noreturn _Static_assert _Thread_local alignas alignof bool static_assert thread_local typeof
    typeof_unqual asm __asm __asm__ __attribute__ __attribute __extension__ __inline __inline__
    __restrict __restrict__ __volatile__ __typeof__ __typeof __alignof__ __thread _Pragma defined
    __VA_ARGS__ __VA_OPT__ NULL true false nullptr TRUE FALSE size_t ssize_t ptrdiff_t intptr_t
    uintptr_t max_align_t nullptr_t int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t
    uint64_t char8_t char16_t char32_t wchar_t class namespace template typename this new delete
    operator public private protected virtual friend using constexpr consteval constinit decltype
    explicit mutable noexcept override final throw try catch static_cast dynamic_cast
    reinterpret_cast const_cast co_await co_return co_yield concept requires export""".split()
)


# Named tuples, not dataclasses: a kernel file's few hundred of them are
# pickled by its preparing worker and read back by the writing process,
# which reads a named tuple about 2.5 times faster (issue #37).
class Definition(NamedTuple):
    name: str
    qualified: str
    kind: str
    line: int
    start: int
    end: int
    enclosing: str


class Uses(NamedTuple):
    """The lines (1-based, ascending, each once) where a file uses ``name``."""

    name: str
    lines: tuple[int, ...]


@dataclass(frozen=True)
class Navigation:
    definitions: list[Definition]
    uses: list[Uses]


def extract(parsed: units.Parsed) -> Navigation:
    """The definitions and uses of one parsed file."""
    # One query for the tree (:func:`_query`): its identifiers, macro bodies
    # and parameter names, and the nodes the outline's definitions are found among.
    found = tree_sitter.QueryCursor(_query(parsed.grammar.name)).captures(parsed.tree.root_node)
    parsed.take_candidates(found.get("c", []))
    entries = outline.definitions(parsed)
    defined: list[Definition] = []
    skip: set[int] = set()  # start bytes of definitions' own name identifiers
    for entry, parent in _walk(entries, None):
        short = short_name(entry.name)
        defined.append(
            Definition(
                short[:MAX_NAME],
                entry.name[:MAX_NAME] if entry.name != short else "",
                entry.kind[:16],
                entry.line or entry.start,
                entry.start,
                entry.end,
                short_name(parent.name)[:MAX_NAME] if parent is not None else "",
            )
        )
        # A computed name (``[Symbol.observable]()``) uses the names it is computed from.
        if entry.name_node is not None and entry.name_node.type != "computed_property_name":
            own = _last_identifier(entry.name_node)
            if own is not None:
                skip.add(own.start_byte)
    skip.update(node.start_byte for node in found.get("p", ()))
    return Navigation(defined, _uses(found, skip))


def short_name(name: str) -> str:
    """The last part of a qualified name: ``m`` of ``A.prototype.m``, ``bar``
    of ``Foo::bar``, ``Config`` of a Rust ``impl Display for Config``."""
    for separator in _SEPARATORS:
        if separator in name:
            name = name.rsplit(separator, 1)[-1]
    return name.strip() or name


def plausible(name: str) -> bool:
    """Whether a use of ``name`` is indexed: long enough, not a receiver or keyword."""
    return MIN_NAME <= len(name) <= MAX_NAME and name not in _NOT_SYMBOLS


def _walk(
    entries: list[outline.Entry], parent: outline.Entry | None
) -> Iterator[tuple[outline.Entry, outline.Entry | None]]:
    for entry in entries:
        yield entry, parent
        yield from _walk(entry.children, entry)


def _last_identifier(node: tree_sitter.Node) -> tree_sitter.Node | None:
    """The identifier a (possibly qualified) name node ends with."""
    while node.named_child_count:
        node = node.named_children[-1]
    return node if node.type in _IDENTIFIERS or node.type == "word" else None


def _uses(found: dict[str, list[tree_sitter.Node]], skip: set[int]) -> list[Uses]:
    """The uses among ``found``'s identifiers (@name) and, in C and C++, macro bodies (@body)."""
    lines: dict[str, list[int]] = {}
    # Each spelling decoded and judged once: a file names the same few hundred
    # names thousands of times (None: not plausible).
    names: dict[bytes | None, str | None] = {}
    # In the file's order, whatever order the cursor hands the captures in
    # (it varied between processes, and the reference rows followed it).
    for node in sorted(found.get("name", ()), key=_START):
        if node.start_byte in skip:
            continue
        raw = node.text
        if raw in names:
            name = names[raw]
        else:
            name = (raw or b"").decode("utf-8", "replace")
            name = names[raw] = name if plausible(name) else None
        if name is None:
            continue
        row = node.start_point.row + 1
        rows = lines.get(name)
        if rows is None:
            lines[name] = [row]
        else:
            rows.append(row)
    for body in sorted(found.get("body", ()), key=_START):
        text = (body.text or b"").decode("utf-8", "replace")
        for name, row in macro_names(text):
            if plausible(name):
                lines.setdefault(name, []).append(body.start_point.row + row + 1)
    return [Uses(name, tuple(sorted(set(rows)))) for name, rows in lines.items()]


def macro_names(body: str) -> Iterator[tuple[str, int]]:
    """The names a C macro's body uses, each with its 0-based line in the body
    (the tokens of :data:`_MACRO_TOKEN`, less :data:`_C_WORDS`)."""
    row, at = 0, 0
    for match in _MACRO_TOKEN.finditer(body):
        name = match.group(1)
        if name is None or name in _C_WORDS:
            continue
        row += body.count("\n", at, match.start())
        at = match.start()
        yield name, row


def _parameters(grammar: str) -> str:
    """The patterns of :data:`_PARAMETERS` that ``grammar`` has the nodes of (capturing ``p``)."""
    language = units.language(grammar)
    kept = []
    for pattern in _PARAMETERS:
        try:
            tree_sitter.Query(language, pattern)
        except (tree_sitter.QueryError, NameError, ValueError):
            continue
        kept.append(pattern)
    return " ".join(kept)


@functools.cache
def _query(grammar: str) -> tree_sitter.Query:
    """One query capturing every identifier node of ``grammar`` (a shell
    command's name as well: a function called) as ``name``, a C or C++
    macro's body as ``body``, each parameter's name as ``p``, and the
    candidates for definitions (:func:`corpus.ingest.units.candidate_patterns`)
    as ``c``: a query's run costs about as much as a walk of the tree, and
    one query of them all about a third of four (issue #37)."""
    language = units.language(grammar)
    kinds = [kind for kind in _IDENTIFIERS if language.id_for_node_kind(kind, True)]
    source = "[" + " ".join(f"({kind})" for kind in kinds) + "] @name"
    if language.id_for_node_kind("command_name", True):
        source += " (command_name (word) @name)"
    if language.id_for_node_kind("preproc_arg", True):
        # A comment inside a continued body breaks it into pieces, some in an ERROR node.
        pieces = "(preproc_arg) @body (ERROR (preproc_arg) @body)"
        source += f" (preproc_def [{pieces}]) (preproc_function_def [{pieces}])"
    source += f" {_parameters(grammar)} {units.candidate_patterns(grammar)}"
    return tree_sitter.Query(language, source)
