"""Definition-aware code units (tree-sitter).

A code file is cut where its definitions are: each function, method, class
or declaration, with the decorators and comments directly above it, is one
unit cited by its own lines. A long definition is opened: its inner
definitions become units of their own and what is left of it (the header,
fields, statements between methods) is windowed, each window carrying the
definition's signature as context. Class-like definitions (classes,
interfaces, impl blocks, namespaces) are opened sooner, since their members
are what a question is usually about. Code between definitions (imports,
constants, scripts) is grouped into windows.

Every unit's ``context`` holds the file's path and the first line of each
enclosing definition, so a method is indexed and embedded with its class.

Grammars come from the per-language wheels (``tree-sitter-python``, …),
which ship compiled parsers and need no network. A file with no grammar, or
one that mostly fails to parse, gets ``None``: the caller uses line windows.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from operator import attrgetter

import tree_sitter
import tree_sitter_bash
import tree_sitter_c
import tree_sitter_cpp
import tree_sitter_go
import tree_sitter_java
import tree_sitter_javascript
import tree_sitter_python
import tree_sitter_ruby
import tree_sitter_rust
import tree_sitter_typescript

from corpus.ingest.chunking import LINES, ChunkDraft

#: context lines longer than this are cut: a signature, not a body
SIGNATURE_CHARS = 200
#: more of a file's top level than this inside ERROR nodes: use line windows
MAX_ERROR_SHARE = 0.2
_COMMENTS = frozenset({"comment", "line_comment", "block_comment"})
_START, _END = attrgetter("start_byte"), attrgetter("end_byte")


@dataclass(frozen=True)
class Grammar:
    """What one language's units are made of."""

    name: str
    load: Callable[[], object]
    #: node types that are definitions
    definitions: frozenset[str]
    #: definitions opened as soon as they are longer than the class limit
    class_like: frozenset[str] = frozenset()
    #: nodes that wrap one definition (decorators, ``export``, templates)
    wrappers: frozenset[str] = frozenset()
    #: nodes kept with the definition below them, like comments
    leading: frozenset[str] = _COMMENTS
    #: a predicate for node types that are definitions only sometimes
    sometimes: Callable[[tree_sitter.Node], bool] | None = None
    #: the only node types ``sometimes`` may accept (None: any): the others
    #: are not asked, which spares a call per node of every function body
    sometimes_types: frozenset[str] | None = None
    #: nodes that never hold a definition (simple statements): the walk for
    #: definitions does not enter them, unless they hold a parse error
    opaque: frozenset[str] = frozenset()
    #: a predicate for definitions the outline lists but the units are not cut
    #: at: functions named by where an expression puts them (JavaScript), a
    #: C macro's ``#define NAME value`` and an enumerator (kept with the code around them)
    local: Callable[[tree_sitter.Node], bool] | None = None
    #: the only node types ``local`` may accept (None: any), as ``sometimes_types``
    local_types: frozenset[str] | None = None


_JS_FUNCTION_VALUES = frozenset(
    {"arrow_function", "function_expression", "function", "generator_function", "class"}
)


#: the node types :func:`_js_binds_function` may accept
_JS_BINDING_TYPES = frozenset({"lexical_declaration", "variable_declaration", "expression_statement"})


def _js_binds_function(node: tree_sitter.Node) -> bool:
    """``const f = () => …``, ``exports.f = function …``, ``A.prototype.m = …``."""
    if node.type in ("lexical_declaration", "variable_declaration"):
        return any(
            is_function_value(child.child_by_field_name("value"))
            for child in node.named_children
            if child.type == "variable_declarator"
        )
    if node.type == "expression_statement" and node.named_child_count == 1:
        expr = node.named_children[0]
        return expr.type == "assignment_expression" and is_function_value(expr.child_by_field_name("right"))
    return False


#: the node types :func:`_js_local_function` may accept
_JS_LOCAL_TYPES = frozenset(
    {"function_expression", "function", "generator_function", "class", "pair", "assignment_expression"}
)


