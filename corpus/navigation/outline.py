"""A file's outline: its definitions as a tree, or its headings, with spans.

Code is read by the grammar its units come from (``corpus/ingest/units.py``:
:func:`~corpus.ingest.units.parse` and :class:`~corpus.ingest.units.Parsed`),
so a definition the index cuts a unit at is an outline entry; JavaScript's
and TypeScript's functions named inside an expression (an object literal's
``next: (value) => …``, a named function expression passed to a call) are
entries too, nested in their enclosing definition, though no unit is cut at
them; so are C's and C++'s object-like macros (``#define NAME value``) and
enumerators (kind constant, nested in their enum), cut with the code around them. Markdown and
reStructuredText (and HTML, by the text it is indexed as) give their
headings, by the scan that cuts their sections, nested by level. Each entry
names its kind, its name, its signature line (cut at
:data:`~corpus.ingest.units.SIGNATURE_CHARS`) and its 1-based line span.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import tree_sitter

from corpus import files
from corpus.citations import SpanRef
from corpus.ingest import sections, units
from corpus.security import ExclusionEngine
from kernel import errors
from kernel.jsontypes import JsonObject

#: the most text an outline reads (characters): a generated file past it is outlined in part
MAX_CHARS = 4 * 1024 * 1024
#: a run of at least this many object-like macros, or enumerators, is one outline entry
FOLD_RUN = 4
#: the node types folded when in a run, and the kind of the entry that stands for the run
_FOLDED = {"preproc_def": "macros", "enumerator": "constants"}
# Prose formats with headings, by document type or extension.
_PROSE = {"md": "md", "markdown": "md", "html": "md", "rst": "rst"}

#: node types named for a reader; a definition inside a class-like one is a method
_KINDS = {
    "function_definition": "function",
    "function_declaration": "function",
    "generator_function_declaration": "function",
    "function_item": "function",
    "function_signature_item": "function",
    "function_signature": "function",
    "preproc_function_def": "macro",
    "preproc_def": "macro",
    "enumerator": "constant",
    "macro_definition": "macro",
    "method_definition": "method",
    "method_declaration": "method",
    "method_signature": "method",
    "abstract_method_signature": "method",
    "method": "method",
    "singleton_method": "method",
    "constructor_declaration": "constructor",
    "compact_constructor_declaration": "constructor",
    "class_definition": "class",
    "class_declaration": "class",
    "abstract_class_declaration": "class",
    "class_specifier": "class",
    "class": "class",
    "singleton_class": "class",
    "interface_declaration": "interface",
    "annotation_type_declaration": "interface",
    "trait_item": "trait",
    "impl_item": "impl",
    "struct_item": "struct",
    "struct_specifier": "struct",
    "union_item": "union",
    "union_specifier": "union",
    "enum_item": "enum",
    "enum_declaration": "enum",
    "enum_specifier": "enum",
    "record_declaration": "record",
    "type_alias_declaration": "type",
    "type_declaration": "type",
    "type_definition": "type",
    "type_item": "type",
    "mod_item": "module",
    "module": "module",
    "internal_module": "module",
    "namespace_definition": "namespace",
    "const_item": "constant",
    "static_item": "static",
    "property_signature": "property",
    "public_field_definition": "field",
    "field_declaration": "field",
    "declaration": "declaration",
    "lexical_declaration": "function",
    "variable_declaration": "function",
    "expression_statement": "function",
    "variable_declarator": "function",
    "pair": "function",
    "assignment_expression": "function",
    "function_expression": "function",
    "function": "function",
    "generator_function": "function",
}
# Where a declarator chain ends in the name (C, C++).
_NAME_NODES = frozenset(
    {
        "identifier",
        "field_identifier",
        "type_identifier",
        "qualified_identifier",
        "destructor_name",
        "operator_name",
        "property_identifier",
        "constant",
    }
)
# A function inside a class is its method; a macro stays a macro (``#define`` in a C++ class body).
_FUNCTION_KINDS = frozenset({"function"})


@dataclass
class Entry:
    """One definition, heading or page, with what is nested in it. ``start``
    and ``end`` are 1-based lines, or a page number twice (``span_kind`` page)."""

    kind: str
    name: str
    signature: str
    start: int
    end: int
    children: list[Entry] = field(default_factory=list)
    span_kind: str = "lines"
    #: the signature's own line where the span starts above it (decorators, attributes)
    line: int | None = None
    #: a definition's syntax node and the node of its name (None for a heading, a page, an impl),
    #: for the symbol index (corpus/navigation/symbols.py); never returned
    node: tree_sitter.Node | None = field(default=None, repr=False, compare=False)
    name_node: tree_sitter.Node | None = field(default=None, repr=False, compare=False)
    #: a folded run (kind macros or constants): how many definitions, and the last one's name
    folded: int = 0
    last: str = ""

    def as_dict(self) -> JsonObject:
        out: JsonObject = {
            "kind": self.kind,
            "name": self.name,
            "signature": self.signature,
            "span": SpanRef(self.span_kind, self.start, self.end).as_dict(),
        }
        if self.line is not None and self.line != self.start:
            out["line"] = self.line
        if self.folded:
            out |= {"folded": self.folded, "last": self.last}
        if self.children:
            out["children"] = [child.as_dict() for child in self.children]
        return out


def walk(entries: list[Entry]) -> Iterator[Entry]:
    """Every entry, depth first, in line order."""
    for entry in entries:
        yield entry
        yield from walk(entry.children)


# -- a document ------------------------------------------------------------------------


@dataclass(frozen=True)
class Outline:
    rel_path: str
    doc_type: str
    #: "definitions" (code), "headings" (prose) or "pages"
    of: str
    entries: list[Entry]
    #: lines, or pages, in the document
    length: int
    #: the document was longer than was read; the outline covers its beginning
    truncated: bool = False
    #: the file kept changing while it was read: this is the outline of its indexed text
    from_index: bool = False

    def as_dict(self) -> JsonObject:
        out = {
            "rel_path": self.rel_path,
            "doc_type": self.doc_type,
            "outline": self.of,
            "entries": [entry.as_dict() for entry in self.entries],
            "count": sum(1 for _ in walk(self.entries)),
            ("pages" if self.of == "pages" else "lines"): self.length,
            "truncated": self.truncated,
        }
        return out | ({"from_index": True} if self.from_index else {})


def outline(engine: ExclusionEngine, rel_path: str, *, max_chars: int = MAX_CHARS) -> Outline:
    """The outline of ``rel_path``, read as ``open_file`` reads it (the one
    check and open; a secret-bearing document refused), its names and
    signatures screened for secrets like any returned text."""
    document = files.read_document(engine, rel_path, max_chars=max_chars)
    rel = document.rel_path
    if document.pages is not None:
        entries = page_outline(document.pages)
        of, length = "pages", len(document.pages)
    else:
        text = document.lines or ""
        length = text.count("\n") + (1 if text and not text.endswith("\n") else 0)
        fmt = _PROSE.get(document.doc_type) or _PROSE.get(rel.rsplit(".", 1)[-1].lower())
        code = code_outline(text, rel) if fmt is None else None
        if code is not None:
            entries, of = code, "definitions"
        elif fmt is not None:
            entries, of = heading_outline(text, fmt), "headings"
        else:
            raise errors.Dir2mcpError(
                errors.DOC_TYPE_UNSUPPORTED,
                f"{rel} has no outline: no grammar or headings for a {document.doc_type} file; "
                "use open_file or search",
            )
    files.screen(engine, rel, "\n".join(f"{e.name}\n{e.signature}" for e in walk(entries)))
    entries = fold(entries) if of == "definitions" else entries
    return Outline(rel, document.doc_type, of, entries, length, document.truncated, document.from_index)


def prune(entries: list[Entry], limit: int) -> tuple[list[Entry], int]:
    """At most ``limit`` entries, the outer levels first (every top-level entry
    before any member), each kept entry with its kept children; and how many
    there were."""
    kept: set[int] = set()
    level, total = list(entries), 0
    while level:
        for entry in level:
            total += 1
            if len(kept) < limit:
                kept.add(id(entry))
        level = [child for entry in level for child in entry.children]

    def rebuilt(group: list[Entry]) -> list[Entry]:
        return [replace(e, children=rebuilt(e.children)) for e in group if id(e) in kept]

    return rebuilt(entries), total


def fold(entries: list[Entry], *, run: int = FOLD_RUN) -> list[Entry]:
    """``entries`` with each run of at least ``run`` consecutive object-like
    macros (or enumerators) as one entry of kind macros (or constants): its
    first definition's name and signature, the last one's name, how many, and
    the span of the run. A header of ``#define`` lines outlines in a few lines
    instead of one a name; the names stay in the symbol index (``symbols``)."""
    found: list[Entry] = []
    for kind, group in itertools.groupby(entries, key=_folded_kind):
        members = list(group)
        if kind and len(members) >= run:
            first, last = members[0], members[-1]
            found.append(
                Entry(
                    kind,
                    first.name,
                    first.signature,
                    first.start,
                    last.end,
                    line=first.line,
                    folded=len(members),
                    last=last.name,
                )
            )
        else:
            found += [replace(e, children=fold(e.children, run=run)) for e in members]
    return found


def _folded_kind(entry: Entry) -> str:
    return _FOLDED.get(entry.node.type, "") if entry.node is not None else ""


# -- code ---------------------------------------------------------------------------


def code_outline(text: str, rel_path: str) -> list[Entry] | None:
    """The definitions of a code file as a tree, or None when no grammar reads it."""
    parsed = units.parse(text, rel_path)
    if parsed is None:
        return None
    return definitions(parsed)


def definitions(parsed: units.Parsed) -> list[Entry]:
    """The definitions of a parsed code file as a tree."""
    return _entries(parsed, parsed.tree.root_node, inside_class=False)


def _entries(parsed: units.Parsed, node: tree_sitter.Node, *, inside_class: bool) -> list[Entry]:
    found = []
    for outer in parsed.inner(node, local=True):
        core = parsed.core(outer)
        specs = _grouped_specs(core)
        if specs:  # Go's type ( A …; B … ): one unit, but each spec its own definition
            found += [_spec_entry(parsed, spec, "type") for spec in specs]
            continue
        declarators = _declarators(core)
        if declarators:  # var a = 1, f = function …: one unit, each function its own definition
            for declarator in declarators:
                if units.is_function_value(declarator.child_by_field_name("value")):
                    entry = _spec_entry(parsed, declarator, "function")
                    entry.children = _entries(parsed, declarator, inside_class=False)
                    found.append(entry)
                else:
                    found += _entries(parsed, declarator, inside_class=False)
            continue
        kind = _KINDS.get(core.type, core.type)
        if inside_class and kind in _FUNCTION_KINDS:
            kind = "method"
        entry = _entry(parsed, kind, core, outer)
        entry.children = _entries(parsed, core, inside_class=parsed.is_class_like(core))
        found.append(entry)
    return found


def _grouped_specs(node: tree_sitter.Node) -> list[tree_sitter.Node]:
    """The specs of a Go ``type ( … )`` that declares more than one type."""
    if node.type != "type_declaration":
        return []
    specs = [c for c in node.named_children if c.type in ("type_spec", "type_alias")]
    return specs if len(specs) > 1 else []


def _declarators(node: tree_sitter.Node) -> list[tree_sitter.Node]:
    """The declarators of a JavaScript ``var``/``let``/``const`` that declares more than one name."""
    if node.type not in ("lexical_declaration", "variable_declaration"):
        return []
    found = [c for c in node.named_children if c.type == "variable_declarator"]
    return found if len(found) > 1 else []


def _spec_entry(parsed: units.Parsed, spec: tree_sitter.Node, kind: str) -> Entry:
    return _entry(parsed, kind, spec, spec)


def _entry(parsed: units.Parsed, kind: str, core: tree_sitter.Node, outer: tree_sitter.Node) -> Entry:
    """The definition ``core`` of ``kind``, spanning ``outer`` (its wrapper, as
    a decorated function, or itself), named and signed on its name's line."""
    name, row = _name(core)
    return Entry(
        kind,
        name,
        parsed.lines[row].strip()[: units.SIGNATURE_CHARS] if row < len(parsed.lines) else "",
        outer.start_point.row + 1,
        units.last_row(outer) + 1,
        line=row + 1,
        node=core,
        name_node=None if core.type == "impl_item" else _name_node(core),
    )


