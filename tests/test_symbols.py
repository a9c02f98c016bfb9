"""The symbol index (issue #32 items 2 and 3): where names are defined and
used, written with the chunks at index time, and replaced or dropped with
them; read back by dir2mcp.symbols and dir2mcp.references. These tests run
on SQLite and, under ``bash .ci/postgres``, on PostgreSQL."""

from __future__ import annotations

import pytest
from django.db import connection

from corpus.ingest import collect
from corpus.ingest.indexing import index_directory
from corpus.models import Document, Reference, ReferenceName, Symbol
from corpus.navigation import names
from kernel import errors
from kernel.config import build_config

pytestmark = pytest.mark.django_db

CONFIG = {
    "pkg/store.py": (
        "import os\n"
        "\n"
        "class Store:\n"
        "    def load(self, path):\n"
        "        return os.path.join(path, 'load')  # load in a comment\n"
        "\n"
        "    @property\n"
        "    def size(self):\n"
        "        return self.load('x')\n"
        "\n"
        "def open_store(path):\n"
        "    return Store().load(path)\n"
    ),
    "pkg/use.py": (
        "from pkg.store import Store, open_store\n"
        "\n"
        "def main():\n"
        "    store = open_store('db')\n"
        "    return Store.load(store, 'loader')\n"
    ),
    "web/app.ts": (
        "export interface Loader { load(path: string): string }\n"
        "export function loadAll(l: Loader) {\n"
        "  return l.load('all');\n"
        "}\n"
    ),
    "README.md": "# Store\n\nThe Store class loads things; open_store opens one.\n",
}


@pytest.fixture
def index(corpus_dir, state, monkeypatch):
    """Write (None deletes) files, then index incrementally; the counters."""
    monkeypatch.delenv("MISTRAL_API_KEY", raising=False)
    config = build_config({}, {}, {})

    def run(files: dict[str, str | None]):
        for rel, text in files.items():
            path = corpus_dir / rel
            if text is None:
                path.unlink()
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        return index_directory(corpus_dir, state=state, config=config)

    return run


def defined(name: str) -> list[tuple]:
    return [(h["rel_path"], h["kind"], h["line"], h["match"]) for h in names.find_symbols(name)["symbols"]]


def used(name: str, **kwargs) -> list[tuple]:
    return [
        (h["rel_path"], h["span"]["start_line"]) for h in names.find_references(name, **kwargs)["references"]
    ]


def test_definitions_are_the_outline_entries_with_their_enclosing_definition(index):
    index(CONFIG)
    hits = names.find_symbols("load")["symbols"]
    by_path = {(h["rel_path"], h["line"]): h for h in hits}
    method = by_path[("pkg/store.py", 4)]
    assert method["kind"] == "method" and method["enclosing"] == "Store" and method["match"] == "exact"
    assert method["span"] == {"kind": "lines", "start_line": 4, "end_line": 5}
    assert method["signature"] == "def load(self, path):"
    # A decorated method's span starts at its decorator; its line is the def's.
    size = names.find_symbols("size")["symbols"][0]
    assert (size["span"]["start_line"], size["line"], size["enclosing"]) == (7, 8, "Store")
    # The TypeScript method signature is a definition too; loadAll comes after, by prefix.
    assert ("web/app.ts", "method", 1, "exact") in defined("load")
    assert defined("load")[-1] == ("web/app.ts", "function", 2, "prefix")
    # The README names Store in prose: not a definition.
    assert defined("Store") == [
        ("pkg/store.py", "class", 3, "exact"),
        ("pkg/store.py", "function", 11, "substring"),
    ]


SOCKET = (
    "export function first(source) {\n"
    "  return new Promise((resolve) => source.subscribe({\n"
    "    next: (value) => resolve(value),\n"
    "  }));\n"
    "}\n"
    "export const EmptyError = createErrorClass((_super) => function EmptyErrorImpl(this: any) {\n"
    "  _super(this);\n"
    "});\n"
    "class Subject {\n"
    "  connect(socket: WebSocket) {\n"
    "    socket.onopen = (evt) => this.next(evt);\n"
    "  }\n"
    "}\n"
)


