"""Type classification: extension table, magic bytes, binary heuristic."""

from __future__ import annotations

import gzip
import io
import struct
import tarfile
import wave
import zipfile

import pytest

from corpus.ingest.classify import DOC_TYPES, classify, index_kind_for, sniff_binary


def _zip_bytes() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        archive.writestr("a.txt", "hello")
    return buf.getvalue()


def _tar_bytes() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as archive:
        info = tarfile.TarInfo("a.txt")
        info.size = 5
        archive.addfile(info, io.BytesIO(b"hello"))
    return buf.getvalue()


def _wav_bytes() -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(8000)
        out.writeframes(b"\x00\x00" * 800)
    return buf.getvalue()


PNG = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + b"\x00" * 17
JPEG = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01"
ELF = b"\x7fELF\x02\x01\x01" + b"\x00" * 9 + bytes(range(256))


@pytest.mark.parametrize(
    ("name", "head", "expected"),
    [
        pytest.param("main.py", b"import os\n", "code", id="python"),
        pytest.param("lib.rs", b"fn main() {}\n", "code", id="rust"),
        pytest.param("App.TSX", b"export {}\n", "code", id="uppercase-extension"),
        pytest.param("Makefile", b"all:\n\ttrue\n", "code", id="makefile-by-filename"),
        pytest.param("Dockerfile", b"FROM python\n", "code", id="dockerfile-by-filename"),
        pytest.param("Dockerfile.dev", b"FROM python\n", "code", id="dockerfile-variant"),
        pytest.param("CMakeLists.txt", b"project(x)\n", "code", id="cmakelists-beats-txt"),
        pytest.param("src/deep/path/util.go", b"package x\n", "code", id="path-with-dirs"),
        pytest.param("README.md", b"# Title\n", "md", id="markdown"),
        pytest.param("notes.txt", b"plain\n", "text", id="txt"),
        pytest.param("guide.rst", b"Title\n=====\n", "text", id="rst"),
        pytest.param("app.log", b"INFO start\n", "text", id="log"),
        pytest.param("config.yaml", b"a: 1\n", "data", id="yaml"),
        pytest.param("rows.csv", b"a,b\n1,2\n", "data", id="csv"),
        pytest.param(".env.example", b"A=1\n", "data", id="env-like"),
        pytest.param("index.html", b"<html></html>", "html", id="html"),
        pytest.param("page.xhtml", b"<html/>", "html", id="xhtml"),
        pytest.param("paper.pdf", b"%PDF-1.7\n", "pdf", id="pdf-extension"),
        pytest.param("photo.jpeg", JPEG, "image", id="jpeg-extension"),
        pytest.param("voice.m4a", b"\x00\x00\x00\x20ftypM4A ", "audio", id="m4a-extension"),
        pytest.param("bundle.tar.gz", gzip.compress(b"x"), "archive", id="tar-gz-compound"),
        pytest.param("report.docx", _zip_bytes(), "office", id="docx-is-office-not-archive"),
        pytest.param("sheet.xls", b"\xd0\xcf\x11\xe0", "office", id="legacy-office"),
        pytest.param("module.pyc", b"\x6f\x0d\x0d\x0a\x00\x00", "binary_ignored", id="compiled-python"),
    ],
)
def test_classify_uses_extension_first(name: str, head: bytes, expected: str) -> None:
    assert classify(name, head) == expected


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        pytest.param(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n", "pdf", id="pdf"),
        pytest.param(PNG, "image", id="png"),
        pytest.param(JPEG, "image", id="jpeg"),
        pytest.param(b"GIF89a\x01\x00\x01\x00", "image", id="gif"),
        pytest.param(b"RIFF\x24\x00\x00\x00WEBPVP8 ", "image", id="webp"),
        pytest.param(_wav_bytes(), "audio", id="wav"),
        pytest.param(b"ID3\x04\x00\x00\x00\x00\x00\x00", "audio", id="mp3-id3"),
        pytest.param(b"\xff\xfb\x90\x64\x00", "audio", id="mp3-frame-sync"),
        pytest.param(b"fLaC\x00\x00\x00\x22", "audio", id="flac"),
        pytest.param(b"OggS\x00\x02", "audio", id="ogg"),
        pytest.param(_zip_bytes(), "archive", id="zip"),
        pytest.param(_tar_bytes(), "archive", id="tar-ustar"),
        pytest.param(gzip.compress(b"hello"), "archive", id="gzip"),
        pytest.param(ELF, "binary_ignored", id="elf-binary"),
        pytest.param(b"#!/usr/bin/env bash\necho hi\n", "code", id="shebang-script"),
        pytest.param(b"Just some words in a file.\n", "text", id="plain-text"),
        pytest.param(b"", "text", id="empty-file"),
    ],
)
def test_classify_sniffs_content_when_extension_is_unknown(head: bytes, expected: str) -> None:
    assert classify("mystery", head) == expected
    assert classify("mystery.unknownext", head) == expected


