"""An image of the corpus as MCP image content (issue #32 item 5, seed 002).

A PNG, JPEG, GIF or WebP file within :data:`MAX_IMAGE_BYTES` goes out as it
is. Anything else the indexer classifies as an image (a larger file, a TIFF
or BMP, which clients do not display) is decoded with Pillow and encoded
again, as PNG when it has transparency and JPEG otherwise, scaled down until
it fits the cap; an animation keeps its first frame. Decoding is bounded:
a file over :data:`MAX_SOURCE_BYTES` is not read and an image over
:data:`MAX_PIXELS` is neither decoded nor sent, however small its file
(``FILE_TOO_LARGE`` names the cap).
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass

from PIL import Image, ImageOps, UnidentifiedImageError

from kernel import errors

#: The most image data one answer carries (before base64).
MAX_IMAGE_BYTES = 1024 * 1024
#: The largest image file that is read to be scaled down.
MAX_SOURCE_BYTES = 32 * 1024 * 1024
#: The most pixels decoded (40 MP: 160 MB as RGBA).
MAX_PIXELS = 40_000_000
JPEG_QUALITY = 85
#: Formats a client shows as they are, by Pillow's name.
PASSED = {"PNG": "image/png", "JPEG": "image/jpeg", "GIF": "image/gif", "WEBP": "image/webp"}
#: Formats decoded at all: what the indexer's extensions and magic bytes call an image.
DECODED = (*PASSED, "TIFF", "BMP")
# Bytes a pixel takes once encoded, to guess the first scale of a re-encoding.
_BYTES_PER_PIXEL = {"PNG": 1.5, "JPEG": 0.25}
_MIN_EDGE = 16
_ATTEMPTS = 12


@dataclass(frozen=True)
class Fitted:
    """The image as it is returned, and what it was."""

    data: bytes
    mime_type: str
    width: int
    height: int
    source_mime_type: str
    source_width: int
    source_height: int

    @property
    def recompressed(self) -> bool:
        return self.mime_type != self.source_mime_type or self.downscaled

    @property
    def downscaled(self) -> bool:
        return self.width * self.height < self.source_width * self.source_height


def fit(rel: str, data: bytes, *, cap: int = MAX_IMAGE_BYTES) -> Fitted:
    """``data`` (an image file's bytes) as an image of at most ``cap`` bytes
    that a client displays; ``DOC_TYPE_UNSUPPORTED`` when it is no image
    Pillow decodes, ``FILE_TOO_LARGE`` past the pixel cap."""
    try:
        image = Image.open(io.BytesIO(data), formats=DECODED)  # reads the header only
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise _too_many_pixels(rel) from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError):
        raise errors.Dir2mcpError(
            errors.DOC_TYPE_UNSUPPORTED, f"{rel} is not an image this server decodes; ask format base64"
        ) from None
    with image:
        fmt, (width, height) = image.format, image.size
        source_mime = PASSED.get(fmt or "") or Image.MIME.get(fmt or "", "application/octet-stream")
        if width * height > MAX_PIXELS:  # a client would decode it too: even a small file is refused
            raise _too_many_pixels(rel)
        if fmt in PASSED and len(data) <= cap:
            return Fitted(data, source_mime, width, height, source_mime, width, height)
        try:
            image.seek(0)
            frame = _flattened(image)
        except (OSError, ValueError, SyntaxError, EOFError):
            raise errors.Dir2mcpError(errors.EXTRACT_FAILED, f"{rel} cannot be decoded as an image") from None
    out, fmt_out, (new_width, new_height) = _shrunk(rel, frame, cap)
    return Fitted(out, PASSED[fmt_out], new_width, new_height, source_mime, width, height)


def _too_many_pixels(rel: str) -> errors.Dir2mcpError:
    return errors.Dir2mcpError(
        errors.FILE_TOO_LARGE,
        f"{rel} is over the {MAX_PIXELS}-pixel limit of an image read; read it as base64",
    )


def _flattened(image: Image.Image) -> Image.Image:
    """The decoded frame upright (a camera's EXIF orientation applied: the
    encoding again drops the tag), as RGBA when it has transparency, RGB otherwise."""
    alpha = image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info
    return ImageOps.exif_transpose(image).convert("RGBA" if alpha else "RGB")


def _shrunk(rel: str, frame: Image.Image, cap: int) -> tuple[bytes, str, tuple[int, int]]:
    """The frame encoded within ``cap`` bytes, scaled down as far as it takes."""
    fmt = "PNG" if frame.mode == "RGBA" else "JPEG"
    width, height = frame.size
    scale = min(1.0, math.sqrt(cap / (width * height * _BYTES_PER_PIXEL[fmt])))
    for _ in range(_ATTEMPTS):
        size = (max(1, round(width * scale)), max(1, round(height * scale)))
        scaled = frame if size == frame.size else frame.resize(size, Image.Resampling.LANCZOS)
        buffer = io.BytesIO()
        scaled.save(buffer, fmt, **({"quality": JPEG_QUALITY} if fmt == "JPEG" else {"optimize": True}))
        if buffer.tell() <= cap:
            return buffer.getvalue(), fmt, size
        if max(size) <= _MIN_EDGE:
            break
        scale *= min(0.9, max(0.5, 0.95 * math.sqrt(cap / buffer.tell())))
    raise errors.Dir2mcpError(
        errors.FILE_TOO_LARGE, f"{rel} does not fit the {cap}-byte limit of an image read"
    )
