"""Hostile round of 2026-11-29, session 22: every field and header as hostile,
against a real ``up`` (daphne, the gate, the connection bounds); see
docs/security.md, "Hostile round, 2026-11-29 (session 22)". Each test shows
a way in that was open before its fix.

Two hosts are told apart as the documented proxy tells them: behind it
(``DJANGO_BEHIND_PROXY``), by the ``X-Real-IP`` it sets.
"""

from __future__ import annotations

import base64
import io
import itertools
import os
import tarfile
import time
import zipfile
import zlib

import httpx
import pytest

from corpus import patterns
from kernel import errors
from tests.fakes.mistral import FakeMistral
from tests.mcp_http import Server, write_corpus
from tests.support import TLS, wait_until
from tests.test_hostile_clients import CHAT, WAIT, answer, send, stateless, token_of, up_with_two_call_slots
from tests.test_hostile_patterns import Call
from tests.test_office import make_docx, make_xlsx

pytestmark = pytest.mark.slow

PROXY = {"DJANGO_BEHIND_PROXY": "1", "DJANGO_SECRET_KEY": "a-test-key-" + "x" * 50}
HOSTILE, OTHER = "192.0.2.7", "198.51.100.9"  # two hosts, as nginx's X-Real-IP names them


@pytest.fixture
def fake():
    fake = FakeMistral().start()
    yield fake
    fake.close()  # releases the held chat requests


class Host(Server):
    """A client of ``up`` from one address, as the proxy passes it on."""

    address: str = ""

    def headers(self, **extra: str) -> dict[str, str]:
        return super().headers(**{"X-Real-IP": self.address, **extra})


def from_host(srv: Server, address: str) -> Host:
    host = Host(srv.root, srv.url, srv.token, srv.proc)
    host.address = address
    return host


# -- who holds the call slots -------------------------------------------------------


def test_many_sessions_of_one_host_never_take_every_call_slot(tmp_path, running, fake):
    """Each MCP session was a client with a share of its own: one host that
    opened ``max_concurrent_calls / max_calls_per_client`` sessions held every
    slot, and every other host was refused SERVER_BUSY until it let go."""
    root = tmp_path / "corpus"
    write_corpus(root)
    env = {
        **PROXY,
        "MISTRAL_API_KEY": fake.API_KEY,
        "DIR2MCP_MISTRAL__BASE_URL": fake.url,
        "DIR2MCP_CHAT__PROVIDER": "mistral",
        "DIR2MCP_SERVER__MAX_CONCURRENT_CALLS": "6",
        "DIR2MCP_SERVER__MAX_CALLS_PER_CLIENT": "2",
        "DIR2MCP_SERVER__CALL_TIMEOUT": "30s",  # the held asks end at it
    }
    up = running("--dir", str(root), "--json", env=env)
    up.event("scan_progress", lambda data: data.get("running") is False)
    srv = Server(root, up.url(), token_of(root), up.proc)
    hostile, other = from_host(srv, HOSTILE), from_host(srv, OTHER)
    fake.delay_next(600, count=20)
    ask = {"name": "dir2mcp.ask", "arguments": {"question": "what does the loader read?"}}
    ids = itertools.count(1)

    def ask_in(host: Host, session: str):
        # each call its own id: a second call under an id in flight in its
        # session is refused -32600 (session 31), not held
        body = {"jsonrpc": "2.0", "id": next(ids), "method": "tools/call", "params": ask}
        return send(
            host.url,
            "/mcp",
            body,
            host.headers(**{"MCP-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"}),
        )

    # The hostile host fills the share of two sessions: four of six slots.
    held = [
        ask_in(hostile, session) for session in (hostile.initialize(), hostile.initialize()) for _ in range(2)
    ]
    wait_until(lambda: len(fake.requests_to(CHAT)) >= 4, timeout=WAIT, message="the asks reach the provider")
    # A third session of the same host would take the last two: refused.
    third = hostile.initialize()
    status, refused = answer(ask_in(hostile, third))
    assert refused.get("error", {}).get("data", {}).get("code") == errors.SERVER_BUSY, (status, refused)
    # Another host is admitted.
    held += [ask_in(other, other.initialize())]
    wait_until(lambda: len(fake.requests_to(CHAT)) >= 5, timeout=WAIT, message="the other host's ask runs")
    for conn in held:  # answered at their deadline
        answer(conn)