def _js_local_function(node: tree_sitter.Node) -> bool:
    """A function inside an expression, named where it is put: a named
    function or class expression (``createErrorClass((_super) => function
    EmptyErrorImpl() …)``), an object literal's key (``next: (value) => …``),
    an assignment that is not a statement of its own (``a = b.f = () => …``)."""
    if node.type in ("function_expression", "function", "generator_function", "class"):
        return node.child_by_field_name("name") is not None
    if node.type == "pair":
        key, value = node.child_by_field_name("key"), node.child_by_field_name("value")
        return key is not None and key.type == "property_identifier" and is_function_value(value)
    if node.type == "assignment_expression":
        parent = node.parent
        if parent is not None and parent.type == "expression_statement" and parent.named_child_count == 1:
            return False  # a definition already (_js_binds_function)
        return is_function_value(node.child_by_field_name("right"))
    return False


def is_function_value(node: tree_sitter.Node | None) -> bool:
    """A JavaScript function, arrow function or class as a value."""
    return node is not None and node.type in _JS_FUNCTION_VALUES


def _c_local(node: tree_sitter.Node) -> bool:
    """``#define NAME value`` and an enumerator (``NAME = 1,``): definitions,
    though no unit is cut at them (a function-like macro,
    ``preproc_function_def``, is cut like a function; an enum with its type)."""
    return node.type in _C_LOCALS


def _c_declares(node: tree_sitter.Node) -> bool:
    """A prototype (``int f(void);``) or a struct/enum/union with a body."""
    if node.type in ("struct_specifier", "enum_specifier", "union_specifier", "class_specifier"):
        return node.child_by_field_name("body") is not None
    return _has_function_declarator(node)


def _has_function_declarator(node: tree_sitter.Node) -> bool:
    declarator = node.child_by_field_name("declarator")
    while declarator is not None:
        if declarator.type == "function_declarator":
            return True
        declarator = declarator.child_by_field_name("declarator")
    return False


_JS_DEFINITIONS = frozenset(
    {"function_declaration", "generator_function_declaration", "class_declaration", "method_definition"}
)
_TS_DEFINITIONS = _JS_DEFINITIONS | {
    "abstract_class_declaration",
    "interface_declaration",
    "type_alias_declaration",
    "enum_declaration",
    "internal_module",
    "module",
    "function_signature",
    "method_signature",
    "abstract_method_signature",
    "property_signature",
    "public_field_definition",
}
_TS_CLASS_LIKE = frozenset(
    {"class_declaration", "abstract_class_declaration", "interface_declaration", "internal_module", "module"}
)
_C_DEFINITIONS = frozenset({"function_definition", "type_definition", "preproc_function_def"})
_C_LOCALS = frozenset({"preproc_def", "enumerator"})
_C_SOMETIMES = frozenset({"declaration", "struct_specifier", "enum_specifier", "union_specifier"})
_CPP_SOMETIMES = _C_SOMETIMES | {"class_specifier", "field_declaration"}


def _typescript(loader: Callable[[], object], name: str) -> Grammar:
    return Grammar(
        name,
        loader,
        _TS_DEFINITIONS,
        class_like=_TS_CLASS_LIKE,
        wrappers=frozenset({"export_statement", "ambient_declaration"}),
        sometimes=_js_binds_function,
        sometimes_types=_JS_BINDING_TYPES,
        local=_js_local_function,
        local_types=_JS_LOCAL_TYPES,
    )


