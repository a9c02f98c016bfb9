"""Property-based fuzz of the MCP endpoint on a real daphne server.

Random and malformed bodies and headers must always get a 4xx or a
JSON-RPC answer: never a 5xx, never a traceback, and the server goes on
serving.
"""

from __future__ import annotations

import json
import string

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.mcp_http import ACCEPT, PROTOCOL, daphne_serving, write_corpus
from tests.support import TLS

METHODS = [
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "logging/setLevel",
    "notifications/initialized",
    "notifications/cancelled",
    "resources/list",
    "server/discover",
    "",
]
TOOLS = [
    "dir2mcp.search",
    "dir2mcp.ask",
    "dir2mcp.open_file",
    "dir2mcp.list_files",
    "dir2mcp.find",
    "dir2mcp.outline",
    "dir2mcp.open_files",
    "dir2mcp.checksum",
    "dir2mcp.diff",
    "dir2mcp.read_bytes",
    "dir2mcp.verify",
    "dir2mcp.symbols",
    "dir2mcp.references",
    "dir2mcp.stats",
]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=12,
)
arguments = st.dictionaries(
    st.sampled_from(
        ["query", "question", "k", "rel_path", "start_line", "page", "limit", "content", "regex", "x"]
    ),
    json_values,
    max_size=4,
)
messages = st.fixed_dictionaries(
    {"jsonrpc": st.sampled_from(["2.0", "1.0", 2])},
    optional={
        "id": st.none() | st.integers() | st.text(max_size=8) | st.floats(allow_nan=False) | st.booleans(),
        "method": st.sampled_from(METHODS) | st.text(max_size=20),
        "params": st.fixed_dictionaries(
            {},
            optional={
                "name": st.sampled_from(TOOLS) | st.text(max_size=10),
                "arguments": arguments | json_values,
                "cursor": json_values,
                "level": st.text(max_size=10),
                "protocolVersion": st.text(max_size=12),
                "_meta": json_values,
            },
        )
        | json_values,
        "result": json_values,
    },
)
bodies = st.one_of(
    messages.map(lambda m: json.dumps(m).encode()),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=300),
)
header_text = st.text(alphabet=string.printable.strip("\r\n\x0b\x0c"), max_size=40).map(str.strip)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    write_corpus(root)
    with daphne_serving(root) as srv:
        srv.session = srv.initialize()
        yield srv


@settings(
    max_examples=250,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    body=bodies,
    accept=st.sampled_from([ACCEPT, "application/json", "*/*", None]) | header_text,
    content_type=st.sampled_from(["application/json", "text/plain", None]) | header_text,
    version=st.sampled_from([PROTOCOL, "2025-03-26", None]) | header_text,
    session=st.sampled_from(["valid", None, "sess_nope"]) | header_text,
    method=st.sampled_from(["POST", "POST", "POST", "GET", "DELETE", "PUT", "OPTIONS"]),
)
def test_random_requests_never_break_the_server(server, body, accept, content_type, version, session, method):
    headers = {"Authorization": f"Bearer {server.token}"}
    for name, value in (
        ("Accept", accept),
        ("Content-Type", content_type),
        ("MCP-Protocol-Version", version),
    ):
        if value is not None:
            headers[name] = value
    if session is not None:
        headers["MCP-Session-Id"] = server.session if session == "valid" else session
    if method == "DELETE" and session == "valid":
        headers["MCP-Session-Id"] = "sess_not_this_one"  # keep the fixture's session alive
    with httpx.stream(method, server.url, headers=headers, content=body, timeout=30, verify=TLS) as response:
        streaming = response.headers.get("content-type", "").startswith("text/event-stream")
        if streaming and method == "GET":
            # The session's standalone stream (kept open by keep-alives): its
            # priming event is what a request gets, then the client hangs up.
            text = first_event(response)
        else:
            text = response.read().decode(errors="replace")
    assert response.status_code < 500, (response.status_code, text[:500])
    assert "Traceback" not in text
    if response.headers.get("content-type", "").startswith("application/json") and text:
        payload = json.loads(text)
        assert payload["jsonrpc"] == "2.0" and ("result" in payload or "error" in payload)
    if streaming:
        assert response.status_code == 200 and ("data: " in text or "data:" in text)


def first_event(response: httpx.Response) -> str:
    """What a stream sends up to the end of its first event (a blank line)."""
    text = ""
    for chunk in response.iter_text():
        text += chunk
        if "\n\n" in text or "\r\n\r\n" in text:
            break
    return text


tool_calls = st.fixed_dictionaries(
    {
        "jsonrpc": st.just("2.0"),
        "id": st.integers(min_value=1, max_value=10**6),
        "method": st.just("tools/call"),
        "params": st.fixed_dictionaries({"name": st.sampled_from(TOOLS), "arguments": arguments}),
    }
)


@settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(message=tool_calls | messages)
def test_random_messages_on_a_valid_session_get_json_rpc_answers(server, message):
    """Valid headers, so the fuzz reaches dispatch and the tools themselves."""
    response = server.post(json.dumps(message).encode(), session=server.session)
    assert response.status_code in (200, 202, 400), (response.status_code, response.text[:500])
    assert "Traceback" not in response.text
    if response.status_code == 200:
        payload = response.json()
        assert ("result" in payload) != ("error" in payload)
        result = payload.get("result") or {}
        if result.get("isError"):
            error = result["structuredContent"]["error"]
            assert error["code"] != "INTERNAL_ERROR", error
            assert set(error) == {"code", "message", "retryable"}


def test_the_server_still_serves_after_the_fuzz(server):
    response = server.post({"jsonrpc": "2.0", "id": 1, "method": "ping"}, session=server.session)
    assert response.json() == {"jsonrpc": "2.0", "id": 1, "result": {}}
