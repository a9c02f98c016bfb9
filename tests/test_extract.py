"""Raw text extraction: encodings, HTML, and the PDF text layer on hand-built PDFs."""

from __future__ import annotations

import io

import pytest
from pypdf import PdfReader, PdfWriter

from corpus.ingest import extract as extract_module
from corpus.ingest.extract import (
    Extracted,
    NeedsProvider,
    Page,
    decode_text,
    extract,
    extract_pdf_text,
    html_to_text,
)
from kernel import errors
from tests.samples import make_pdf


def encrypt_pdf(data: bytes, *, user_password: str) -> bytes:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    writer.encrypt(user_password=user_password, owner_password="owner-secret", algorithm="AES-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


THREE_PAGES = ["Alpha page one\nwith a second line", None, "Gamma (page three)"]


# --- decode_text ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "expected_text", "expected_meta"),
    [
        pytest.param(b"plain ascii\n", "plain ascii\n", {}, id="utf8-ascii"),
        pytest.param("naïve café ✓\n".encode(), "naïve café ✓\n", {}, id="utf8-multibyte"),
        pytest.param(b"\xef\xbb\xbfwith bom", "with bom", {"encoding": "utf-8-sig"}, id="utf8-bom-stripped"),
        pytest.param("Grüße\n".encode("utf-16"), "Grüße\n", {"encoding": "utf-16"}, id="utf16-le-bom"),
        pytest.param(
            b"\xfe\xff" + "Grüße".encode("utf-16-be"), "Grüße", {"encoding": "utf-16"}, id="utf16-be-bom"
        ),
        pytest.param("Grüße".encode("utf-32"), "Grüße", {"encoding": "utf-32"}, id="utf32-bom"),
        pytest.param(b"caf\xe9", "café", {"encoding": "cp1252"}, id="short-latin1"),
        pytest.param(
            "Le cœur de l’été, “quoted”.\n".encode("cp1252"),
            "Le cœur de l’été, “quoted”.\n",
            {"encoding": "cp1252"},
            id="cp1252-smart-quotes",
        ),
        pytest.param(
            "Привет, мир! Это обычный текст на русском языке.\n".encode("cp1251"),
            "Привет, мир! Это обычный текст на русском языке.\n",
            {"encoding": "cp1251"},
            id="cp1251-cyrillic",
        ),
        pytest.param(
            "résumé naïve façade ".encode() * 3 + b"stray \xff byte",
            "résumé naïve façade " * 3 + "stray \ufffd byte",
            {"replaced_bytes": 1},
            id="mostly-utf8-keeps-utf8",
        ),
        pytest.param(b"a\r\nb\rc\n", "a\nb\nc\n", {}, id="crlf-and-cr-normalized"),
        pytest.param("x\r\ny".encode("utf-16"), "x\ny", {"encoding": "utf-16"}, id="utf16-crlf-normalized"),
        pytest.param(b"nul\x00bytes\x00", "nulbytes", {}, id="nul-stripped"),
        pytest.param(b"", "", {}, id="empty"),
    ],
)
def test_decode_text(data: bytes, expected_text: str, expected_meta: dict) -> None:
    text, meta = decode_text(data)
    assert text == expected_text
    assert meta == expected_meta


def test_decode_text_survives_random_binary() -> None:
    text, _ = decode_text(bytes(range(256)) * 8)
    assert isinstance(text, str)
    assert "\r" not in text and "\x00" not in text


# --- html_to_text --------------------------------------------------------------

HTML = """<!doctype html>
<html><head><title>Page title</title>
<style>body { color: red; } .secret-style {}</style>
<script>var trackingScript = "do not index";</script></head>
<body><h1>Main heading</h1>
<p>First paragraph with <a href="https://example.com/doc">a link</a> &amp; an entity.</p>
<script type="module">console.log("inline body script")</script>
<ul><li>item one</li><li>item two</li></ul>
<img src="diagram.png" alt="system diagram">
<p>{long}</p>
</body></html>"""


def test_html_to_text_drops_scripts_and_styles() -> None:
    text = html_to_text(HTML.replace("{long}", "x"))
    assert "trackingScript" not in text
    assert "inline body script" not in text
    assert "secret-style" not in text
    assert "color: red" not in text


def test_html_to_text_keeps_readable_structure() -> None:
    text = html_to_text(HTML.replace("{long}", "x"))
    assert "# Main heading" in text
    assert "[a link](https://example.com/doc) & an entity." in text
    assert "* item one" in text
    assert "system diagram" in text
    assert "diagram.png" not in text


def test_html_to_text_does_not_wrap_long_paragraphs() -> None:
    sentence = " ".join(f"word{i}" for i in range(200))
    text = html_to_text(HTML.replace("{long}", sentence))
    assert sentence in text.split("\n")


# --- PDF -----------------------------------------------------------------------


def test_hand_built_pdf_is_well_formed() -> None:
    reader = PdfReader(io.BytesIO(make_pdf(THREE_PAGES)), strict=True)
    assert len(reader.pages) == 3