def test_textual_extension_with_binary_content_is_ignored() -> None:
    assert classify("notes.txt", ELF) == "binary_ignored"
    assert classify("data.json", b'{"a": 1}\x00\x00\x00') == "binary_ignored"


def test_utf16_text_with_bom_keeps_its_extension_type() -> None:
    head = "def f():\n    return 1\n".encode("utf-16")
    assert classify("f.py", head) == "code"
    assert classify("notes", head) == "text"


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        pytest.param(b"hello world\n", False, id="ascii"),
        pytest.param("café naïve\n".encode(), False, id="utf8"),
        pytest.param("café".encode("cp1252"), False, id="cp1252"),
        pytest.param(b"tab\tseparated\r\nlines\f", False, id="tab-crlf-formfeed"),
        pytest.param(b"\x1b[31mred\x1b[0m log line\n", False, id="ansi-colours"),
        pytest.param("hello".encode("utf-16"), False, id="utf16-le-bom"),
        pytest.param(b"\xfe\xff" + "hello".encode("utf-16-be"), False, id="utf16-be-bom"),
        pytest.param("hello".encode("utf-32"), False, id="utf32-bom"),
        pytest.param(b"", False, id="empty"),
        pytest.param(b"text then a NUL\x00", True, id="nul-byte"),
        pytest.param("hello".encode("utf-16-le"), True, id="utf16-without-bom"),
        pytest.param(bytes(range(1, 32)) * 4, True, id="control-bytes"),
        pytest.param(b"a" * 9000 + b"\x00", False, id="nul-after-sniff-window"),
    ],
)
def test_sniff_binary(head: bytes, expected: bool) -> None:
    assert sniff_binary(head) is expected


@pytest.mark.parametrize(
    ("doc_type", "name", "expected"),
    [
        pytest.param("code", "main.go", "code", id="code"),
        pytest.param("data", "settings.json", "code", id="json-config"),
        pytest.param("data", "deploy/values.YAML", "code", id="yaml-config-uppercase"),
        pytest.param("data", "pyproject.toml", "code", id="toml-config"),
        pytest.param("data", "setup.cfg", "code", id="cfg-config"),
        pytest.param("data", "pom.xml", "code", id="xml-config"),
        pytest.param("data", "rows.csv", "text", id="csv-is-text"),
        pytest.param("data", "events.jsonl", "text", id="jsonl-is-text"),
        pytest.param("md", "README.md", "text", id="markdown"),
        pytest.param("html", "index.html", "text", id="html"),
        pytest.param("pdf", "paper.pdf", "text", id="pdf"),
        pytest.param("text", "notes.txt", "text", id="text"),
    ],
)
def test_index_kind_for(doc_type: str, name: str, expected: str) -> None:
    assert index_kind_for(doc_type, name) == expected


def test_classify_only_returns_known_doc_types() -> None:
    heads = [b"", PNG, ELF, b"text", _zip_bytes()]
    names = ["a", "a.py", "a.zip", "a.docx", "a.weird", ".env", "a.tar.xz"]
    assert {classify(name, head) for name in names for head in heads} <= set(DOC_TYPES)
