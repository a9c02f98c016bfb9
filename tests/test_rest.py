"""The REST mirror (``/api/v1/``) on a real daphne server.

Parity: each endpoint answers exactly what ``tools/call`` answers on the MCP
endpoint for the same arguments, and that answer validates against the
tool's outputSchema. Then auth, the error envelope and its statuses, the
OpenAPI document, and Schemathesis over that document.
"""

from __future__ import annotations

from urllib.parse import urlencode

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, assume, given, settings
from jsonschema import Draft202012Validator
from prometheus_client.parser import text_string_to_metric_families
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from kernel import errors
from mcp_gateway import rest, schemas, tools
from tests.mcp_http import daphne_serving, start_daphne, stop, write_corpus
from tests.support import TLS


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    write_corpus(root)
    (root / "docs" / "setup.md").write_text("# Setup\n\nInstall the loader, then run it.\n")
    with daphne_serving(root) as srv:
        srv.session = srv.initialize()
        yield srv


def api_url(server, path: str) -> str:
    return f"{server.base}/api/v1{path}"


def auth(server) -> dict[str, str]:
    return {"Authorization": f"Bearer {server.token}"}


def rest_get(server, path: str, params=None, **headers: str) -> httpx.Response:
    return httpx.get(
        api_url(server, path), params=params, headers={**auth(server), **headers}, timeout=30, verify=TLS
    )


def rest_post(server, path: str, body, **headers: str) -> httpx.Response:
    return httpx.post(
        api_url(server, path), json=body, headers={**auth(server), **headers}, timeout=30, verify=TLS
    )


def mcp(server, name: str, arguments: dict) -> dict:
    """The ``tools/call`` result (isError, structuredContent) on the MCP endpoint."""
    return server.call(server.session, name, arguments)


def assert_envelope(response: httpx.Response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "retryable"}
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return body["error"]


# -- parity --------------------------------------------------------------------------

