"""Slow and oversized request heads against a real `up` process (issue #23).

`up` serves with ``server.header_timeout`` and ``server.idle_timeout`` set
short here (1 s and 2 s). Each test asserts what the server did (a 408 and
a close, a close after a keep-alive response, a 414 with a JSON body) and in
what order, never how long it took: sockets wait with generous timeouts
only so that a regression fails instead of hanging.
"""

from __future__ import annotations

import json
import re
import resource
import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from mcp_gateway import bounded
from tests.mcp_http import Server, base_env
from tests.support import TLS
from tests.up_process import Up

pytestmark = pytest.mark.slow

HEADER_TIMEOUT = "1s"
IDLE_TIMEOUT = "2s"
WAIT = 60.0  # a socket's safety timeout: only a broken server reaches it


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    env = base_env(
        DIR2MCP_SERVER__HEADER_TIMEOUT=HEADER_TIMEOUT,
        DIR2MCP_SERVER__IDLE_TIMEOUT=IDLE_TIMEOUT,
    )
    yield from serve_notes(tmp_path_factory.mktemp("slow"), env)


def serve_notes(root: Path, env: dict[str, str], **options: int) -> Iterator[Server]:
    """``up`` over one small file in ``root``, indexed; stopped cleanly afterwards."""
    root.mkdir(exist_ok=True)
    (root / "notes.txt").write_text("hnsw index notes\nsecond line\n")
    up = Up("--dir", str(root), "--json", env=env, **options)
    url = up.url()
    up.event("scan_progress", lambda data: data.get("running") is False)
    token = (root / ".dir2mcp" / "secret.token").read_text().strip()
    yield Server(root, url, token, up.proc)
    code = up.stop()
    up.close()
    assert code == 0, up.stderr[-3000:]
    assert "Traceback" not in up.stderr, up.stderr[-3000:]


def address(srv: Server) -> tuple[str, int]:
    parts = urlsplit(srv.url)
    return parts.hostname, parts.port


def connect(srv: Server) -> socket.socket:
    return socket.create_connection(address(srv), timeout=WAIT)


