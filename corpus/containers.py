"""The parts of a zip container (and the streams of a PDF) a raw read hands out whole.

A ``.docx``, ``.xlsx``, ``.pptx``, ``.odt`` or ``.epub`` is a zip: its text
and everything else it carries (comments, custom properties, an embedded
workbook or object) are compressed parts. The indexer screens the text its
extractor takes out; a raw read (``read_bytes``, a whole ``resources/read``)
hands out every part, and screening the container's bytes sees none of them
(until session 22 a document whose embedded object held a key and a
password was served, and the client unzipped them). So before a zip
container's bytes go out, each part is decompressed and screened
(:func:`screen_zip_parts`; a zip behind other bytes, a self-extracting
archive's stub, under any name, too), nested zips inside it too, within a budget of
decompressed bytes; a container that cannot be screened within it (too
large, compressed past :data:`MAX_RATIO`, encrypted or unreadable parts) is
refused. An archive (``.zip``, ``.jar``) is never read as bytes at all
(``files.refuse_archive_bytes``); this is for the documents that are zips.

A PDF is the same kind of container: its text layer is what the indexer
screens, and its streams (an attached file, a form, an annotation's
appearance) are compressed in its bytes. Each stream is decoded and
screened the same way (:func:`screen_pdf_streams`), within the same budget.

The verdict is remembered for the file's identity and version (device,
inode, size, modification and change times), so reading a large document
range by range screens it once, and asking again for one that was refused
costs no second screening.
"""

from __future__ import annotations

import collections
import io
import threading
import zipfile
import zlib
from typing import BinaryIO

from corpus import files
from corpus.security import ARCHIVE_SEPARATOR, ExclusionEngine, OpenedFile
from kernel import errors

ZIP_MAGIC = b"PK\x03\x04"
PDF_MAGIC = b"%PDF-"
#: decompressed bytes screened for one container, nested ones included
MAX_SCREENED_BYTES = 256 * 2**20
#: decompressed over compressed bytes a part may reach once past 1 MiB
MAX_RATIO = 100
#: zips inside zips screened (a workbook embedded in a document is one level)
MAX_DEPTH = 3
#: the largest nested zip held in memory to be screened in turn
MAX_NESTED_BYTES = 32 * 2**20
_CHUNK = 1 << 20
_REMEMBERED = 512

#: the verdict on each version screened lately: None (clean) or its refusal
_verdicts: collections.OrderedDict[tuple[int, ...], errors.Dir2mcpError | None] = collections.OrderedDict()
_lock = threading.Lock()


def screen_zip_parts(engine: ExclusionEngine, opened: OpenedFile) -> None:
    """FORBIDDEN when ``opened`` is a zip container (or a PDF) one of whose
    parts (streams) holds a secret, or that cannot be screened; nothing for
    any other file. Leaves the file's position anywhere: the caller seeks."""
    opened.file.seek(0)
    head = opened.file.read(len(PDF_MAGIC))
    if head.startswith(ZIP_MAGIC) or (head != PDF_MAGIC and _zip_behind(opened.file)):
        screen = _screen_zip
    elif head == PDF_MAGIC:
        screen = _screen_pdf
    else:
        return
    st = opened.st
    version = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    with _lock:
        known = version in _verdicts
        verdict = _verdicts.get(version)
        if known:
            _verdicts.move_to_end(version)
    if not known:
        opened.file.seek(0)
        try:
            screen(engine, opened.rel, opened.file, [MAX_SCREENED_BYTES], 1)
        except errors.Dir2mcpError as refused:
            verdict = refused
        with _lock:
            _verdicts[version] = verdict
            while len(_verdicts) > _REMEMBERED:
                _verdicts.popitem(last=False)
    if verdict is not None:
        raise errors.Dir2mcpError(verdict.code, verdict.message)


def _zip_behind(source: BinaryIO) -> bool:
    """Whether a zip ends ``source`` though its head is not a zip's: a zip is
    read from its directory at the end, so bytes before it (a
    self-extracting archive's stub, anything) leave it a zip every tool
    opens (until review 31b a stub then a zip holding a ``.env`` was served
    whole, under any name). Only a zip that opens counts: a file whose tail
    merely holds the directory's signature is not refused for it."""
    source.seek(0)
    try:  # reads the directory's end record (in the last 64 KiB) first: no record, no zip
        with zipfile.ZipFile(source):
            return True
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError, ValueError, OSError):
        return False