def test_the_rest_mirror_and_stateless_calls_of_one_host_hold_one_share(tmp_path, running, fake):
    """Calls without a session (the REST mirror, 2026-07-28 stateless MCP)
    were admitted per surface: a host that switched surfaces held two shares."""
    up, root = up_with_two_call_slots(tmp_path, running, fake, "30s")
    url = up.url()
    auth = {"Authorization": f"Bearer {token_of(root)}"}
    question = {"question": "what does the loader read?"}
    fake.delay_next(600, count=8)

    rest_headers = {**auth, "Content-Type": "application/json", "Accept": "application/json"}
    held = [send(url, "/api/v1/ask", question, rest_headers) for _ in range(2)]
    wait_until(lambda: len(fake.requests_to(CHAT)) >= 2, timeout=WAIT, message="the asks reach the provider")
    call, mcp_headers = stateless("tools/call", {"name": "dir2mcp.ask", "arguments": question})
    status, body = answer(send(url, "/mcp", call, {**mcp_headers, **auth}))
    assert body.get("error", {}).get("data", {}).get("code") == errors.SERVER_BUSY, (status, body)
    assert len(fake.requests_to(CHAT)) == 2  # the refused call never reached the provider
    for conn in held:
        answer(conn)


# -- the regex worker's turns ------------------------------------------------------


def test_hosts_take_turns_at_the_regex_worker_before_their_sessions_do():
    """Turns went to the waiting session that had one least recently, each
    session a client: a host with many sessions had a turn for each of them
    to every one of another host's. (On a live ``up`` six such sessions kept
    another host's small finds within their budget, since every turn ends a
    quarter of its holder's time after another waits, but that host had one
    turn in seven of the worker's time, so a longer find was cut short six
    times as often.) Now the host that had a turn least recently goes first."""
    turns = patterns.Turns()
    a1, a2, a3, b = ("host-a", "sess_1"), ("host-a", "sess_2"), ("host-a", "sess_3"), ("host-b", "host-b")
    far = time.monotonic() + WAIT
    for who in (a2, a3, b, a1):  # the last turn of each: a2, a3, b, then a1's, which it holds
        assert turns.take(who, far)
        if who is not a1:
            turns.give_back()
    order: list[tuple[str, str]] = []

    def wait_for_turn(who: tuple[str, str]) -> None:
        assert turns.take(who, far)
        order.append(who)
        turns.give_back()

    waiting = []
    for count, who in enumerate((a2, a3, b), 1):  # in this order, each once the one before waits
        waiting.append(Call(wait_for_turn, who))
        wait_until(lambda n=count: len(turns.waiting) == n, timeout=WAIT, message="it waits")
    turns.give_back()  # a1's turn ends
    for call in waiting:
        call.value()
    # host-b had a turn less recently than host-a (a1's): it goes first; then
    # host-a's sessions, the one with the oldest turn first
    assert order == [b, a2, a3], order


# -- archives read as bytes ------------------------------------------------------------


