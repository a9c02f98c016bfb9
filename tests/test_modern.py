"""MCP 2026-07-28 (stateless) beside 2025-11-25: the per-request rules as
tables (mcp_gateway/modern.py, mirrored.py), then on a real daphne server
where a session and stateless requests share /mcp."""

from __future__ import annotations

import base64
import json

import httpx
import pytest

from mcp_gateway import mirrored, modern
from mcp_gateway.transport import shape_message
from tests.mcp_http import base_env, daphne_serving, index, write_corpus
from tests.support import TLS
from tests.test_stdio import Raw, command

VERSION = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": VERSION,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
}


def message(method: str, params: dict | None = None, msg_id=1):
    body = {"jsonrpc": "2.0", "id": msg_id, "method": method}
    if params is not None:
        body["params"] = params
    return shape_message(body)


# -- which revision serves a request ------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "params", "header", "session", "expected"),
    [
        pytest.param("tools/list", {"_meta": META}, VERSION, None, True, id="meta-and-header"),
        pytest.param("tools/list", {"_meta": META}, None, None, True, id="meta-alone-stdio"),
        pytest.param("tools/list", {"_meta": META}, VERSION, "sess_x", True, id="meta-wins-over-a-session"),
        pytest.param("server/discover", {}, None, None, True, id="discover-without-meta"),
        pytest.param("tools/list", {}, VERSION, None, True, id="modern-header-no-session"),
        pytest.param("tools/list", {}, "v999", None, True, id="unknown-header-no-session"),
        pytest.param("tools/list", {}, "2025-11-25", None, False, id="legacy-header"),
        pytest.param("tools/list", {}, "v999", "sess_x", False, id="unknown-header-with-session"),
        pytest.param("tools/list", {}, None, None, False, id="nothing-says-modern"),
        pytest.param(
            "initialize", {"protocolVersion": "2025-11-25"}, None, None, False, id="legacy-initialize"
        ),
        pytest.param("initialize", {"_meta": META}, VERSION, None, True, id="initialize-with-modern-meta"),
    ],
)
def test_which_revision_serves_a_request(method, params, header, session, expected):
    msg = message(method, params)
    assert modern.is_modern(msg, header_version=header, session_id=session) is expected


@pytest.mark.parametrize(
    ("meta", "code"),
    [
        pytest.param(None, -32602, id="no-meta"),
        pytest.param({k: v for k, v in META.items() if "protocolVersion" not in k}, -32602, id="no-version"),
        pytest.param(
            {k: v for k, v in META.items() if "Capabilities" not in k}, -32602, id="no-capabilities"
        ),
        pytest.param(
            {**META, "io.modelcontextprotocol/clientCapabilities": []}, -32602, id="capabilities-a-list"
        ),
        pytest.param({**META, "io.modelcontextprotocol/logLevel": "loud"}, -32602, id="unknown-log-level"),
        pytest.param(
            {**META, "io.modelcontextprotocol/protocolVersion": "v999"}, -32022, id="unknown-version"
        ),
        pytest.param(
            {**META, "io.modelcontextprotocol/protocolVersion": "2025-11-25"}, -32022, id="handshake-v"
        ),
    ],
)
def test_a_malformed_envelope_is_refused_with_its_code(meta, code):
    params = {} if meta is None else {"_meta": meta}
    with pytest.raises(modern.Refusal) as refused:
        env = modern.envelope(message("tools/list", params))
        modern.check_version(env.version)
    assert refused.value.rpc_code == code
    assert refused.value.status == 400
    if code == -32022:
        assert refused.value.data["supported"][0] == VERSION
        assert "2025-11-25" in refused.value.data["supported"]


def test_client_info_is_optional_and_the_log_level_is_read():
    meta = {k: v for k, v in META.items() if "clientInfo" not in k} | {
        "io.modelcontextprotocol/logLevel": "info"
    }
    env = modern.envelope(message("tools/list", {"_meta": meta}))
    assert (env.version, env.client_info, env.log_level) == (VERSION, {}, "info")


# -- headers mirrored from the body ------------------------------------------------------