def _name(node: tree_sitter.Node) -> tuple[str, int]:
    """What a definition declares, as written (``parse``, ``Config``, ``impl
    Display for Config``), and the 0-based row it is named on: a Java method's
    name under its annotations, a C function's under its return type."""
    if node.type == "impl_item":
        trait, of = node.child_by_field_name("trait"), node.child_by_field_name("type")
        parts = [part for part in (trait, of) if part is not None]
        return " for ".join(_text(part) for part in parts), (parts[-1] if parts else node).start_point.row
    named = _name_node(node)
    return (_text(named), named.start_point.row) if named is not None else ("", node.start_point.row)


def _name_node(node: tree_sitter.Node) -> tree_sitter.Node | None:
    if node.type in ("preproc_def", "preproc_function_def"):
        return _macro_name(node)
    named = node.child_by_field_name("name")
    if named is not None:
        return named
    if node.type in ("lexical_declaration", "variable_declaration", "type_declaration"):
        inner = next(
            (c for c in node.named_children if c.type in ("variable_declarator", "type_spec", "type_alias")),
            None,
        )
        return _name_node(inner) if inner is not None else None
    if node.type == "expression_statement" and node.named_child_count == 1:
        return node.named_children[0].child_by_field_name("left")
    if node.type in ("pair", "assignment_expression"):
        return node.child_by_field_name("key" if node.type == "pair" else "left")
    declarator = node.child_by_field_name("declarator")
    while declarator is not None:
        if declarator.type in _NAME_NODES:
            return declarator
        declarator = declarator.child_by_field_name("declarator") or next(
            (c for c in declarator.named_children if c.type in _NAME_NODES), None
        )
    return None


