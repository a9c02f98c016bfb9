"""C and C++ macros in the symbol index (issue #37): ``#define NAME`` is a
definition of kind macro, not a use; a macro's parameters are not uses and
the names its body uses are; a generated table of constants keeps no names
in the index, and ``symbols`` still finds where it defines one, through the
full-text index. Runs on SQLite and, under ``bash .ci/postgres``, PostgreSQL."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from jsonschema import Draft202012Validator

from corpus.ingest import generated, units
from corpus.ingest.indexing import index_directory
from corpus.models import Document, Reference, Symbol
from corpus.navigation import names, outline, symbols
from kernel.config import build_config
from mcp_gateway import summaries
from mcp_gateway.navigation_schemas import OUTLINE_OUTPUT, SYMBOLS_OUTPUT
from tests.test_generated import enum_header, register_header, small_functions

pytestmark = pytest.mark.django_db

REGS = (
    "#ifndef REGS_H\n"  # 1
    "#define REGS_H\n"  # 2
    "\n"  # 3
    "#define mmGRBM_STATUS 0x2004\n"  # 4
    "#define mmGRBM_STATUS_BASE_IDX 0\n"  # 5
    "#define WREG32(reg, v) write_reg(adev, (reg), (v))\n"  # 6
    "#define WREG32_SOC15(reg, v) \\\n"  # 7
    "\tWREG32(reg##_BASE_IDX + reg, v) /* #reg */\n"  # 8
    "\n"  # 9
    "#endif\n"  # 10
)
DRIVER = (
    '#include "regs.h"\n'  # 1
    "\n"  # 2
    "static void reset(struct amdgpu_device *adev)\n"  # 3
    "{\n"  # 4
    "\tWREG32_SOC15(mmGRBM_STATUS, 1);\n"  # 5
    "\tWREG32(mmGRBM_STATUS, 0); /* mmGRBM_STATUS in a comment */\n"  # 6
    '\tpr_info("mmGRBM_STATUS");\n'  # 7
    "}\n"  # 8
)


@pytest.fixture
def index(corpus_dir, state, monkeypatch):
    monkeypatch.delenv("MISTRAL_API_KEY", raising=False)

    def run(files: dict[str, str]):
        for rel, text in files.items():
            path = corpus_dir / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        return index_directory(corpus_dir, state=state, config=build_config({}, {}, {}))

    return run


def defined(name: str, **kwargs) -> list[tuple]:
    found = names.find_symbols(name, **kwargs)["symbols"]
    return [(h["rel_path"], h["kind"], h["line"], h["match"]) for h in found]


def used(name: str) -> list[tuple]:
    return [(h["rel_path"], h["span"]["start_line"]) for h in names.find_references(name)["references"]]


@pytest.mark.parametrize("rel_path", ["inc/regs.h", "inc/regs.hpp"])
def test_object_and_function_like_macros_are_definitions_of_kind_macro(index, rel_path):
    index({rel_path: REGS, "drv/reset.c": DRIVER})
    assert defined("mmGRBM_STATUS") == [(rel_path, "macro", 4, "exact"), (rel_path, "macro", 5, "prefix")]
    assert defined("WREG32") == [(rel_path, "macro", 6, "exact"), (rel_path, "macro", 7, "prefix")]
    assert defined("WREG32_SOC15") == [(rel_path, "macro", 7, "exact")]
    assert defined("REGS_H") == [(rel_path, "macro", 2, "exact")]
    assert defined("mmGRBM_STATUS", kind="function") == []


def test_references_find_uses_in_another_file_and_in_macro_bodies_not_the_define(index):
    index({"inc/regs.h": REGS, "drv/reset.c": DRIVER})
    # Not line 4 (its #define), nor the comment and string of lines 6 and 7.
    assert used("mmGRBM_STATUS") == [("drv/reset.c", 5), ("drv/reset.c", 6)]
    # Called from a macro's body (line 8, a continued line), and from the driver.
    assert sorted(used("WREG32")) == [("drv/reset.c", 6), ("inc/regs.h", 8)]
    assert used("write_reg") == [("inc/regs.h", 6)]
    # The guard's #ifndef uses it; its #define defines it.
    assert used("REGS_H") == [("inc/regs.h", 1)]


def test_a_macros_parameters_pasted_and_stringified_names_are_not_uses(index):
    index({"inc/regs.h": REGS})
    stored = set(Reference.objects.values_list("name__name", flat=True))
    # reg and v as declared are parameters; in the body they are uses, as a function's are.
    assert used("reg") == [("inc/regs.h", 6), ("inc/regs.h", 8)]
    assert "_BASE_IDX" not in stored  # pasted onto reg: half a name
    assert {"adev", "write_reg", "WREG32"} <= stored


def test_macro_body_scan_skips_literals_comments_numbers_and_keywords():
    body = "do { if (x) foo(\"bar baz\", 'q'); } while (0) /* qux */ // quux\n"
    body += "\t0x1fUL + y##_Z + #w + sizeof(int) + tail"
    assert list(symbols.macro_names(body)) == [("x", 0), ("foo", 0), ("tail", 1)]


def test_object_like_macros_are_outline_entries_but_units_are_cut_as_before():
    text = "#define A 1\n#define B(x) ((x) + A)\n\nint f(void)\n{\n#define INNER 2\n\treturn B(INNER);\n}\n"
    entries = outline.code_outline(text, "a.c")
    assert entries is not None
    listed = [(e.kind, e.name, e.start, e.end) for e in outline.walk(entries)]
    assert listed == [
        ("macro", "A", 1, 1),
        ("macro", "B", 2, 2),
        ("function", "f", 4, 8),
        ("macro", "INNER", 6, 6),
    ]
    # B is cut as before (a function-like macro is a unit); A stays in the lines before it.
    assert [(d.start, d.end) for d in units.code_units(text, "a.c") or []] == [(1, 1), (2, 2), (4, 8)]


def test_a_comment_inside_a_continued_body_keeps_the_macros_name():
    text = "#define BAZ \\\n\tdo { foo(); } /* why */ while (0)\n"
    parsed = units.parse(text, "a.c")
    assert parsed is not None
    found = symbols.extract(parsed)
    assert [(d.name, d.kind, d.start, d.end) for d in found.definitions] == [("BAZ", "macro", 1, 2)]
    assert "BAZ" not in {u.name for u in found.uses}
    assert "foo" in {u.name for u in found.uses}


def test_a_generated_table_keeps_no_names_and_symbols_still_finds_its_defines(index):
    table = register_header(1200)
    assert generated.generated_kind(table) == generated.TABLE
    driver = '#include "regs.h"\nint read(void)\n{\n\treturn RREG32(mmREG_00042);\n}\n'
    index({"asic_reg/gc_offset.h": table, "drv/read.c": driver})
    header = Document.objects.get(rel_path="asic_reg/gc_offset.h")
    assert not Symbol.objects.filter(document=header).exists()
    assert not Reference.objects.filter(document=header).exists()
    # Found in the table by the full-text index and a scan of the files it names.
    line = next(n for n, row in enumerate(table.split("\n"), 1) if row.startswith("#define mmREG_00042 "))
    assert defined("mmREG_00042") == [("asic_reg/gc_offset.h", "macro", line, "generated")]
    Draft202012Validator(SYMBOLS_OUTPUT).validate(names.find_symbols("mmREG_00042"))
    assert defined("mmREG_00042", kind="constant") == []
    assert defined("mmREG_00042", path_prefix="drv") == []
    # Its uses are the hand-written file's, the only ones stored.
    assert used("mmREG_00042") == [("drv/read.c", 4)]


def test_a_generated_enum_table_gives_its_enumerators_as_constants(index):
    text = enum_header(400)
    index({"inc/soc_enum.h": text})
    line = next(n for n, row in enumerate(text.split("\n"), 1) if row.startswith("ENUM_7_ON "))
    assert defined("ENUM_7_ON") == [("inc/soc_enum.h", "constant", line, "generated")]


def test_generated_definitions_come_after_the_exact_ones_of_hand_written_code(index):
    table = register_header(1200) + "#define LIMIT 4\n"
    index({"asic_reg/gc_offset.h": table, "src/a.c": "#define LIMIT 16\n#define LIMITS 2\n"})
    line = table.count("\n")
    assert defined("LIMIT") == [
        ("src/a.c", "macro", 1, "exact"),
        ("asic_reg/gc_offset.h", "macro", line, "generated"),
        ("src/a.c", "macro", 2, "prefix"),
    ]
    assert defined("LIMIT", limit=1) == [("src/a.c", "macro", 1, "exact")]
    assert names.find_symbols("LIMIT", limit=1)["truncated"]


def test_enumerators_are_constants_in_their_enum_and_their_uses_are_references(index):
    header = "enum power_state {\n\tPOWER_OFF = 0,\n\tPOWER_ON,\n};\n"
    user = '#include "power.h"\nint on(int s)\n{\n\treturn s == POWER_ON;\n}\n'
    index({"inc/power.h": header, "src/on.c": user})
    assert defined("POWER_ON") == [("inc/power.h", "constant", 3, "exact")]
    assert names.find_symbols("POWER_ON")["symbols"][0]["enclosing"] == "power_state"
    assert used("POWER_ON") == [("src/on.c", 4)]


def test_a_marked_generated_file_that_is_no_table_keeps_its_names(index):
    text = "// Code generated by protoc. DO NOT EDIT.\n" + small_functions(150)
    index({"gen/api.pb.c": text, "src/use.c": "int use(void)\n{\n\treturn helper_7(0, 1);\n}\n"})
    assert generated.generated_kind(text) == generated.MARKED
    line = next(n for n, row in enumerate(text.split("\n"), 1) if row.startswith("static int helper_7("))
    assert defined("helper_7")[0] == ("gen/api.pb.c", "function", line, "exact")
    assert used("helper_7") == [("src/use.c", 3)]
    assert defined("LIMIT") == [("gen/api.pb.c", "macro", 9, "exact")]


def full_text_queries(call) -> list[str]:
    """The full-text searches (SQLite FTS5 MATCH, PostgreSQL @@) that ``call`` runs."""
    with CaptureQueriesContext(connection) as captured:
        call()
    return [q["sql"] for q in captured.captured_queries if " MATCH " in q["sql"] or " @@ " in q["sql"]]


def test_symbols_over_an_index_without_tables_of_constants_finds_what_the_symbol_index_holds(index):
    index({"src/a.c": "#define LIMIT 16\nint limit(void)\n{\n\treturn LIMIT;\n}\n"})
    assert full_text_queries(lambda: names.find_symbols("LIMIT", kind="function")) == []
    assert defined("LIMIT") == [
        ("src/a.c", "macro", 1, "exact"),
        ("src/a.c", "function", 2, "case_insensitive"),
    ]


def test_symbols_searches_the_tables_only_for_the_kinds_they_define(index):
    index({"asic_reg/gc_offset.h": register_header(1200), "src/a.c": "int limit(void)\n{\n\treturn 0;\n}\n"})
    assert full_text_queries(lambda: names.find_symbols("mmREG_00042")) != []
    assert full_text_queries(lambda: names.find_symbols("mmREG_00042", kind="function")) == []


def test_a_run_of_defines_is_one_outline_entry_and_each_stays_a_symbol(index):
    body = "".join(f"#define REG_{n:03d} 0x{n:04x}\n" for n in range(40))
    text = "#ifndef R_H\n#define R_H\n" + body + "int reset(void);\n#define ONE 1\n#define TWO 2\n#endif\n"
    folded = outline.fold(outline.code_outline(text, "r.h") or [])
    listed = [(e.kind, e.name, e.last, e.folded, e.start, e.end) for e in outline.walk(folded)]
    assert listed == [
        ("macros", "R_H", "REG_039", 41, 2, 42),
        ("declaration", "reset", "", 0, 43, 43),
        ("macro", "ONE", "", 0, 44, 44),
        ("macro", "TWO", "", 0, 45, 45),
    ]
    index({"inc/r.h": text})
    assert defined("REG_017") == [("inc/r.h", "macro", 20, "exact")]


def test_a_long_enum_folds_its_enumerators_and_a_function_like_macro_breaks_a_run():
    enum = "enum state {\n" + "".join(f"\tS_{n},\n" for n in range(10)) + "};\n"
    macros = "#define A 1\n#define B 2\n#define C 3\n#define F(x) (x)\n#define D 4\n"
    folded = outline.fold(outline.code_outline(enum + macros, "s.c") or [])
    listed = [(e.kind, e.name, e.last, e.folded) for e in outline.walk(folded)]
    assert listed == [
        ("enum", "state", "", 0),
        ("constants", "S_0", "S_9", 10),
        ("macro", "A", "", 0),
        ("macro", "B", "", 0),
        ("macro", "C", "", 0),
        ("macro", "F", "", 0),
        ("macro", "D", "", 0),
    ]


def test_a_folded_outline_meets_the_schema_and_reads_as_one_line():
    text = "".join(f"#define REG_{n:03d} 0x{n:04x}\n" for n in range(12)) + "int reset(void);\n"
    found = outline.Outline(
        "r.h", "code", "definitions", outline.fold(outline.code_outline(text, "r.h") or []), 13
    )
    result = found.as_dict() | {"total": 2}
    Draft202012Validator(OUTLINE_OUTPUT).validate(result)
    assert result["entries"][0] | {"span": None} == {
        "kind": "macros",
        "name": "REG_000",
        "signature": "#define REG_000 0x0000",
        "span": None,
        "folded": 12,
        "last": "REG_011",
    }
    assert summaries.outline(result).split("\n")[1] == "[r.h:L1-L12] macros 12: REG_000 … REG_011"
