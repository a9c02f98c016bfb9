"""What a code file defines and what it uses, for ``dir2mcp.symbols`` and
``dir2mcp.references`` (corpus/navigation/names.py reads them back).

Both come from the parse the units are cut from (``units.Parsed``), at index
time: the definitions are exactly the outline's entries
(:func:`~corpus.navigation.outline.definitions`); the uses are the
identifier nodes of the syntax tree (so never a comment or a string), less
each definition's own name (not the names a computed one is made of) and
each parameter's name, rest and type parameters too (a local's
definition), less names too short or too common to look up
(:data:`MIN_NAME`, :data:`_NOT_SYMBOLS`). A use is kept once per line, and a
file's uses of one name are one row (:class:`Uses`): the rows stay few.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass

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
    # Ruby
    "(method_parameters (identifier) @p)",
    "(block_parameters (identifier) @p)",
    "(optional_parameter name: (identifier) @p)",
)
# Receivers and contextual keywords that parse as identifiers: never a symbol.
_NOT_SYMBOLS = frozenset({"self", "cls", "this", "super", "undefined", "nil", "null"})
_SEPARATORS = (" for ", "::", ".", "->", "#")


@dataclass(frozen=True)
class Definition:
    name: str
    qualified: str
    kind: str
    line: int
    start: int
    end: int
    enclosing: str


@dataclass(frozen=True)
class Uses:
    """The lines (1-based, ascending, each once) where a file uses ``name``."""

    name: str
    lines: tuple[int, ...]


@dataclass(frozen=True)
class Navigation:
    definitions: list[Definition]
    uses: list[Uses]


def extract(parsed: units.Parsed) -> Navigation:
    """The definitions and uses of one parsed file."""
    entries = outline.definitions(parsed)
    found: list[Definition] = []
    skip: set[int] = set()  # start bytes of definitions' own name identifiers
    for entry, parent in _walk(entries, None):
        short = short_name(entry.name)
        found.append(
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
    skip.update(node.start_byte for node in _captures(_parameters(parsed.grammar.name), parsed))
    return Navigation(found, _uses(parsed, skip))


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


def _uses(parsed: units.Parsed, skip: set[int]) -> list[Uses]:
    lines: dict[str, list[int]] = {}
    # In the file's order: the query's captures come grouped in an order that
    # varies between processes (string hashing), and the rows follow it.
    for node in sorted(_identifiers(parsed), key=_start):
        if node.start_byte in skip:
            continue
        name = (node.text or b"").decode("utf-8", "replace")
        if not plausible(name):
            continue
        lines.setdefault(name, []).append(node.start_point.row + 1)
    return [Uses(name, tuple(sorted(set(rows)))) for name, rows in lines.items()]


def _start(node: tree_sitter.Node) -> int:
    return node.start_byte


def _identifiers(parsed: units.Parsed) -> list[tree_sitter.Node]:
    return _captures(_query(parsed.grammar.name), parsed)


def _captures(query: tree_sitter.Query | None, parsed: units.Parsed) -> list[tree_sitter.Node]:
    if query is None:
        return []
    captures = tree_sitter.QueryCursor(query).captures(parsed.tree.root_node)
    return [node for nodes in captures.values() for node in nodes]


@functools.cache
def _parameters(grammar: str) -> tree_sitter.Query | None:
    """One query capturing the parameter names of ``grammar``, or None."""
    language = units.language(grammar)
    kept = []
    for pattern in _PARAMETERS:
        try:
            tree_sitter.Query(language, pattern)
        except (tree_sitter.QueryError, NameError, ValueError):
            continue
        kept.append(pattern)
    return tree_sitter.Query(language, " ".join(kept)) if kept else None


@functools.cache
def _query(grammar: str) -> tree_sitter.Query:
    """One query capturing every identifier node of ``grammar`` (a shell
    command's name as well: a function called)."""
    language = units.language(grammar)
    kinds = [kind for kind in _IDENTIFIERS if language.id_for_node_kind(kind, True)]
    source = "[" + " ".join(f"({kind})" for kind in kinds) + "] @name"
    if language.id_for_node_kind("command_name", True):
        source += " (command_name (word) @name)"
    return tree_sitter.Query(language, source)