# (tool, MCP arguments, REST method, path, query params or JSON body)
PARITY = [
    (
        "dir2mcp.search",
        {"query": "configuration loader"},
        "GET",
        "/search",
        {"query": "configuration loader"},
    ),
    (
        "dir2mcp.search",
        {"query": "loader", "k": 2, "index": "text", "doc_types": ["md", "text"]},
        "GET",
        "/search",
        [("query", "loader"), ("k", "2"), ("index", "text"), ("doc_types", "md"), ("doc_types", "text")],
    ),
    (
        "dir2mcp.search",
        {"query": "parse_config_file", "path_prefix": "src/", "file_glob": "*.py"},
        "POST",
        "/search",
        {"query": "parse_config_file", "path_prefix": "src/", "file_glob": "*.py"},
    ),
    (
        "dir2mcp.ask",
        {"question": "what reads configuration files?", "mode": "search_only", "k": 3},
        "POST",
        "/ask",
        {"question": "what reads configuration files?", "mode": "search_only", "k": 3},
    ),
    (
        "dir2mcp.ask",
        {"question": "where are the hnsw notes?"},
        "POST",
        "/ask",
        {"question": "where are the hnsw notes?"},
    ),
    ("dir2mcp.list_files", {}, "GET", "/files", {}),
    (
        "dir2mcp.list_files",
        {"path_prefix": "docs/", "limit": 1, "offset": 1},
        "GET",
        "/files",
        {"path_prefix": "docs/", "limit": "1", "offset": "1"},
    ),
    ("dir2mcp.list_files", {"glob": "*.md"}, "GET", "/files", {"glob": "*.md"}),
    ("dir2mcp.open_file", {"rel_path": "notes.txt"}, "GET", "/files/slice", {"rel_path": "notes.txt"}),
    (
        "dir2mcp.open_file",
        {"rel_path": "src/loader.py", "start_line": 2, "end_line": 3, "max_chars": 200},
        "GET",
        "/files/slice",
        {"rel_path": "src/loader.py", "start_line": "2", "end_line": "3", "max_chars": "200"},
    ),
    ("dir2mcp.find", {"content": "loader"}, "GET", "/find", {"content": "loader"}),
    (
        "dir2mcp.outline",
        {"rel_path": "src/loader.py"},
        "GET",
        "/files/outline",
        {"rel_path": "src/loader.py"},
    ),
    (
        "dir2mcp.open_files",
        {"slices": [{"rel_path": "notes.txt", "start_line": 2, "end_line": 2}, {"rel_path": "nope.txt"}]},
        "POST",
        "/files/slices",
        {"slices": [{"rel_path": "notes.txt", "start_line": 2, "end_line": 2}, {"rel_path": "nope.txt"}]},
    ),
    ("dir2mcp.checksum", {"rel_path": "notes.txt"}, "GET", "/files/checksum", {"rel_path": "notes.txt"}),
    (
        "dir2mcp.checksum",
        {"rel_path": "notes.txt", "algorithm": "md5"},
        "GET",
        "/files/checksum",
        {"rel_path": "notes.txt", "algorithm": "md5"},
    ),
    (
        "dir2mcp.diff",
        {"rel_path_a": "notes.txt", "rel_path_b": "docs/guide.md"},
        "GET",
        "/files/diff",
        {"rel_path_a": "notes.txt", "rel_path_b": "docs/guide.md"},
    ),
    (
        "dir2mcp.read_bytes",
        {"rel_path": "notes.txt", "offset": 5, "length": 12},
        "GET",
        "/files/bytes",
        {"rel_path": "notes.txt", "offset": "5", "length": "12"},
    ),
    (
        "dir2mcp.verify",
        {"text": 'It "reads configuration files" [docs/guide.md:L3-L3]; [notes.txt:L9-L9]'},
        "POST",
        "/verify",
        {"text": 'It "reads configuration files" [docs/guide.md:L3-L3]; [notes.txt:L9-L9]'},
    ),
    (
        "dir2mcp.outline",
        {"rel_path": "docs/guide.md", "max_entries": 1},
        "GET",
        "/files/outline",
        {"rel_path": "docs/guide.md", "max_entries": "1"},
    ),
    (
        "dir2mcp.find",
        {"content": "^h\\w+", "regex": True, "case_sensitive": True, "limit": 1},
        "GET",
        "/find",
        {"content": "^h\\w+", "regex": "true", "case_sensitive": "true", "limit": "1"},
    ),
    (
        "dir2mcp.find",
        {"name_glob": "*.md", "modified_after": 0, "doc_types": ["md"]},
        "GET",
        "/find",
        {"name_glob": "*.md", "modified_after": "0", "doc_types": "md"},
    ),
    ("dir2mcp.symbols", {"name": "parse_config_file"}, "GET", "/symbols", {"name": "parse_config_file"}),
    (
        "dir2mcp.symbols",
        {"name": "PARSE", "kind": "function", "path_prefix": "src/", "limit": 5},
        "GET",
        "/symbols",
        {"name": "PARSE", "kind": "function", "path_prefix": "src/", "limit": "5"},
    ),
    ("dir2mcp.references", {"name": "path"}, "GET", "/references", {"name": "path"}),
    (
        "dir2mcp.references",
        {"name": "path", "limit": 1, "path_prefix": "src"},
        "GET",
        "/references",
        {"name": "path", "limit": "1", "path_prefix": "src"},
    ),
    ("dir2mcp.stats", {}, "GET", "/stats", {}),
]


@pytest.mark.parametrize(("name", "arguments", "method", "path", "params"), PARITY)
def test_rest_and_mcp_give_the_same_result(server, name, arguments, method, path, params):
    expected = mcp(server, name, arguments)
    assert not expected.get("isError"), expected
    if method == "GET":
        response = rest_get(server, path, params)
    else:
        response = rest_post(server, path, params)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert body == expected["structuredContent"]
    Draft202012Validator(tools.table()[name].output_schema).validate(body)


def test_parity_results_are_not_empty(server):
    """Guards the parity table against comparing two empty answers."""
    assert rest_get(server, "/search", {"query": "configuration loader"}).json()["hits"]
    assert rest_get(server, "/find", {"content": "loader"}).json()["matches"]
    assert rest_get(server, "/files").json()["total"] == 4
    assert "second line" in rest_get(server, "/files/slice", {"rel_path": "notes.txt"}).json()["content"]
    assert rest_get(server, "/symbols", {"name": "PARSE"}).json()["symbols"][0]["match"] == "prefix"
    # The parameter on line 1 defines path; line 3 uses it.
    page = rest_get(server, "/references", {"name": "path"}).json()
    assert [(hit["span"]["start_line"], hit["snippet"]) for hit in page["references"]] == [(3, "return path")]


