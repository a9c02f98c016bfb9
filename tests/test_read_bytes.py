"""dir2mcp.read_bytes (issue #32 item 5, seed 002): byte ranges as text or
base64, and an image file as MCP image content.

First through the tool table on a real index (every case, schema included),
then over MCP HTTP and the REST mirror of a real ``up`` served by daphne
for the cases that matter at the edge: content items, errors and the cap.
"""

from __future__ import annotations

import base64
import functools
import io
import os
import random

import httpx
import pytest
from PIL import Image

from corpus.navigation import images, reads
from kernel import errors
from kernel.config import build_config
from mcp_gateway import context, tools
from tests.mcp_http import Server, base_env
from tests.mcp_http import index as reindex
from tests.support import TLS, wait_until
from tests.test_mcp_client import start_up
from tests.test_stdio import Raw, command

TEXT = "plain words\nsecond line\n"
ACCENTS = "h\u00e9llo w\u00f6rld \U0001f600 end\n"  # é and ö take 2 bytes, the emoji 4
BLOB = bytes(range(256)) * 4
SECRET_LINE = "aws_key = AKIAIOSFODNN7EXAMPLE\n"


@functools.cache
def png(size=(40, 30), color=(200, 30, 30)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, "PNG")
    return buffer.getvalue()


@functools.cache
def noise(size: tuple[int, int], mode: str, fmt: str) -> bytes:
    """An image of random pixels: it does not compress, so it is as large as its pixels."""
    channels = {"RGB": 3, "RGBA": 4, "1": 1 / 8}[mode]
    data = random.Random(7).randbytes(int(size[0] * size[1] * channels))
    buffer = io.BytesIO()
    Image.frombytes(mode, size, data).save(buffer, fmt)
    return buffer.getvalue()


@functools.cache
def rotated_jpeg() -> bytes:
    """A landscape photo over the cap whose EXIF says: turn it upright (portrait)."""
    image = Image.frombytes("RGB", (1600, 1200), random.Random(1).randbytes(1600 * 1200 * 3))
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 degrees clockwise to view
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=95, exif=exif)
    return buffer.getvalue()


def tiff() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (20, 10), (0, 90, 200)).save(buffer, "TIFF")
    return buffer.getvalue()


def decoded(item: dict) -> Image.Image:
    image = Image.open(io.BytesIO(base64.b64decode(item["data"])))
    image.load()
    return image


# -- through the tool table, on a real index ------------------------------------------


@pytest.fixture
def call(index, corpus_dir, state):
    """``call(arguments)``: the CallToolResult of dir2mcp.read_bytes, as every surface runs it."""
    os.symlink("/etc/hostname", corpus_dir / "escape.txt")
    index(
        {
            "notes.txt": TEXT,
            "accents.txt": ACCENTS,
            "latin1.txt": "caf\u00e9 cr\u00e8me\n".encode("latin-1"),
            "blob.bin": BLOB,
            "big.log": "".join(f"line {n:06d}\n" for n in range(20_000)),  # 240,000 bytes
            "pic.png": png(),
            "scan.tiff": tiff(),
            "photo.jpg": rotated_jpeg(),  # 2.2 MB
            "noise.png": noise((1600, 1200), "RGB", "PNG"),  # 5.8 MB
            "clear.png": noise((700, 600), "RGBA", "PNG"),  # 1.7 MB, with transparency
            "huge.png": noise((8000, 6000), "1", "PNG"),  # 48 MP, 6 MB
            "tall.png": png((20, 2_100_000), (0, 0, 0)),  # 42 MP in a few KB: a bomb for the client
            "fake.png": "not an image at all\n",
            "keys.txt": "config\n" + SECRET_LINE,
            ".env": "TOKEN=1\n",
        }
    )
    config = build_config({"embed": {"provider": "none"}, "chat": {"provider": "none"}}, {}, {})
    ctx = context.build(root=corpus_dir, state=state, config=config, auth_spec="none")
    tool = tools.table()["dir2mcp.read_bytes"]
    return lambda arguments: tools.run(tool, arguments, tools.Call(ctx))


def ok(result: dict) -> dict:
    assert not result.get("isError"), result["content"][0]["text"]
    return result["structuredContent"]