OPEN_FILE_SCHEMA = {
    "type": "object",
    "properties": {
        "rel_path": {"type": "string", "x-mcp-header": "Path"},
        "page": {"type": "integer", "x-mcp-header": "Page"},
        "deep": {"type": "object", "properties": {"flag": {"type": "boolean", "x-mcp-header": "Flag"}}},
    },
}


def b64(text: str) -> str:
    return "=?base64?" + base64.b64encode(text.encode()).decode() + "?="


def headers(method: str, **extra: str) -> dict[str, str]:
    return {"mcp-protocol-version": VERSION, "mcp-method": method} | {k.lower(): v for k, v in extra.items()}


CALL = {"name": "dir2mcp.open_file", "arguments": {"rel_path": "src/a.py"}, "_meta": META}


@pytest.mark.parametrize(
    ("method", "params", "sent"),
    [
        pytest.param("tools/list", {"_meta": META}, headers("tools/list"), id="list"),
        pytest.param("tools/list", {"_meta": META}, headers("  tools/list \t"), id="whitespace-trimmed"),
        pytest.param(
            "tools/call",
            CALL,
            headers("tools/call", **{"Mcp-Name": "dir2mcp.open_file", "Mcp-Param-Path": "src/a.py"}),
            id="call",
        ),
        pytest.param(
            "tools/call",
            CALL,
            headers(
                "tools/call", **{"Mcp-Name": b64("dir2mcp.open_file"), "Mcp-Param-Path": b64("src/a.py")}
            ),
            id="base64-forms",
        ),
        pytest.param(
            "tools/call",
            {**CALL, "arguments": {"rel_path": "a", "page": 42, "deep": {"flag": True}}},
            headers(
                "tools/call",
                **{
                    "Mcp-Name": "dir2mcp.open_file",
                    "Mcp-Param-Path": "a",
                    "Mcp-Param-Page": "42.0",
                    "Mcp-Param-Flag": "true",
                },
            ),
            id="integer-compared-as-a-number-and-nested-boolean",
        ),
        pytest.param(
            "tools/call",
            {**CALL, "arguments": {}},
            headers("tools/call", **{"Mcp-Name": "dir2mcp.open_file"}),
            id="no-value-no-header-expected",
        ),
        pytest.param(
            "resources/read",
            {"uri": "dir2mcp:///src/a.py", "_meta": META},
            headers("resources/read", **{"Mcp-Name": "dir2mcp:///src/a.py"}),
            id="read-names-its-uri",
        ),
    ],
)
def test_matching_headers_pass(method, params, sent):
    mirrored.check(message(method, params), sent, OPEN_FILE_SCHEMA if method == "tools/call" else None)


@pytest.mark.parametrize(
    ("method", "params", "sent"),
    [
        pytest.param("tools/list", {"_meta": META}, {"mcp-method": "tools/list"}, id="no-version-header"),
        pytest.param(
            "tools/list",
            {"_meta": META},
            headers("tools/list") | {"mcp-protocol-version": "2025-11-25"},
            id="version-differs",
        ),
        pytest.param("tools/list", {"_meta": META}, {"mcp-protocol-version": VERSION}, id="no-method-header"),
        pytest.param("tools/list", {"_meta": META}, headers("prompts/list"), id="method-differs"),
        pytest.param("tools/list", {"_meta": META}, headers("TOOLS/LIST"), id="method-case-differs"),
        pytest.param(
            "tools/call", CALL, headers("tools/call", **{"Mcp-Param-Path": "src/a.py"}), id="no-name-header"
        ),
        pytest.param(
            "tools/call",
            CALL,
            headers("tools/call", **{"Mcp-Name": "x", "Mcp-Param-Path": "src/a.py"}),
            id="name-differs",
        ),
        pytest.param(
            "tools/call",
            CALL,
            headers("tools/call", **{"Mcp-Name": "dir2mcp.open_file"}),
            id="no-param-header",
        ),
        pytest.param(
            "tools/call",
            CALL,
            headers("tools/call", **{"Mcp-Name": "dir2mcp.open_file", "Mcp-Param-Path": "b.py"}),
            id="param-differs",
        ),
        pytest.param(
            "tools/call",
            CALL,
            headers(
                "tools/call", **{"Mcp-Name": "dir2mcp.open_file", "Mcp-Param-Path": "=?base64?c3JjL2EucHk?="}
            ),
            id="bad-base64-padding",
        ),
        pytest.param(
            "tools/call",
            CALL,
            headers(
                "tools/call", **{"Mcp-Name": "dir2mcp.open_file", "Mcp-Param-Path": "=?base64?c3J!!jL2E=?="}
            ),
            id="bad-base64-chars",
        ),
        pytest.param(
            "tools/call",
            CALL,
            headers("tools/call", **{"Mcp-Name": "dir2mcp.open_file", "Mcp-Param-Path": "src/\x01a.py"}),
            id="control-character",
        ),
        pytest.param(
            "resources/read",
            {"uri": "dir2mcp:///a", "_meta": META},
            headers("resources/read"),
            id="no-uri-header",
        ),
    ],
)
def test_mismatched_or_missing_headers_are_refused(method, params, sent):
    with pytest.raises(modern.Refusal) as refused:
        mirrored.check(message(method, params), sent, OPEN_FILE_SCHEMA if method == "tools/call" else None)
    assert (refused.value.rpc_code, refused.value.status) == (-32020, 400)


