"""The uses of names in a TypeScript or Go file by its syntax tree: the fair
reference for ``dir2mcp.references`` (bench/symbols.py, issue #32).

The issue asks for "identifier nodes of the syntax tree, not comments or
strings, not its own definition". This reference takes every named leaf of
the tree (tree-sitter's, from the grammar's wheel) that is spelled like an
identifier and is not a literal, a string, a comment or a regular expression,
whatever its node type, and leaves out the leaves that declare a name rather
than use it:

- what a definition names: a class, interface, type, enum, function,
  method, module, a member signature or field (TypeScript's property
  signatures and fields, Go's struct fields and interface methods), and the
  function bindings tree-sitter's ``tags.scm`` counts as definitions
  (``const f = () => …``, ``next: (value) => …``, ``a.b = function …``);
- parameters: a function's, a method's, an arrow function's (the names
  inside a destructured one too, not its default values), Go's receivers
  and named results, and type parameters.

A variable's name where it is declared (``const x = 1``, ``x := 1``), an
imported name and an object literal's key are uses, as :mod:`ast` holds an
assigned name and the Python reference holds an imported one. It is
independent of the index's own rules (``corpus/navigation/symbols.py``:
a list of identifier node types and a query for parameters); it shares only
the parser. The lexical scan (``bench/corpora.lexical_uses``) is the
reference that shares nothing, and counts every parameter as a use.
"""

from __future__ import annotations

import functools
import re

import tree_sitter
import tree_sitter_go
import tree_sitter_typescript

_WORD = re.compile(r"[A-Za-z_$][\w$]*\Z")
# Leaves spelled like a word that are no name: literals and the receivers the index never stores.
_LITERALS = frozenset({"true", "false", "null", "undefined", "this", "super", "nil", "iota"})
_NOT_NAMES = ("string", "comment", "rune", "regex", "escape", "literal", "number")
# Node types whose ``name`` field is the name they declare.
_DECLARES = {
    "ts": frozenset(
        {
            "class_declaration",
            "abstract_class_declaration",
            "class",
            "interface_declaration",
            "type_alias_declaration",
            "enum_declaration",
            "function_declaration",
            "generator_function_declaration",
            "function_expression",
            "generator_function",
            "function_signature",
            "method_definition",
            "method_signature",
            "abstract_method_signature",
            "property_signature",
            "public_field_definition",
            "module",
            "internal_module",
            "type_parameter",
        }
    ),
    "go": frozenset(
        {
            "function_declaration",
            "method_declaration",
            "type_spec",
            "type_alias",
            "parameter_declaration",
            "variadic_parameter_declaration",
            "type_parameter_declaration",
            "field_declaration",
            "method_elem",
            "method_spec",
        }
    ),
}
_FUNCTION_VALUES = frozenset({"arrow_function", "function_expression", "function", "generator_function"})
# Where a destructured parameter's names are: climbing out of these from a leaf stays in the pattern.
_PATTERNS = frozenset(
    {
        "object_pattern",
        "array_pattern",
        "pair_pattern",
        "rest_pattern",
        "assignment_pattern",
        "object_assignment_pattern",
    }
)
_PARAMETERS = frozenset({"required_parameter", "optional_parameter"})


@functools.cache
def _parser(language: str) -> tree_sitter.Parser:
    loaded = tree_sitter_go.language() if language == "go" else tree_sitter_typescript.language_typescript()
    return tree_sitter.Parser(tree_sitter.Language(loaded))


def syntax_uses(language: str, text: str) -> set[tuple[str, int]]:
    """(name, 1-based line) of every use of a name in ``text`` (``ts`` or ``go``)."""
    tree = _parser(language).parse(text.encode("utf-8", "surrogatepass"))
    found: set[tuple[str, int]] = set()
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        if node.child_count:
            stack.extend(node.children)
        elif _is_name(node) and not declares(language, node):
            found.add((node.text.decode("utf-8", "replace"), node.start_point.row + 1))
    return found


def _is_name(leaf: tree_sitter.Node) -> bool:
    if not leaf.is_named or leaf.type in _LITERALS or any(word in leaf.type for word in _NOT_NAMES):
        return False
    return _WORD.match(leaf.text.decode("utf-8", "replace")) is not None


def declares(language: str, leaf: tree_sitter.Node) -> bool:
    """Whether ``leaf`` is a name being declared (the module docstring's list)."""
    parent = leaf.parent
    if parent is None:
        return False
    names = parent.children_by_field_name("name")
    if parent.type in _DECLARES[language] and any(_same(leaf, name) for name in names):
        return True
    return language == "ts" and (_binds_function(leaf, parent) or _in_parameter(leaf))


def _binds_function(leaf: tree_sitter.Node, parent: tree_sitter.Node) -> bool:
    """tags.scm's function bindings: ``const f = () => …``, ``f: () => …``, ``a.f = () => …``."""
    if parent.type == "variable_declarator":
        return _same(leaf, parent.child_by_field_name("name")) and _function(parent, "value")
    if parent.type == "pair":
        return _same(leaf, parent.child_by_field_name("key")) and _function(parent, "value")
    if parent.type == "member_expression" and _same(leaf, parent.child_by_field_name("property")):
        leaf, parent = parent, parent.parent
    return (
        parent is not None
        and parent.type == "assignment_expression"
        and _same(leaf, parent.child_by_field_name("left"))
        and _function(parent, "right")
    )


def _in_parameter(leaf: tree_sitter.Node) -> bool:
    """A parameter's name, or a name inside a destructured parameter (not its default value)."""
    node = leaf
    while node.parent is not None:
        parent = node.parent
        if parent.type in _PARAMETERS:
            return _same(node, parent.child_by_field_name("pattern"))
        if parent.type == "arrow_function":
            return _same(node, parent.child_by_field_name("parameter"))
        if parent.type == "formal_parameters":
            return True
        if parent.type not in _PATTERNS:
            return False
        if parent.type in ("assignment_pattern", "object_assignment_pattern") and _same(
            node, parent.child_by_field_name("right")
        ):
            return False  # a default value is an expression
        if parent.type == "pair_pattern" and _same(node, parent.child_by_field_name("key")):
            return False  # the property read, not the local
        node = parent
    return False


def _function(node: tree_sitter.Node, field: str) -> bool:
    value = node.child_by_field_name(field)
    return value is not None and value.type in _FUNCTION_VALUES


def _same(a: tree_sitter.Node, b: tree_sitter.Node | None) -> bool:
    return b is not None and (a.start_byte, a.end_byte, a.type) == (b.start_byte, b.end_byte, b.type)
