"""dir2mcp.outline (issue #32): a file's definitions, headings or pages, per
language, read through the one check and open, on a real index."""

from __future__ import annotations

import json

import pytest

from corpus.ingest import units
from corpus.navigation import outline as outlines
from corpus.navigation import symbols
from corpus.security import ExclusionEngine
from kernel import errors
from kernel.config import build_config
from tests.samples import make_pdf


def flat(entries, depth: int = 0) -> list[tuple]:
    """(depth, kind, name, start, end) of every entry, depth first."""
    rows = []
    for entry in entries:
        rows.append((depth, entry.kind, entry.name, entry.start, entry.end))
        rows += flat(entry.children, depth + 1)
    return rows


CODE = {
    "python": (
        "m.py",
        "import os\n"
        "\n"
        "@cached\n"
        "def load(path):\n"
        "    def inner():\n"
        "        return 1\n"
        "    return inner\n"
        "\n"
        "class Store(Base):\n"
        "    limit = 3\n"
        "\n"
        "    def get(self, key):\n"
        "        return key\n",
        [
            (0, "function", "load", 3, 7),
            (1, "function", "inner", 5, 6),
            (0, "class", "Store", 9, 13),
            (1, "method", "get", 12, 13),
        ],
    ),
    "javascript": (
        "m.js",
        "export function parse(text) {\n"
        "  return text;\n"
        "}\n"
        "const fetchAll = async () => {\n"
        "  return [];\n"
        "};\n"
        "class Loader {\n"
        "  load(path) {\n"
        "    return path;\n"
        "  }\n"
        "}\n",
        [
            (0, "function", "parse", 1, 3),
            (0, "function", "fetchAll", 4, 6),
            (0, "class", "Loader", 7, 11),
            (1, "method", "load", 8, 10),
        ],
    ),
    "typescript": (
        "m.ts",
        "export interface Options {\n"
        "  depth: number;\n"
        "}\n"
        "type Id = string;\n"
        "enum Color { Red, Blue }\n"
        "export function run(o: Options): Id {\n"
        "  return '';\n"
        "}\n",
        [
            (0, "interface", "Options", 1, 3),
            (1, "property", "depth", 2, 2),
            (0, "type", "Id", 4, 4),
            (0, "enum", "Color", 5, 5),
            (0, "function", "run", 6, 8),
        ],
    ),
    "tsx": (
        "m.tsx",
        "export function Button(props: Props) {\n  return <button>{props.label}</button>;\n}\n",
        [(0, "function", "Button", 1, 3)],
    ),
    "go": (
        "m.go",
        "package m\n"
        "\n"
        "type Server struct {\n"
        "\tport int\n"
        "}\n"
        "\n"
        "func (s *Server) Start() error {\n"
        "\treturn nil\n"
        "}\n"
        "\n"
        "func New() *Server {\n"
        "\treturn &Server{}\n"
        "}\n",
        [
            (0, "type", "Server", 3, 5),
            (0, "method", "Start", 7, 9),
            (0, "function", "New", 11, 13),
        ],
    ),
    "rust": (
        "m.rs",
        "pub struct Config {\n"
        "    name: String,\n"
        "}\n"
        "\n"
        "impl Display for Config {\n"
        "    fn fmt(&self, f: &mut Formatter) -> Result {\n"
        "        Ok(())\n"
        "    }\n"
        "}\n"
        "\n"
        "pub trait Load {\n"
        "    fn load(&self);\n"
        "}\n",
        [
            (0, "struct", "Config", 1, 3),
            (0, "impl", "Display for Config", 5, 9),
            (1, "method", "fmt", 6, 8),
            (0, "trait", "Load", 11, 13),
            (1, "method", "load", 12, 12),
        ],
    ),
    "java": (
        "M.java",
        "public class Cache {\n"
        "    public Cache(int size) {\n"
        "    }\n"
        "    public int size() {\n"
        "        return 0;\n"
        "    }\n"
        "}\n",
        [
            (0, "class", "Cache", 1, 7),
            (1, "constructor", "Cache", 2, 3),
            (1, "method", "size", 4, 6),
        ],
    ),
    "c": (
        "m.c",
        "struct node {\n"
        "    int value;\n"
        "};\n"
        "int count(struct node *n);\n"
        "typedef unsigned long size_type;\n"
        "static int count(struct node *n) {\n"
        "    return n->value;\n"
        "}\n",
        [
            (0, "struct", "node", 1, 3),
            (0, "declaration", "count", 4, 4),
            (0, "type", "size_type", 5, 5),
            (0, "function", "count", 6, 8),
        ],
    ),
    "cpp": (
        "m.cpp",
        "namespace store {\nclass Table {\n  public:\n    int rows() const { return 0; }\n};\n}\n",
        [
            (0, "namespace", "store", 1, 6),
            (1, "class", "Table", 2, 5),
            (2, "method", "rows", 4, 4),
        ],
    ),
    "ruby": (
        "m.rb",
        "module Billing\n  class Invoice\n    def total\n      0\n    end\n  end\nend\n",
        [
            (0, "module", "Billing", 1, 7),
            (1, "class", "Invoice", 2, 6),
            (2, "method", "total", 3, 5),
        ],
    ),
    "bash": (
        "m.sh",
        "#!/bin/sh\nbuild() {\n  make all\n}\n",
        [(0, "function", "build", 2, 4)],
    ),
}