def test_functions_named_inside_an_expression_are_definitions_not_uses(index):
    # rxjs 7.8.1's shapes: an object literal's arrow function, a named function
    # expression passed to a call, an arrow function assigned to a member.
    index({"web/socket.ts": SOCKET})
    found = {
        (h["name"], h["line"]): (h["kind"], h.get("enclosing"), h.get("qualified"))
        for name in ("next", "EmptyErrorImpl", "onopen")
        for h in names.find_symbols(name)["symbols"]
        if h["match"] == "exact"
    }
    assert found == {
        ("next", 3): ("function", "first", None),
        ("EmptyErrorImpl", 6): ("function", None, None),
        ("onopen", 11): ("function", "connect", "socket.onopen"),
    }
    # Their own names are not uses; this.next(evt) on line 11 is one, inside onopen.
    assert used("EmptyErrorImpl") == [] and used("onopen") == []
    hits = names.find_references("next")["references"]
    assert [(h["span"]["start_line"], h.get("enclosing")) for h in hits] == [(11, "onopen")]


def test_typescript_declarations_of_every_shape_are_not_uses(index):
    # rxjs 7.8.1 against its syntax tree's uses: a rest parameter and a type
    # parameter were stored as uses, a computed method name's names were not.
    index(
        {
            "web/pipe.ts": (
                "export function pipe<TValue>(...operations: unknown[]) {\n"
                "  return operations as TValue;\n"
                "}\n"
                "class Observable {\n"
                "  [Symbol_observable]() {\n"
                "    return this;\n"
                "  }\n"
                "}\n"
            )
        }
    )
    assert used("operations") == [("web/pipe.ts", 2)]
    assert used("TValue") == [("web/pipe.ts", 2)]
    assert used("Symbol_observable") == [("web/pipe.ts", 5)]


MORE = "def STORE():\n    pass\n\ndef store_all():\n    pass\n\ndef restore():\n    pass\n"


def test_exact_then_case_insensitive_then_prefix_then_substring(index):
    index(CONFIG | {"pkg/more.py": MORE})
    assert [(path, line, match) for path, _, line, match in defined("Store")] == [
        ("pkg/store.py", 3, "exact"),
        ("pkg/more.py", 1, "case_insensitive"),
        ("pkg/more.py", 4, "prefix"),
        ("pkg/more.py", 7, "substring"),
        ("pkg/store.py", 11, "substring"),
    ]
    only = names.find_symbols("store", kind="class")["symbols"]
    assert [(h["name"], h["match"]) for h in only] == [("Store", "case_insensitive")]
    assert [h["rel_path"] for h in names.find_symbols("Store", path_prefix="pkg/more.py")["symbols"]] == [
        "pkg/more.py"
    ] * 3
    assert names.find_symbols("Store", path_prefix="web/")["symbols"] == []
    result = names.find_symbols("Store", limit=2)
    assert result["count"] == 2 and result["truncated"] is True


def test_references_are_identifiers_not_comments_strings_or_the_definition(index):
    index(CONFIG)
    # store.py: line 5 has load only in a string and a comment; line 4 is the definition.
    assert used("load") == [
        ("pkg/store.py", 9),
        ("pkg/store.py", 12),
        ("pkg/use.py", 5),
        ("web/app.ts", 3),
    ]
    hits = names.find_references("open_store")["references"]
    assert [(h["rel_path"], h["span"]["start_line"], h.get("enclosing")) for h in hits] == [
        ("pkg/use.py", 1, None),
        ("pkg/use.py", 4, "main"),
    ]
    assert hits[1]["snippet"] == "store = open_store('db')"
    assert used("load", path_prefix="pkg/") == used("load")[:3]
    # Names too short or receivers are not indexed as uses.
    assert used("self") == [] and not Reference.objects.filter(name__name__in=["self", "l"]).exists()
    # A parameter's name is its definition, not a use: store.py's path is used on lines 5 and 12.
    assert used("path", path_prefix="pkg/store.py") == [("pkg/store.py", 5), ("pkg/store.py", 12)]


