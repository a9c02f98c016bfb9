"""Office documents (docx, pptx, xlsx) to ``raw_text``.

A Word document is flowing prose and becomes plain text. A presentation
becomes one page per slide and a workbook one page per sheet, each page
carrying a human pointer ("slide 7", "sheet 'Q2'") that follows its chunks
into spans and, as the page's first line (``[slide 7]``), into snippets and hits.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from corpus.ingest.extracted import PAGE_SEPARATOR, RAW_TEXT, Extracted, Page
from kernel import errors

if TYPE_CHECKING:  # openpyxl is imported on first use, in _xlsx
    from openpyxl.worksheet.worksheet import Worksheet

OFFICE_EXTENSIONS = ("docx", "pptx", "xlsx")
# A workbook can hold millions of cells; past this many characters per sheet
# the rest is not indexed (and the meta says so).
MAX_SHEET_CHARS = 2_000_000


def _failed(name: str, exc: BaseException) -> errors.Dir2mcpError:
    return errors.Dir2mcpError(errors.EXTRACT_FAILED, f"{name}: not a readable Office file: {exc}"[:500])


def _clean(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "").replace(PAGE_SEPARATOR, "\n")


def _docx(data: bytes) -> Extracted:
    import docx

    document = docx.Document(io.BytesIO(data))
    parts = [paragraph.text for paragraph in document.paragraphs]
    for table in document.tables:
        for row in table.rows:
            parts.append("\t".join(cell.text for cell in row.cells))
    text = _clean("\n".join(parts)).strip()
    return Extracted(rep_type=RAW_TEXT, text=text, meta={"converted_from": "docx"})


# Any: python-pptx's shape classes are told apart by their has_* flags,
# which its types do not narrow to the class that has the attribute.
def _shape_texts(shapes: Iterable[Any]) -> list[str]:
    texts = []
    for shape in shapes:
        if getattr(shape, "has_text_frame", False) and shape.text_frame.text.strip():
            texts.append(shape.text_frame.text)
        if getattr(shape, "has_table", False):
            for row in shape.table.rows:
                texts.append("\t".join(cell.text for cell in row.cells))
        if hasattr(shape, "shapes"):  # group shapes
            texts.extend(_shape_texts(shape.shapes))
    return texts


def _pptx(data: bytes) -> Extracted:
    from pptx import Presentation

    presentation = Presentation(io.BytesIO(data))
    pages = []
    for number, slide in enumerate(presentation.slides, start=1):
        texts = _shape_texts(slide.shapes)
        if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
            notes = slide.notes_slide.notes_text_frame.text.strip()
            if notes:
                texts.append(f"Notes: {notes}")
        pages.append(_page(number, f"slide {number}", "\n".join(texts)))
    return _paged(pages, "pptx", "slides")


def _sheet_text(sheet: Worksheet) -> tuple[str, bool]:
    """A sheet's rows (a ReadOnlyWorksheet at run time; the stubs type a
    workbook's sheets as Worksheet) as tab-separated lines, and whether they were cut."""
    lines: list[str] = []
    size = 0
    for row in sheet.iter_rows(values_only=True):
        cells = ["" if value is None else str(value) for value in row]
        while cells and cells[-1] == "":
            cells.pop()
        if not cells:
            continue
        line = "\t".join(cells)
        size += len(line) + 1
        if size > MAX_SHEET_CHARS:
            return "\n".join(lines), True
        lines.append(line)
    return "\n".join(lines), False


def _xlsx(data: bytes) -> Extracted:
    import openpyxl

    workbook = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    try:
        pages, truncated = [], []
        for number, sheet in enumerate(workbook.worksheets, start=1):
            text, cut = _sheet_text(sheet)
            if cut:
                truncated.append(sheet.title)
            pages.append(_page(number, f"sheet '{sheet.title}'", text))
    finally:
        workbook.close()
    extracted = _paged(pages, "xlsx", "sheets")
    if truncated:
        extracted.meta["sheets_truncated"] = truncated
    return extracted


def _page(number: int, label: str, text: str) -> Page:
    """A page whose text opens with its pointer, so snippets and hits show where they are."""
    body = _clean(text).strip()
    return Page(number=number, text=f"[{label}]\n{body}" if body else f"[{label}]", label=label)


def _paged(pages: list[Page], kind: str, unit: str) -> Extracted:
    # "pages" lets open_file serve a slide or sheet by its page number.
    meta = {
        "converted_from": kind,
        "pages": len(pages),
        unit: len(pages),
        "page_labels": [page.label for page in pages],
    }
    text = PAGE_SEPARATOR.join(page.text for page in pages)
    return Extracted(rep_type=RAW_TEXT, text=text, pages=tuple(pages), meta=meta)


_READERS = {"docx": _docx, "pptx": _pptx, "xlsx": _xlsx}


def office_extension(name: str) -> str | None:
    """``docx``, ``pptx`` or ``xlsx`` when ``name`` is an Office format we read."""
    ext = name.rsplit(".", 1)[-1].lower() if "." in name else ""
    return ext if ext in _READERS else None


def extract_office(name: str, data: bytes) -> Extracted:
    """The text of a docx, pptx or xlsx; ``DOC_TYPE_UNSUPPORTED`` for other Office formats."""
    ext = office_extension(name)
    if ext is None:
        raise errors.Dir2mcpError(
            errors.DOC_TYPE_UNSUPPORTED, f"{name}: only docx, pptx and xlsx Office files are indexed"
        )
    try:
        return _READERS[ext](data)
    # The OOXML readers raise zip, XML, key, value and attribute errors (and
    # more, by version) for broken files.
    except Exception as exc:
        raise _failed(name, exc) from None