@pytest.mark.parametrize("language", sorted(CODE))
def test_code_outline_lists_each_definition_with_its_span(language):
    rel, text, expected = CODE[language]
    assert flat(outlines.code_outline(text, rel)) == expected


# Functions named inside an expression (rxjs 7.8.1's shapes): outline entries,
# nested in their enclosing definition, though no unit is cut at them.
LOCAL = [
    pytest.param(
        "m.ts",
        "export function first<T>(source: Observable<T>): Promise<T> {\n"
        "  return new Promise((resolve, reject) => {\n"
        "    source.subscribe({\n"
        "      next: (value) => resolve(value),\n"
        "      error: function (err) {\n"
        "        reject(err);\n"
        "      },\n"
        "    });\n"
        "  });\n"
        "}\n",
        [(0, "function", "first", 1, 10), (1, "function", "next", 4, 4), (1, "function", "error", 5, 7)],
        id="ts-object-literal-values",
    ),
    pytest.param(
        "m.ts",
        "export const EmptyError: EmptyErrorCtor = createErrorClass(\n"
        "  (_super) =>\n"
        "    function EmptyErrorImpl(this: any) {\n"
        "      _super(this);\n"
        "    }\n"
        ");\n",
        [(0, "function", "EmptyErrorImpl", 3, 5)],
        id="ts-named-function-expression-in-a-call",
    ),
    pytest.param(
        "m.ts",
        "class WebSocketSubject {\n"
        "  connect() {\n"
        "    const socket = new WebSocket(url);\n"
        "    socket.onopen = (evt: Event) => {\n"
        "      this.open = true;\n"
        "    };\n"
        "    const closing = (socket.onclose = () => this.close());\n"
        "  }\n"
        "}\n",
        [
            (0, "class", "WebSocketSubject", 1, 9),
            (1, "method", "connect", 2, 8),
            (2, "function", "socket.onopen", 4, 6),
            (2, "function", "socket.onclose", 7, 7),
        ],
        id="ts-member-assigned-in-a-body",
    ),
    pytest.param(
        "m.js",
        "function subscribe(source) {\n"
        "  return source.subscribe({ complete: () => done(), next(value) { push(value); } });\n"
        "}\n",
        [(0, "function", "subscribe", 1, 3), (1, "function", "complete", 2, 2), (1, "method", "next", 2, 2)],
        id="js-object-literal-values",
    ),
    pytest.param(
        "m.js",
        "var runInContext = (function runInContext(context) {\n  return context;\n});\n",
        [(0, "function", "runInContext", 1, 3)],
        id="js-named-function-expression-in-parentheses",
    ),
    pytest.param(
        "m.js",
        "function wrapperAt(paths) {\n"
        "  var length = paths.length,\n"
        "      interceptor = function(object) { return object; };\n"
        "  return interceptor;\n"
        "}\n",
        [(0, "function", "wrapperAt", 1, 5), (1, "function", "interceptor", 3, 3)],
        id="js-function-among-several-declarators",
    ),
]