def _refused(rel: str, why: str) -> errors.Dir2mcpError:
    return errors.Dir2mcpError(
        errors.FORBIDDEN,
        f"{rel} holds parts that cannot be screened for secrets ({why}); its bytes are not "
        "served: read its text with open_file",
    )


def _screen_zip(engine: ExclusionEngine, rel: str, source: BinaryIO, budget: list[int], depth: int) -> None:
    try:
        with zipfile.ZipFile(source) as container:
            for info in container.infolist():
                if info.is_dir():
                    continue
                if info.flag_bits & 0x1:
                    raise _refused(rel, "an encrypted part")
                if engine.excluded_reason(f"{rel}{ARCHIVE_SEPARATOR}{info.filename}") is not None:
                    raise _refused(rel, "a part the exclusion rules refuse by name")
                nested = _screen_part(engine, rel, container, info, budget)
                if nested is not None and depth < MAX_DEPTH:
                    _screen_zip(engine, rel, io.BytesIO(nested), budget, depth + 1)
                elif nested is not None:
                    raise _refused(rel, f"zips nested more than {MAX_DEPTH} deep")
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError, zlib.error, ValueError):
        raise _refused(rel, "a part that cannot be read") from None


def _screen_pdf(engine: ExclusionEngine, rel: str, source: BinaryIO, budget: list[int], depth: int) -> None:
    """Every stream of the PDF, decoded (an attached zip screened in turn)."""
    # imported on the first PDF read as bytes: pypdf costs 0.11 CPU-s to import (corpus/ingest/extract.py)
    from pypdf import PasswordType, PdfReader
    from pypdf.generic import IndirectObject, StreamObject

    try:
        reader = PdfReader(source, strict=False)
        if reader.is_encrypted and reader.decrypt("") == PasswordType.NOT_DECRYPTED:
            raise _refused(rel, "it is encrypted")
        numbered = {(number, generation) for generation, table in reader.xref.items() for number in table}
        numbered |= {(number, 0) for number in reader.xref_objStm}
        for number, generation in sorted(numbered):
            stream = reader.get_object(IndirectObject(number, generation, reader))
            if not isinstance(stream, StreamObject):
                continue
            data = stream.get_data()
            budget[0] -= len(data)
            if budget[0] < 0:
                raise _refused(rel, f"over {MAX_SCREENED_BYTES // 2**20} MiB decoded")
            for start in range(0, max(len(data), 1), _CHUNK):
                _screen_bytes(engine, rel, data[max(0, start - files.LIVE_CONTEXT) : start + _CHUNK])
            if data.startswith(ZIP_MAGIC) and depth < MAX_DEPTH:
                _screen_zip(engine, rel, io.BytesIO(data), budget, depth + 1)
    except errors.Dir2mcpError:
        raise
    # pypdf raises a wide and version-dependent set of exceptions (and
    # RecursionError on cyclic trees) for broken files (corpus/ingest/extract.py)
    except Exception:
        raise _refused(rel, "it cannot be read") from None


def _screen_part(
    engine: ExclusionEngine, rel: str, container: zipfile.ZipFile, info: zipfile.ZipInfo, budget: list[int]
) -> bytes | None:
    """Screen one part as it decompresses, with :data:`files.LIVE_CONTEXT`
    carried across chunks; its bytes when it is itself a zip (to screen in turn)."""
    tail, read, held = b"", 0, bytearray()
    nested: bool | None = None
    with container.open(info) as part:
        while chunk := part.read(_CHUNK):
            read += len(chunk)
            budget[0] -= len(chunk)
            if budget[0] < 0:
                raise _refused(rel, f"over {MAX_SCREENED_BYTES // 2**20} MiB decompressed")
            if read > _CHUNK and read > MAX_RATIO * max(info.compress_size, 1):
                raise _refused(rel, f"a part compressed more than {MAX_RATIO} to 1")
            if nested is None:
                nested = chunk.startswith(ZIP_MAGIC)
            if nested:
                if read > MAX_NESTED_BYTES:
                    raise _refused(rel, f"a zip inside it over {MAX_NESTED_BYTES // 2**20} MiB")
                held += chunk
            window = tail + chunk
            _screen_bytes(engine, rel, window)
            tail = window[-files.LIVE_CONTEXT :]
    return bytes(held) if nested else None


def _screen_bytes(engine: ExclusionEngine, rel: str, data: bytes) -> None:
    """As Latin-1 (every byte one character) and without NULs (UTF-16 text)."""
    files.screen(engine, rel, data.decode("latin-1"))
    if b"\x00" in data:
        files.screen(engine, rel, data.replace(b"\x00", b"").decode("latin-1"))
