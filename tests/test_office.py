"""Office documents: docx, pptx and xlsx become searchable text; slides and sheets are pages."""

from __future__ import annotations

import io

import docx
import openpyxl
import pytest
from jsonschema import Draft202012Validator
from pptx import Presentation
from pptx.util import Inches

from corpus.files import open_file
from corpus.ingest.extract import extract
from corpus.models import Chunk, Document
from corpus.retrieval import Searcher
from corpus.security import ExclusionEngine
from kernel import errors
from kernel.config import build_config
from mcp_gateway import tools
from mcp_gateway.context import AuthSetup, Context

pytestmark = pytest.mark.django_db


def make_docx() -> bytes:
    document = docx.Document()
    document.add_heading("Quarterly planning memo", level=1)
    document.add_paragraph("The zephyrine budget was approved by the board.")
    table = document.add_table(rows=1, cols=2)
    table.rows[0].cells[0].text = "owner"
    table.rows[0].cells[1].text = "Mirela Ostrova"
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def make_pptx(slides: list[tuple[str, str]], notes: dict[int, str] | None = None) -> bytes:
    presentation = Presentation()
    for index, (title, body) in enumerate(slides, start=1):
        slide = presentation.slides.add_slide(presentation.slide_layouts[5])
        slide.shapes.title.text = title
        box = slide.shapes.add_textbox(Inches(1), Inches(2), Inches(6), Inches(2))
        box.text_frame.text = body
        if notes and index in notes:
            slide.notes_slide.notes_text_frame.text = notes[index]
    out = io.BytesIO()
    presentation.save(out)
    return out.getvalue()


def make_xlsx(sheets: dict[str, list[list[object]]]) -> bytes:
    workbook = openpyxl.Workbook()
    workbook.remove(workbook.active)
    for title, rows in sheets.items():
        sheet = workbook.create_sheet(title)
        for row in rows:
            sheet.append(row)
    out = io.BytesIO()
    workbook.save(out)
    return out.getvalue()


def spans_of(rel_path: str) -> list[tuple[str, int, int, dict | None]]:
    chunks = Chunk.objects.filter(representation__document__rel_path=rel_path, deleted=False)
    return [
        (span.span_kind, span.start, span.end, span.extra_json)
        for chunk in chunks.prefetch_related("spans").order_by("ordinal")
        for span in chunk.spans.all()
    ]


def test_docx_paragraphs_and_tables_become_raw_text() -> None:
    extracted = extract("office", "memo.docx", make_docx())

    assert extracted.rep_type == "raw_text"
    assert extracted.pages is None
    assert "zephyrine budget was approved" in extracted.text
    assert "owner\tMirela Ostrova" in extracted.text
    assert extracted.meta["converted_from"] == "docx"


def test_pptx_slides_are_labelled_pages_with_notes() -> None:
    data = make_pptx([("Intro", "hello"), ("Roadmap", "ship the quokka release")], notes={2: "say it slowly"})

    extracted = extract("office", "deck.pptx", data)

    assert [(p.number, p.label) for p in extracted.pages] == [(1, "slide 1"), (2, "slide 2")]
    assert "ship the quokka release" in extracted.pages[1].text
    assert "Notes: say it slowly" in extracted.pages[1].text
    assert "quokka" not in extracted.pages[0].text
    assert extracted.pages[1].text.startswith("[slide 2]\n")
    assert extracted.meta["slides"] == 2


def test_xlsx_sheets_are_labelled_pages_of_tab_separated_rows() -> None:
    data = make_xlsx({"Q1": [["region", "revenue"], ["north", 10]], "Q2": [["south", 42.5, None, "late"]]})

    extracted = extract("office", "book.xlsx", data)

    assert [(p.number, p.label) for p in extracted.pages] == [(1, "sheet 'Q1'"), (2, "sheet 'Q2'")]
    assert extracted.pages[0].text == "[sheet 'Q1']\nregion\trevenue\nnorth\t10"
    assert extracted.pages[1].text == "[sheet 'Q2']\nsouth\t42.5\t\tlate"


@pytest.mark.parametrize(
    ("name", "data", "code"),
    [
        pytest.param("broken.docx", b"PK\x03\x04garbage", errors.EXTRACT_FAILED, id="broken-docx"),
        pytest.param("broken.xlsx", b"not a zip at all", errors.EXTRACT_FAILED, id="broken-xlsx"),
        pytest.param("old.ppt", b"\xd0\xcf\x11\xe0", errors.DOC_TYPE_UNSUPPORTED, id="legacy-ppt"),
        pytest.param("sheet.ods", b"PK\x03\x04", errors.DOC_TYPE_UNSUPPORTED, id="opendocument"),
    ],
)
def test_unreadable_or_unsupported_office_files_get_a_clear_code(name: str, data: bytes, code: str) -> None:
    with pytest.raises(errors.Dir2mcpError) as caught:
        extract("office", name, data)
    assert caught.value.code == code
    assert name in caught.value.message


