"""Definition-level code units: boundaries, spans and context per language."""

from __future__ import annotations

import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corpus.ingest.units import code_units, language_for, parse


def units(source: str, path: str, **kwargs) -> list[tuple[int, int, str]]:
    """(start, end, first line) of each unit, after checking every span."""
    text = textwrap.dedent(source).lstrip("\n")
    drafts = code_units(text, path, **kwargs)
    assert drafts is not None
    assert_spans_exact(text, drafts)
    return [(d.start, d.end, d.text.split("\n")[0].strip()) for d in drafts]


def assert_spans_exact(text: str, drafts) -> None:
    lines = text.split("\n")
    for n, draft in enumerate(drafts):
        assert draft.ordinal == n
        assert draft.text == "\n".join(lines[draft.start - 1 : draft.end])
        assert draft.text.strip()
    starts = [d.start for d in drafts]
    assert starts == sorted(starts)
    for before, after in zip(drafts, drafts[1:], strict=False):
        assert before.end < after.start, "units never overlap"


def context_of(source: str, path: str, first_line: str) -> list[str]:
    text = textwrap.dedent(source).lstrip("\n")
    draft = next(d for d in code_units(text, path) if d.text.split("\n")[0].strip() == first_line)
    return draft.context.split("\n")


PYTHON = '''
"""Module docstring."""
import os

LIMIT = 3


# A comment directly above belongs to the function.
@decorator
@other(1)
def decorated(a, b):
    return a + b


def plain():
    pass


class Outer:
    """Short class: one unit."""

    def method(self):
        return 1
'''


def test_python_functions_carry_their_decorators_and_comments():
    assert units(PYTHON, "m.py") == [
        (1, 4, '"""Module docstring."""'),
        (7, 11, "# A comment directly above belongs to the function."),
        (14, 15, "def plain():"),
        (18, 22, "class Outer:"),
    ]


def test_a_comment_separated_by_a_blank_line_is_not_leading():
    source = "# licence header\n\ndef f():\n    return 1\n"
    assert units(source, "m.py") == [(1, 1, "# licence header"), (3, 4, "def f():")]


def long_class(methods: int, body: int = 3) -> str:
    out = ["class Big(Base):", '    """Doc."""', "    FIELD = 1", ""]
    for m in range(methods):
        out.append(f"    def method_{m}(self, x):")
        out += [f"        x = x + {i}" for i in range(body)]
        out += ["        return x", ""]
    return "\n".join(out) + "\n"


def test_a_class_longer_than_the_class_limit_is_opened_into_header_and_methods():
    got = units(long_class(6), "big.py", unit_max_lines=80)
    assert got[0] == (1, 3, "class Big(Base):")
    assert [line for _, _, line in got[1:]] == [f"def method_{m}(self, x):" for m in range(6)]
    assert context_of(long_class(6), "pkg/big.py", "def method_2(self, x):") == [
        "pkg/big.py",
        "class Big(Base):",
    ]


def test_a_long_function_without_inner_definitions_is_windowed_with_its_signature():
    body = "\n".join(f"    total += {i}" for i in range(200))
    source = f"def long_one(total):\n{body}\n    return total\n"
    drafts = code_units(source, "long.py", unit_max_lines=50)
    assert len(drafts) == 5
    assert_spans_exact(source, drafts)
    assert all(d.end - d.start < 50 for d in drafts)
    assert all(d.context.split("\n") == ["long.py", "def long_one(total):"] for d in drafts)
    assert drafts[0].start == 1 and drafts[-1].end == 202


def test_a_long_function_is_opened_and_its_inner_definitions_become_units():
    inner = "\n".join(f"        y = {i}" for i in range(60))
    head = "def outer(x):\n    setup = 1\n\n    def helper(y):\n"
    source = f"{head}{inner}\n        return y\n\n    return helper(x)\n"
    got = units(source, "o.py", unit_max_lines=40)
    firsts = [line for _, _, line in got]
    assert firsts[0] == "def outer(x):"
    assert "def helper(y):" in firsts
    assert firsts[-1] == "return helper(x)"


def test_nested_classes_show_every_enclosing_signature():
    source = long_class(4).replace(
        "    FIELD = 1\n", "    FIELD = 1\n\n    class Meta:\n        ordering = 1\n"
    )
    assert context_of(source, "n.py", "class Meta:") == ["n.py", "class Big(Base):"]


def test_a_file_that_fails_to_parse_gets_line_windows():
    assert code_units("def (((:\n  ]]]\n" * 20, "broken.py") is None


def test_a_file_with_a_small_error_still_gets_units():
    source = "def good():\n    return 1\n\n" * 10 + "x = = 1\n"
    drafts = code_units(source, "mostly.py")
    assert drafts is not None and sum(d.text.startswith("def good") for d in drafts) == 10