def code_of(result: dict) -> str:
    assert result.get("isError") is True, result
    return result["structuredContent"]["error"]["code"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        pytest.param(
            {"rel_path": "notes.txt"},
            {"format": "text", "content": TEXT, "offset": 0, "length": 24, "eof": True, "next_offset": 24},
            id="text-whole-file",
        ),
        pytest.param(
            {"rel_path": "notes.txt", "offset": 6, "length": 9, "format": "text"},
            {"content": "words\nsec", "offset": 6, "length": 9, "eof": False, "next_offset": 15},
            id="text-range",
        ),
        pytest.param(  # byte 2 is inside é (bytes 1-2), byte 9 inside ö (8-9)
            {"rel_path": "accents.txt", "offset": 2, "length": 7},
            {"content": "\u00e9llo w", "offset": 1, "length": 7, "next_offset": 8, "lossy": False},
            id="utf8-boundaries-move-to-whole-characters",
        ),
        pytest.param(  # the emoji is bytes 14-17: one byte of it is the whole character
            {"rel_path": "accents.txt", "offset": 15, "length": 1},
            {"content": "\U0001f600", "offset": 14, "length": 4, "next_offset": 18},
            id="utf8-range-inside-one-character",
        ),
        pytest.param(
            {"rel_path": "latin1.txt", "format": "text"},
            {"content": "caf\ufffd cr\ufffdme\n", "lossy": True},
            id="text-that-is-not-utf8-is-lossy",
        ),
        pytest.param(
            {"rel_path": "blob.bin", "offset": 250, "length": 10},
            {"format": "base64", "content": base64.b64encode(BLOB[250:260]).decode(), "length": 10},
            id="base64-of-a-binary",
        ),
        pytest.param(
            {"rel_path": "notes.txt", "format": "base64", "offset": 0, "length": 5},
            {"format": "base64", "content": base64.b64encode(b"plain").decode(), "mime_type": "text/plain"},
            id="base64-of-text",
        ),
        pytest.param(
            {"rel_path": "notes.txt", "offset": 1000},
            {"content": "", "offset": 1000, "length": 0, "eof": True, "next_offset": 1000},
            id="offset-past-eof",
        ),
        pytest.param(
            {"rel_path": "blob.bin", "offset": 1024, "format": "base64"},
            {"content": "", "length": 0, "eof": True, "size_bytes": 1024},
            id="offset-at-eof",
        ),
        pytest.param(
            {"rel_path": "big.log", "max_tokens": 200_000},
            {"offset": 0, "length": reads.DEFAULT_LENGTH, "eof": False, "size_bytes": 240_000},
            id="default-length-is-64-KiB-and-says-there-is-more",
        ),
        pytest.param(
            {"rel_path": "big.log"},
            {"offset": 0, "eof": False, "size_bytes": 240_000, "budget": {"truncated": True}},
            id="the-default-budget-shortens-the-default-length",
        ),
        pytest.param(
            {"rel_path": "pic.png", "offset": 0, "length": 8},
            {"format": "base64", "content": base64.b64encode(b"\x89PNG\r\n\x1a\n").decode()},
            id="auto-with-a-range-on-an-image-is-base64",
        ),
    ],
)
def test_a_range_returns_exactly_those_bytes(call, arguments, expected):
    result = ok(call(arguments))
    if "budget" in expected:  # 64 KiB of text, in the text and the structured result, is over 16,000 tokens
        assert result["budget"]["truncated"] and result["length"] < reads.DEFAULT_LENGTH
        expected = {key: value for key, value in expected.items() if key != "budget"}
    assert {key: result[key] for key in expected} == expected
    assert result["rel_path"] == arguments["rel_path"]
    assert result["next_offset"] == result["offset"] + result["length"]


@pytest.mark.django_db
def test_following_next_offset_reads_the_file_once_whole(call, corpus_dir):
    pieces, offset = [], 0
    while True:
        result = ok(call({"rel_path": "big.log", "offset": offset, "length": 50_000}))
        pieces.append(result["content"])
        offset = result["next_offset"]
        if result["eof"]:
            break
    assert "".join(pieces) == (corpus_dir / "big.log").read_text() and len(pieces) >= 5  # 64 KiB or what fits


@pytest.mark.django_db
def test_text_ranges_cut_anywhere_join_to_the_text(call):
    """Every cut of a multi-byte text, read on from next_offset, gives each character once."""
    data = ACCENTS.encode()
    for length in range(1, 6):
        pieces, offset = [], 0
        while offset < len(data):
            result = ok(call({"rel_path": "accents.txt", "offset": offset, "length": length}))
            assert result["offset"] == offset and result["length"] <= max(length, 4)
            pieces.append(result["content"])
            offset = result["next_offset"]
        assert "".join(pieces) == ACCENTS, length


