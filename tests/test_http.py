"""The Streamable HTTP transport on a real daphne server: one test per row
of the reference's status table, plus sessions, SSE and CORS."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.mcp_http import PROTOCOL, daphne_serving, start_daphne, stop, write_corpus
from tests.support import TLS, wait_until

PING = {"jsonrpc": "2.0", "id": 7, "method": "ping"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    write_corpus(root)
    with daphne_serving(root) as srv:
        yield srv


@pytest.fixture
def session(server):
    return server.initialize()


def error_code(response: httpx.Response) -> int:
    return response.json()["error"]["code"]


def test_initialize_assigns_a_session_and_requests_answer_200(server):
    session = server.initialize()
    assert session.startswith("sess_") and all(0x21 <= ord(c) <= 0x7E for c in session)
    response = server.post(PING, session=session)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    assert response.json() == {"jsonrpc": "2.0", "id": 7, "result": {}}


def test_two_sessions_get_different_ids(server):
    assert server.initialize() != server.initialize()


def test_notifications_and_responses_get_202_and_no_body(server, session):
    for body in (
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 99}},
        {"jsonrpc": "2.0", "id": 5, "result": {}},
    ):
        response = server.post(body, session=session)
        assert response.status_code == 202
        assert response.content == b""
        assert "content-type" not in response.headers


def test_method_level_errors_are_200_with_an_error_body(server, session):
    response = server.post({"jsonrpc": "2.0", "id": 1, "method": "no/such"}, session=session)
    assert response.status_code == 200 and error_code(response) == -32601


def test_bad_origin_is_403_before_auth(server):
    response = httpx.post(
        server.url,
        headers=server.headers(Origin="http://evil.example.com", Authorization="Bearer wrong"),
        json=PING,
        verify=TLS,
    )
    assert response.status_code == 403
    assert response.json()["error"]["data"]["code"] == "FORBIDDEN_ORIGIN"


def test_loopback_origin_is_allowed_with_cors_headers(server, session):
    response = server.post(PING, session=session, Origin="http://localhost:5173")
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == "http://localhost:5173"
    assert "MCP-Session-Id" in response.headers["access-control-expose-headers"]


def test_preflight_for_allowed_origins_only(server):
    ok = httpx.options(server.url, headers={"Origin": "http://127.0.0.1:3000"}, verify=TLS)
    assert ok.status_code == 204
    assert ok.headers["access-control-allow-origin"] == "http://127.0.0.1:3000"
    assert "Authorization" in ok.headers["access-control-allow-headers"]
    assert "POST" in ok.headers["access-control-allow-methods"]
    refused = httpx.options(server.url, headers={"Origin": "http://evil.example.com"}, verify=TLS)
    assert refused.status_code == 403
    assert "access-control-allow-origin" not in refused.headers


@pytest.mark.parametrize("authorization", [None, "Bearer wrong", "Basic abc"])
def test_missing_or_wrong_bearer_is_401(server, authorization):
    headers = server.headers()
    headers.pop("Authorization")
    if authorization:
        headers["Authorization"] = authorization
    response = httpx.post(server.url, headers=headers, json=PING, verify=TLS)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert server.token not in response.text


def test_disallowed_host_is_refused(server):
    response = httpx.post(server.url, headers=server.headers(Host="evil.example.com"), json=PING, verify=TLS)
    assert response.status_code == 400


def test_unsupported_protocol_version_is_400(server, session):
    response = server.post(PING, session=session, **{"MCP-Protocol-Version": "2026-07-28"})
    assert response.status_code == 400
    assert error_code(response) == -32600


def test_every_supported_version_is_accepted_in_the_header(server, session):
    for version in ("2024-11-05", "2025-03-26", "2025-06-18", PROTOCOL):
        assert server.post(PING, session=session, **{"MCP-Protocol-Version": version}).status_code == 200


def test_missing_session_is_400_and_unknown_session_is_404(server):
    assert server.post(PING).status_code == 400
    response = server.post(PING, session="sess_unknown")
    assert response.status_code == 404
    assert "X-MCP-Session-Expired" not in response.headers


def test_delete_ends_the_session_then_404(server):
    session = server.initialize()
    deleted = httpx.delete(server.url, headers={**server.headers(), "MCP-Session-Id": session}, verify=TLS)
    assert deleted.status_code == 204
    assert server.post(PING, session=session).status_code == 404
    again = httpx.delete(server.url, headers={**server.headers(), "MCP-Session-Id": session}, verify=TLS)
    assert again.status_code == 404


def test_a_method_the_endpoint_does_not_serve_is_405_with_allow(server, session):
    # GET opens the session's stream (tests/test_notifications.py); PUT is nothing.
    response = httpx.put(
        server.url, headers={**server.headers(), "MCP-Session-Id": session}, json=PING, verify=TLS
    )
    assert response.status_code == 405
    assert {"GET", "POST", "DELETE"} <= {m.strip() for m in response.headers["allow"].split(",")}


def test_accept_lacking_a_type_is_406(server, session):
    response = server.post(PING, session=session, Accept="application/json")
    assert response.status_code == 406


def test_wrong_content_type_is_415(server, session):
    response = server.post(json.dumps(PING).encode(), session=session, **{"Content-Type": "text/plain"})
    assert response.status_code == 415


def test_oversized_body_is_413(server, session):
    body = json.dumps({**PING, "params": {"pad": "x" * (5 * 1024 * 1024)}}).encode()
    response = server.post(body, session=session)
    assert response.status_code == 413


def test_malformed_json_is_400_parse_error(server, session):
    response = server.post(b"{nope", session=session)
    assert response.status_code == 400 and error_code(response) == -32700


def test_absurdly_deep_json_is_a_parse_error_not_a_crash(server, session):
    # Deeper than the parser recurses, within the token bound: parsed, and refused.
    response = server.post(b"[" * 9_000 + b"]" * 9_000, session=session)
    assert response.status_code == 400 and error_code(response) == -32700
    # Past the token bound (transport.MAX_JSON_TOKENS): refused before it is parsed.
    response = server.post(b"[" * 100_000 + b"]" * 100_000, session=session)
    assert response.status_code == 400 and error_code(response) == -32600


def test_batch_is_400_invalid_request(server, session):
    response = server.post(json.dumps([PING, PING]).encode(), session=session)
    assert response.status_code == 400 and error_code(response) == -32600


def test_null_id_is_400(server, session):
    response = server.post({"jsonrpc": "2.0", "id": None, "method": "ping"}, session=session)
    assert response.status_code == 400 and error_code(response) == -32600


def test_progress_token_gets_an_sse_stream_with_progress_then_the_response(server, session):
    body = {
        "jsonrpc": "2.0",
        "id": 11,
        "method": "tools/call",
        "params": {
            "name": "dir2mcp.ask",
            "arguments": {"question": "loader"},
            "_meta": {"progressToken": "tok"},
        },
    }
    response = server.post(body, session=session)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
    progress = [e["params"]["progress"] for e in events if e.get("method") == "notifications/progress"]
    assert progress and progress == sorted(set(progress))
    assert events[-1]["id"] == 11 and "result" in events[-1]


def test_log_messages_flow_after_set_level(server):
    session = server.initialize()
    assert (
        server.post(
            {"jsonrpc": "2.0", "id": 1, "method": "logging/setLevel", "params": {"level": "debug"}},
            session=session,
        ).json()["result"]
        == {}
    )
    body = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "dir2mcp.ask", "arguments": {"question": "x"}},
    }
    response = server.post(body, session=session)
    events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
    logs = [e for e in events if e.get("method") == "notifications/message"]
    assert logs and logs[0]["params"]["logger"] == "dir2mcp"
    assert server.token not in response.text


def test_tool_errors_are_results_with_is_error(server, session):
    result = server.call(session, "dir2mcp.search", {"query": "x", "k": 99})
    assert result["isError"] is True
    assert result["structuredContent"]["error"]["code"] == "INVALID_RANGE"


def test_rate_limit_gives_429_with_retry_after(tmp_path):
    write_corpus(tmp_path)
    limited = start_daphne(tmp_path, env={"DIR2MCP_SERVER__RATE_LIMIT_PER_MINUTE": "6"})
    try:
        session = limited.initialize()  # two requests of the burst of five
        statuses = [limited.post(PING, session=session).status_code for _ in range(6)]
        assert statuses[:3] == [200, 200, 200]
        assert statuses[-1] == 429
        response = limited.post(PING, session=session)
        assert response.status_code == 429
        assert int(response.headers["Retry-After"]) >= 1
        assert response.json()["error"]["data"]["code"] == "RATE_LIMITED"
    finally:
        stop(limited)


def chat_env(fake_mistral) -> dict[str, str]:
    """Chat (ask) through the fake Mistral at the network edge."""
    return {
        "MISTRAL_API_KEY": fake_mistral.API_KEY,
        "DIR2MCP_MISTRAL__BASE_URL": fake_mistral.url,
        "DIR2MCP_CHAT__PROVIDER": "mistral",
    }


@pytest.fixture
def slow_chat_server(tmp_path, fake_mistral):
    """A server whose chat model (the fake Mistral) takes 6 s to answer."""
    write_corpus(tmp_path)
    srv = start_daphne(
        tmp_path,
        env=chat_env(fake_mistral),
    )
    fake_mistral.delay_next(6.0, count=4)
    yield srv
    err = stop(srv)
    assert "Traceback" not in err, err


def ask_body(msg_id, **meta):
    params = {"name": "dir2mcp.ask", "arguments": {"question": "what reads configuration files?"}}
    if meta:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": msg_id, "method": "tools/call", "params": params}


def cancel(server, session, request_id):
    note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": request_id}}
    assert server.post(note, session=session).status_code == 202


def test_cancel_ends_a_streamed_call_without_a_response(slow_chat_server):
    server = slow_chat_server
    session = server.initialize()
    headers = server.headers(**{"MCP-Session-Id": session, "MCP-Protocol-Version": PROTOCOL})
    events = []
    # Without the cancel, the stream would end after the chat model's 6 s
    # with the answer; with it, it ends with no response at all.
    with httpx.stream(
        "POST", server.url, headers=headers, json=ask_body(21, progressToken="c"), timeout=10, verify=TLS
    ) as r:
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            events.append(json.loads(line[6:]))
            if len(events) == 1:
                cancel(server, session, 21)
    assert events[0]["method"] == "notifications/progress"
    assert not [e for e in events if e.get("id") == 21]  # no response to a cancelled request
    assert server.post(PING, session=session).json()["result"] == {}


def test_cancel_answers_a_pending_json_call_with_request_cancelled(slow_chat_server):
    import threading

    server = slow_chat_server
    session = server.initialize()
    replies = []
    worker = threading.Thread(target=lambda: replies.append(server.post(ask_body(22), session=session)))
    worker.start()
    for _ in range(200):  # until the call is registered and cancelled
        cancel(server, session, 22)
        worker.join(timeout=0.05)
        if not worker.is_alive():
            break
    worker.join(timeout=15)
    assert replies and replies[0].status_code == 200
    assert replies[0].json()["error"]["code"] == -32800


def test_a_client_that_never_reads_its_stream_does_not_stall_others(tmp_path, fake_mistral):
    import socket

    write_corpus(tmp_path)
    server = start_daphne(
        tmp_path,
        env=chat_env(fake_mistral),
    )
    try:
        session = server.initialize()
        fake_mistral.delay_next(12.0, count=1)
        body = json.dumps(ask_body(41, progressToken="slow")).encode()
        host, port = server.base.split("//", 1)[1].rsplit(":", 1)
        head = (
            f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {server.token}\r\n"
            "Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n"
            f"MCP-Session-Id: {session}\r\nMCP-Protocol-Version: {PROTOCOL}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        with socket.create_connection((host, int(port)), timeout=30) as slow:
            slow.sendall(head + body)  # then reads nothing while the chat model takes 12 s
            other = server.initialize()
            answers = [server.post(PING, session=other).json() for _ in range(20)]
            searched = server.call(other, "dir2mcp.search", {"query": "loader"})
            # Only now look at the slow stream: its answer cannot have come yet,
            # so the calls above were served while it was pending, not after.
            slow.setblocking(False)
            try:
                pending = slow.recv(65536)
            except BlockingIOError:
                pending = b""
    finally:
        err = stop(server)
    assert all(answer["result"] == {} for answer in answers)
    assert searched["structuredContent"]["hits"]
    assert b'"id": 41' not in pending and b'"id":41' not in pending
    assert "Traceback" not in err


def test_calls_past_the_concurrency_limit_are_refused_busy_not_queued(tmp_path, fake_mistral):
    import threading

    write_corpus(tmp_path)
    srv = start_daphne(
        tmp_path,
        env={**chat_env(fake_mistral), "DIR2MCP_SERVER__MAX_CONCURRENT_CALLS": "1"},
    )
    try:
        session = srv.initialize()
        fake_mistral.delay_next(4.0, count=1)
        replies = []
        slow = threading.Thread(target=lambda: replies.append(srv.post(ask_body(31), session=session)))
        slow.start()
        wait_until(  # the slow call is in its chat request, holding the only slot
            lambda: fake_mistral.requests_to("/v1/chat/completions"),
            timeout=10,
            interval=0.01,
            message="the slow call's chat request",
        )
        refused = srv.post(ask_body(32), session=session).json()
        pinged = srv.post(PING, session=session).json()
        slow.join(timeout=30)
        after = srv.post(ask_body(33), session=session).json()
    finally:
        err = stop(srv)
    assert refused["error"]["code"] == -32001
    assert refused["error"]["data"] == {"code": "SERVER_BUSY", "retryable": True}
    assert pinged["result"] == {}  # only tool calls take slots
    assert replies and "result" in replies[0].json()  # the running call was not disturbed
    assert "result" in after  # its slot was given back
    assert "Traceback" not in err


def test_mcp_requests_and_tool_calls_show_in_metrics(server, session):
    from prometheus_client.parser import text_string_to_metric_families

    server.call(session, "dir2mcp.search", {"query": "loader"})
    server.call(session, "dir2mcp.open_file", {"rel_path": "../outside"})  # an error result
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(httpx.get(f"{server.base}/metrics", verify=TLS).text)
        for sample in family.samples
    }

    def value(name: str, **labels) -> float:
        return samples.get((name, tuple(sorted(labels.items()))), 0.0)

    assert value("dir2mcp_tool_calls_total", tool="dir2mcp.search", outcome="ok") >= 1
    assert value("dir2mcp_tool_calls_total", tool="dir2mcp.open_file", outcome="error") >= 1
    assert value("dir2mcp_tool_call_seconds_count", tool="dir2mcp.search") >= 1
    assert value("dir2mcp_http_requests_total", endpoint="mcp", method="POST", status="200") >= 2


def test_gateway_skips_the_site_middleware_but_the_admin_keeps_it(server, session):
    mcp = server.post(PING, session=session)
    assert "set-cookie" not in mcp.headers and "vary" not in mcp.headers  # no sessions, no CSRF
    admin = httpx.get(f"{server.base}/admin/login/", verify=TLS)
    assert admin.status_code == 200
    # the same security headers all the same, written by the gateway itself (security_headers.py)
    assert admin.headers["x-frame-options"] == mcp.headers["x-frame-options"] == "DENY"
    assert "csrftoken" in admin.headers.get("set-cookie", "")