def test_no_grammar_means_none():
    assert code_units("whatever", "file.unknownext") is None
    assert language_for("Makefile") is None


@pytest.mark.parametrize(
    ("path", "text", "expected"),
    [
        ("a/b.py", "", "python"),
        ("lib.d.ts", "", "typescript"),
        ("x.tsx", "", "tsx"),
        ("a.zip!/src/main.rs", "", "rust"),
        ("run", "#!/usr/bin/env python3\n", "python"),
        ("run", "#!/bin/sh\n", "bash"),
        ("Rakefile", "", "ruby"),
        ("x.hpp", "", "cpp"),
    ],
    ids=["py", "dts", "tsx", "archive-member", "shebang-python", "shebang-sh", "rakefile", "hpp"],
)
def test_language_for(path, text, expected):
    assert language_for(path, text) == expected


TYPESCRIPT = """
import { x } from "./x";

/**
 * Adds two numbers.
 */
export function add(a: number, b: number): number {
  return a + b;
}

export const twice = (n: number) => n * 2;

interface Shape {
  /** The area of the shape. */
  area(): number;
  /** Its name. */
  readonly name: string;
}

type Id = string;
"""


def test_typescript_declarations_with_their_jsdoc():
    assert units(TYPESCRIPT, "a.ts") == [
        (1, 1, 'import { x } from "./x";'),
        (3, 8, "/**"),
        (10, 10, "export const twice = (n: number) => n * 2;"),
        (12, 17, "interface Shape {"),
        (19, 19, "type Id = string;"),
    ]


def test_a_long_interface_is_opened_into_its_members():
    members = "\n".join(
        f"  /** Member {i} does things. */\n  member{i}(x: number): string;" for i in range(30)
    )
    source = f"interface Big<T> {{\n{members}\n}}\n"
    got = units(source, "lib.d.ts")
    assert got[0] == (1, 1, "interface Big<T> {")
    assert got[1] == (2, 3, "/** Member 0 does things. */")
    assert len(got) == 31
    assert context_of(source, "lib.d.ts", "/** Member 5 does things. */") == [
        "lib.d.ts",
        "interface Big<T> {",
    ]


JAVASCRIPT = """
'use strict';

/** Doc of f. */
function f(a) {
  return a;
}

exports.g = function (b) {
  return b;
};

Foo.prototype.bar = function () {};
"""


def test_javascript_functions_and_assigned_functions():
    assert units(JAVASCRIPT, "a.js") == [
        (1, 1, "'use strict';"),
        (3, 6, "/** Doc of f. */"),
        (8, 10, "exports.g = function (b) {"),
        (12, 12, "Foo.prototype.bar = function () {};"),
    ]


GO = """
package main

import "fmt"

// Hello says hello.
func Hello(name string) string {
	return fmt.Sprintf("hi %s", name)
}

type Point struct {
	X, Y int
}

func (p Point) Norm() int { return p.X*p.X + p.Y*p.Y }
"""


def test_go_functions_methods_and_types():
    assert units(GO, "m.go") == [
        (1, 3, "package main"),
        (5, 8, "// Hello says hello."),
        (10, 12, "type Point struct {"),
        (14, 14, "func (p Point) Norm() int { return p.X*p.X + p.Y*p.Y }"),
    ]


RUST = """
use std::fmt;

/// A point.
#[derive(Debug)]
pub struct Point {
    x: i32,
}

impl Point {
    /// Makes one.
    pub fn new(x: i32) -> Self {
        Point { x }
    }
}
"""


def test_rust_items_with_doc_comments_and_attributes():
    assert units(RUST, "lib.rs") == [(1, 1, "use std::fmt;"), (3, 7, "/// A point."), (9, 14, "impl Point {")]


JAVA = """
package p;

/** A thing. */
public class Thing {
    private int n;

    /** Gets n. */
    public int getN() { return n; }
}
"""


def test_java_class_is_one_unit_when_short():
    assert units(JAVA, "Thing.java") == [(1, 1, "package p;"), (3, 9, "/** A thing. */")]


C_HEADER = """
#ifndef X_H
#define X_H

/* A record. */
struct rec {
    int a;
};

/* Makes a record. */
struct rec *rec_new(int a);

static int helper(int x)
{
    return x + 1;
}
#endif
"""


def test_c_prototypes_structs_and_functions_inside_include_guards():
    assert units(C_HEADER, "x.h") == [
        (1, 2, "#ifndef X_H"),
        (4, 7, "/* A record. */"),
        (9, 10, "/* Makes a record. */"),
        (12, 15, "static int helper(int x)"),
        (16, 16, "#endif"),
    ]