@pytest.mark.parametrize(
    ("name", "arguments", "path", "code"),
    [
        # A length past the schema's maxLength is INVALID_RANGE, as for every bounded string.
        ("dir2mcp.symbols", {"name": "x" * 10_000}, "/symbols", "INVALID_RANGE"),
        ("dir2mcp.references", {"name": "x" * 10_000}, "/references", "INVALID_RANGE"),
        ("dir2mcp.symbols", {"name": "load", "kind": "gizmo"}, "/symbols", "INVALID_FIELD"),
        (
            "dir2mcp.references",
            {"name": "path", "cursor": "bm90IGEgY3Vyc29y"},
            "/references",
            "INVALID_FIELD",
        ),
    ],
)
def test_bad_names_kinds_and_cursors_get_their_code(server, name, arguments, path, code):
    result = mcp(server, name, arguments)
    assert result["isError"] is True
    assert result["structuredContent"]["error"]["code"] == code
    assert_envelope(rest_get(server, path, arguments), 400, code)


# (tool, MCP arguments, REST method, path, params, status)
ERRORS = [
    ("dir2mcp.search", {"query": "x", "k": 0}, "GET", "/search", {"query": "x", "k": "0"}, 400),
    ("dir2mcp.search", {"query": "x", "k": 51}, "POST", "/search", {"query": "x", "k": 51}, 400),
    ("dir2mcp.search", {}, "GET", "/search", {}, 400),
    ("dir2mcp.search", {"query": ""}, "GET", "/search", {"query": ""}, 400),
    (
        "dir2mcp.search",
        {"query": "x", "index": "nope"},
        "GET",
        "/search",
        {"query": "x", "index": "nope"},
        400,
    ),
    ("dir2mcp.ask", {}, "POST", "/ask", {}, 400),
    (
        "dir2mcp.ask",
        {"question": "x", "mode": "poem"},
        "POST",
        "/ask",
        {"question": "x", "mode": "poem"},
        400,
    ),
    ("dir2mcp.ask", {"question": "x", "k": "3"}, "POST", "/ask", {"question": "x", "k": "3"}, 400),
    ("dir2mcp.ask", {"question": "x", "extra": 1}, "POST", "/ask", {"question": "x", "extra": 1}, 400),
    ("dir2mcp.list_files", {"limit": 0}, "GET", "/files", {"limit": "0"}, 400),
    (
        "dir2mcp.open_file",
        {"rel_path": "../outside.txt"},
        "GET",
        "/files/slice",
        {"rel_path": "../outside.txt"},
        403,
    ),
    (
        "dir2mcp.open_file",
        {"rel_path": "/etc/passwd"},
        "GET",
        "/files/slice",
        {"rel_path": "/etc/passwd"},
        403,
    ),
    (
        "dir2mcp.open_file",
        {"rel_path": "missing.txt"},
        "GET",
        "/files/slice",
        {"rel_path": "missing.txt"},
        404,
    ),
    ("dir2mcp.open_file", {}, "GET", "/files/slice", {}, 400),
    (
        "dir2mcp.open_file",
        {"rel_path": "notes.txt", "max_chars": 10},
        "GET",
        "/files/slice",
        {"rel_path": "notes.txt", "max_chars": "10"},
        400,
    ),
    ("dir2mcp.find", {"content": "(", "regex": True}, "GET", "/find", {"content": "(", "regex": "true"}, 400),
    ("dir2mcp.find", {"modified_after": "soon"}, "GET", "/find", {"modified_after": "soon"}, 400),
]


@pytest.mark.parametrize(("name", "arguments", "method", "path", "params", "status"), ERRORS)
def test_errors_have_the_mcp_code_and_an_http_status(server, name, arguments, method, path, params, status):
    expected = mcp(server, name, arguments)
    assert expected["isError"] is True
    code = expected["structuredContent"]["error"]["code"]
    response = rest_get(server, path, params) if method == "GET" else rest_post(server, path, params)
    error = assert_envelope(response, status, code)
    assert error["retryable"] is False
    assert errors.http_status(code) == status