def _macro_name(node: tree_sitter.Node) -> tree_sitter.Node | None:
    """The name right after ``#define``, also where the grammar fails to read
    the body (a comment inside a continued body puts the name in an ERROR
    node, and its ``name`` field on a word of the body)."""
    first = node.named_children[0] if node.named_child_count else None
    while first is not None and first.type == "ERROR":
        first = first.named_children[0] if first.named_child_count else None
    return first if first is not None and first.type == "identifier" else None


def _text(node: tree_sitter.Node) -> str:
    return (node.text or b"").decode("utf-8", "replace")[: units.SIGNATURE_CHARS]


# -- prose and pages -------------------------------------------------------------------


def heading_outline(text: str, fmt: str) -> list[Entry]:
    """Headings nested by level; each spans to the line before the next heading
    of the same or a higher level (or the end)."""
    line_count = text.count("\n") + (0 if text.endswith("\n") else 1)
    found = sections.headings(text, "rst" if fmt == "rst" else "md")
    top: list[Entry] = []
    open_: list[tuple[int, Entry]] = []  # (level, entry) of the headings still open
    for heading in found:
        while open_ and open_[-1][0] >= heading.level:
            open_.pop()[1].end = heading.line - 1
        entry = Entry("heading", heading.title, heading.title, heading.line, line_count)
        (open_[-1][1].children if open_ else top).append(entry)
        open_.append((heading.level, entry))
    for _, entry in open_:
        entry.end = max(entry.start, line_count)
    return top


def page_outline(pages: list[str]) -> list[Entry]:
    """One entry per page, named by its first line of text."""
    entries = []
    for number, page in enumerate(pages, 1):
        first = next((line.strip() for line in page.split("\n") if line.strip()), "")
        first = first.lstrip("#").strip()[: units.SIGNATURE_CHARS]
        entries.append(Entry("page", f"page {number}", first, number, number, span_kind="page"))
    return entries