@pytest.mark.django_db
def test_an_image_is_image_content_with_its_mime_type(call, corpus_dir):
    result = call({"rel_path": "pic.png"})
    structured = ok(result)
    text, item = result["content"]
    assert item["type"] == "image" and item["mimeType"] == "image/png"
    assert base64.b64decode(item["data"]) == (corpus_dir / "pic.png").read_bytes()  # as it is
    assert decoded(item).size == (40, 30)
    assert "data" not in structured and "_image_data" not in structured
    assert structured["format"] == "image" and structured["mime_type"] == "image/png"
    assert structured["image"] == {
        "width": 40,
        "height": 30,
        "data_bytes": len(png()),
        "downscaled": False,
        "recompressed": False,
        "source_mime_type": "image/png",
        "source_width": 40,
        "source_height": 30,
    }
    assert "image/png 40x30" in text["text"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("rel_path", "mime", "mode"),
    [
        pytest.param("noise.png", "image/jpeg", "RGB", id="opaque-as-jpeg"),
        pytest.param("clear.png", "image/png", "RGBA", id="transparent-as-png"),
    ],
)
def test_an_image_over_the_cap_is_scaled_down_to_fit(call, corpus_dir, rel_path, mime, mode):
    assert (corpus_dir / rel_path).stat().st_size > images.MAX_IMAGE_BYTES
    result = call({"rel_path": rel_path, "format": "image"})
    structured, item = ok(result), result["content"][1]
    assert item["mimeType"] == mime and len(base64.b64decode(item["data"])) <= images.MAX_IMAGE_BYTES
    image = decoded(item)
    assert image.mode == mode and image.size == (structured["image"]["width"], structured["image"]["height"])
    assert structured["image"]["downscaled"] is True and structured["image"]["recompressed"] is True
    assert image.width < structured["image"]["source_width"]
    assert "encoded again" in result["content"][0]["text"]


@pytest.mark.django_db
def test_a_photo_encoded_again_is_turned_upright_as_its_exif_says(call):
    result = call({"rel_path": "photo.jpg"})
    image, size = ok(result)["image"], decoded(result["content"][1]).size
    assert size == (image["width"], image["height"]) and size[1] > size[0]  # portrait now
    assert (image["source_width"], image["source_height"]) == (1600, 1200)


@pytest.mark.django_db
def test_a_tiff_is_sent_in_a_format_clients_show(call):
    result = call({"rel_path": "scan.tiff"})
    structured, item = ok(result), result["content"][1]
    assert item["mimeType"] == "image/jpeg" and decoded(item).size == (20, 10)
    assert structured["image"]["source_mime_type"] == "image/tiff"
    assert (structured["image"]["recompressed"], structured["image"]["downscaled"]) == (True, False)