# -- one server, both revisions ---------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    write_corpus(root)
    with daphne_serving(root) as srv:
        yield srv


def post(server, method: str, params: dict | None = None, *, msg_id=1, extra: dict | None = None, meta=META):
    params = dict(params or {})
    if meta is not None:
        params["_meta"] = {**meta, **params.get("_meta", {})}
    sent = {"MCP-Protocol-Version": VERSION, "Mcp-Method": method}
    name = params.get("uri") if method == "resources/read" else params.get("name")
    if method in mirrored.NAME_FIELDS and isinstance(name, str):
        sent["Mcp-Name"] = name
    sent.update(extra or {})
    body = {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}
    return httpx.post(server.url, headers=server.headers(**sent), json=body, timeout=60, verify=TLS)


def test_discover_lists_both_revisions_without_a_session(server):
    response = post(server, "server/discover")
    assert response.status_code == 200, response.text
    assert "MCP-Session-Id" not in response.headers
    result = response.json()["result"]
    assert result["supportedVersions"][:2] == [VERSION, "2025-11-25"]
    assert {"tools", "resources", "prompts", "completions"} <= set(result["capabilities"])
    assert result["resultType"] == "complete"
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "dir2mcp"
    assert (result["ttlMs"], result["cacheScope"]) == (3_600_000, "public")


def test_every_list_is_complete_and_cacheable(server):
    for method, key, scope in [
        ("tools/list", "tools", "public"),
        ("prompts/list", "prompts", "public"),
        ("resources/templates/list", "resourceTemplates", "public"),
        ("resources/list", "resources", "private"),
    ]:
        result = post(server, method).json()["result"]
        assert result[key], method
        assert result["resultType"] == "complete"
        assert result["cacheScope"] == scope and isinstance(result["ttlMs"], int) and result["ttlMs"] >= 0


def test_search_read_and_complete_statelessly(server):
    found = post(server, "tools/call", {"name": "dir2mcp.search", "arguments": {"query": "parse config"}})
    result = found.json()["result"]
    assert result["resultType"] == "complete" and not result.get("isError")
    hit = result["structuredContent"]["hits"][0]
    uri = f"dir2mcp:///{hit['rel_path']}"
    read = post(server, "resources/read", {"uri": uri}).json()["result"]
    assert read["contents"][0]["uri"] == uri and read["contents"][0]["text"]
    assert (read["resultType"], read["cacheScope"]) == ("complete", "private")
    prompt = post(server, "prompts/get", {"name": "ask", "arguments": {"question": "what loads config?"}})
    assert prompt.json()["result"]["messages"], prompt.text
    done = post(
        server,
        "completion/complete",
        {
            "ref": {"type": "ref/resource", "uri": "dir2mcp:///{+path}"},
            "argument": {"name": "path", "value": "src/"},
        },
    )
    assert done.json()["result"]["resultType"] == "complete", done.text