def test_integers_past_int64_are_400(server):
    """SQLite cannot hold them; the REST models bound what the input schemas leave open."""
    error = assert_envelope(rest_get(server, "/files", {"offset": str(2**70)}), 400, "INVALID_RANGE")
    assert "offset" in error["message"]
    # list_files judges every file before its page (session 27): its offset stops at 10,000
    assert_envelope(rest_get(server, "/files", {"offset": str(2**63 - 1)}), 400, "INVALID_RANGE")
    assert rest_get(server, "/files", {"offset": "10000"}).json()["files"] == []


# -- known bugs outside the REST mirror ------------------------------------------------


@pytest.mark.parametrize(
    ("path", "params"), [("/files", {"glob": "[z-a]"}), ("/find", {"name_glob": "[z-a]"})]
)
def test_an_invalid_glob_is_400_not_500(server, path, params):
    assert_envelope(rest_get(server, path, params), 400, "INVALID_FIELD")


def test_mcp_list_files_rejects_an_offset_past_int64(server):
    result = mcp(server, "dir2mcp.list_files", {"offset": 2**70})
    assert result["structuredContent"]["error"]["code"] == "INVALID_RANGE"


def test_outside_root_and_missing_file(server):
    error = assert_envelope(
        rest_get(server, "/files/slice", {"rel_path": "../../etc/passwd"}), 403, "PATH_OUTSIDE_ROOT"
    )
    assert "root:" not in error["message"]
    assert_envelope(rest_get(server, "/files/slice", {"rel_path": "docs/nope.md"}), 404, "FILE_NOT_FOUND")
    assert_envelope(rest_get(server, "/search", {"query": "x", "k": "abc"}), 400, "INVALID_FIELD")


def tool_calls(server, tool: str) -> dict[str, float]:
    """``dir2mcp_tool_calls_total`` of ``tool`` by outcome, as the server's /metrics says."""
    scraped = httpx.get(f"{server.base}/metrics", timeout=30, verify=TLS)
    assert scraped.status_code == 200, scraped.text
    counts = {"ok": 0.0, "error": 0.0}
    for family in text_string_to_metric_families(scraped.text):
        for s in family.samples:
            if s.name == "dir2mcp_tool_calls_total" and s.labels.get("tool") == tool:
                counts[s.labels["outcome"]] = s.value
    return counts


def test_rest_tool_calls_are_counted_like_mcp_calls(server):
    """The REST mirror runs tools through tools.run, so /metrics counts them, errors included."""
    before = tool_calls(server, "dir2mcp.open_file")
    assert rest_get(server, "/files/slice", {"rel_path": "notes.txt"}).status_code == 200
    assert_envelope(rest_get(server, "/files/slice", {"rel_path": "docs/nope.md"}), 404, "FILE_NOT_FOUND")
    after = tool_calls(server, "dir2mcp.open_file")
    assert (after["ok"] - before["ok"], after["error"] - before["error"]) == (1, 1)


def test_bad_bodies_are_400_or_415_with_the_envelope(server):
    url = api_url(server, "/ask")
    headers = {**auth(server), "Content-Type": "application/json"}
    assert_envelope(httpx.post(url, content=b"{not json", headers=headers, verify=TLS), 400, "INVALID_FIELD")
    assert_envelope(httpx.post(url, content=b"[1, 2]", headers=headers, verify=TLS), 400, "INVALID_FIELD")
    assert_envelope(httpx.post(url, content=b"", headers=headers, verify=TLS), 400, "MISSING_FIELD")
    text = {**auth(server), "Content-Type": "text/plain"}
    assert_envelope(
        httpx.post(url, content=b'{"question": "x"}', headers=text, verify=TLS), 415, "INVALID_FIELD"
    )


def test_post_needs_no_cookie_or_csrf_token(server):
    with httpx.Client(verify=TLS) as client:
        response = client.post(
            api_url(server, "/ask"), json={"question": "loader", "mode": "search_only"}, headers=auth(server)
        )
        assert response.status_code == 200, response.text
        assert not client.cookies