def read_to_close(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def rest_get(srv: Server, path: str, headers: dict | None = None, **kw) -> httpx.Response:
    headers = {"Authorization": f"Bearer {srv.token}", **(headers or {})}
    return httpx.get(f"{srv.base}/api/v1{path}", headers=headers, timeout=WAIT, **kw)


def connection_budget() -> int:
    """How many idle sockets this test may hold: up to 1,000, within the
    file-descriptor limit the server and the test share, and short of the
    connections the server keeps open (past them, the oldest make way)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(50, min(1000, (soft - 200) // 2, bounded.connection_cap(0) - 16))


# -- slow clients ----------------------------------------------------------------


def test_half_sent_request_lines_are_closed_while_another_client_is_served(server):
    slow = []
    for _ in range(connection_budget()):
        sock = connect(server)
        sock.sendall(b"GET /api/v1/search?query=hnsw")  # half a request line, never finished
        slow.append(sock)
    try:
        # Another client is served while they hang.
        response = rest_get(server, "/search", params={"query": "hnsw index"})
        assert response.status_code == 200, response.text
        assert response.json()["hits"]
        # Then the server closes every one of them: a 408 with a JSON body, then end of stream.
        for sock in slow:
            answer = read_to_close(sock)
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 408 "), answer[:200]
            error = json.loads(body)["error"]
            assert error["code"] == "INVALID_RANGE"
            assert "server.header_timeout" in error["message"]
    finally:
        for sock in slow:
            sock.close()


def test_a_head_trickled_byte_by_byte_is_cut_off_by_the_header_timeout(server):
    """Each byte resets an idle timer, so only a deadline on the whole head
    stops a slowloris client."""
    host, port = address(server)
    head = f"GET /healthz/live HTTP/1.1\r\nHost: {host}:{port}\r\nX-Slow: {'z' * 40}\r\n\r\n".encode()
    sock = connect(server)
    sent = 0
    answer = b""
    try:
        for byte in head:
            try:
                sock.sendall(bytes([byte]))
            except OSError:  # the server has closed its end
                break
            sent += 1
            readable = _wait_readable(sock, 0.2)  # well under the 2 s idle timeout
            if readable:
                answer = read_to_close(sock)
                break
        else:
            answer = read_to_close(sock)
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert sent < len(head)  # cut off before the head was complete


def _wait_readable(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        sock.recv(1, socket.MSG_PEEK)  # data, or b"" at end of stream: either way the server spoke
        return True
    except TimeoutError:
        return False
    finally:
        sock.settimeout(WAIT)


def test_an_idle_keep_alive_connection_is_closed_after_the_idle_timeout(server):
    host, port = address(server)
    sock = connect(server)
    try:
        sock.sendall(f"GET /healthz/live HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        first = _one_response(sock)
        assert first.startswith(b"HTTP/1.1 200 "), first[:200]
        assert b"connection: close" not in first.lower()  # kept alive
        # Nothing more is sent: the server closes the connection, saying nothing.
        assert read_to_close(sock) == b""
    finally:
        sock.close()


def _one_response(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(re.search(rb"(?im)^content-length:\s*(\d+)", head).group(1))
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, data
        body += chunk
    return head + b"\r\n\r\n" + body


def test_a_request_sent_in_time_is_answered_normally(server):
    """The header deadline ends with the head: a keep-alive connection serves
    several requests, each with its own deadline."""
    host, port = address(server)
    sock = connect(server)
    try:
        for _ in range(3):
            sock.sendall(f"GET /healthz/live HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
            assert _one_response(sock).startswith(b"HTTP/1.1 200 ")
    finally:
        sock.close()


# -- long request lines and heads --------------------------------------------------


def test_a_20_kib_query_string_gets_414_in_the_rest_envelope(server):
    response = rest_get(server, "/search", params={"query": "x" * 20 * 1024})
    assert response.status_code == 414, response.text
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert error["code"] == "INVALID_RANGE"
    assert error["retryable"] is False
    assert "request line" in error["message"]
    # The server goes on serving.
    assert rest_get(server, "/search", params={"query": "hnsw"}).status_code == 200


def test_a_long_url_on_the_mcp_endpoint_gets_414_in_json_rpc_shape(server):
    response = httpx.get(
        server.url, params={"q": "x" * 20 * 1024}, headers=server.headers(), timeout=WAIT, verify=TLS
    )
    assert response.status_code == 414, response.text
    body = response.json()
    assert body["jsonrpc"] == "2.0"
    assert body["error"]["data"]["code"] == "INVALID_RANGE"


def test_an_oversized_request_head_gets_431_with_a_json_body(server):
    headers = {f"X-Filler-{i}": "y" * 1000 for i in range(20)}  # 20 KB of headers, each line short
    response = rest_get(server, "/search", params={"query": "hnsw"}, headers=headers)
    assert response.status_code == 431, response.text
    assert response.json()["error"]["code"] == "INVALID_RANGE"


# -- every REST error in the REST envelope ---------------------------------------------


def _rest_envelope(raw: bytes, status: int, code: str) -> dict:
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status} ".encode()), raw[:300]
    assert b"application/json" in head.lower(), head
    payload = json.loads(body)
    assert set(payload) == {"error"}, payload  # no "jsonrpc": the REST mirror's envelope
    assert set(payload["error"]) == {"code", "message", "retryable"}
    assert payload["error"]["code"] == code
    return payload["error"]


def _post_head(srv: Server, path: str, *lines: str) -> bytes:
    host, port = address(srv)
    head = [f"POST {path} HTTP/1.1", f"Host: {host}:{port}", f"Authorization: Bearer {srv.token}"]
    return ("\r\n".join([*head, "Content-Type: application/json", *lines]) + "\r\n\r\n").encode()


def test_a_rest_body_over_the_limit_by_its_declared_length_gets_413_in_the_rest_envelope(server):
    with connect(server) as sock:
        sock.sendall(_post_head(server, "/api/v1/ask", "Content-Length: 100000000") + b"{")
        error = _rest_envelope(read_to_close(sock), 413, "INVALID_RANGE")
    assert "byte limit" in error["message"] and error["retryable"] is False


def test_a_chunked_rest_body_over_the_limit_gets_413_in_the_rest_envelope(server):
    block = b"x" * 65536
    with connect(server) as sock:
        sock.sendall(_post_head(server, "/api/v1/ask", "Transfer-Encoding: chunked"))
        try:
            for _ in range(100):  # 6.4 MB, past the 4 MiB limit
                sock.sendall(b"%x\r\n%s\r\n" % (len(block), block))
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused mid-body: the answer is already waiting
        _rest_envelope(read_to_close(sock), 413, "INVALID_RANGE")


def test_the_mcp_endpoint_keeps_its_json_rpc_413(server):
    path = urlsplit(server.url).path
    with connect(server) as sock:
        sock.sendall(_post_head(server, path, "Content-Length: 100000000") + b"{")
        reply = read_to_close(sock)
    assert reply.startswith(b"HTTP/1.1 413 ")
    body = json.loads(reply.partition(b"\r\n\r\n")[2])
    assert body["jsonrpc"] == "2.0" and body["error"]["data"]["code"] == "INVALID_RANGE"


@pytest.mark.parametrize(
    ("method", "path", "content_type", "body", "status", "code"),
    [
        pytest.param(
            "POST", "/ask", "application/json", b"{not json", 400, "INVALID_FIELD", id="malformed-json"
        ),
        pytest.param("GET", "/no-such-endpoint", None, None, 404, "NOT_FOUND", id="unknown-route"),
        pytest.param("DELETE", "/search", None, None, 405, "METHOD_NOT_ALLOWED", id="wrong-method"),
        pytest.param("POST", "/ask", "text/plain", b'{"question": "x"}', 415, "INVALID_FIELD", id="not-json"),
    ],
)
def test_rest_errors_under_up_are_the_rest_envelope(server, method, path, content_type, body, status, code):
    headers = {"Authorization": f"Bearer {server.token}"} | (
        {"Content-Type": content_type} if content_type else {}
    )
    response = httpx.request(
        method, f"{server.base}/api/v1{path}", content=body, headers=headers, timeout=WAIT, verify=TLS
    )
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    payload = response.json()
    assert set(payload) == {"error"} and set(payload["error"]) == {"code", "message", "retryable"}
    assert payload["error"]["code"] == code


# -- the API docs page ----------------------------------------------------------------


def test_the_docs_page_loads_nothing_from_another_origin(server):
    page = httpx.get(f"{server.base}/api/v1/docs", timeout=WAIT, verify=TLS)
    assert page.status_code == 200, page.text
    html = page.text
    references = re.findall(r"""(?:src|href)=["']([^"']+)["']""", html)
    assert any(ref.endswith("swagger-ui-bundle.js") for ref in references), references
    assert any(ref.endswith("swagger-ui.css") for ref in references), references
    for ref in references:
        assert not urlsplit(ref).netloc and not urlsplit(ref).scheme, ref
        asset = httpx.get(
            f"{server.base}{ref}" if ref.startswith("/") else f"{server.base}/{ref}", timeout=WAIT, verify=TLS
        )
        assert asset.status_code == 200, ref
        assert asset.content, ref
    assert "cdn." not in html
    settings = json.loads(re.search(r'id="swagger-settings">(.*?)</script>', html, re.S).group(1))
    assert settings["validatorUrl"] is None  # no badge fetched from validator.swagger.io
    assert settings["url"].endswith("/api/v1/openapi.json")


# -- too many connections ----------------------------------------------------------

#: the file-descriptor limit of the server below: low enough for a test to reach
OPEN_FILES = 512
#: slow uploads, each holding a socket and (a body over 100 kB) a temporary file
SLOW_UPLOADS = 300


def test_slow_uploads_past_the_file_limit_make_way_for_another_client(few_files_server):
    """An unauthenticated client trickling request bodies held every file
    descriptor of the process (a socket and a temporary file each): every
    other client was reset. The oldest connection waiting on its client
    now makes way for a new one, with a 503 it may retry."""
    srv = few_files_server
    # The REST routes load once serving has begun (mcp_gateway.server._load_urls),
    # reading their modules' files: loaded first, as any server is within a
    # second, not while the uploads below hold every descriptor (then the
    # one request that loads them is refused with EMFILE; seen under load).
    assert rest_get(srv, "/search", params={"query": "hnsw index"}).status_code == 200
    head = _post_head(srv, "/mcp", "Content-Length: 1000000") + b"{"
    slow = []
    try:
        for _ in range(SLOW_UPLOADS):
            sock = connect(srv)
            sock.sendall(head)
            slow.append(sock)
        response = rest_get(srv, "/search", params={"query": "hnsw index"})
        assert response.status_code == 200, response.text
        assert response.json()["hits"]
        # The first upload was the oldest waiting: it was told to retry, then closed.
        answer = read_to_close(slow[0])
        head_part, _, body = answer.partition(b"\r\n\r\n")
        assert head_part.startswith(b"HTTP/1.1 503 "), answer[:200]
        assert b"Retry-After: 1" in head_part
        # JSON-RPC once its request line was read, else the REST envelope (as a 408 is).
        error = json.loads(body)["error"]
        if error["code"] == -32001:
            assert error["data"] == {"code": "SERVER_BUSY", "retryable": True}
        else:
            assert (error["code"], error["retryable"]) == ("SERVER_BUSY", True)
        assert "server.max_connections" in error["message"]
    finally:
        for sock in slow:
            sock.close()


@pytest.fixture
def few_files_server(tmp_path):
    yield from serve_notes(tmp_path / "root", base_env(), open_files=OPEN_FILES)


@pytest.fixture
def small_buffer_server(tmp_path):
    yield from serve_notes(tmp_path / "root", base_env(DIR2MCP_SERVER__MAX_BODY_BUFFER_MB="8"))


@pytest.mark.parametrize("oldest_body", ["first", "last"])
def test_unfinished_uploads_past_the_body_buffer_make_the_oldest_make_way(small_buffer_server, oldest_body):
    """Each unfinished upload held up to 4 MiB in a temporary file: 100
    unauthenticated ones held 400 MiB, and the connection limit alone allowed
    tens of GiB. Past ``server.max_body_buffer_mb`` (8 here), the oldest
    unfinished upload is told to retry and closed; the newest goes on. Also
    when the oldest connection's body comes last (or, as on a loaded machine,
    its bytes wait in the kernel's buffers until the others' are read): the
    youngest used to make way, and the oldest waited out its idle timeout."""
    srv = small_buffer_server
    head = _post_head(srv, "/mcp", "Content-Length: 4194304")
    body = b" " * (3 * 1024 * 1024)  # 9 MiB in all, each short of its 4 MiB body
    uploads = []
    try:
        for n in range(3):
            sock = connect(srv)
            sock.sendall(head if (n == 0 and oldest_body == "last") else head + body)
            uploads.append(sock)
        if oldest_body == "last":
            uploads[0].sendall(body)
        answer = read_to_close(uploads[0])
        head_part, _, body = answer.partition(b"\r\n\r\n")
        assert head_part.startswith(b"HTTP/1.1 503 "), answer[:200]
        error = json.loads(body)["error"]
        assert error["code"] == -32001 and error["data"] == {"code": "SERVER_BUSY", "retryable": True}
        assert "server.max_body_buffer_mb" in error["message"]
        # The newest upload was not cut: it finishes and is answered (its spaces are not JSON: 400).
        uploads[2].sendall(b" " * (1024 * 1024))
        assert _one_response(uploads[2]).startswith(b"HTTP/1.1 400 ")
        response = rest_get(srv, "/search", params={"query": "hnsw index"})
        assert response.status_code == 200, response.text
    finally:
        for sock in uploads:
            sock.close()