_GRAMMARS: dict[str, Grammar] = {
    g.name: g
    for g in (
        Grammar(
            "python",
            tree_sitter_python.language,
            frozenset({"function_definition", "class_definition"}),
            class_like=frozenset({"class_definition"}),
            wrappers=frozenset({"decorated_definition"}),
            # A def or class is a statement: no simple statement and no expression holds one.
            opaque=frozenset(
                {
                    "parameters",
                    "lambda_parameters",
                    "argument_list",
                    "call",
                    "string",
                    "comparison_operator",
                    "boolean_operator",
                    "binary_operator",
                    "not_operator",
                    "attribute",
                    "subscript",
                    "type",
                    "parenthesized_expression",
                    "expression_statement",
                    "return_statement",
                    "import_statement",
                    "import_from_statement",
                    "future_import_statement",
                    "assert_statement",
                    "raise_statement",
                    "delete_statement",
                    "global_statement",
                    "nonlocal_statement",
                    "print_statement",
                    "exec_statement",
                    "type_alias_statement",
                }
            ),
        ),
        Grammar(
            "javascript",
            tree_sitter_javascript.language,
            _JS_DEFINITIONS,
            class_like=frozenset({"class_declaration"}),
            wrappers=frozenset({"export_statement"}),
            sometimes=_js_binds_function,
            sometimes_types=_JS_BINDING_TYPES,
            local=_js_local_function,
            local_types=_JS_LOCAL_TYPES,
        ),
        _typescript(tree_sitter_typescript.language_typescript, "typescript"),
        _typescript(tree_sitter_typescript.language_tsx, "tsx"),
        Grammar(
            "go",
            tree_sitter_go.language,
            frozenset({"function_declaration", "method_declaration", "type_declaration"}),
        ),
        Grammar(
            "rust",
            tree_sitter_rust.language,
            frozenset(
                {
                    "function_item",
                    "function_signature_item",
                    "impl_item",
                    "struct_item",
                    "enum_item",
                    "union_item",
                    "trait_item",
                    "mod_item",
                    "macro_definition",
                    "type_item",
                    "const_item",
                    "static_item",
                }
            ),
            class_like=frozenset({"impl_item", "trait_item", "mod_item"}),
            leading=_COMMENTS | {"attribute_item"},
        ),
        Grammar(
            "java",
            tree_sitter_java.language,
            frozenset(
                {
                    "class_declaration",
                    "interface_declaration",
                    "enum_declaration",
                    "record_declaration",
                    "annotation_type_declaration",
                    "method_declaration",
                    "constructor_declaration",
                    "compact_constructor_declaration",
                }
            ),
            class_like=frozenset(
                {
                    "class_declaration",
                    "interface_declaration",
                    "enum_declaration",
                    "record_declaration",
                    "annotation_type_declaration",
                }
            ),
        ),
        Grammar(
            "c",
            tree_sitter_c.language,
            _C_DEFINITIONS,
            sometimes=lambda node: node.type in _C_SOMETIMES and _c_declares(node),
            sometimes_types=_C_SOMETIMES,
            local=_c_local,
            local_types=_C_LOCALS,
        ),
        Grammar(
            "cpp",
            tree_sitter_cpp.language,
            _C_DEFINITIONS | {"namespace_definition"},
            class_like=frozenset({"class_specifier", "struct_specifier", "namespace_definition"}),
            wrappers=frozenset({"template_declaration"}),
            sometimes=lambda node: node.type in _CPP_SOMETIMES and _c_declares(node),
            sometimes_types=_CPP_SOMETIMES,
            local=_c_local,
            local_types=_C_LOCALS,
        ),
        Grammar(
            "ruby",
            tree_sitter_ruby.language,
            frozenset({"method", "singleton_method", "class", "module", "singleton_class"}),
            class_like=frozenset({"class", "module", "singleton_class"}),
        ),
        Grammar("bash", tree_sitter_bash.language, frozenset({"function_definition"})),
    )
}