# -- auth ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/search?query=x", "/files", "/files/slice?rel_path=notes.txt", "/stats"])
def test_no_token_is_401_with_a_bearer_challenge(server, path):
    response = httpx.get(api_url(server, path), verify=TLS)
    assert_envelope(response, 401, "UNAUTHORIZED")
    assert response.headers["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize(
    "authorization", ["Bearer wrong", "Basic dXNlcjpwYXNz", "Bearer", "bearer", "Token {token}", "{token}"]
)
def test_wrong_token_is_401(server, authorization):
    headers = {"Authorization": authorization.format(token=server.token)}
    response = httpx.get(api_url(server, "/stats"), headers=headers, verify=TLS)
    assert_envelope(response, 401, "UNAUTHORIZED")
    response = httpx.post(api_url(server, "/ask"), json={"question": "x"}, headers=headers, verify=TLS)
    assert_envelope(response, 401, "UNAUTHORIZED")


def test_token_is_checked_case_insensitively_on_the_scheme_only(server):
    response = httpx.get(
        api_url(server, "/stats"), headers={"Authorization": f"bearer {server.token}"}, verify=TLS
    )
    assert response.status_code == 200
    upper = server.token.upper() if server.token.upper() != server.token else server.token.lower()
    response = httpx.get(api_url(server, "/stats"), headers={"Authorization": f"Bearer {upper}"}, verify=TLS)
    assert response.status_code == 401


@pytest.mark.parametrize("origin", ["http://evil.example", "null", "https://localhost.evil.example"])
def test_bad_origin_is_403(server, origin):
    response = rest_get(server, "/stats", Origin=origin)
    assert_envelope(response, 403, "FORBIDDEN_ORIGIN")
    response = rest_post(server, "/ask", {"question": "x"}, Origin=origin)
    assert_envelope(response, 403, "FORBIDDEN_ORIGIN")


def test_allowed_origin_passes_with_cors_headers(server):
    ok = rest_get(server, "/stats", Origin="http://localhost:5173")
    assert ok.status_code == 200
    assert ok.headers["access-control-allow-origin"] == "http://localhost:5173"
    assert ok.headers["vary"] == "Origin"
    assert rest_get(server, "/stats", Origin="http://127.0.0.1").status_code == 200
    # A browser must be able to read an error too.
    refused = httpx.get(api_url(server, "/stats"), headers={"Origin": "http://localhost:5173"}, verify=TLS)
    assert_envelope(refused, 401, "UNAUTHORIZED")
    assert refused.headers["access-control-allow-origin"] == "http://localhost:5173"
    assert "WWW-Authenticate" in refused.headers["access-control-expose-headers"]
    assert "access-control-allow-origin" not in rest_get(server, "/stats").headers


def test_preflight_for_allowed_origins_only(server):
    ok = httpx.options(
        api_url(server, "/ask"),
        headers={"Origin": "http://localhost:3000", "Access-Control-Request-Method": "POST"},
        verify=TLS,
    )
    assert ok.status_code == 204
    assert ok.headers["access-control-allow-origin"] == "http://localhost:3000"
    assert "POST" in ok.headers["access-control-allow-methods"]
    assert "Authorization" in ok.headers["access-control-allow-headers"]
    refused = httpx.options(api_url(server, "/ask"), headers={"Origin": "http://evil.example"}, verify=TLS)
    assert_envelope(refused, 403, "FORBIDDEN_ORIGIN")
    assert "access-control-allow-origin" not in refused.headers


def test_unknown_routes_and_methods_get_the_envelope_not_html(server):
    assert_envelope(rest_get(server, "/no-such-endpoint"), 404, "NOT_FOUND")
    wrong_method = httpx.delete(api_url(server, "/search"), headers=auth(server), verify=TLS)
    assert_envelope(wrong_method, 405, "METHOD_NOT_ALLOWED")
    assert "GET" in wrong_method.headers["allow"] and "POST" in wrong_method.headers["allow"]