CPP = """
namespace ns {
// Adds.
template <typename T>
T add(T a, T b) { return a + b; }
}
"""


def test_cpp_templates_inside_a_namespace():
    assert units(CPP, "a.cpp") == [(1, 5, "namespace ns {")]
    assert units(CPP, "a.cpp", unit_max_lines=5)[0][2] == "namespace ns {"


RUBY = """
require 'x'

# Greets.
def greet(name)
  "hi #{name}"
end

class Dog
  def bark
    'woof'
  end
end
"""


def test_ruby_methods_and_classes():
    assert units(RUBY, "a.rb") == [(1, 1, "require 'x'"), (3, 6, "# Greets."), (8, 12, "class Dog")]


BASH = """
#!/bin/bash
set -e

# Prints usage.
usage() {
  echo "usage"
}

main() { usage; }
main "$@"
"""


def test_shell_functions_and_the_script_around_them():
    assert units(BASH, "run.sh") == [
        (1, 2, "#!/bin/bash"),
        (4, 7, "# Prints usage."),
        (9, 9, "main() { usage; }"),
        (10, 10, 'main "$@"'),
    ]


def test_closing_braces_alone_are_not_units():
    source = "class A {\n" + "\n".join(f"  m{i}() {{ return {i}; }}" for i in range(40)) + "\n}\n"
    got = units(source, "a.js", unit_max_lines=20)
    assert all(line != "}" for _, _, line in got)


_LINE = st.sampled_from(
    ["def f(x):", "    return x", "class C:", "    def m(self):", "        pass", "# note", "", "x = 1", "@d"]
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_LINE, max_size=60))
def test_spans_are_exact_for_any_python_like_text(lines):
    text = "\n".join(lines)
    drafts = code_units(text, "h.py", unit_max_lines=8)
    if drafts is not None:
        assert_spans_exact(text, drafts)


# The definitions under a node come from one query per file (units._Nesting);
# a walk of every node is the rule they must agree with, on every grammar,
# parse errors and Python's skipped statements included.
NESTING_CASES = {
    "a.c": """
        #define A 1
        #define F(x) g(x)
        enum e { X = 1, Y, Z };
        struct s { int a; struct { int b; } in; };
        int proto(void);
        static int f(int a) {
            #define LOCAL 2
            struct local { int q; } v;
            enum { P, Q } w;
            extern int g(int);
            return a + (struct { int z; }){1}.z;
        }
        int broken( { if (;
        typedef struct t { int x; } t_t;
    """,
    "a.cpp": """
        namespace n { class C { int m(); void k() {} }; template <class T> T id(T t) { return t; } }
        struct S { int f(); };
    """,
    "a.py": """
        import os
        def f(a, b=1):
            def g():
                class L: pass
            return lambda: g
        @decorator
        class C:
            x = call(lambda: 1)
            def m(self): ...
        if True:
            def h(): pass
        def broken(:
            pass
    """,
    "a.js": """
        const a = () => 1, b = function named() {}, c = 3;
        exports.f = function () { return { next: (v) => v, k: 1 }; };
        class K { m() { const inner = () => 2; } }
        A.prototype.m = x = function () {};
        export function e() {}
        foo(function cb() {}, class Q {});
    """,
    "a.ts": """
        interface I { p: string; m(): void; }
        export abstract class A { abstract f(): void; g = () => 1; }
        namespace N { export function h() {} }
        type T = { a: number };
        declare function d(x: number): void;
    """,
    "a.go": "package p\ntype ( A int\n B struct{} )\nfunc (a A) M() {}\nfunc F() { f := func() {}; _ = f }\n",
    "a.rs": """
        mod m { fn f() {} }
        impl Display for C { fn fmt(&self) {} }
        trait T { fn t(); }
        macro_rules! mm { () => {} }
    """,
    "A.java": """
        class A { void m() { class L {} Runnable r = new Runnable() { public void run() {} }; } enum E { X } }
    """,
    "a.rb": "module M\n  class C\n    def m; end\n    def self.s; end\n  end\nend\n",
    "a.sh": "f() { g() { :; }; }\nfunction h { :; }\n",
}


@pytest.mark.parametrize("path", sorted(NESTING_CASES), ids=sorted(NESTING_CASES))
def test_the_definitions_found_by_the_query_are_those_a_walk_finds(path):
    text = textwrap.dedent(NESTING_CASES[path])
    parsed = parse(text, path)
    assert parsed is not None
    root = parsed.tree.root_node
    for local in (False, True):
        checked, pending = 0, [root]
        while pending:
            node = pending.pop()
            found = list(parsed.inner(node, local=local))
            assert [n.id for n in found] == [n.id for n in parsed.walked(node, local=local)], node.type
            checked += 1
            pending += [parsed.core(n) for n in found] + found
        assert checked > 3