_EXTENSIONS = {
    "py": "python",
    "pyi": "python",
    "pyw": "python",
    "js": "javascript",
    "mjs": "javascript",
    "cjs": "javascript",
    "jsx": "javascript",
    "ts": "typescript",
    "mts": "typescript",
    "cts": "typescript",
    "tsx": "tsx",
    "go": "go",
    "rs": "rust",
    "java": "java",
    "c": "c",
    "h": "c",
    "cc": "cpp",
    "cpp": "cpp",
    "cxx": "cpp",
    "c++": "cpp",
    "hpp": "cpp",
    "hh": "cpp",
    "hxx": "cpp",
    "rb": "ruby",
    "rake": "ruby",
    "sh": "bash",
    "bash": "bash",
}
_SHEBANGS = (
    ("python", "python"),
    ("node", "javascript"),
    ("bash", "bash"),
    ("/sh", "bash"),
    ("ruby", "ruby"),
)
_NAMES = {
    "rakefile": "ruby",
    "gemfile": "ruby",
    ".bashrc": "bash",
    ".bash_profile": "bash",
    ".profile": "bash",
}


def language_for(rel_path: str, text: str = "") -> str | None:
    """The grammar name for a file, by extension, name or shebang; None if none."""
    name = rel_path.rsplit("/", 1)[-1].rsplit("!/", 1)[-1].lower()
    if name in _NAMES:
        return _NAMES[name]
    if "." in name.lstrip("."):
        return _EXTENSIONS.get(name.rsplit(".", 1)[-1])
    if text.startswith("#!"):
        first = text.split("\n", 1)[0]
        return next((lang for word, lang in _SHEBANGS if word in first), None)
    return None


@functools.cache
def language(name: str) -> tree_sitter.Language:
    """The compiled language of grammar ``name`` (``python``, ``go``, …)."""
    return tree_sitter.Language(_GRAMMARS[name].load())


@functools.cache
def _parser(name: str) -> tree_sitter.Parser:
    return tree_sitter.Parser(language(name))


# -- cutting ----------------------------------------------------------------------


@dataclass(frozen=True)
class _Piece:
    start: int  # 0-based first line
    end: int  # 0-based last line, inclusive
    context: tuple[str, ...]


@dataclass(frozen=True)
class Parsed:
    """One file parsed by its grammar: the tree, and which nodes are definitions.

    The units and the outline (``corpus/navigation/outline.py``) read
    definitions through this one rule, so every unit's definition is an
    outline entry; the outline adds the grammar's local definitions
    (:attr:`Grammar.local`: JavaScript's functions inside expressions, C's
    object-like macros and enumerators), which are cut with the unit that holds them."""

    grammar: Grammar
    tree: tree_sitter.Tree
    lines: list[str]
    #: :meth:`inner`'s answers for the whole tree, by ``local`` (built on first use)
    _nestings: dict[bool, _Nesting | None] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def is_definition(self, node: tree_sitter.Node) -> bool:
        grammar = self.grammar
        kind = node.type
        if kind in grammar.wrappers:
            return any(self.is_definition(child) for child in node.named_children)
        if kind in grammar.definitions:
            return True
        sometimes, types = grammar.sometimes, grammar.sometimes_types
        return sometimes is not None and (types is None or kind in types) and sometimes(node)

    def core(self, node: tree_sitter.Node) -> tree_sitter.Node:
        """The definition a wrapper wraps (a decorated function's function)."""
        while node.type in self.grammar.wrappers:
            inner = next((c for c in node.named_children if self.is_definition(c)), None)
            if inner is None:
                break
            node = inner
        return node

    def inner(self, node: tree_sitter.Node, *, local: bool = False) -> Iterator[tree_sitter.Node]:
        """The nearest definitions under ``node``, in order (wrappers included);
        with ``local``, the outline's local definitions too (:attr:`Grammar.local`).

        Answered from the tree's nesting of definitions, worked out once
        (:class:`_Nesting`), for the root and for a definition; any other
        node is walked (:meth:`walked`)."""
        if not self._nestings:
            query = _candidate_query(self.grammar.name)
            self.take_candidates(tree_sitter.QueryCursor(query).captures(self.tree.root_node).get("c", []))
        nesting = self._nestings[local]
        found = nesting.under(node) if nesting is not None else None
        return iter(found) if found is not None else self.walked(node, local=local)

    def take_candidates(self, nodes: list[tree_sitter.Node]) -> None:
        """Work out :meth:`inner`'s answers from ``nodes``, what a query of
        :func:`candidate_patterns` captured in this tree: a reader that runs
        one query for more than this (corpus/navigation/symbols.py) hands
        them here, and the query is not run again."""
        if not self._nestings:
            self._nestings.update(_Nesting.of(self, nodes))

    def walked(self, node: tree_sitter.Node, *, local: bool = False) -> Iterator[tree_sitter.Node]:
        """:meth:`inner`'s answer by a walk of ``node``'s subtree in Python: the rule
        the answers from the nesting agree with (tests/test_units.py)."""
        opaque = self.grammar.opaque
        is_local = self.grammar.local if local else None
        local_types = self.grammar.local_types
        is_definition = self.is_definition  # looked up once: this visits every node of a body
        stack = node.children[::-1]
        pop, push = stack.pop, stack.extend
        while stack:
            child = pop()
            # Named nodes only: Ruby's ``class`` keyword is a node of type "class" too.
            if child.is_named and (
                is_definition(child)
                or (
                    is_local is not None
                    and (local_types is None or child.type in local_types)
                    and is_local(child)
                )
            ):
                yield child
            elif child.child_count and (child.type not in opaque or child.has_error):
                push(child.children[::-1])

    def is_class_like(self, node: tree_sitter.Node) -> bool:
        return node.type in self.grammar.class_like

    def is_local(self, node: tree_sitter.Node) -> bool:
        """Whether ``node`` is one of the outline's local definitions (:attr:`Grammar.local`)."""
        is_local, types = self.grammar.local, self.grammar.local_types
        return is_local is not None and (types is None or node.type in types) and is_local(node)