def test_json_answers_are_written_with_their_length(server):
    """REST answers carried no ``Content-Length``, so twisted sent them
    chunked, as streams are, and counted them against
    ``server.max_unread_mb`` (the unread bound meant for streams: an answer
    of known size is never cut). Now each JSON answer, result or error
    envelope, says its length and is not chunked."""
    answers = [
        rest_get(server, "/search", {"query": "loader"}),
        rest_post(server, "/files/slices", {"slices": [{"rel_path": "notes.txt", "end_line": 2}]}),
        rest_get(server, "/no-such-endpoint"),
        httpx.get(api_url(server, "/stats"), headers={"Origin": "http://evil.example"}, verify=TLS),
    ]
    for response in answers:
        assert response.headers["content-type"].startswith("application/json"), response.text
        assert "transfer-encoding" not in response.headers, (response.url, response.headers)
        assert response.headers.get("content-length") == str(len(response.content)), response.url
    assert [r.status_code for r in answers] == [200, 200, 404, 403]


def test_bad_origin_is_refused_before_the_token_is_looked_at(server):
    response = httpx.get(api_url(server, "/stats"), headers={"Origin": "http://evil.example"}, verify=TLS)
    assert_envelope(response, 403, "FORBIDDEN_ORIGIN")


def test_openapi_and_docs_are_public(server):
    response = httpx.get(api_url(server, "/openapi.json"), verify=TLS)
    assert response.status_code == 200
    assert response.json()["info"]["title"] == "dir2mcp REST mirror"
    docs = httpx.get(api_url(server, "/docs"), verify=TLS)
    assert docs.status_code == 200
    assert "text/html" in docs.headers["content-type"]
    assert "openapi.json" in docs.text


def test_auth_none_and_the_shared_rate_limit(tmp_path):
    """With --auth none there is no token to send; the rate limit is the MCP endpoint's."""
    write_corpus(tmp_path)
    srv = start_daphne(tmp_path, auth="none", env={"DIR2MCP_SERVER__RATE_LIMIT_PER_MINUTE": "6"})
    try:
        assert srv.token is None
        session = srv.initialize()
        assert httpx.get(api_url(srv, "/stats"), verify=TLS).status_code == 200
        statuses = [httpx.get(api_url(srv, "/files"), verify=TLS).status_code for _ in range(5)]
        assert statuses[-1] == 429 and set(statuses) == {200, 429}
        response = httpx.get(api_url(srv, "/stats"), verify=TLS)
        error = assert_envelope(response, 429, "RATE_LIMITED")
        assert error["retryable"] is True
        assert int(response.headers["Retry-After"]) >= 1
        ping = {"jsonrpc": "2.0", "id": 9, "method": "ping"}
        assert srv.post(ping, session=session).status_code == 429  # one bucket for both surfaces
    finally:
        err = stop(srv)
    assert "Traceback" not in err, err[-3000:]


# -- the OpenAPI document ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def openapi(server) -> dict:
    return httpx.get(api_url(server, "/openapi.json"), verify=TLS).json()


OPERATIONS = {
    ("/api/v1/search", "get"): "dir2mcp.search",
    ("/api/v1/search", "post"): "dir2mcp.search",
    ("/api/v1/ask", "post"): "dir2mcp.ask",
    ("/api/v1/files", "get"): "dir2mcp.list_files",
    ("/api/v1/files/slice", "get"): "dir2mcp.open_file",
    ("/api/v1/find", "get"): "dir2mcp.find",
    ("/api/v1/files/outline", "get"): "dir2mcp.outline",
    ("/api/v1/files/slices", "post"): "dir2mcp.open_files",
    ("/api/v1/files/checksum", "get"): "dir2mcp.checksum",
    ("/api/v1/files/diff", "get"): "dir2mcp.diff",
    ("/api/v1/files/bytes", "get"): "dir2mcp.read_bytes",
    ("/api/v1/verify", "post"): "dir2mcp.verify",
    ("/api/v1/symbols", "get"): "dir2mcp.symbols",
    ("/api/v1/references", "get"): "dir2mcp.references",
    ("/api/v1/stats", "get"): "dir2mcp.stats",
}


# The MCP resources' read-only routes (tests/test_resources.py checks them).
RESOURCE_OPERATIONS = {("/api/v1/resources", "get"), ("/api/v1/resources/read", "get")}


