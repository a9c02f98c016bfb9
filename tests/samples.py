"""Sample files built in code for tests: nothing binary is checked in."""

from __future__ import annotations


def _pdf_string(text: str) -> str:
    return "(" + text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") + ")"


def _content_stream(text: str | None) -> bytes:
    if text is None:
        return b""
    ops = ["BT", "/F1 12 Tf", "72 720 Td", "14 TL"]
    ops += [f"{_pdf_string(line)} Tj T*" for line in text.split("\n")]
    ops.append("ET")
    return "\n".join(ops).encode("latin-1")


def make_pdf(pages: list[str | None], *, kids: str | None = None) -> bytes:
    """A minimal valid PDF: one Helvetica text object per page (``None`` = no text)."""
    kids = kids or " ".join(f"{4 + 2 * index} 0 R" for index in range(len(pages)))
    bodies = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    for index, text in enumerate(pages):
        stream = _content_stream(text)
        bodies.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % (5 + 2 * index)
        )
        bodies.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(bodies, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref_at = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(bodies) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(bodies) + 1, xref_at)
    return bytes(out)