def test_references_page_with_a_cursor_and_every_use_comes_once(index):
    body = "".join(f"def f{i}():\n    return target + target\n" for i in range(7))
    index({"a.py": "target = 1\n" + body, "b.py": "from a import target\nprint(target)\n"})
    seen, cursor, pages = [], None, 0
    while pages < 20:
        page = names.find_references("target", limit=3, cursor=cursor)
        seen += [(h["rel_path"], h["span"]["start_line"]) for h in page["references"]]
        pages += 1
        cursor = page.get("next_cursor")
        if cursor is None:
            break
    assert seen == [("a.py", 1)] + [("a.py", 3 + 2 * i) for i in range(7)] + [("b.py", 1), ("b.py", 2)]
    assert pages == 4
    with pytest.raises(errors.Dir2mcpError) as info:
        names.find_references("other", cursor=names.find_references("target", limit=1)["next_cursor"])
    assert info.value.code == errors.INVALID_FIELD


def test_a_rename_and_a_deletion_change_the_rows_under_incremental_indexing(index):
    index(CONFIG)
    assert used("open_store") and defined("open_store")
    # Rename the function in store.py and its uses in use.py.
    renamed = {
        "pkg/store.py": CONFIG["pkg/store.py"].replace("open_store", "make_store"),
        "pkg/use.py": CONFIG["pkg/use.py"].replace("open_store", "make_store"),
    }
    index(renamed)
    assert defined("open_store") == [] and used("open_store") == []
    assert defined("make_store") == [("pkg/store.py", "function", 11, "exact")]
    assert used("make_store") == [("pkg/use.py", 1), ("pkg/use.py", 4)]
    # Deleting a file drops its rows, and only its rows.
    index({"pkg/use.py": None})
    assert used("make_store") == []
    doc = Document.objects.get(rel_path="pkg/use.py")
    assert doc.deleted
    assert (
        not Symbol.objects.filter(document=doc).exists()
        and not Reference.objects.filter(document=doc).exists()
    )
    assert defined("make_store") == [("pkg/store.py", "function", 11, "exact")]


def test_collected_files_take_the_names_only_they_used(index, state):
    """References hold interned names (migration 0023): once the tombstones
    of a deleted file are collected, the names no other file uses go too
    (on SQLite: a shared PostgreSQL database keeps them, corpus/ingest/collect.py)."""
    if connection.vendor != "sqlite":
        pytest.skip("names are collected on SQLite only")
    extra = "from pkg.store import open_store\n\ndef run():\n    return only_here(open_store)\n"
    index(CONFIG | {"pkg/extra.py": extra})
    assert used("only_here") == [("pkg/extra.py", 4)]
    index({"pkg/extra.py": None})
    found = collect.collect(state, share=0.0, days=0.0)

    assert found.documents == 1 and found.names >= 1
    stored = set(ReferenceName.objects.values_list("name", flat=True))
    assert "only_here" not in stored and {"open_store", "load"} <= stored
    assert used("open_store") == [("pkg/use.py", 1), ("pkg/use.py", 4)]


def test_a_file_that_turns_into_no_code_loses_its_rows(index):
    index(CONFIG)
    index({"pkg/use.py": "def main(): AKIAABCDEFGHIJKLMNOP\n"})  # now secret-bearing: skipped
    doc = Document.objects.get(rel_path="pkg/use.py")
    assert doc.status == "skipped"
    assert (
        not Reference.objects.filter(document=doc).exists()
        and not Symbol.objects.filter(document=doc).exists()
    )


def test_a_name_past_the_longest_stored_is_invalid_range():
    for call in (names.find_symbols, names.find_references):
        with pytest.raises(errors.Dir2mcpError) as info:
            call("x" * 10_000)
        assert info.value.code == errors.INVALID_RANGE


@pytest.mark.parametrize(
    "call,kwargs",
    [
        (names.find_symbols, {"name": ""}),
        (names.find_symbols, {"name": "load", "kind": "gizmo"}),
        (names.find_references, {"name": "load", "cursor": "not a cursor"}),
        (names.find_references, {"name": 7}),
    ],
)
def test_bad_input_is_invalid_field(call, kwargs):
    with pytest.raises(errors.Dir2mcpError) as info:
        call(**kwargs)
    assert info.value.code == errors.INVALID_FIELD


def test_a_prefix_outside_the_root_is_refused():
    with pytest.raises(errors.Dir2mcpError) as info:
        names.find_references("load", path_prefix="../etc/")
    assert info.value.code == errors.PATH_OUTSIDE_ROOT