def test_a_missing_resource_is_invalid_params_with_its_uri(server):
    response = post(server, "resources/read", {"uri": "test://nothing-here"}, msg_id="r1")
    error = response.json()["error"]
    assert (response.json()["id"], error["code"], error["data"]["uri"]) == (
        "r1",
        -32602,
        "test://nothing-here",
    )


@pytest.mark.parametrize(
    "method", ["initialize", "ping", "logging/setLevel", "resources/subscribe", "no/such"]
)
def test_removed_and_unknown_methods_are_404_method_not_found(server, method):
    response = post(server, method, {"uri": "dir2mcp:///x"} if "subscribe" in method else {}, msg_id=9)
    assert response.status_code == 404
    assert (response.json()["id"], response.json()["error"]["code"]) == (9, -32601)


def test_refusals_are_400_and_carry_the_request_id(server):
    unsupported = post(
        server,
        "tools/list",
        extra={"MCP-Protocol-Version": "v9"},
        meta={**META, "io.modelcontextprotocol/protocolVersion": "v9"},
        msg_id=3,
    )
    assert unsupported.status_code == 400
    assert (unsupported.json()["id"], unsupported.json()["error"]["code"]) == (3, -32022)
    assert unsupported.json()["error"]["data"]["requested"] == "v9"
    mismatch = post(server, "tools/list", extra={"Mcp-Method": "prompts/list"}, msg_id=4)
    assert (mismatch.status_code, mismatch.json()["id"], mismatch.json()["error"]["code"]) == (400, 4, -32020)
    no_meta = post(server, "tools/list", meta=None, msg_id=5)
    assert (no_meta.status_code, no_meta.json()["id"], no_meta.json()["error"]["code"]) == (400, 5, -32602)
    param = post(
        server,
        "tools/call",
        {"name": "dir2mcp.open_file", "arguments": {"rel_path": "src/loader.py"}},
        msg_id=6,
    )
    assert (param.status_code, param.json()["error"]["code"]) == (400, -32020)


def test_the_bearer_token_and_origin_still_guard_stateless_requests(server):
    body = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": META}}
    sent = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": VERSION,
        "Mcp-Method": "server/discover",
    }
    assert httpx.post(server.url, headers=sent, json=body, timeout=30, verify=TLS).status_code == 401
    evil = server.headers(
        **{
            "MCP-Protocol-Version": VERSION,
            "Mcp-Method": "server/discover",
            "Origin": "http://evil.example.com",
        }
    )
    assert httpx.post(server.url, headers=evil, json=body, timeout=30, verify=TLS).status_code == 403