def resolve(document: dict, node: dict) -> dict:
    while "$ref" in node:
        node = document["components"]["schemas"][node["$ref"].rsplit("/", 1)[-1]]
    return node


def test_openapi_lists_every_operation_with_bearer_security(openapi):
    assert openapi["openapi"].startswith("3.1")
    assert openapi["info"]["version"] == schemas.SCHEMA_VERSION
    ops = {(path, method) for path, item in openapi["paths"].items() for method in item}
    assert ops == set(OPERATIONS) | RESOURCE_OPERATIONS
    schemes = openapi["components"]["securitySchemes"]
    assert list(schemes.values()) == [{"type": "http", "scheme": "bearer"}]
    for path, method in [*OPERATIONS, *RESOURCE_OPERATIONS]:
        assert openapi["paths"][path][method]["security"] == [{name: []} for name in schemes]


@pytest.mark.parametrize(("path", "method"), list(OPERATIONS))
def test_openapi_200_is_the_tool_output_schema(openapi, path, method):
    tool = tools.table()[OPERATIONS[(path, method)]]
    op = openapi["paths"][path][method]
    schema = resolve(openapi, op["responses"]["200"]["content"]["application/json"]["schema"])
    expected, defs = rest._openapi_schema(tool.output_schema)
    assert {k: v for k, v in schema.items() if k != "title"} == expected
    for name, definition in defs.items():
        assert openapi["components"]["schemas"][name] == definition
    for status in ("400", "401", "403", "429", "500", "502", "503"):
        error = resolve(openapi, op["responses"][status]["content"]["application/json"]["schema"])
        assert error["required"] == ["error"]
    assert "WWW-Authenticate" in op["responses"]["401"]["headers"]


@pytest.mark.parametrize(("path", "method"), list(OPERATIONS))
def test_openapi_inputs_mirror_the_tool_input_schema(openapi, path, method):
    tool = tools.table()[OPERATIONS[(path, method)]]
    op = openapi["paths"][path][method]
    properties = tool.input_schema.get("properties", {})
    required = set(tool.input_schema.get("required", ()))
    if method == "post":
        body = resolve(openapi, op["requestBody"]["content"]["application/json"]["schema"])
        fields, needed = body["properties"], set(body.get("required", ()))
        assert body["additionalProperties"] is False
    else:
        fields = {p["name"]: p["schema"] for p in op["parameters"] if p["in"] == "query"}
        needed = {p["name"] for p in op["parameters"] if p["required"]}
    assert set(fields) == set(properties)
    assert needed == required
    for name, prop in properties.items():
        field = fields[name]
        for key in ("enum", "minimum", "maximum", "minLength", "maxLength", "default", "description"):
            expected = prop.get(key)
            if prop["type"] == "integer" and key in ("minimum", "maximum") and expected is None:
                expected = rest.INT64_MIN if key == "minimum" else rest.INT64_MAX
            assert field.get(key) == expected, (name, key)
        if isinstance(prop["type"], list):
            assert {member["type"] for member in field["anyOf"]} == set(prop["type"])
        else:
            assert field["type"] == prop["type"], name
            assert field.get("items") == prop.get("items"), name


# -- Schemathesis ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def api_schema(server):
    return schemathesis.openapi.from_url(api_url(server, "/openapi.json"), timeout=30)


CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


# schemathesis.pytest.from_fixture() needs a pytest Node._nodeid that pytest 9
# no longer has, so each operation runs its strategy under @given directly.
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=str)
@pytest.mark.parametrize(("path", "method"), list(OPERATIONS))
def test_openapi_conformance(api_schema, server, path, method, mode):
    operation = api_schema[path][method.upper()]

    @settings(
        max_examples=25,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def conforms(case):
        # A path argument one past its 4,096 characters, percent-encoded, can
        # pass twisted's 16 KiB request-line limit: bare daphne (this server)
        # drops such a connection without a word; `up` answers 414
        # (tests/test_slow_clients.py), and a body carries it on POST routes.
        assume(len(urlencode(case.query or {}, doseq=True)) < 16000)
        case.call_and_validate(base_url=server.base, headers=auth(server), checks=CHECKS, timeout=30)

    conforms()