@pytest.mark.parametrize(("rel", "text", "expected"), LOCAL)
def test_functions_named_inside_an_expression_are_nested_entries(rel, text, expected):
    assert flat(outlines.code_outline(text, rel)) == expected


def test_a_signature_is_the_definitions_own_line_not_its_decorator():
    rel, text, _ = CODE["python"]
    load = outlines.code_outline(text, rel)[0]
    assert (load.signature, load.start, load.line) == ("def load(path):", 3, 4)
    assert load.as_dict()["line"] == 4
    assert "line" not in outlines.code_outline(text, rel)[1].as_dict()  # no decorator: the span says it


def test_a_go_type_alias_is_named():
    # Go's standard library: builtin/builtin.go's ``type any = interface{}`` was listed with no name.
    text = "package p\n\ntype any = interface{}\n\ntype (\n\tA = int\n\tB struct{}\n)\n"
    assert flat(outlines.code_outline(text, "p.go")) == [
        (0, "type", "any", 3, 3),
        (0, "type", "A", 6, 6),
        (0, "type", "B", 7, 7),
    ]


def test_each_type_of_a_grouped_go_declaration_is_its_own_entry():
    # go/ast/ast.go declares twenty statement types in one type ( … ): the outline listed only the first.
    text = "package p\n\ntype (\n\tBadStmt struct {\n\t\tFrom int\n\t}\n\n\tDeclStmt struct{ Decl int }\n)\n"
    assert flat(outlines.code_outline(text, "p.go")) == [
        (0, "type", "BadStmt", 4, 6),
        (0, "type", "DeclStmt", 8, 8),
    ]
    found = symbols.extract(units.parse(text, "p.go"))  # the symbol index: each a definition, neither a use
    assert [(d.name, d.line) for d in found.definitions] == [("BadStmt", 4), ("DeclStmt", 8)]
    assert not {use.name for use in found.uses} & {"BadStmt", "DeclStmt"}


def test_a_file_no_grammar_reads_has_no_code_outline():
    assert outlines.code_outline("just words\n", "notes.txt") is None


def test_markdown_headings_nest_by_level_and_span_to_the_next_peer():
    text = "# Guide\n\nintro\n\n## Install\n\nsteps\n\n## Use\n\n### Flags\n\nmore\n\n# Appendix\n\nend\n"
    assert flat(outlines.heading_outline(text, "md")) == [
        (0, "heading", "Guide", 1, 14),
        (1, "heading", "Install", 5, 8),
        (1, "heading", "Use", 9, 14),
        (2, "heading", "Flags", 11, 14),
        (0, "heading", "Appendix", 15, 17),
    ]


def test_a_heading_inside_a_code_fence_is_not_a_heading():
    text = "# Real\n\n```sh\n# not a heading\n```\n"
    assert [row[2] for row in flat(outlines.heading_outline(text, "md"))] == ["Real"]


def test_rst_titles_are_headings():
    text = "Title\n=====\n\nText.\n\nPart\n----\n\nMore.\n"
    assert flat(outlines.heading_outline(text, "rst")) == [
        (0, "heading", "Title", 1, 9),
        (1, "heading", "Part", 6, 9),
    ]


def test_prune_keeps_the_outer_levels_first():
    rel, text, _ = CODE["cpp"]
    entries = outlines.code_outline(text, rel)
    kept, total = outlines.prune(entries, 2)
    assert total == 3
    assert flat(kept) == [(0, "namespace", "store", 1, 6), (1, "class", "Table", 2, 5)]
    assert flat(outlines.prune(entries, 10)[0]) == flat(entries)


# -- on a real index ------------------------------------------------------------------------


@pytest.fixture
def engine(corpus_dir, state):
    return ExclusionEngine.from_config(corpus_dir, build_config({}, {}, {}), state_dir=state.path)