def test_an_archive_is_never_served_as_its_bytes(tmp_path, running):
    """The exclusion rules judge an archive's members, and refused a member
    that was a ``.env`` or held a key; but the archive itself was served
    whole by ``read_bytes`` (MCP and REST) and as a ``resources/read`` blob,
    and the client unpacked the refused members from it."""
    root = tmp_path / "corpus"
    write_corpus(root)
    with zipfile.ZipFile(root / "backup.zip", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("readme.txt", "what the backup holds\n")
        archive.writestr("config/.env", "DB_PASSWORD=Sup3rSecretValue123\n")
        archive.writestr("keys.txt", "aws AKIAABCDEFGHIJKLMNOP here\n")
    with tarfile.open(root / "backup.tar.gz", "w:gz") as archive:
        data = b"aws AKIAABCDEFGHIJKLMNOP here\n"
        member = tarfile.TarInfo("keys.txt")
        member.size = len(data)
        archive.addfile(member, io.BytesIO(data))
    up = running("--dir", str(root), "--json")
    up.event("scan_progress", lambda data: data.get("running") is False)
    srv = Server(root, up.url(), token_of(root), up.proc)
    session = srv.initialize()
    answers = {}
    for name in ("backup.zip", "backup.tar.gz"):
        for fmt in ("auto", "base64"):
            result = srv.call(session, "dir2mcp.read_bytes", {"rel_path": name, "format": fmt})
            answers[(name, "read_bytes", fmt)] = result["structuredContent"].get("error", {}).get("code")
        ranged = srv.call(session, "dir2mcp.read_bytes", {"rel_path": name, "offset": 30, "length": 100})
        answers[(name, "read_bytes", "range")] = ranged["structuredContent"].get("error", {}).get("code")
        rest = httpx.get(
            f"{srv.base}/api/v1/files/bytes",
            params={"rel_path": name},
            headers={"Authorization": f"Bearer {srv.token}"},
            timeout=WAIT,
            verify=TLS,
        )
        answers[(name, "REST", "bytes")] = rest.json().get("error", {}).get("code")
        read = srv.post(
            {"jsonrpc": "2.0", "id": 2, "method": "resources/read", "params": {"uri": f"dir2mcp:///{name}"}},
            session=session,
        ).json()
        answers[(name, "resources/read", "whole")] = read.get("error", {}).get("data", {}).get("code")
    # the members the rules allow are still read, as before
    member = srv.call(session, "dir2mcp.open_file", {"rel_path": "backup.zip!/readme.txt"})
    assert "what the backup holds" in member["structuredContent"]["content"], member
    assert set(answers.values()) == {errors.FORBIDDEN}, answers


# -- long secrets cut by a range -------------------------------------------------------


def private_key() -> str:
    """An RSA-4096-sized PEM block (random material: only its shape matters)."""
    body = base64.encodebytes(os.urandom(2350)).decode()
    return f"-----BEGIN RSA PRIVATE KEY-----\n{body}-----END RSA PRIVATE KEY-----\n"


def test_a_range_inside_a_long_key_is_refused_however_far_from_its_start(tmp_path, running):
    """Ranges and slices were screened with 256 bytes on each side: enough
    for a token, not for a private key, whose rule anchors at its BEGIN line.
    A range in the middle of a key in a file the indexer never screens (a
    binary file, or any file under ``--no-index``) was served, and so was
    most of the key, range by range."""
    root = tmp_path / "corpus"
    write_corpus(root)
    key = private_key()
    far = "unrelated line of text\n" * 2000  # 46 KB: past any screen's reach
    head = b"\x00\x01\x02header\x00" * 4  # a binary file: never screened by the indexer
    (root / "keystore.bin").write_bytes(head + key.encode() + far.encode())
    (root / "deploy.txt").write_text("notes\n" + key + far)
    up = running("--dir", str(root), "--json", "--no-index")
    srv = Server(root, up.url(), token_of(root), up.proc)
    session = srv.initialize()
    start = len(head) + key.index("\n", 2000)  # a line well past the BEGIN line's 256-byte reach
    in_key = srv.call(
        session, "dir2mcp.read_bytes", {"rel_path": "keystore.bin", "offset": start, "length": 64}
    )
    middle_line = 1 + key[:2000].count("\n") + 1
    lines = {"rel_path": "deploy.txt", "start_line": middle_line, "end_line": middle_line + 2}
    in_text = srv.call(session, "dir2mcp.open_file", lines)
    size = (root / "keystore.bin").stat().st_size
    tail = srv.call(session, "dir2mcp.read_bytes", {"rel_path": "keystore.bin", "offset": size - 64})
    last = (root / "deploy.txt").read_text().count("\n")
    tail_lines = srv.call(session, "dir2mcp.open_file", {"rel_path": "deploy.txt", "start_line": last - 1})
    for refused in (in_key, in_text):
        assert refused["structuredContent"].get("error", {}).get("code") == errors.FORBIDDEN, refused
    assert "content" in tail["structuredContent"], tail  # far from the key: served
    assert "unrelated line" in tail_lines["structuredContent"]["content"], tail_lines


# -- documents that are zips ---------------------------------------------------------------


def with_part(document: bytes, name: str, data: bytes) -> bytes:
    """``document`` (a zip) with one more part."""
    out = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(document)) as source,
        zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zipped,
    ):
        for info in source.infolist():
            zipped.writestr(info, source.read(info))
        zipped.writestr(name, data)
    return out.getvalue()