def test_indexed_slides_and_sheets_carry_page_spans_with_a_human_pointer(corpus_dir, state, index) -> None:
    (corpus_dir / "deck.pptx").write_bytes(make_pptx([("Intro", "welcome"), ("Plan", "the axolotl plan")]))
    (corpus_dir / "book.xlsx").write_bytes(make_xlsx({"Q1": [["a", 1]], "Q2": [["wombat", 2]]}))
    (corpus_dir / "memo.docx").write_bytes(make_docx())

    counters = index()

    assert counters.indexed == 3
    assert spans_of("deck.pptx") == [
        ("page", 1, 1, {"label": "slide 1"}),
        ("page", 2, 2, {"label": "slide 2"}),
    ]
    assert spans_of("book.xlsx") == [
        ("page", 1, 1, {"label": "sheet 'Q1'"}),
        ("page", 2, 2, {"label": "sheet 'Q2'"}),
    ]
    assert spans_of("memo.docx")[0][0] == "lines"
    opened = open_file(
        ExclusionEngine.from_config(corpus_dir, build_config({}, {}, {})), rel_path="book.xlsx", page=2
    )
    assert opened["content"] == "[sheet 'Q2']\nwombat\t2"
    hit = Searcher(state, build_config({}, {}, {}), None).search("axolotl", k=3).hits[0]
    assert (hit.rel_path, hit.span.kind, hit.span.start) == ("deck.pptx", "page", 2)
    assert hit.snippet.startswith("[slide 2]")


def test_office_files_skipped_by_an_older_version_are_read_on_the_next_run(corpus_dir, index) -> None:
    (corpus_dir / "memo.docx").write_bytes(make_docx())
    index()
    Document.objects.filter(rel_path="memo.docx").update(
        status="skipped",
        error="DOC_TYPE_UNSUPPORTED: Office documents are not indexed yet",
        policy_hash="old",
    )

    index()

    assert Document.objects.get(rel_path="memo.docx").status == "ok"


def test_every_chunk_of_a_long_sheet_is_labelled_in_hits_and_citations(corpus_dir, state, index) -> None:
    rows = [[f"row {i}", "filler text that makes this sheet far longer than one chunk"] for i in range(200)]
    rows.append(["the last row names the quokka ledger", 3])
    (corpus_dir / "book.xlsx").write_bytes(make_xlsx({"Intro": [["hello", 1]], "Q2": rows}))
    config = build_config({"embed": {"provider": "none"}}, {}, {})
    index(config=config)
    labels = [extra["label"] for kind, _, _, extra in spans_of("book.xlsx")]
    assert len(labels) > 3 and labels[0] == "sheet 'Intro'" and set(labels[1:]) == {"sheet 'Q2'"}
    ctx = Context(root=corpus_dir, state=state, config=config, auth=AuthSetup(token=None, source="none"))

    found = tools.run(tools.table()["dir2mcp.search"], {"query": "quokka ledger"}, tools.Call(ctx))
    asked = tools.run(
        tools.table()["dir2mcp.ask"], {"question": "quokka ledger", "mode": "search_only"}, tools.Call(ctx)
    )

    hit = found["structuredContent"]["hits"][0]
    assert not hit["snippet"].startswith("[sheet")  # a later chunk: its text has no pointer of its own
    assert (hit["rel_path"], hit["span"], hit["label"]) == (
        "book.xlsx",
        {"kind": "page", "page": 2},
        "sheet 'Q2'",
    )
    assert "[book.xlsx#p=2] (sheet 'Q2')" in found["content"][0]["text"]
    assert asked["structuredContent"]["citations"][0]["label"] == "sheet 'Q2'"
    for name, result in (("dir2mcp.search", found), ("dir2mcp.ask", asked)):
        Draft202012Validator(tools.table()[name].output_schema).validate(result["structuredContent"])
    (corpus_dir / "notes.md").write_text("# Notes\n\nthe quokka ledger is elsewhere too\n")
    index(config=config)
    plain = Searcher(state, config, None).search("quokka ledger elsewhere", k=5).hits
    assert [h.label for h in plain if h.rel_path == "notes.md"] == [None]
    assert "label" not in next(h for h in plain if h.rel_path == "notes.md").as_dict()
