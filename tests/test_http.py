"""The Streamable HTTP transport on a real daphne server: one test per row
of the reference's status table, plus sessions, SSE and CORS."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.mcp_http import PROTOCOL, start_daphne, stop, write_corpus

PING = {"jsonrpc": "2.0", "id": 7, "method": "ping"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    write_corpus(root)
    srv = start_daphne(root)
    yield srv
    err = stop(srv)
    assert "Traceback" not in err, err


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
    )
    assert response.status_code == 403
    assert response.json()["error"]["data"]["code"] == "FORBIDDEN_ORIGIN"


def test_loopback_origin_is_allowed_with_cors_headers(server, session):
    response = server.post(PING, session=session, Origin="http://localhost:5173")
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == "http://localhost:5173"
    assert "MCP-Session-Id" in response.headers["access-control-expose-headers"]


def test_preflight_for_allowed_origins_only(server):
    ok = httpx.options(server.url, headers={"Origin": "http://127.0.0.1:3000"})
    assert ok.status_code == 204
    assert "Authorization" in ok.headers["access-control-allow-headers"]
    assert "POST" in ok.headers["access-control-allow-methods"]
    refused = httpx.options(server.url, headers={"Origin": "http://evil.example.com"})
    assert refused.status_code == 403
    assert "access-control-allow-origin" not in refused.headers


@pytest.mark.parametrize("authorization", [None, "Bearer wrong", "Basic abc"])
def test_missing_or_wrong_bearer_is_401(server, authorization):
    headers = server.headers()
    headers.pop("Authorization")
    if authorization:
        headers["Authorization"] = authorization
    response = httpx.post(server.url, headers=headers, json=PING)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert server.token not in response.text


def test_disallowed_host_is_refused(server):
    response = httpx.post(server.url, headers=server.headers(Host="evil.example.com"), json=PING)
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
    deleted = httpx.delete(server.url, headers={**server.headers(), "MCP-Session-Id": session})
    assert deleted.status_code == 204
    assert server.post(PING, session=session).status_code == 404
    again = httpx.delete(server.url, headers={**server.headers(), "MCP-Session-Id": session})
    assert again.status_code == 404


def test_get_offers_no_stream_405_with_allow(server, session):
    response = httpx.get(
        server.url, headers={**server.headers(Accept="text/event-stream"), "MCP-Session-Id": session}
    )
    assert response.status_code == 405
    assert "POST" in response.headers["allow"]


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
    response = server.post(b"[" * 100_000 + b"]" * 100_000, session=session)
    assert response.status_code == 400 and error_code(response) == -32700


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


@pytest.fixture
def slow_chat_server(tmp_path, fake_mistral):
    """A server whose chat model (the fake Mistral) takes 6 s to answer."""
    write_corpus(tmp_path)
    srv = start_daphne(
        tmp_path,
        env={
            "MISTRAL_API_KEY": fake_mistral.API_KEY,
            "DIR2MCP_MISTRAL__BASE_URL": fake_mistral.url,
            "DIR2MCP_CHAT__PROVIDER": "mistral",
        },
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
        "POST", server.url, headers=headers, json=ask_body(21, progressToken="c"), timeout=10
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


def test_gateway_skips_the_site_middleware_but_the_admin_keeps_it(server, session):
    mcp = server.post(PING, session=session)
    assert "x-frame-options" not in mcp.headers and "set-cookie" not in mcp.headers
    admin = httpx.get(f"{server.base}/admin/login/")
    assert admin.status_code == 200
    assert admin.headers["x-frame-options"] == "DENY"
    assert "csrftoken" in admin.headers.get("set-cookie", "")