def test_a_document_that_is_a_zip_is_served_as_bytes_only_once_its_parts_are_screened(tmp_path, running):
    """A .docx is a zip: the indexer screened the text its extractor took
    out, and ``read_bytes`` served the container, whose compressed parts the
    byte screen never saw: an embedded object holding a key, a workbook
    embedded in the document. (A whole ``resources/read`` of a document
    serves its extracted text.)"""
    root = tmp_path / "corpus"
    write_corpus(root)
    clean = make_docx()
    (root / "memo.docx").write_bytes(clean)
    key = b"aws_access_key_id AKIAABCDEFGHIJKLMNOP\n"
    (root / "object.docx").write_bytes(with_part(clean, "word/embeddings/oleObject1.bin", key))
    workbook = make_xlsx({"creds": [["aws", "AKIAABCDEFGHIJKLMNOP"]]})
    (root / "workbook.docx").write_bytes(with_part(clean, "word/embeddings/Sheet1.xlsx", workbook))
    up = running("--dir", str(root), "--json")
    up.event("scan_progress", lambda data: data.get("running") is False)
    srv = Server(root, up.url(), token_of(root), up.proc)
    session = srv.initialize()

    def refusals(name: str) -> list[str | None]:
        whole = srv.call(session, "dir2mcp.read_bytes", {"rel_path": name})
        ranged = srv.call(session, "dir2mcp.read_bytes", {"rel_path": name, "offset": 10, "length": 20})
        return [r["structuredContent"].get("error", {}).get("code") for r in (whole, ranged)]

    assert refusals("memo.docx") == [None, None]  # a clean document's bytes are served as before
    assert refusals("object.docx") == [errors.FORBIDDEN] * 2
    assert refusals("workbook.docx") == [errors.FORBIDDEN] * 2
    for name in ("object.docx", "workbook.docx"):  # a whole resources/read is the extracted text
        read = srv.post(
            {"jsonrpc": "2.0", "id": 2, "method": "resources/read", "params": {"uri": f"dir2mcp:///{name}"}},
            session=session,
        ).json()
        assert "zephyrine budget" in read["result"]["contents"][0]["text"], read
    text = srv.call(session, "dir2mcp.open_file", {"rel_path": "object.docx"})
    assert "zephyrine budget" in text["structuredContent"]["content"], text  # its text as before


def pdf_with_attachment(data: bytes) -> bytes:
    """A one-page PDF with ``data`` attached as a compressed embedded file."""
    packed = zlib.compress(data)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R /Names << /EmbeddedFiles << /Names [(notes.txt) 4 0 R] >> >> >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] >>",
        b"<< /Type /Filespec /F (notes.txt) /EF << /F 5 0 R >> >>",
        b"<< /Type /EmbeddedFile /Filter /FlateDecode /Length %d >>\nstream\n" % len(packed)
        + packed
        + b"\nendstream",
    ]
    out = bytearray(b"%PDF-1.7\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def test_a_pdf_is_served_as_bytes_only_once_its_streams_are_screened(tmp_path, running):
    """The indexer screens a PDF's text layer; ``read_bytes`` served the
    file, whose compressed streams (here an attached file holding a key)
    the byte screen never saw."""
    root = tmp_path / "corpus"
    write_corpus(root)
    (root / "attached.pdf").write_bytes(pdf_with_attachment(b"aws AKIAABCDEFGHIJKLMNOP here\n"))
    (root / "clean.pdf").write_bytes(pdf_with_attachment(b"minutes of the planning meeting\n"))
    up = running("--dir", str(root), "--json", "--no-index")
    srv = Server(root, up.url(), token_of(root), up.proc)
    session = srv.initialize()
    codes = {
        (name, offset): srv.call(session, "dir2mcp.read_bytes", {"rel_path": name, "offset": offset})[
            "structuredContent"
        ]
        .get("error", {})
        .get("code")
        for name in ("attached.pdf", "clean.pdf")
        for offset in (0, 200)
    }
    assert codes == {
        ("attached.pdf", 0): errors.FORBIDDEN,
        ("attached.pdf", 200): errors.FORBIDDEN,
        ("clean.pdf", 0): None,
        ("clean.pdf", 200): None,
    }, codes