class _Nesting:
    """Every node :meth:`Parsed.inner` can yield in one tree, each under the
    nearest one above it that it would be yielded from (or the root): the
    candidates are found by one query, in C, instead of a walk in Python
    of every node below each definition (issue #37: on the kernel's C, the
    walks were the largest part of preparing a file)."""

    def __init__(self, root: int, children: dict[int, list[tree_sitter.Node]], stops: set[int]) -> None:
        self._root = root
        self._children = children
        self._stops = stops

    def under(self, node: tree_sitter.Node) -> list[tree_sitter.Node] | None:
        """What :meth:`Parsed.inner` yields of ``node``: known for the root
        and for a node it yields; None for any other node."""
        key = node.id
        if key == self._root or key in self._stops:
            return self._children.get(key, [])
        return None

    @classmethod
    def of(cls, parsed: Parsed, nodes: list[tree_sitter.Node]) -> dict[bool, _Nesting | None]:
        """The nestings of ``parsed``'s tree, with the outline's local
        definitions (True) and without (False), from ``nodes`` (the
        candidates :func:`candidate_patterns` captures)."""
        stops: list[tree_sitter.Node] = []
        definitions: list[tree_sitter.Node] = []
        # In the file's order, a node before those it holds (by start, then
        # by end the other way): two stable sorts with keys read in C.
        ordered = sorted(nodes, key=_END, reverse=True)
        ordered.sort(key=_START)
        for node in ordered:
            if not node.is_named:
                continue
            if parsed.is_definition(node):
                definitions.append(node)
                stops.append(node)
            elif parsed.is_local(node):
                stops.append(node)
        root = parsed.tree.root_node
        return {
            True: cls.nest(root, stops, parsed.grammar.opaque),
            False: cls.nest(root, definitions, parsed.grammar.opaque),
        }

    @classmethod
    def nest(
        cls, root: tree_sitter.Node, stops: list[tree_sitter.Node], opaque: frozenset[str]
    ) -> _Nesting | None:
        """Each of ``stops`` (in order) under the nearest that holds it, or
        the root; None where that cannot be told from byte ranges (a stop of
        no width, or two of one range)."""
        children: dict[int, list[tree_sitter.Node]] = {}
        open_: list[tree_sitter.Node] = []  # the stops that hold the current one, innermost last
        last = (-1, -1)
        for node in stops:
            start, end = node.start_byte, node.end_byte
            if start == end or (start, end) == last:
                return None
            last = (start, end)
            while open_ and open_[-1].end_byte < end:
                open_.pop()
            above = open_[-1].id if open_ else root.id
            if not (opaque and _hidden(node, above, opaque)):
                children.setdefault(above, []).append(node)
            open_.append(node)
        return cls(root.id, children, {node.id for node in stops})