def test_pdf_pages_are_extracted_with_numbers_and_form_feed_separators() -> None:
    result = extract_pdf_text(make_pdf(THREE_PAGES))
    assert result.rep_type == "raw_text"
    assert [page.number for page in result.pages] == [1, 2, 3]
    assert result.pages[0].text == "Alpha page one\nwith a second line"
    assert result.pages[2].text == "Gamma (page three)"
    assert result.text.split("\f") == [page.text for page in result.pages]


def test_pdf_page_without_text_is_listed() -> None:
    result = extract_pdf_text(make_pdf(THREE_PAGES))
    assert result.pages[1].text == ""
    assert result.meta == {"source": "pdf_text_layer", "pages": 3, "pages_without_text": [2]}


def test_pdf_page_with_only_a_page_number_counts_as_without_text() -> None:
    result = extract_pdf_text(make_pdf(["Real content on page one", "2"]))
    assert result.meta["pages_without_text"] == [2]


@pytest.mark.parametrize(
    "pages",
    [
        pytest.param([None], id="one-blank-page"),
        pytest.param([None, None, None], id="three-blank-pages"),
        pytest.param(["7", None], id="only-page-numbers"),
    ],
)
def test_pdf_without_any_text_needs_ocr(pages: list[str | None]) -> None:
    with pytest.raises(NeedsProvider) as caught:
        extract_pdf_text(make_pdf(pages))
    assert caught.value.what == "ocr"


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(make_pdf(THREE_PAGES)[:300], id="truncated"),
        pytest.param(b"this is not a pdf at all", id="garbage"),
        pytest.param(b"%PDF-1.4\n" + bytes(range(256)) * 4, id="header-then-noise"),
        pytest.param(b"", id="empty"),
        pytest.param(make_pdf(["looping page tree"], kids="2 0 R"), id="cyclic-page-tree"),
    ],
)
def test_broken_pdf_raises_extract_failed(data: bytes) -> None:
    with pytest.raises(errors.Dir2mcpError) as caught:
        extract_pdf_text(data)
    assert caught.value.code == errors.EXTRACT_FAILED
    assert "PDF" in caught.value.message


def test_password_protected_pdf_raises_extract_failed() -> None:
    data = encrypt_pdf(make_pdf(THREE_PAGES), user_password="open-sesame")
    with pytest.raises(errors.Dir2mcpError) as caught:
        extract_pdf_text(data)
    assert caught.value.code == errors.EXTRACT_FAILED
    assert "password" in caught.value.message


def test_pdf_encrypted_with_empty_user_password_is_extracted() -> None:
    # Owner-password-only PDFs (copy/print restrictions) open for any reader.
    data = encrypt_pdf(make_pdf(THREE_PAGES), user_password="")
    result = extract_pdf_text(data)
    assert result.pages[0].text == "Alpha page one\nwith a second line"


def test_pdf_pages_beyond_the_cap_are_not_processed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(extract_module, "MAX_PDF_PAGES", 2)
    result = extract_pdf_text(make_pdf(["page one text", "page two text", "page three text"]))
    assert [page.number for page in result.pages] == [1, 2]
    assert result.meta["pages"] == 3
    assert result.meta["pages_processed"] == 2


# --- extract dispatch ----------------------------------------------------------


@pytest.mark.parametrize("doc_type", ["code", "text", "md", "data"])
def test_extract_decodes_textual_types(doc_type: str) -> None:
    result = extract(doc_type, "file", "line one\r\nline two é\r\n".encode("cp1252"))
    assert result == Extracted(
        rep_type="raw_text", text="line one\nline two é\n", pages=None, meta={"encoding": "cp1252"}
    )


def test_extract_converts_html() -> None:
    html = "<html><body><h2>Título</h2><script>x()</script><p>Hola</p></body></html>"
    result = extract("html", "page.html", html.encode("cp1252"))
    assert result.text == "## Título\n\nHola"
    assert result.meta == {"encoding": "cp1252", "converted_from": "html"}
    assert result.pages is None


def test_extract_routes_pdf_to_text_layer() -> None:
    result = extract("pdf", "doc.pdf", make_pdf(THREE_PAGES))
    assert result.pages[2] == Page(number=3, text="Gamma (page three)")


@pytest.mark.parametrize(
    ("doc_type", "provider"),
    [pytest.param("image", "ocr", id="image-ocr"), pytest.param("audio", "stt", id="audio-stt")],
)
def test_extract_media_needs_a_provider(doc_type: str, provider: str) -> None:
    with pytest.raises(NeedsProvider) as caught:
        extract(doc_type, "media", b"\x00\x01")
    assert caught.value.what == provider


@pytest.mark.parametrize("doc_type", ["archive", "office", "binary_ignored", "nonsense"])
def test_extract_rejects_unsupported_types(doc_type: str) -> None:
    with pytest.raises(errors.Dir2mcpError) as caught:
        extract(doc_type, "thing.bin", b"\x00")
    assert caught.value.code == errors.DOC_TYPE_UNSUPPORTED
    assert "thing.bin" in caught.value.message