BAD_READS = [
    ("over-pixel-cap", {"rel_path": "huge.png"}, errors.FILE_TOO_LARGE, "40000000-pixel"),
    ("small-file-over-pixel-cap", {"rel_path": "tall.png"}, errors.FILE_TOO_LARGE, "40000000-pixel"),
    ("binary-as-text", {"rel_path": "blob.bin", "format": "text"}, errors.DOC_TYPE_UNSUPPORTED, "base64"),
    (
        "text-as-image",
        {"rel_path": "notes.txt", "format": "image"},
        errors.DOC_TYPE_UNSUPPORTED,
        "not an image",
    ),
    ("not-an-image", {"rel_path": "fake.png", "format": "image"}, errors.DOC_TYPE_UNSUPPORTED, "base64"),
    ("image-offset", {"rel_path": "pic.png", "format": "image", "offset": 0}, errors.INVALID_FIELD, "whole"),
    ("image-length", {"rel_path": "pic.png", "format": "image", "length": 9}, errors.INVALID_FIELD, "whole"),
    ("negative", {"rel_path": "notes.txt", "offset": -1}, errors.INVALID_RANGE, "offset"),
    ("absurd", {"rel_path": "notes.txt", "offset": 2**60}, errors.INVALID_RANGE, "offset"),
    ("string", {"rel_path": "notes.txt", "offset": "3"}, errors.INVALID_FIELD, "offset"),
    ("length-0", {"rel_path": "notes.txt", "length": 0}, errors.INVALID_RANGE, "length"),
    (
        "length-over-1-MiB",
        {"rel_path": "notes.txt", "length": reads.MAX_LENGTH + 1},
        errors.INVALID_RANGE,
        "length",
    ),
    ("format", {"rel_path": "notes.txt", "format": "hex"}, errors.INVALID_FIELD, "format"),
    ("excluded", {"rel_path": ".env"}, errors.FORBIDDEN, ".env"),
    ("secret", {"rel_path": "keys.txt", "format": "base64"}, errors.FORBIDDEN, "secret"),
    ("outside-root", {"rel_path": "../outside.txt"}, errors.PATH_OUTSIDE_ROOT, ""),
    ("absolute", {"rel_path": "/etc/hostname"}, errors.PATH_OUTSIDE_ROOT, ""),
    ("symlink-escaping", {"rel_path": "escape.txt"}, errors.FORBIDDEN, ""),
    ("10000-char-path", {"rel_path": "a" * 10_000}, errors.INVALID_FIELD, "4096"),
    ("missing", {"rel_path": "missing.txt"}, errors.FILE_NOT_FOUND, ""),
    ("no-path", {}, errors.MISSING_FIELD, "rel_path"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("arguments", "code", "words"), [pytest.param(*row[1:], id=row[0]) for row in BAD_READS]
)
def test_bad_reads_get_their_error_code(call, arguments, code, words):
    result = call(arguments)
    assert code_of(result) == code
    assert words in result["structuredContent"]["error"]["message"]


@pytest.mark.django_db
def test_a_range_next_to_a_secret_is_refused(call, corpus_dir):
    """The bytes on each side of a range are screened: a range that stops
    inside a key, or just before it, does not leak its start."""
    head = "x" * 20_000 + "\n"  # past the 16 KiB screened on each side (files.LIVE_CONTEXT)
    (corpus_dir / "later.txt").write_text(head + SECRET_LINE)  # written after indexing
    key_at = len(head) + SECRET_LINE.index("AKIA")
    for offset, length in [(0, len(head)), (0, key_at + 6), (key_at + 2, 8)]:
        refused = call({"rel_path": "later.txt", "offset": offset, "length": length})
        assert code_of(refused) == errors.FORBIDDEN, (offset, length)
    assert ok(call({"rel_path": "later.txt", "offset": 0, "length": 500}))["content"] == "x" * 500


@pytest.mark.django_db
def test_a_secret_in_utf16_is_refused_as_base64(call, corpus_dir):
    (corpus_dir / "wide.txt").write_bytes(SECRET_LINE.encode("utf-16"))
    assert code_of(call({"rel_path": "wide.txt", "format": "base64"})) == errors.FORBIDDEN
    assert code_of(call({"rel_path": "wide.txt", "format": "base64", "offset": 5})) == errors.FORBIDDEN


# -- over MCP HTTP and REST, on a real `up` ------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root, outside = tmp_path_factory.mktemp("corpus"), tmp_path_factory.mktemp("outside")
    files = {
        "notes.txt": TEXT.encode(),
        "accents.txt": ACCENTS.encode(),
        "blob.bin": BLOB,
        "pic.png": png(),
        "noise.png": noise((1600, 1200), "RGB", "PNG"),
        "keys.txt": ("config\n" + SECRET_LINE).encode(),
        ".env": b"TOKEN=1\n",
    }
    for rel, data in files.items():
        (root / rel).write_bytes(data)
    (outside / "elsewhere.txt").write_text("outside the root\n")
    (root / "escape.txt").symlink_to(outside / "elsewhere.txt")
    proc, connection, _ = start_up(root)
    token = (root / ".dir2mcp" / "secret.token").read_text().strip()
    server = Server(root, connection["url"], token, proc)
    session = server.initialize()
    wait_until(lambda: indexed(server, session), timeout=60, message="the first index")
    yield server, session
    proc.terminate()
    _, err = proc.communicate(timeout=30)
    assert "Traceback" not in err, err[-2000:]


def indexed(server: Server, session: str) -> bool:
    stats = server.call(session, "dir2mcp.stats", {})["structuredContent"]
    return bool(stats["indexing"]["job_id"]) and not stats["indexing"]["running"]


def rest(server: Server, params: dict) -> httpx.Response:
    return httpx.get(
        f"{server.base}/api/v1/files/bytes",
        params=params,
        headers={"Authorization": f"Bearer {server.token}"},
        timeout=30,
        verify=TLS,
    )


EDGE_ERRORS = [
    ("binary-text", {"rel_path": "blob.bin", "format": "text"}, errors.DOC_TYPE_UNSUPPORTED, 400),
    ("image-with-offset", {"rel_path": "pic.png", "format": "image", "offset": 3}, errors.INVALID_FIELD, 400),
    ("negative-offset", {"rel_path": "notes.txt", "offset": -5}, errors.INVALID_RANGE, 400),
    ("length-cap", {"rel_path": "notes.txt", "length": 2**20 + 1}, errors.INVALID_RANGE, 400),
    ("excluded", {"rel_path": ".env"}, errors.FORBIDDEN, 403),
    ("secret-bearing", {"rel_path": "keys.txt"}, errors.FORBIDDEN, 403),
    ("outside-root", {"rel_path": "../elsewhere.txt"}, errors.PATH_OUTSIDE_ROOT, 403),
    ("symlink-escaping", {"rel_path": "escape.txt"}, errors.FORBIDDEN, 403),
    ("10000-char-path", {"rel_path": "d" * 10_000}, errors.INVALID_FIELD, 400),
]


@pytest.mark.parametrize(
    ("arguments", "code", "status"), [pytest.param(*row[1:], id=row[0]) for row in EDGE_ERRORS]
)
def test_mcp_and_rest_refuse_alike(served, arguments, code, status):
    server, session = served
    result = server.call(session, "dir2mcp.read_bytes", arguments)
    assert result["isError"] is True and result["structuredContent"]["error"]["code"] == code
    response = rest(server, arguments)
    assert (response.status_code, response.json()["error"]["code"]) == (status, code)


def test_mcp_and_rest_read_the_same_range(served):
    server, session = served
    arguments = {"rel_path": "accents.txt", "offset": 2, "length": 7}
    result = server.call(session, "dir2mcp.read_bytes", arguments)
    assert result["structuredContent"]["content"] == "\u00e9llo w"
    assert result["content"][0]["text"].endswith("\n\n\u00e9llo w")
    assert rest(server, arguments).json() == result["structuredContent"]
    past = server.call(session, "dir2mcp.read_bytes", {"rel_path": "blob.bin", "offset": 5000})
    assert (past["structuredContent"]["content"], past["structuredContent"]["eof"]) == ("", True)
    binary = rest(server, {"rel_path": "blob.bin", "offset": 16, "length": 32}).json()
    assert base64.b64decode(binary["content"]) == BLOB[16:48] and binary["format"] == "base64"


@pytest.mark.parametrize(("rel_path", "mime"), [("pic.png", "image/png"), ("noise.png", "image/jpeg")])
def test_mcp_answers_an_image_as_image_content_and_rest_as_data(served, rel_path, mime):
    server, session = served
    result = server.call(session, "dir2mcp.read_bytes", {"rel_path": rel_path})
    assert [item["type"] for item in result["content"]] == ["text", "image"]
    item, structured = result["content"][1], result["structuredContent"]
    assert item["mimeType"] == mime == structured["mime_type"] and "data" not in structured
    assert len(base64.b64decode(item["data"])) == structured["image"]["data_bytes"] <= images.MAX_IMAGE_BYTES
    assert decoded(item).size == (structured["image"]["width"], structured["image"]["height"])
    answer = rest(server, {"rel_path": rel_path, "format": "image"}).json()
    assert decoded(answer).size == decoded(item).size and answer["mime_type"] == mime
    assert {k: v for k, v in answer.items() if k != "data"} == structured


def test_stdio_answers_an_image_and_a_range_as_http_does(tmp_path):
    root = tmp_path / "corpus"
    root.mkdir()
    (root / "pic.png").write_bytes(png())
    (root / "accents.txt").write_text(ACCENTS)
    reindex(root, base_env(DIR2MCP_ROOT=str(root)))
    server = Raw(command(root, "--no-index"))
    try:
        server.initialize()
        image = server.call(1, "dir2mcp.read_bytes", {"rel_path": "pic.png"})
        assert [item["type"] for item in image["content"]] == ["text", "image"]
        assert base64.b64decode(image["content"][1]["data"]) == png()
        text = server.call(2, "dir2mcp.read_bytes", {"rel_path": "accents.txt", "offset": 2, "length": 7})
        assert (text["structuredContent"]["content"], text["structuredContent"]["offset"]) == (
            "\u00e9llo w",
            1,
        )
        assert server.close() == 0
    finally:
        server.kill()