def _hidden(node: tree_sitter.Node, above: int, opaque: frozenset[str]) -> bool:
    """Whether an opaque node the walk does not enter lies between ``node``
    and the stop ``above`` it."""
    parent = node.parent
    while parent is not None and parent.id != above:
        if parent.type in opaque and not parent.has_error:
            return True
        parent = parent.parent
    return False


@functools.cache
def candidate_patterns(name: str) -> str:
    """Query patterns capturing, as ``c``, every node of a type
    :meth:`Parsed.inner` may yield in grammar ``name`` (its local definitions too)."""
    grammar = _GRAMMARS[name]
    types = set(grammar.definitions | grammar.wrappers)
    for predicate, accepted in (
        (grammar.sometimes, grammar.sometimes_types),
        (grammar.local, grammar.local_types),
    ):
        if predicate is not None:
            # A predicate asked of every type would need every node captured.
            assert accepted is not None, f"{name}: a predicate without the types it accepts"
            types |= accepted
    lang = language(name)
    kinds = sorted(kind for kind in types if lang.id_for_node_kind(kind, True))
    return "[" + " ".join(f"({kind})" for kind in kinds) + "] @c"


@functools.cache
def _candidate_query(name: str) -> tree_sitter.Query:
    return tree_sitter.Query(language(name), candidate_patterns(name))


def parse(text: str, rel_path: str) -> Parsed | None:
    """``text`` parsed by the grammar its path names, or None when none does,
    the file is empty, or it mostly fails to parse."""
    name = language_for(rel_path, text)
    if name is None:
        return None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        return None
    tree = _parser(name).parse(text.encode("utf-8", "surrogatepass"))
    if _mostly_broken(tree.root_node, len(lines)):
        return None
    return Parsed(_GRAMMARS[name], tree, lines)