@pytest.mark.django_db
def test_outline_of_indexed_files_of_each_kind(index, engine):
    index(
        {
            "src/m.py": CODE["python"][1],
            "docs/guide.md": "# Guide\n\n## Install\n\ntext\n",
            "site/page.html": "<html><body><h1>Home</h1><p>x</p><h2>News</h2><p>y</p></body></html>",
            "paper.pdf": make_pdf(["First page about loaders", "Second page about stores"]),
        }
    )
    code = outlines.outline(engine, "src/m.py").as_dict()
    assert code["outline"] == "definitions" and code["lines"] == 13 and not code["truncated"]
    assert [e["name"] for e in code["entries"]] == ["load", "Store"]
    assert code["entries"][1]["children"][0]["span"] == {"kind": "lines", "start_line": 12, "end_line": 13}

    guide = outlines.outline(engine, "docs/guide.md").as_dict()
    assert guide["outline"] == "headings" and guide["entries"][0]["name"] == "Guide"

    page = outlines.outline(engine, "site/page.html").as_dict()
    assert [e["name"] for e in page["entries"]] == ["Home"]
    assert page["entries"][0]["children"][0]["name"] == "News"

    pdf = outlines.outline(engine, "paper.pdf").as_dict()
    assert pdf["outline"] == "pages" and pdf["pages"] == 2
    assert pdf["entries"][1]["span"] == {"kind": "page", "page": 2}
    assert "Second page" in pdf["entries"][1]["signature"]


@pytest.mark.django_db
def test_the_outline_is_much_smaller_than_the_file(index, engine):
    body = "".join(f"def f{i}(x):\n" + "    y = x * 2\n" * 20 + "    return y\n\n" for i in range(40))
    index({"big.py": body})
    found = outlines.outline(engine, "big.py")
    assert sum(1 for _ in outlines.walk(found.entries)) == 40
    assert len(json.dumps(found.as_dict())) * 2 < len(body)


@pytest.mark.django_db
def test_a_header_of_defines_outlines_much_smaller_than_the_file(index, engine):
    body = "".join(f"#define REG_{n:04d}_OFFSET 0x{n:04x} /* register {n} */\n" for n in range(300))
    text = f"#ifndef REGS_H\n#define REGS_H\n\nstruct regs {{ int base; }};\n\n{body}\n#endif\n"
    index({"inc/regs.h": text})
    found = outlines.outline(engine, "inc/regs.h")
    assert [(e.kind, e.name, e.folded) for e in found.entries] == [
        ("macro", "REGS_H", 0),
        ("struct", "regs", 0),
        ("macros", "REG_0000_OFFSET", 300),
    ]
    assert len(json.dumps(found.as_dict())) * 20 < len(text)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("files", "rel_path", "code"),
    [
        ({}, "missing.py", errors.FILE_NOT_FOUND),
        ({}, "../outside.py", errors.PATH_OUTSIDE_ROOT),
        ({".env": "X=1\n"}, ".env", errors.FORBIDDEN),
        ({"keys.py": "KEY = 'AKIAABCDEFGHIJKLMNOP'\n"}, "keys.py", errors.FORBIDDEN),
        ({"notes.txt": "plain words\n"}, "notes.txt", errors.DOC_TYPE_UNSUPPORTED),
        ({"blob.bin": bytes(range(256)) * 8}, "blob.bin", errors.DOC_TYPE_UNSUPPORTED),
        ({}, "a" * 10_000, errors.INVALID_FIELD),
        ({}, "", errors.MISSING_FIELD),
    ],
    ids=["missing", "outside", "excluded", "secret", "plain-text", "binary", "long-name", "empty"],
)
def test_bad_input_gets_its_documented_error(index, engine, files, rel_path, code):
    index(files)
    with pytest.raises(errors.Dir2mcpError) as refused:
        outlines.outline(engine, rel_path)
    assert refused.value.code == code


@pytest.mark.django_db
def test_a_secret_in_a_signature_of_an_unindexed_file_is_not_returned(corpus_dir, engine):
    (corpus_dir / "fresh.py").write_text("def f(token='ghp_" + "a1B2" * 10 + "'):\n    pass\n")
    with pytest.raises(errors.Dir2mcpError) as refused:
        outlines.outline(engine, "fresh.py")
    assert refused.value.code == errors.FORBIDDEN