def test_a_session_still_works_beside_stateless_requests(server):
    session = server.initialize()
    listed = server.post({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, session=session).json()[
        "result"
    ]
    assert listed["tools"] and "resultType" not in listed and "ttlMs" not in listed
    assert server.post({"jsonrpc": "2.0", "id": 3, "method": "ping"}, session=session).json()["result"] == {}
    gone = server.post(
        {"jsonrpc": "2.0", "id": 4, "method": "resources/read", "params": {"uri": "test://x"}},
        session=session,
    )
    assert gone.json()["error"]["code"] == -32002  # 2025-11-25's code, unchanged


def sse_messages(response: httpx.Response) -> list[dict]:
    return [
        json.loads(line[5:])
        for line in response.text.splitlines()
        if line.startswith("data:") and line[5:].strip()
    ]


def test_progress_and_logs_only_for_the_request_that_asks(server):
    args = {"name": "dir2mcp.search", "arguments": {"query": "loader"}}
    plain = post(server, "tools/call", args | {"_meta": {"progressToken": "p1"}})
    assert plain.headers["content-type"].startswith("text/event-stream")
    messages = sse_messages(plain)
    assert messages[-1]["result"]["resultType"] == "complete"
    assert not [m for m in messages if m.get("method") == "notifications/message"]
    asked = {"name": "dir2mcp.ask", "arguments": {"question": "what loads config?"}}
    quiet = sse_messages(post(server, "tools/call", asked | {"_meta": {"progressToken": "p2"}}))
    assert not [m for m in quiet if m.get("method") == "notifications/message"]
    logged = post(server, "tools/call", asked | {"_meta": {"io.modelcontextprotocol/logLevel": "debug"}})
    messages = sse_messages(logged)
    assert [m for m in messages if m.get("method") == "notifications/message"], messages
    assert messages[-1]["id"] == 1 and messages[-1]["result"]["resultType"] == "complete"


# -- stdio: both revisions in one process ------------------------------------------------------


@pytest.fixture
def stdio_server():
    started: list[Raw] = []
    yield lambda root, *extra, env=None: started.append(Raw(command(root, *extra), env=env)) or started[-1]
    for server in started:
        server.kill()


def test_stdio_serves_stateless_requests_before_and_beside_initialize(tmp_path, stdio_server):
    root = tmp_path / "corpus"
    root.mkdir()
    write_corpus(root)
    index(root, base_env(DIR2MCP_ROOT=str(root)))
    server = stdio_server(root, "--no-index")
    before = server.request("d", "server/discover", {"_meta": META})["result"]
    assert before["supportedVersions"][0] == VERSION and before["resultType"] == "complete"
    legacy_first = server.request("l", "tools/list", {})
    assert legacy_first["error"]["code"] == -32600  # a handshake request still needs initialize
    listed = server.request(1, "tools/list", {"_meta": META})["result"]
    assert listed["tools"] and (listed["ttlMs"], listed["cacheScope"]) == (3_600_000, "public")
    found = server.request(
        2, "tools/call", {"name": "dir2mcp.search", "arguments": {"query": "config"}, "_meta": META}
    )
    hit = found["result"]["structuredContent"]["hits"][0]
    read = server.request(3, "resources/read", {"uri": f"dir2mcp:///{hit['rel_path']}", "_meta": META})[
        "result"
    ]
    assert read["contents"][0]["text"] and read["resultType"] == "complete"
    assert server.request(4, "ping", {"_meta": META})["error"]["code"] == -32601
    assert server.request("i", "initialize", {"_meta": META})["error"]["code"] == -32601
    assert server.request("l2", "tools/list", {})["error"]["code"] == -32600  # so no session began
    missing = server.request(5, "resources/read", {"uri": "test://nothing", "_meta": META})["error"]
    assert (missing["code"], missing["data"]["uri"]) == (-32602, "test://nothing")
    unsupported = server.request(
        6, "tools/list", {"_meta": {**META, "io.modelcontextprotocol/protocolVersion": "v9"}}
    )
    assert unsupported["error"]["code"] == -32022 and VERSION in unsupported["error"]["data"]["supported"]
    assert server.initialize()["protocolVersion"] == "2025-11-25"
    session_list = server.request(7, "tools/list", {})["result"]
    assert session_list["tools"] and "resultType" not in session_list
    again = server.request(8, "tools/list", {"_meta": META})["result"]
    assert again["resultType"] == "complete"
    assert server.close() == 0


def test_stdio_cancels_a_stateless_call_by_its_id(tmp_path, stdio_server, fake_mistral):
    root = tmp_path / "corpus"
    root.mkdir()
    write_corpus(root)
    index(root, base_env(DIR2MCP_ROOT=str(root)))
    env = {
        "MISTRAL_API_KEY": fake_mistral.API_KEY,
        "DIR2MCP_MISTRAL__BASE_URL": fake_mistral.url,
        "DIR2MCP_CHAT__PROVIDER": "mistral",
    }
    server = stdio_server(root, "--no-index", env=env)
    fake_mistral.delay_next(3.0, count=4)
    asked = {"name": "dir2mcp.ask", "arguments": {"question": "what reads configuration files?"}}
    server.send(
        {
            "jsonrpc": "2.0",
            "id": 31,
            "method": "tools/call",
            "params": asked | {"_meta": META | {"progressToken": 7}},
        }
    )
    first = server.recv()
    assert first["method"] == "notifications/progress" and first["params"]["progressToken"] == 7
    server.notify("notifications/cancelled", {"requestId": 31})
    # Answered while the cancelled call still runs; nothing more of the call comes.
    assert server.request(32, "server/discover", {"_meta": META})["result"]["resultType"] == "complete"
    assert server.close() == 0
    replies = [json.loads(line) for line in server.lines]
    assert not [r for r in replies if r.get("id") == 31]