class _Cutter:
    """Walks one parsed file and yields its pieces in line order."""

    def __init__(self, parsed: Parsed, unit_max_lines: int) -> None:
        self.parsed = parsed
        self.grammar = parsed.grammar
        self.lines = parsed.lines
        self.max_lines = unit_max_lines
        self.class_lines = max(unit_max_lines // 4, 5)

    def pieces(self, root: tree_sitter.Node) -> Iterator[_Piece]:
        yield from self._container(root, 0, len(self.lines) - 1, ())

    def _container(
        self, node: tree_sitter.Node, first: int, last: int, context: tuple[str, ...]
    ) -> Iterator[_Piece]:
        """Units for the definitions inside ``node``; windows for the lines between them."""
        cursor = first
        for start, definition in self._inner(node):
            if start < cursor:  # a comment already taken, or overlapping nodes
                start = cursor
            yield from self._rest(cursor, start - 1, context)
            yield from self._definition(definition, start, context)
            cursor = max(cursor, last_row(definition) + 1)
        yield from self._rest(cursor, last, context)

    def _definition(self, node: tree_sitter.Node, start: int, context: tuple[str, ...]) -> Iterator[_Piece]:
        end = last_row(node)
        core = self._core(node)
        length = end - start + 1
        opened = length > self.max_lines or (
            core.type in self.grammar.class_like and length > self.class_lines
        )
        if not opened or not self._inner_exists(core):
            if length > self.max_lines:
                yield from self._rest(start, end, (*context, self._signature(core)))
            else:
                yield _Piece(start, end, context)
            return
        yield from self._container(core, start, end, (*context, self._signature(core)))

    def _rest(self, first: int, last: int, context: tuple[str, ...]) -> Iterator[_Piece]:
        """Lines between definitions, in windows of at most ``max_lines``."""
        while first <= last and not self.lines[first].strip():
            first += 1
        while last >= first and not self.lines[last].strip():
            last -= 1
        while first <= last:
            end = min(last, first + self.max_lines - 1)
            if end < last:
                end = self._blank_before(first, end)
            if any(ch.isalnum() for line in self.lines[first : end + 1] for ch in line):
                yield _Piece(first, end, context)
            first = end + 1
            while first <= last and not self.lines[first].strip():
                first += 1

    def _blank_before(self, first: int, end: int) -> int:
        """Cut a window after a blank line in its last third, if it has one."""
        for row in range(end, first + (end - first) * 2 // 3, -1):
            if not self.lines[row].strip():
                return row
        return end

    # -- the tree -----------------------------------------------------------------

    def _inner(self, node: tree_sitter.Node) -> Iterator[tuple[int, tree_sitter.Node]]:
        """(first line with leading comments, node) of the nearest definitions under ``node``."""
        for child in self.parsed.inner(node):
            yield self._leading_start(child), child

    def _inner_exists(self, node: tree_sitter.Node) -> bool:
        return next(self.parsed.inner(node), None) is not None

    def _core(self, node: tree_sitter.Node) -> tree_sitter.Node:
        return self.parsed.core(node)

    def _leading_start(self, node: tree_sitter.Node) -> int:
        """The first line of the comments and attributes directly above ``node``."""
        start = node.start_point.row
        previous = node.prev_sibling
        while previous is not None and previous.type in self.grammar.leading:
            if last_row(previous) < start - 1 or self._shares_line(previous):
                break
            start = previous.start_point.row
            previous = previous.prev_sibling
        return start

    def _shares_line(self, comment: tree_sitter.Node) -> bool:
        """A trailing comment (``x = 1  # note``) belongs to the code before it."""
        before = comment.prev_sibling
        return before is not None and last_row(before) == comment.start_point.row

    def _signature(self, node: tree_sitter.Node) -> str:
        line = self.lines[node.start_point.row].strip()
        return line[:SIGNATURE_CHARS]


def code_units(
    text: str, rel_path: str, *, unit_max_lines: int = 80, parsed: Parsed | None = None
) -> list[ChunkDraft] | None:
    """The definition-level units of a code file, or None when no grammar
    parses it (the caller then uses line windows). ``parsed`` is ``text``
    already parsed, when the caller has it (the indexer: the symbol index
    reads the same parse)."""
    if language_for(rel_path, text) is None:
        return None
    parsed = parsed or parse(text, rel_path)
    if parsed is None:
        return [] if not text.rstrip("\n") else None
    lines = parsed.lines
    drafts: list[ChunkDraft] = []
    for piece in _Cutter(parsed, unit_max_lines).pieces(parsed.tree.root_node):
        body = "\n".join(lines[piece.start : piece.end + 1])
        context = "\n".join((rel_path, *piece.context)) if rel_path else "\n".join(piece.context)
        drafts.append(ChunkDraft(len(drafts), body, LINES, piece.start + 1, piece.end + 1, context=context))
    return drafts


def last_row(node: tree_sitter.Node) -> int:
    """The last line a node covers: a line comment ends at column 0 of the next."""
    end = node.end_point
    return end.row - 1 if end.column == 0 and end.row > node.start_point.row else end.row


def _mostly_broken(root: tree_sitter.Node, line_count: int) -> bool:
    if not root.has_error:
        return False
    broken = sum(
        last_row(child) - child.start_point.row + 1
        for child in root.children
        if child.is_error or child.is_missing
    )
    return broken > MAX_ERROR_SHARE * line_count or root.is_error
