"""Media fixtures generated in tests, and how the fakes "recognise" them.

The fakes cannot really read pixels or hear speech, so each fixture carries
what a real OCR or speech model would find, where our own extractors never
look: a scanned PDF page holds it in a private page key, a PNG in a ``tEXt``
chunk, a WAV in a private RIFF chunk. The pixels and samples are real (text is
rendered into the image; the WAV has the stated duration), so our side deals
with genuine scans and audio.
"""

from __future__ import annotations

import io
import json
import struct
import wave

from PIL import Image, ImageDraw, PngImagePlugin
from pypdf import PdfReader, PdfWriter
from pypdf.generic import NameObject, TextStringObject

PAGE_KEY = "/Dir2mcpFakeOcr"
PNG_KEY = "Dir2mcpFakeOcr"
WAV_CHUNK = b"fkts"


def _render(text: str, size: tuple[int, int] = (640, 200)) -> Image.Image:
    image = Image.new("L", size, color=255)
    draw = ImageDraw.Draw(image)
    for i, line in enumerate(text.split("\n")[:8]):
        draw.text((20, 20 + 22 * i), line, fill=0)
    return image


def make_png(text: str) -> bytes:
    """A PNG with ``text`` drawn on it (and told to the fake OCR)."""
    info = PngImagePlugin.PngInfo()
    info.add_text(PNG_KEY, text)
    out = io.BytesIO()
    _render(text).save(out, "PNG", pnginfo=info)
    return out.getvalue()


def make_scanned_pdf(pages: list[str]) -> bytes:
    """A PDF of page images with no text layer."""
    images = [_render(text).convert("RGB") for text in pages]
    raw = io.BytesIO()
    images[0].save(raw, "PDF", save_all=True, append_images=images[1:], resolution=72)
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(raw.getvalue())))
    for page, text in zip(writer.pages, pages, strict=True):
        page[NameObject(PAGE_KEY)] = TextStringObject(text)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def make_text_pdf(pages: list[str]) -> bytes:
    """A PDF whose pages have a real text layer."""
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_font("helvetica", size=12)
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 8, text)
    return bytes(pdf.output())


def make_mixed_pdf(pages: list[tuple[str, bool]]) -> bytes:
    """Pages in order, each ``(text, scanned)``."""
    writer = PdfWriter()
    for text, scanned in pages:
        source = make_scanned_pdf([text]) if scanned else make_text_pdf([text])
        writer.add_page(PdfReader(io.BytesIO(source)).pages[0])
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def make_wav(segments: list[tuple[float, float, str]], *, seconds: float | None = None) -> bytes:
    """A mono 8 kHz WAV of ``seconds`` (default: the last segment's end) of quiet tone."""
    seconds = seconds if seconds is not None else max((end for _, end, _ in segments), default=1.0)
    frames = int(8000 * seconds)
    out = io.BytesIO()
    with wave.open(out, "wb") as handle:
        handle.setnchannels(1)
        handle.setsampwidth(2)
        handle.setframerate(8000)
        handle.writeframes(struct.pack("<h", 0) * frames)
    script = json.dumps([{"start": s, "end": e, "text": t} for s, e, t in segments]).encode()
    if len(script) % 2:
        script += b" "
    data = out.getvalue() + WAV_CHUNK + struct.pack("<I", len(script)) + script
    return data[:4] + struct.pack("<I", len(data) - 8) + data[8:]


# -- what the fakes read back ------------------------------------------------


def pdf_page_texts(data: bytes) -> list[str]:
    """Per page: the planted scan text, else the text layer (what OCR would see)."""
    texts = []
    for page in PdfReader(io.BytesIO(data)).pages:
        planted = page.get(PAGE_KEY)
        texts.append(str(planted) if planted is not None else (page.extract_text() or "").strip())
    return texts


def image_text(data: bytes) -> str:
    with Image.open(io.BytesIO(data)) as image:
        image.load()
        return str(image.info.get(PNG_KEY, ""))


def wav_script(data: bytes) -> tuple[float, list[dict]]:
    """Duration in seconds and the planted segments of a WAV."""
    with wave.open(io.BytesIO(data), "rb") as handle:
        duration = handle.getnframes() / handle.getframerate()
    pos, segments = 12, []
    while pos + 8 <= len(data):
        name, size = data[pos : pos + 4], struct.unpack("<I", data[pos + 4 : pos + 8])[0]
        if name == WAV_CHUNK:
            segments = json.loads(data[pos + 8 : pos + 8 + size])
        pos += 8 + size + (size % 2)
    return duration, segments
